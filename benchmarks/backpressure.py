"""Back-pressure benchmark: pooled control vs fixed concurrency vs per-run-only control (the original).

Several runs share one SimulatedEndpoint with a known USL curve (sigma, kappa, lam in items/s; peak at
N* items in flight). Each run is a thread looping: throttle slot -> serve(batch*group items) ->
release -> local "training" sleep -> back-pressure observation. Modes, all measured in this process, each for the same window of `--seconds`:
  fixed c    : throttle capacity c, batch size fixed (c in 1, 2, 3, 4 and the number of runs: the
               endpoint peaks at 1-2 requests in flight, so best and worst c are both in that set)
  per-run    : no throttle, each run's own USL controller sets its batch size (the original's design)
  pooled     : the campaign actor's pooled fit sets the throttle capacity; batch size fixed
Two throughputs per mode, the same rule for every mode (fixed capacities included):
  whole window : tokens of all steps / wall time from start until the last run's last step ended
                 (warmup and convergence included);
  steady state : tokens of the steps that *completed* in the second half of the window, [W/2, W],
                 divided by W/2 (every warmup is over by then: the pooled sweep takes ~1-3 s, the
                 per-run warmup 10 steps; the pooled capacity may still move between neighbours,
                 which the notes column shows). A step's completion time is taken when it reports
                 its observation, by a recording wrapper around every mode's advisor.
Also: fit cost per observation.

Repetitions (`--repeat`) rotate the order of the modes, and the summary gives the min / median / max
of each ratio over them; `--background-load K` runs K busy processes throughout (a loaded machine).

    .venv/bin/python benchmarks/backpressure.py [--seconds 20] [--runs 4 8] [--repeat 3] [--background-load 1]
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
import ray  # noqa: E402

from retrain_ray.actors.backpressure import RemoteAdvisor, start_backpressure_actor  # noqa: E402
from retrain_ray.actors.simulated_endpoint import RecordingAdvisor, SimulatedEndpoint, simulated_run  # noqa: E402
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


def _throughputs(recs: list[RecordingAdvisor], t0: float, seconds: float, wall: float) -> dict:
    steps = [s for r in recs for s in r.steps]
    half = t0 + seconds / 2
    steady = sum(tok for t, tok, _ in steps if half <= t <= t0 + seconds)
    caps = sorted((t, c) for t, _, c in steps if c is not None)
    changes = [t for (_, before), (t, after) in zip(caps, caps[1:], strict=False) if after != before]
    return {"tokens_per_s": sum(tok for _, tok, _ in steps) / wall, "steady_tokens_per_s": steady / (seconds / 2),
            "cap_changes": len(changes), "last_change_s": changes[-1] - t0 if changes else 0.0,
            "caps_second_half": sorted({c for t, c in caps if t >= half})}


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
    recs = [None] * n_runs

    def one(i: int) -> dict:
        run_id = f"r{i}"
        if mode == "pooled":
            advisor = RemoteAdvisor(bp, run_id, "ep")
        elif mode == "per-run":
            advisor = LocalAdvisor(USLController(max_batch_size=MAX_BS), True, 1, MAX_BS)
        else:
            advisor = NoOpAdvisor()
        advisor = recs[i] = RecordingAdvisor(advisor)
        hold = ThrottleClient(throttle, run_id, timeout_s=120.0) if use_throttle else NoThrottle()
        return simulated_run(endpoint, advisor, hold, run_id=run_id, resource="ep", batch_size=BATCH,
                             group_size=GROUP, deadline=deadline, train_s_per_item=TRAIN_S_PER_ITEM)

    t0 = time.monotonic()
    deadline = t0 + seconds
    with ThreadPoolExecutor(n_runs) as pool:
        results = list(pool.map(one, range(n_runs)))
    wall = time.monotonic() - t0
    stats = ray.get(endpoint.stats.remote(), timeout=60)
    snap = ray.get(bp.snapshot.remote(), timeout=60) if bp is not None else None
    if bp is not None:
        ray.kill(bp)
    return {"mode": mode, "capacity": capacity, **_throughputs(recs, t0, seconds, wall),
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


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b > 0 else "-"


def _table(n_runs: int, rows: list[dict], per_run: dict, pooled: dict) -> None:
    best_w = max(rows, key=lambda r: r["tokens_per_s"])
    best_s = max(rows, key=lambda r: r["steady_tokens_per_s"])
    print(f"\n{n_runs} runs (best fixed: c={best_w['capacity']} whole window, c={best_s['capacity']} steady)")
    print("| mode | whole tok/s | vs best fixed | vs per-run | steady tok/s | vs best fixed | vs per-run | notes |")
    print("|---|---|---|---|---|---|---|---|")
    pool = pooled["pooled"]
    notes = {"per-run": f"last batch sizes {per_run['last_bs']}",
             "pooled": f"final c={pool['capacity']}, c in second half {pooled['caps_second_half']}, "
                       f"{pooled['cap_changes']} capacity changes (last at {pooled['last_change_s']:.1f} s, "
                       f"{pool['rounds']} rounds), pooled p* {pool['p_star']:.1f} items"}
    for r in rows + [per_run, pooled]:
        name = f"fixed c={r['capacity']}" if r["mode"] == "fixed" else r["mode"]
        note = notes.get(r["mode"], f"peak in flight {r['peak_in_flight']} items")
        print(f"| {name} | {r['tokens_per_s']:.0f} | {_ratio(r['tokens_per_s'], best_w['tokens_per_s'])} | "
              f"{_ratio(r['tokens_per_s'], per_run['tokens_per_s'])} | {r['steady_tokens_per_s']:.0f} | "
              f"{_ratio(r['steady_tokens_per_s'], best_s['steady_tokens_per_s'])} | "
              f"{_ratio(r['steady_tokens_per_s'], per_run['steady_tokens_per_s'])} | {note} |")
    worst = min(rows, key=lambda r: r["steady_tokens_per_s"])
    print(f"worst fixed (steady): c={worst['capacity']}, "
          f"{_ratio(worst['steady_tokens_per_s'], best_s['steady_tokens_per_s'])} of best")


def _measure(endpoint, throttle, n_runs: int, seconds: float, rep: int) -> tuple[list, dict, dict]:
    """Every mode once, in an order rotated by `rep` so no mode always runs first or last."""
    caps = sorted({c for c in (1, 2, 3, 4) if c <= n_runs} | {n_runs})
    modes = [("fixed", c) for c in caps] + [("per-run", None), ("pooled", None)]
    k = rep % len(modes)
    out = {m: _campaign(endpoint, throttle, m[0], n_runs, seconds, m[1]) for m in modes[k:] + modes[:k]}
    return [out[m] for m in modes[:-2]], out[modes[-2]], out[modes[-1]]


def _ratios(rows: list[dict], per_run: dict, pooled: dict) -> dict[str, float]:
    best_w = max(r["tokens_per_s"] for r in rows)
    best_s = max(r["steady_tokens_per_s"] for r in rows)
    return {"best_w": pooled["tokens_per_s"] / best_w, "best_s": pooled["steady_tokens_per_s"] / best_s,
            "per_run_w": pooled["tokens_per_s"] / per_run["tokens_per_s"],
            "per_run_s": pooled["steady_tokens_per_s"] / per_run["steady_tokens_per_s"],
            "worst_s": min(r["steady_tokens_per_s"] for r in rows) / best_s}


def _summary(ratios: dict[int, list[dict[str, float]]]) -> None:
    print("\nSummary over repetitions, pooled throughput as a ratio (min / median / max)")
    print("| runs | reps | vs best fixed, whole | vs best fixed, steady | vs per-run, whole | vs per-run, steady "
          "| worst fixed vs best, steady |")
    print("|---|---|---|---|---|---|---|")
    for n_runs, reps in ratios.items():
        cells = []
        for key in ("best_w", "best_s", "per_run_w", "per_run_s", "worst_s"):
            v = sorted(r[key] for r in reps)
            cells.append(f"{v[0]:.2f} / {statistics.median(v):.2f} / {v[-1]:.2f}")
        print(f"| {n_runs} | {len(reps)} | " + " | ".join(cells) + " |")


def _start_background_load(n: int) -> list[subprocess.Popen]:
    """`n` busy-looping processes (to measure the controller on a loaded machine); stopped by pid."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--runs", type=int, nargs="+", default=[4, 8])
    ap.add_argument("--repeat", type=int, default=1, help="repetitions of every mode (order rotated)")
    ap.add_argument("--background-load", type=int, default=0, metavar="K",
                    help="run K busy-looping processes during the measurement")
    args = ap.parse_args(argv)
    t_start = time.monotonic()
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, namespace=NS,
             object_store_memory=200 * 2**20)
    print(f"endpoint USL sigma={SIGMA} kappa={KAPPA} lam={LAM} items/s, N*={usl_optimal_p(SIGMA, KAPPA):.1f}"
          f" items; request = {BATCH}x{GROUP} items; {args.seconds:.0f} s per mode, steady = last half; "
          f"{args.repeat} repetition(s), {args.background_load} busy background process(es)")
    endpoint = SimulatedEndpoint.remote(SIGMA, KAPPA, LAM)
    throttle = start_throttle("bench", "ep", 1, namespace=NS, lease_ttl_s=30.0)
    load = _start_background_load(args.background_load)
    ratios: dict[int, list[dict[str, float]]] = {n: [] for n in args.runs}
    try:
        for rep in range(args.repeat):
            for n_runs in args.runs:
                rows, per_run, pooled = _measure(endpoint, throttle, n_runs, args.seconds, rep)
                print(f"\nrepetition {rep + 1} of {args.repeat}, load average {os.getloadavg()[0]:.1f}", end="")
                _table(n_runs, rows, per_run, pooled)
                ratios[n_runs].append(_ratios(rows, per_run, pooled))
    finally:
        for proc in load:
            proc.kill()
            proc.wait(timeout=30)
    _summary(ratios)
    per_run_us, pooled_us = fit_cost_us()
    print(f"\nfit cost: per-run observe+recommend {per_run_us:.1f} us, pooled observe {pooled_us:.1f} us")
    print(f"total wall time {time.monotonic() - t_start:.0f} s")
    ray.shutdown()


if __name__ == "__main__":
    sys.exit(main())
