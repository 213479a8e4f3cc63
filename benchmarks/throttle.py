"""Benchmark: the Ray throttle actor against the original's flock slot-file semaphore, same run.

Measures, with capacity 4 (the default [backend].max_concurrent) and 1, 8 and 32 clients spread over
up to 4 processes (threads inside each):
* acquire/release pairs per second with an empty body (pure overhead),
* with a 5 ms body (contention): pairs/s, client-side wait percentiles, and fairness of grants per
  client (min/max ratio and Jain's index, 1.0 = perfectly even),
* how fast a slot comes back when its holder is SIGKILLed, and when it hangs (SIGSTOP).
The baseline is built here exactly as spec section 6 describes `TinkerThrottle`: N slot files, try each
with flock(LOCK_EX|LOCK_NB), else block on slot 0.

Then the scale section: 32 clients (8 threads in each of 4 processes) with an empty body at capacity 4
and 32, and with a 5 ms body at capacity 32 (uncontended, as a real endpoint call holds a slot), three clients interleaved over `--reps` repetitions: the current one (per-process local pool of
slots), the previous one (`throttle_previous.py`: per-process batched channel, every grant through the
actor) and the one before (rebuilt here: an acquire and a release RPC per hold, a renewal thread per
hold). Each prints grants/s, grants per client (max/min, Jain), client wait p50/p99 and CPU time per
grant (client processes plus the throttle actor: robust to a loaded machine), min / median / max, and
where the spread of grants per client comes from (clients inside one process: the throttle's hand-out
order; whole processes: their CPU shares, printed next to it); then the slot-back time after a SIGKILL
of a holder, and of a process holding a block of 4 slots, against TTL + 1 s. Run: `.venv/bin/python benchmarks/throttle.py [--reps 3] [--scale-only]`.
"""

from __future__ import annotations

import argparse
import fcntl
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import ray

from retrain_ray.actors.throttle import start_throttle
from retrain_ray.throttle import ThrottleClient
from retrain_ray.throttle.client import RPC_TIMEOUT_S

BENCH_DIR = str(Path(__file__).resolve().parent)  # the client processes import throttle_previous from here

CAPACITY = 4
DURATION_S = 2.0
CLIENTS = (1, 8, 32)
BODIES_S = (0.0, 0.005)
RAY_TTL_S = 1.0
HANG_TIMEOUT_S = 3.0
EXPIRED_IN_RUNS: list[int] = []


