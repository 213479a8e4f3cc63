"""Where the CPU goes while a campaign on simulated nodes waits for its first step (benchmarks/scale.py --nodes).

A `ray.cluster_utils.Cluster` runs every node's processes on this machine's cores: per node a raylet, its
dashboard agent and runtime-env agent (two Python processes) and its prestarted workers. `CpuProbe` samples
the CPU seconds of every process below the driver process once a second, by kind (`KINDS`: matched on the
command line), so the time to the first step can be split into the campaign's own work and the simulated
nodes' processes that share the cores with it, which on a real cluster run on their own machines.
`wait_quiet` waits until the processes below the driver have settled (`--settle`): the nodes' own start-up
finished before the campaign's clock starts.
"""

from __future__ import annotations

import threading
import time

import psutil

KINDS = (("trial", "ray::"), ("agent", "dashboard/agent.py"), ("agent", "runtime_env/agent"),
         ("worker", "default_worker.py"), ("raylet", "raylet"), ("gcs", "gcs_server"))


def _kind(process: psutil.Process) -> str:
    try:
        line = " ".join(process.cmdline()) or process.name()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return "gone"
    return next((kind for kind, mark in KINDS if mark in line), "other")


def _cpu(process: psutil.Process) -> float:
    try:
        times = process.cpu_times()
        return times.user + times.system
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return 0.0


class CpuProbe:
    """CPU seconds of the driver's descendant processes, per kind, sampled every `period_s` into `timeline`
    (Unix time, totals per kind). A process's CPU counts from its first sample; what a process spent after its
    last sample before it ended is not counted."""

    def __init__(self, period_s: float = 1.0) -> None:
        self._root = psutil.Process()
        self._seen: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.timeline: list[tuple[float, dict[str, float]]] = []
        self.timeline.append((time.time(), self.totals()))  # the baseline: what the processes spent before
        self._thread = threading.Thread(target=self._run, args=(period_s,), daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        for process in self._root.children(recursive=True):
            seen = self._seen.get(process.pid)
            kind = seen[0] if seen else _kind(process)
            with self._lock:
                self._seen[process.pid] = (kind, max(_cpu(process), seen[1] if seen else 0.0))

    def _run(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            self.timeline.append((time.time(), self.totals()))

    def totals(self) -> dict[str, float]:
        self._sample()
        with self._lock:
            out: dict[str, float] = {}
            for kind, cpu in self._seen.values():
                out[kind] = out.get(kind, 0.0) + cpu
        return out

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def spent_between(timeline: list[tuple[float, dict[str, float]]], start: float, end: float) -> dict[str, float]:
    """CPU seconds per kind from the last sample at or before `start` to the last at or before `end`."""
    def at(moment: float) -> dict[str, float]:
        before = [totals for when, totals in timeline if when <= moment]
        return before[-1] if before else {}

    first, last = at(start), at(end)
    return {kind: round(last[kind] - first.get(kind, 0.0), 2) for kind in sorted(last)}


def wait_quiet(*, busy_below: float = 0.25, quiet_s: float = 3.0, timeout_s: float = 300.0) -> float:
    """Waits until the driver's descendant processes use under `busy_below` of one core for `quiet_s` seconds
    in a row (or `timeout_s`); returns the seconds waited."""
    root, start = psutil.Process(), time.perf_counter()
    quiet_since: float | None = None
    last = sum(_cpu(p) for p in root.children(recursive=True))
    while time.perf_counter() - start < timeout_s:
        time.sleep(1.0)
        now = sum(_cpu(p) for p in root.children(recursive=True))
        busy, last = now - last, now
        quiet_since = (quiet_since or time.perf_counter()) if busy < busy_below else None
        if quiet_since is not None and time.perf_counter() - quiet_since >= quiet_s:
            break
    return time.perf_counter() - start
