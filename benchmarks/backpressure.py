"""Back-pressure benchmark: pooled control vs fixed concurrency vs per-run-only control (the original).

Several runs share one SimulatedEndpoint with a known USL curve (sigma, kappa, lam in items/s; peak at
N* items in flight). Each run is a thread looping: throttle slot -> serve(batch*group items) ->
release -> local "training" sleep -> back-pressure observation. Modes, all measured in this process:
  fixed c    : throttle capacity c (1..runs), batch size fixed            (best and worst c reported)
  per-run    : no throttle, each run's own USL controller sets its batch size (the original's design)
  pooled     : the campaign actor's pooled fit sets the throttle capacity; batch size fixed
Campaign throughput = tokens served / wall time, warmup included. Also: fit cost per observation.

    .venv/bin/python benchmarks/backpressure.py [--seconds 6] [--runs 4 8]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
import ray  # noqa: E402

from retrain_ray.actors.backpressure import RemoteAdvisor, start_backpressure_actor  # noqa: E402
from retrain_ray.actors.simulated_endpoint import SimulatedEndpoint, simulated_run  # noqa: E402
from retrain_ray.actors.throttle import start_throttle  # noqa: E402
from retrain_ray.backpressure.advisor import LocalAdvisor  # noqa: E402
from retrain_ray.backpressure.pooled import PooledController  # noqa: E402
from retrain_ray.backpressure.settings import BackPressureSettings  # noqa: E402
from retrain_ray.backpressure.types import NoOpAdvisor, StepObservation  # noqa: E402
from retrain_ray.backpressure.usl import USLController, usl_optimal_p  # noqa: E402
from retrain_ray.throttle.client import NoThrottle, ThrottleClient  # noqa: E402

SIGMA, KAPPA, LAM = 0.02, 0.002, 60.0  # N* = sqrt(0.98/0.002) = 22.1 items in flight
BATCH, GROUP, MAX_BS = 4, 4, 16           # 16 items per request; per-run control ranges 4..64 items
TRAIN_S_PER_ITEM = 0.0005
NS = "retrain-ray-bench"


def _campaign(endpoint, throttle, mode: str, n_runs: int, seconds: float, capacity: int | None) -> dict:
    tag = f"bench-{mode}-{n_runs}-{capacity}-{random.randrange(1 << 30)}"
    ray.get(throttle.resize.remote(capacity or n_runs), timeout=30)
    bp = None
    if mode == "pooled":
        settings = BackPressureSettings(enabled=False, pooled=True, max_capacity=n_runs)
        bp = start_backpressure_actor(tag, NS, settings)
        ray.get(bp.set_throttle.remote("ep", throttle), timeout=30)
    use_throttle = mode != "per-run"
    ray.get(endpoint.reset_stats.remote(), timeout=60)
    deadline = time.monotonic() + seconds

    def one(i: int) -> dict:
        run_id = f"r{i}"
        if mode == "pooled":
            advisor = RemoteAdvisor(bp, run_id, "ep")
        elif mode == "per-run":
            advisor = LocalAdvisor(USLController(max_batch_size=MAX_BS), True, 1, MAX_BS)
        else:
            advisor = NoOpAdvisor()
        hold = ThrottleClient(throttle, run_id, timeout_s=120.0) if use_throttle else NoThrottle()
        return simulated_run(endpoint, advisor, hold, run_id=run_id, resource="ep", batch_size=BATCH,
                             group_size=GROUP, deadline=deadline, train_s_per_item=TRAIN_S_PER_ITEM)

    t0 = time.monotonic()
    with ThreadPoolExecutor(n_runs) as pool:
        results = list(pool.map(one, range(n_runs)))
    wall = time.monotonic() - t0
    stats = ray.get(endpoint.stats.remote(), timeout=60)
    snap = ray.get(bp.snapshot.remote(), timeout=60) if bp is not None else None
    if bp is not None:
        ray.kill(bp)
    tokens = sum(r["tokens"] for r in results)
    return {"mode": mode, "capacity": capacity, "tokens_per_s": tokens / wall,
            "peak_in_flight": stats["peak_in_flight"], "pooled": snap["pools"]["ep"] if snap else None,
            "last_bs": [r["batch_sizes"][-1] for r in results]}


def fit_cost_us(n: int = 20000) -> tuple[float, float]:
    """Mean microseconds per observe+recommend (per-run) and per pooled observe."""
    rnd = random.Random(0)
    ctl = USLController(warmup_steps=0)
    t0 = time.perf_counter()
    for _ in range(n):
        ctl.observe(rnd.uniform(0.1, 2), rnd.randint(1, 64), 4, rnd.uniform(100, 9000))
        ctl.recommend()
    per_run = (time.perf_counter() - t0) / n * 1e6
    pool = PooledController("ep")
    t0 = time.perf_counter()
    for i in range(n):
        pool.observe(StepObservation(f"r{i % 8}", i, rnd.randint(1, 64), 4, 1000, rnd.uniform(0.1, 2),
                                     sample_time_s=0.05))
    return per_run, (time.perf_counter() - t0) / n * 1e6


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--runs", type=int, nargs="+", default=[4, 8])
    args = ap.parse_args(argv)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=NS,
             object_store_memory=200 * 2**20)
    print(f"endpoint USL sigma={SIGMA} kappa={KAPPA} lam={LAM} items/s, N*={usl_optimal_p(SIGMA, KAPPA):.1f}"
          f" items; request = {BATCH}x{GROUP} items; {args.seconds:.0f} s per mode")
    endpoint = SimulatedEndpoint.remote(SIGMA, KAPPA, LAM)
    throttle = start_throttle("bench", "ep", 1, namespace=NS, lease_ttl_s=30.0)
    for n_runs in args.runs:
        caps = [c for c in (1, 2, 3, 4, 6, 8) if c <= n_runs]
        rows = [_campaign(endpoint, throttle, "fixed", n_runs, args.seconds, c) for c in caps]
        best = max(rows, key=lambda r: r["tokens_per_s"])
        worst = min(rows, key=lambda r: r["tokens_per_s"])
        per_run = _campaign(endpoint, throttle, "per-run", n_runs, args.seconds, None)
        pooled = _campaign(endpoint, throttle, "pooled", n_runs, args.seconds, None)
        print(f"\n{n_runs} runs | tokens/s | vs best fixed | vs per-run | notes")
        for r in rows:
            print(f"  fixed c={r['capacity']:<3d} | {r['tokens_per_s']:8.0f} | "
                  f"{r['tokens_per_s'] / best['tokens_per_s']:.2f} | | peak in flight {r['peak_in_flight']}")
        for r, note in ((per_run, f"last batch sizes {per_run['last_bs']}"),
                        (pooled, "capacity {capacity}, pooled p* {p_star:.1f}".format(**pooled["pooled"]))):
            print(f"  {r['mode']:<9s} | {r['tokens_per_s']:8.0f} | {r['tokens_per_s'] / best['tokens_per_s']:.2f}"
                  f" | {r['tokens_per_s'] / per_run['tokens_per_s']:.2f} | {note}")
        print(f"  best fixed c={best['capacity']}, worst fixed c={worst['capacity']} "
              f"({worst['tokens_per_s'] / best['tokens_per_s']:.2f} of best)")
    per_run_us, pooled_us = fit_cost_us()
    print(f"\nfit cost: per-run observe+recommend {per_run_us:.1f} us, pooled observe {pooled_us:.1f} us")
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
