"""Calibration figures from the logs of earlier runs (a pilot), for `retrain-ray explain --calibrate`.

Reads a run directory (its Arrow metrics log, `run_meta.json`), a campaign directory (`manifest.json`
and its runs) or a directory holding them. Per run: the warm-start (`phase = "sft"`) and RL steps
apart, each with the median `step_time_s` over its recent steps (the later half, seed 000's figure),
the wall clock per step (the mean spacing of the rows' `wall_time`: what the estimate adds up) and
the between-step overhead (that spacing over `step_time_s`: logging, checkpoints, the warm start's
probe); whether the warm start ended; `max_token_hit_rate`; tokens/s; the back-pressure
regimes and actions; the run's start-up (trial start to its first step) and teardown (last step to the
trial's end); the size of a checkpoint. Per campaign: its own start-up (driver process start to the
first run's start), teardown (last run's end to the manifest's final write) and the handover between
a run's end and the next run's start in its slot.

`RunFigures` and `CampaignFigures` are plain records; `pooled` merges runs (a condition's, or all).
"""

from __future__ import annotations

import datetime as dt
import json
import statistics
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

from retrain_ray.logs.manifest import MANIFEST, RunRecord, SessionRecord, read_manifest

WARM_START = "sft"
CHECKPOINTS = "checkpoints"  # the run's checkpoint folders live in <work>/checkpoints/


@dataclass(frozen=True)
class PhaseFigures:
    """Step times of one phase (warm start or RL) of one or more runs."""

    steps: int
    recent_step_times: tuple[float, ...]  # step_time_s of the later half of the phase's steps
    step_time_sum: float  # over the steps that follow another row (the span's steps)
    wall_span_sum: float  # wall_time differences to the previous row, over the same steps
    spans: int = 0  # how many such steps

    @property
    def median_step_time_s(self) -> float:
        return statistics.median(self.recent_step_times) if self.recent_step_times else 0.0

    @property
    def overhead(self) -> float:
        """Wall clock per second of `step_time_s` (>= 1): what happens between the timed steps."""
        if self.step_time_sum <= 0 or self.wall_span_sum <= 0:
            return 1.0
        return max(1.0, self.wall_span_sum / self.step_time_sum)

    @property
    def seconds_per_step(self) -> float:
        """Wall clock per step: the mean spacing of the rows (slow steps weigh what they cost; the median
        `step_time_s` alone ran 10-20% short of a loaded pilot's own wall time)."""
        return self.wall_span_sum / self.spans if self.spans else self.median_step_time_s


@dataclass(frozen=True)
class RunFigures:
    run_name: str
    condition: str
    seed: int | None
    steps: int
    warm_start: PhaseFigures | None
    rl: PhaseFigures | None
    warm_start_ended: bool  # RL steps followed the warm start (by its target or at its own cap: see the next two)
    max_token_hit_rate: float | None = None
    tokens_per_s: float | None = None
    bp_regimes: dict[str, int] = field(default_factory=dict)
    bp_actions: dict[str, int] = field(default_factory=dict)
    startup_s: float | None = None
    teardown_s: float | None = None
    checkpoint_bytes: int | None = None
    warm_start_capped: bool = False  # no target probe was logged: the warm start ran its own sft_warmup_steps
    warm_start_last_probe: float | None = None  # the last warm-start step's sft_probe_correct_rate

    @property
    def warm_start_steps(self) -> int:
        return self.warm_start.steps if self.warm_start else 0


@dataclass(frozen=True)
class CampaignFigures:
    name: str
    path: str
    runs: int
    max_concurrent: int
    startup_s: float | None = None
    teardown_s: float | None = None
    handover_s: float | None = None
    wall_time_s: float | None = None


@dataclass(frozen=True)
class Calibration:
    source: str
    runs: tuple[RunFigures, ...]
    campaigns: tuple[CampaignFigures, ...] = ()

    def for_condition(self, condition: str) -> tuple[RunFigures, ...]:
        return tuple(r for r in self.runs if r.condition == condition)


# --- reading ---------------------------------------------------------------------------------------


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") else None


def _seconds(value: object) -> float | None:
    """A row's wall_time (datetime, or an ISO string from JSON) as Unix seconds."""
    if isinstance(value, dt.datetime):
        return value.timestamp()
    if isinstance(value, str):
        try:
            return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return _number(value)


