"""Which runs of an adaptive campaign wait at a rung, and for what: the campaign's progress line names them
(`paused at rung 120: grpo+none_s1, maxrl+none_s1 (waiting for maxrl+none_s2)`), where it once counted them
`stale`. The scheduler writes `paused_at_rung` and `paused_why` into each run's manifest entry as it pauses
the run and clears them as it resumes it (campaign/adaptive/scheduler.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from retrain_ray.logs.manifest import RunRecord

PAUSED_KEYS = ("paused_at_rung", "paused_why")


def paused_at(run: RunRecord) -> int | None:
    """The rung `run` waits at (None: not paused)."""
    rung = getattr(run, "paused_at_rung", None)
    return rung if isinstance(rung, int) and run.status not in ("completed", "stopped", "failed") else None


def paused_summary(runs: Iterable[RunRecord]) -> str:
    """`; paused at rung R: run, run (why)` per rung with paused runs; "" when none is."""
    by_rung: dict[int, list[RunRecord]] = {}
    for run in runs:
        rung = paused_at(run)
        if rung is not None:
            by_rung.setdefault(rung, []).append(run)
    parts: list[str] = []
    for rung, paused in sorted(by_rung.items()):
        why = str(getattr(paused[-1], "paused_why", "") or "")
        waiting = why.split(" for ", 1)[1] if " for " in why else "the decision"
        parts.append(f"paused at rung {rung}: {', '.join(r.run_name for r in paused)} (waiting for {waiting})")
    return "".join(f"; {p}" for p in parts)