class FlockSemaphore:
    """The original's throttle (spec 6): slot files, non-blocking tries, then block on slot 0."""

    def __init__(self, lock_dir: str, max_concurrent: int) -> None:
        self.paths = [Path(lock_dir) / f"slot_{i}.lock" for i in range(max_concurrent)]
        Path(lock_dir).mkdir(parents=True, exist_ok=True)
        for path in self.paths:
            path.touch()

    @contextmanager
    def hold(self):
        fd = self._acquire()
        try:
            yield fd
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def _acquire(self) -> int:
        for path in self.paths:
            fd = os.open(path, os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return fd
            except BlockingIOError:
                os.close(fd)
        fd = os.open(self.paths[0], os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX)
        return fd


def client_loop(hold, start_at: float, duration_s: float, body_s: float) -> tuple[int, list[float]]:
    """Hold/release in a loop from `start_at` (wall clock) for `duration_s`; count and waits."""
    time.sleep(max(0.0, start_at - time.time()))
    end = time.monotonic() + duration_s
    count, waits_s = 0, []
    while time.monotonic() < end:
        asked = time.monotonic()
        with hold():
            waits_s.append(time.monotonic() - asked)
            if body_s:
                time.sleep(body_s)
        count += 1
    return count, waits_s


class PerRequestClient:
    """The previous ThrottleClient.hold(): an acquire and a release RPC per hold, a renewal thread per hold."""

    def __init__(self, handle, holder: str) -> None:
        self.handle, self.holder = handle, holder

    @contextmanager
    def hold(self):
        lease = ray.get(self.handle.acquire.remote(self.holder, 120.0), timeout=120 + RPC_TIMEOUT_S)
        stop = threading.Event()
        renewer = threading.Thread(target=self._renew_until, args=(lease, stop), daemon=True)
        renewer.start()
        try:
            yield lease
        finally:
            stop.set()
            renewer.join(timeout=RPC_TIMEOUT_S)
            ray.get(self.handle.release.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)

    def _renew_until(self, lease, stop: threading.Event) -> None:
        while not stop.wait(min(lease.ttl_s, RAY_TTL_S) / 3):
            ray.get(self.handle.renew.remote(lease.lease_id), timeout=RPC_TIMEOUT_S)


@ray.remote(num_cpus=0)
class RayClients:
    """One client process; each concurrent call is one client thread."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def pid(self) -> int:
        return os.getpid()

    def loop(self, handle, holder: str, start_at: float, duration_s: float, body_s: float,
             client: str = "pooled"):
        if client == "pooled":
            hold = ThrottleClient(handle, holder, timeout_s=120, lease_ttl_s=RAY_TTL_S).hold
        elif client == "batched":
            if BENCH_DIR not in sys.path:
                sys.path.insert(0, BENCH_DIR)
            from throttle_previous import PreviousClient

            hold = PreviousClient(handle, holder, 120.0, RAY_TTL_S).hold
        else:
            hold = PerRequestClient(handle, holder).hold
        return client_loop(hold, start_at, duration_s, body_s)

    def cpu_s(self) -> float:
        return time.process_time()

    def hold_forever(self, holder: str) -> None:
        with ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=RAY_TTL_S).hold():
            time.sleep(600)


def _flock_process(lock_dir, n_threads, start_at, duration_s, body_s, results) -> None:
    sem = FlockSemaphore(lock_dir, CAPACITY)
    out = []
    threads = [
        threading.Thread(target=lambda: out.append(client_loop(sem.hold, start_at, duration_s, body_s)))
        for _ in range(n_threads)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    results.put(out)


def _layout(n_clients: int) -> list[int]:
    """Threads per process: up to 4 processes."""
    n_procs = min(4, n_clients)
    return [n_clients // n_procs + (i < n_clients % n_procs) for i in range(n_procs)]


def run_ray(procs: list, n_clients: int, body_s: float, campaign: str, capacity: int = CAPACITY,
            client: str = "pooled", cpu: list | None = None) -> list[tuple[int, list[float]]]:
    """`procs`: 4 client processes (actors) reused across cases, each with room for 8 client threads.

    `cpu`, if given, gets the CPU seconds each client process and (last) the throttle actor used.
    """
    handle = start_throttle(campaign, "bench", capacity, namespace="bench", lease_ttl_s=RAY_TTL_S)
    cpu_before = _cpu_s(procs, handle)
    start_at = time.time() + 0.5
    refs = [
        proc.loop.remote(handle, f"c{p}-{t}", start_at, DURATION_S, body_s, client)
        for p, (proc, k) in enumerate(zip(procs, _layout(n_clients), strict=False))
        for t in range(k)
    ]
    results = ray.get(refs, timeout=120)
    if cpu is not None:
        cpu.append(list(np.array(_cpu_s(procs, handle)) - cpu_before))
    _wait_for(lambda: ray.get(handle.stats.remote(), timeout=30).in_flight == 0)  # idle pooled slots return
    stats = ray.get(handle.stats.remote(), timeout=30)
    assert stats.peak_in_flight <= capacity, f"throttle exceeded capacity: {stats.peak_in_flight}"
    EXPIRED_IN_RUNS.append(stats.expired)  # leases lost while held: renewals late on a starved machine
    ray.kill(handle)
    return results


def _cpu_s(procs: list, handle) -> np.ndarray:
    return np.array(ray.get([proc.cpu_s.remote() for proc in procs] + [handle.cpu_s.remote()], timeout=60))


def run_flock(n_clients: int, body_s: float) -> list[tuple[int, list[float]]]:
    ctx = mp.get_context("fork")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as lock_dir:
        start_at = time.time() + 0.5
        procs = [
            ctx.Process(target=_flock_process, args=(lock_dir, k, start_at, DURATION_S, body_s, results))
            for k in _layout(n_clients)
        ]
        for proc in procs:
            proc.start()
        out = [item for _ in procs for item in results.get(timeout=120)]
        for proc in procs:
            proc.join(timeout=30)
    return out


def summarize(results: list[tuple[int, list[float]]]) -> dict[str, float]:
    counts = np.array([count for count, _ in results], dtype=float)
    waits_ms = np.concatenate([np.array(w) for _, w in results]) * 1e3
    return {
        "pairs_s": counts.sum() / DURATION_S,
        "p50_ms": float(np.percentile(waits_ms, 50)),
        "p90_ms": float(np.percentile(waits_ms, 90)),
        "p99_ms": float(np.percentile(waits_ms, 99)),
        "min_max": float(counts.min() / counts.max()) if counts.max() else 0.0,
        "jain": float(counts.sum() ** 2 / (len(counts) * (counts**2).sum())),
    }


def _flock_holder(lock_dir: str, ready) -> None:
    with FlockSemaphore(lock_dir, 1).hold():
        ready.set()
        time.sleep(600)


def flock_reclaim_s(sig: int) -> float:
    """Seconds until a waiter gets the slot after its holder gets `sig` (inf: not within the timeout)."""
    ctx = mp.get_context("fork")
    with tempfile.TemporaryDirectory() as lock_dir:
        ready = ctx.Event()
        holder = ctx.Process(target=_flock_holder, args=(lock_dir, ready))
        holder.start()
        assert ready.wait(30), "flock holder did not start"
        got = []
        waiter = threading.Thread(target=lambda: got.append(_flock_acquire_time(lock_dir)), daemon=True)
        waiter.start()
        time.sleep(0.2)
        signalled = time.monotonic()
        os.kill(holder.pid, sig)
        waiter.join(timeout=HANG_TIMEOUT_S)
        os.kill(holder.pid, signal.SIGKILL)  # our own child: end it in every case
        holder.join(timeout=30)
        waiter.join(timeout=30)
    return got[0] - signalled if got and got[0] - signalled < HANG_TIMEOUT_S else float("inf")


def _flock_acquire_time(lock_dir: str) -> float:
    with FlockSemaphore(lock_dir, 1).hold():
        return time.monotonic()


def ray_reclaim_s(sig: int | None, campaign: str) -> float:
    """Seconds until a waiter gets the slot after its holder is ray.kill-ed (None) or gets `sig`."""
    handle = start_throttle(campaign, "reclaim", 1, namespace="bench", lease_ttl_s=RAY_TTL_S)
    holder = RayClients.remote(handle)
    pid = ray.get(holder.pid.remote(), timeout=120)
    holder.hold_forever.remote("victim")
    _wait_for(lambda: ray.get(handle.stats.remote(), timeout=30).in_flight == 1)
    waiter = handle.acquire.remote("waiter", 60.0)
    _wait_for(lambda: ray.get(handle.stats.remote(), timeout=30).waiting == 1)
    signalled = time.monotonic()  # same machine: the actor's monotonic clock is this one
    if sig is None:
        ray.kill(holder)
    else:
        os.kill(pid, sig)  # the worker process of an actor this benchmark created
    lease = ray.get(waiter, timeout=60)
    if sig is not None:
        os.kill(pid, signal.SIGCONT)
        ray.kill(holder)
    ray.kill(handle)
    return lease.granted_at - signalled


def _wait_for(predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError("benchmark setup did not reach its state in time")
        time.sleep(0.02)


def _row(label: str, ray_s: dict, flock_s: dict) -> str:
    return (
        f"| {label} | {ray_s['pairs_s']:.0f} | {flock_s['pairs_s']:.0f} | "
        f"{ray_s['pairs_s'] / flock_s['pairs_s']:.3f} | "
        f"{ray_s['p50_ms']:.1f} / {ray_s['p90_ms']:.1f} / {ray_s['p99_ms']:.1f} | "
        f"{flock_s['p50_ms']:.2f} / {flock_s['p90_ms']:.1f} / {flock_s['p99_ms']:.1f} | "
        f"{ray_s['min_max']:.2f} / {ray_s['jain']:.3f} | {flock_s['min_max']:.2f} / {flock_s['jain']:.3f} |"
    )


SCALE_CLIENTS = 32
# (capacity, body): an empty body at capacity 4 (contended) and 32 (nothing to ration: the clients race for
# CPU), and at capacity 32 a 5 ms body, a stand-in for the endpoint call a real client holds its slot for
SCALE_CASES = ((4, 0.0), (32, 0.0), (32, 0.005))
SCALE_CLIENT_KINDS = ("pooled", "batched", "per-request")  # current, previous, the one before


def run_scale(procs: list, reps: int) -> dict[tuple[int, float, str], list[dict[str, float]]]:
    """32 clients: the three clients interleaved (order rotating), `reps` times per (capacity, body) case."""
    out: dict[tuple[int, float, str], list[dict[str, float]]] = {}
    for rep in range(reps):
        for capacity, body_s in SCALE_CASES:
            kinds = SCALE_CLIENT_KINDS[rep % 3:] + SCALE_CLIENT_KINDS[:rep % 3]
            for client in kinds:
                cpu: list[list[float]] = []
                results = run_ray(procs, SCALE_CLIENTS, body_s, f"scale-{rep}-{capacity}-{body_s}-{client}",
                                  capacity, client, cpu)
                summary = summarize(results)
                summary["cpu_ms_per_grant"] = sum(cpu[0]) * 1e3 / max(1.0, summary["pairs_s"] * DURATION_S)
                summary.update(_by_process(results, cpu[0][:len(procs)]))
                out.setdefault((capacity, body_s, client), []).append(summary)
    return out


def _by_process(results: list[tuple[int, list[float]]], cpu_s: list[float]) -> dict[str, float]:
    """Where the spread of grants per client comes from: clients of one process (the throttle's hand-out
    order), or whole processes (their CPU shares: grants per process against CPU per process)."""
    counts = np.array([count for count, _ in results], dtype=float).reshape(len(cpu_s), -1)
    per_process = counts.sum(axis=1)
    return {"inside": float(max(row.max() / max(row.min(), 1.0) for row in counts)),
            "across": float(per_process.max() / max(per_process.min(), 1.0)),
            "cpu_spread": float(max(cpu_s) / max(min(cpu_s), 1e-9))}


def _spread(values: list[float], fmt: str = "{:.0f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(values), float(np.median(values)), max(values)))


def print_scale(scale: dict, reps: int, load: tuple[float, float]) -> None:
    print(f"\nscale: {SCALE_CLIENTS} clients (8 threads in each of 4 processes), "
          f"{DURATION_S:.0f} s per case, {reps} repetitions interleaved (load average {load[0]:.1f} before, "
          f"{load[1]:.1f} after); min / median / max")
    print("| capacity, body | client | grants/s | vs previous (median) | grants per client max/min | Jain | "
          "wait p50 / p99 ms (median) | CPU ms per grant |")
    print("|---|---|---|---|---|---|---|---|")
    for capacity, body_s in SCALE_CASES:
        base = np.median([r["pairs_s"] for r in scale[capacity, body_s, "batched"]])
        for client in SCALE_CLIENT_KINDS:
            rows = scale[capacity, body_s, client]
            rate = [r["pairs_s"] for r in rows]
            spread = [1 / r["min_max"] if r["min_max"] else float("inf") for r in rows]
            print(f"| {_case(capacity, body_s)} | {client} | {_spread(rate)} | {np.median(rate) / base:.2f} | "
                  f"{_spread(spread, '{:.2f}')} | {_spread([r['jain'] for r in rows], '{:.3f}')} | "
                  f"{np.median([r['p50_ms'] for r in rows]):.2f} / {np.median([r['p99_ms'] for r in rows]):.1f} | "
                  f"{_spread([r['cpu_ms_per_grant'] for r in rows], '{:.2f}')} |")
    print("\nwhere the spread of grants per client comes from: inside a process (max/min among its 8 clients, "
          "worst process) and across processes (grants per process, CPU seconds per process); min / median / max")
    print("| capacity, body | client | inside a process | across processes | process CPU max/min |")
    print("|---|---|---|---|---|")
    for capacity, body_s in SCALE_CASES:
        for client in SCALE_CLIENT_KINDS:
            rows = scale[capacity, body_s, client]
            print(f"| {_case(capacity, body_s)} | {client} | " + " | ".join(
                _spread([r[key] for r in rows], "{:.2f}") for key in ("inside", "across", "cpu_spread")) + " |")
    for capacity, body_s in SCALE_CASES:  # paired per repetition: does the spread follow the CPU shares?
        print(f"pooled, {_case(capacity, body_s)}, each repetition (grants per client max/min, across processes, "
              "process CPU max/min): " + "; ".join(
                  f"{1 / r['min_max'] if r['min_max'] else float('inf'):.2f}, {r['across']:.2f}, "
                  f"{r['cpu_spread']:.2f}" for r in scale[capacity, body_s, "pooled"]))


def _case(capacity: int, body_s: float) -> str:
    return f"{capacity}, {body_s * 1e3:.0f} ms"


def block_reclaim_s(campaign: str, block: int = 4) -> float:
    """Seconds until a waiter for `block` slots gets them after the process pooling them is SIGKILLed."""
    handle = start_throttle(campaign, "block", block, namespace="bench", lease_ttl_s=RAY_TTL_S)
    victim = RayClients.options(max_concurrency=block).remote(handle)
    pid = ray.get(victim.pid.remote(), timeout=120)
    for i in range(block):
        victim.hold_forever.remote(f"victim-{i}")
    _wait_for(lambda: ray.get(handle.stats.remote(), timeout=30).in_flight == block)
    waiter = handle.acquire_many.remote("waiter", block, 60.0)
    _wait_for(lambda: ray.get(handle.stats.remote(), timeout=30).waiting == 1)
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)  # the worker process of an actor this benchmark created
    leases = ray.get(waiter, timeout=60)
    ray.kill(victim)
    ray.kill(handle)
    return max(lease.granted_at for lease in leases) - killed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3, help="repetitions of the scale section")
    parser.add_argument("--scale-only", action="store_true", help="skip the flock comparison")
    args = parser.parse_args()
    started, load_start = time.monotonic(), os.getloadavg()[0]
    cases = [(n, body) for body in BODIES_S for n in CLIENTS]
    if not args.scale_only:
        flock = {case: summarize(run_flock(*case)) for case in cases}  # before Ray: fork a clean process
        flock_kill, flock_hang = flock_reclaim_s(signal.SIGKILL), flock_reclaim_s(signal.SIGSTOP)
    ray.init(address="local", num_cpus=4, include_dashboard=False, object_store_memory=300 * 2**20,
             log_to_driver=False, namespace="bench")
    procs = [RayClients.options(max_concurrency=max(CLIENTS) // 4).remote(None) for _ in range(4)]
    ray.get([proc.pid.remote() for proc in procs], timeout=120)
    if not args.scale_only:
        ours = {case: summarize(run_ray(procs, *case, campaign=f"bench-{i}")) for i, case in enumerate(cases)}
    scale_load = os.getloadavg()[0]
    scale = run_scale(procs, args.reps)
    scale_load = (scale_load, os.getloadavg()[0])
    ray_kill = [ray_reclaim_s(None, f"kill-{i}") for i in range(3)]
    ray_hang = ray_reclaim_s(signal.SIGSTOP, "hang")
    block_kill = [block_reclaim_s(f"block-{i}") for i in range(3)]
    ray.shutdown()
    load_end = os.getloadavg()[0]
    print(f"capacity {CAPACITY}, {DURATION_S:.0f} s per case, clients in up to 4 processes, "
          f"{os.cpu_count()} cores (load average {load_start:.1f} at the start, "
          f"{load_end:.1f} at the end); Ray lease TTL {RAY_TTL_S} s, reaper period {RAY_TTL_S / 4} s\n")
    if not args.scale_only:
        print("| clients, body | Ray pairs/s | flock pairs/s | Ray/flock | Ray wait p50/p90/p99 ms | "
              "flock wait p50/p90/p99 ms | Ray fairness min/max, Jain | flock fairness min/max, Jain |")
        print("|---|---|---|---|---|---|---|---|")
        for n, body in cases:
            print(_row(f"{n}, {body * 1e3:.0f} ms", ours[n, body], flock[n, body]))
        print(f"\nflock: slot back after holder SIGKILL {flock_kill * 1e3:.1f} ms; after SIGSTOP (hung): "
              f"{'never (still blocked)' if flock_hang == float('inf') else f'{flock_hang:.2f} s'} "
              f"after {HANG_TIMEOUT_S:.0f} s")
    print(f"slot back after holder SIGKILL: Ray {_spread(ray_kill, '{:.2f}')} s (min / median / max; "
          f"TTL + reaper bound {RAY_TTL_S * 1.25:.2f})")
    print(f"block of 4 pooled slots back after its process's SIGKILL: {_spread(block_kill, '{:.2f}')} s")
    print(f"slot back after holder SIGSTOP (hung): Ray {ray_hang:.2f} s")
    print(f"leases reclaimed during the throughput cases (late renewals): {sum(EXPIRED_IN_RUNS)}")
    print_scale(scale, args.reps, scale_load)
    worst = max(ray_kill + block_kill)
    print(f"dead holder's slot back within TTL + 1 s ({RAY_TTL_S + 1:.1f} s): "
          f"{'yes' if worst <= RAY_TTL_S + 1 else 'NO'} (worst {worst:.2f} s)")
    print(f"\ntotal {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