def phase_figures(rows: Sequence[Mapping[str, object]], previous: Sequence[float | None]) -> PhaseFigures | None:
    """Figures of one phase's rows; `previous[i]` is the wall time of the row logged before rows[i]."""
    times = [_number(r.get("step_time_s")) for r in rows]
    if not rows:
        return None
    valid = [t for t in times if t is not None and t > 0]
    recent = tuple(valid[len(valid) // 2:])
    step_sum = span_sum = 0.0
    spans = 0
    for row, step_time, before in zip(rows, times, previous, strict=True):
        now = _seconds(row.get("wall_time"))
        if step_time is None or step_time <= 0 or now is None or before is None or now <= before:
            continue
        step_sum += step_time
        span_sum += now - before
        spans += 1
    return PhaseFigures(len(rows), recent, step_sum, span_sum, spans)


def _frequencies(rows: Iterable[Mapping[str, object]], key: str) -> dict[str, int]:
    return dict(Counter(str(r[key]) for r in rows if r.get(key)))


def _checkpoint_bytes(work_dir: Path) -> int | None:
    """The size of the run's largest checkpoint (a folder in `checkpoints/`), None when it saved none."""
    folders = [d for parent in work_dir.rglob(CHECKPOINTS) if parent.is_dir() for d in parent.iterdir() if d.is_dir()]
    sizes = [sum(f.stat().st_size for f in d.rglob("*") if f.is_file()) for d in folders]
    return max(sizes) if sizes else None


def run_figures(run_name: str, rows: Sequence[Mapping[str, object]], *, seed: int | None = None,
                started_at: float | None = None, finished_at: float | None = None,
                work_dir: Path | None = None) -> RunFigures:
    """A run's figures from its metric rows (in step order) and, where known, its trial's start and end."""
    walls = [_seconds(r.get("wall_time")) for r in rows]
    previous: list[float | None] = [None, *walls[:-1]]
    warm = [i for i, r in enumerate(rows) if r.get("phase") == WARM_START]
    rl = [i for i, r in enumerate(rows) if r.get("phase") != WARM_START]
    rl_rows = [rows[i] for i in rl]
    hits = [h for h in (_number(r.get("max_token_hit_rate")) for r in rl_rows[len(rl_rows) // 2:]) if h is not None]
    speeds = [s for s in (_number(r.get("tokens_per_second")) for r in rl_rows[len(rl_rows) // 2:]) if s]
    first_step = _number(rows[0].get("step_time_s")) if rows else None
    last_probe = _number(rows[warm[-1]].get("sft_probe_correct_rate")) if warm else None
    startup = teardown = None
    if rows and started_at is not None and walls[0] is not None:
        startup = max(0.0, walls[0] - (first_step or 0.0) - started_at)
    if rows and finished_at is not None and walls[-1] is not None:
        teardown = max(0.0, finished_at - walls[-1])
    return RunFigures(
        run_name=run_name,
        condition=str(rows[-1].get("condition") or "") if rows else "",
        seed=seed,
        steps=len(rows),
        warm_start=phase_figures([rows[i] for i in warm], [previous[i] for i in warm]),
        rl=phase_figures(rl_rows, [previous[i] for i in rl]),
        warm_start_ended=bool(warm) and bool(rl),
        max_token_hit_rate=statistics.fmean(hits) if hits else None,
        tokens_per_s=statistics.median(speeds) if speeds else None,
        bp_regimes=_frequencies(rows, "bp_regime"),
        bp_actions=_frequencies(rows, "bp_action"),
        startup_s=startup,
        teardown_s=teardown,
        checkpoint_bytes=_checkpoint_bytes(work_dir) if work_dir is not None else None,
        warm_start_capped=bool(warm) and bool(rl) and last_probe is None,
        warm_start_last_probe=last_probe,
    )


def _read_rows(run_dir: Path) -> list[dict[str, object]]:
    # deferred: pyarrow, only once a run was found
    from retrain_ray.logs import read_stream  # pyright: ignore[reportUnknownVariableType]  # returns a pyarrow Table

    try:
        table = read_stream(run_dir, name="metrics")  # pyright: ignore[reportUnknownVariableType]  # a pyarrow Table
        rows = cast("list[dict[str, object]]", table.to_pylist())  # pyright: ignore[reportUnknownMemberType]
    except (OSError, ValueError):
        return []
    return sorted(rows, key=lambda r: int(_number(r.get("step")) or 0))


def _iso(value: object) -> float | None:
    return _seconds(value) if isinstance(value, str) else None


def _tune_finished_at(campaign_dir: Path, run_name: str) -> float | None:
    """The trial's last report time from Tune's result.json (manifests before `finished_at` was recorded)."""
    path = campaign_dir / "tune" / run_name / "result.json"
    try:
        lines = path.read_text(encoding="utf-8").strip().splitlines()
        return _number(json.loads(lines[-1]).get("timestamp")) if lines else None
    except (OSError, ValueError, AttributeError):
        return None


def _handover(entries: Sequence[RunRecord], slots: int) -> float | None:
    """Median seconds from a run's end to the start of the run that took its slot."""
    starts = sorted(s for s in (_number(e.started_at) for e in entries) if s is not None)
    ends = sorted(f for f in (_number(e.finished_at) for e in entries) if f is not None)
    gaps: list[float] = []
    for start in starts[slots:]:
        before = [f for f in ends if f <= start]
        if before:
            gaps.append(start - before[-1])
    return statistics.median(gaps) if gaps else None


def campaign_figures(campaign_dir: Path) -> tuple[CampaignFigures, list[RunFigures]]:
    """A campaign's own figures and its runs' (those with logged steps)."""
    manifest = read_manifest(campaign_dir)
    entries: list[RunRecord] = []
    runs: list[RunFigures] = []
    for entry in manifest.runs:
        run_dir = Path(entry.run_dir or campaign_dir / "runs" / entry.run_name)
        if not run_dir.is_dir():
            run_dir = campaign_dir / "runs" / entry.run_name
        rows = _read_rows(run_dir)
        finished = _number(entry.finished_at)
        if finished is None and entry.status == "completed":
            finished = _tune_finished_at(campaign_dir, entry.run_name)
        entries.append(entry.model_copy(update={"finished_at": finished}))
        if rows:
            runs.append(run_figures(entry.run_name, rows, seed=entry.seed if "seed" in entry.model_fields_set else None,
                                    started_at=_number(entry.started_at), finished_at=finished,
                                    work_dir=run_dir / "work"))
    first = manifest.sessions[0] if manifest.sessions else SessionRecord()
    began = _number(first.process_started_at or None) or _iso(manifest.created or None) or _number(first.started or None)
    starts = [s for s in (_number(e.started_at) for e in entries) if s is not None]
    ends = [f for f in (_number(e.finished_at) for e in entries) if f is not None]
    done = manifest.status in ("done", "partial") and len(manifest.sessions) <= 1
    updated = _iso(manifest.updated or None) if done else None
    figures = CampaignFigures(
        name=manifest.name or campaign_dir.name,
        path=str(campaign_dir),
        runs=len(manifest.runs),
        max_concurrent=manifest.max_concurrent or 1,
        startup_s=min(starts) - began if starts and began is not None else None,
        teardown_s=max(0.0, updated - max(ends)) if updated is not None and ends else None,
        handover_s=_handover(entries, manifest.max_concurrent or 1),
        wall_time_s=updated - began if updated is not None and began is not None else None,
    )
    return figures, runs


def _single_run(run_dir: Path) -> RunFigures | None:
    rows = _read_rows(run_dir)
    if not rows:
        return None
    meta_path = next((p for p in (run_dir / "run_meta.json", run_dir / "work" / "run_meta.json") if p.is_file()),
                     run_dir / "run_meta.json")  # a `train` run's own, or a campaign run's work dir
    seed, started = None, None
    if meta_path.is_file():
        try:
            seed = json.loads(meta_path.read_text(encoding="utf-8")).get("seed")
        except (OSError, ValueError, AttributeError):
            seed = None
        started = meta_path.stat().st_mtime  # written as the run starts, before the model loads
    return run_figures(str(rows[-1].get("run") or run_dir.name), rows, seed=seed, started_at=started,
                       work_dir=run_dir)


def read_calibration(directory: str | Path) -> Calibration:
    """Figures from a run, a campaign, or a directory holding them; ValueError when it holds none."""
    root = Path(directory)
    if not root.is_dir():
        raise ValueError(f"--calibrate {directory}: not a directory; pass a pilot run or campaign directory "
                         "(e.g. logs/<pilot>)")
    campaigns: list[CampaignFigures] = []
    runs: list[RunFigures] = []
    campaign_dirs = sorted(p.parent for p in root.rglob(MANIFEST) if "tune" not in p.parent.parts[len(root.parts):])
    for campaign_dir in campaign_dirs:
        try:
            figures, its_runs = campaign_figures(campaign_dir)
        except (FileNotFoundError, ValueError):
            continue
        campaigns.append(figures)
        runs += its_runs
    inside = tuple(campaign_dirs)
    for log in sorted(root.rglob("metrics*.arrows")):
        run_dir = log.parent
        if any(run_dir.is_relative_to(c) for c in inside) or any(r.run_name == run_dir.name for r in runs):
            continue
        single = _single_run(run_dir)
        if single is not None:
            runs.append(single)
    if not runs:
        raise ValueError(f"--calibrate {directory}: no run with logged steps found (no metrics*.arrows below it); "
                         "run a pilot first (a few seeds, part of max_steps) and pass its directory")
    return Calibration(str(root), tuple(runs), tuple(campaigns))


# --- pooling ---------------------------------------------------------------------------------------


def pooled_phase(phases: Iterable[PhaseFigures | None]) -> PhaseFigures | None:
    present = [p for p in phases if p is not None and p.steps]
    if not present:
        return None
    return PhaseFigures(
        steps=sum(p.steps for p in present),
        recent_step_times=tuple(t for p in present for t in p.recent_step_times),
        step_time_sum=sum(p.step_time_sum for p in present),
        wall_span_sum=sum(p.wall_span_sum for p in present),
        spans=sum(p.spans for p in present),
    )


def median_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def mean_of(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def frequencies(counts: Iterable[Mapping[str, int]]) -> dict[str, float]:
    """Summed counts as shares of their total."""
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    n = sum(total.values())
    return {k: v / n for k, v in total.most_common()} if n else {}
