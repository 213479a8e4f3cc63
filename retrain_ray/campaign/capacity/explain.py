"""`retrain-ray explain`'s capacity section: the plan's runs and a pilot's figures -> the estimate and
seed 000's checklist.

Per run of the plan: its warm-start steps (`sft_warmup_steps`, or the pilot's measured length where
the warm start stops at `sft_target_correct_rate`: the same condition and seed's, else the mean of the
pilot's) and its RL steps, at the seconds per step of its condition in the pilot (all pilot runs
pooled where the condition did not run). Start-up, teardown and handover come from the pilot campaign;
concurrency from the plan's own formula (`campaign/plan.py: concurrent_runs`), bounded by the GPUs
available. Uncalibrated, every step takes `median_step_time` (10 s unless typed) and nothing else counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

from retrain_ray.campaign.capacity.calibration import (
    Calibration,
    PhaseFigures,
    RunFigures,
    frequencies,
    mean_of,
    median_of,
    pooled_phase,
    read_calibration,
)
from retrain_ray.campaign.capacity.estimate import (
    CheckpointUse,
    Estimate,
    EstimateJson,
    Overheads,
    RunWork,
    estimate,
    kept_checkpoints,
    slots,
)
from retrain_ray.campaign.capacity.pilot_warm_start import capped_pilot_warnings, reached_target
from retrain_ray.campaign.capacity.placement import mode_for_gpus, parse_devices
from retrain_ray.campaign.plan import CampaignError, CampaignPlan, build_plan, concurrent_runs, default_root
from retrain_ray.config.campaign_schema import CampaignSection
from retrain_ray.config.schema import RetrainConfig
from retrain_ray.config.sections_runtime import LoggingSection
from retrain_ray.config.sections_training import TrainingSection
from retrain_ray.logs.manifest import MANIFEST, read_manifest

DEFAULT_STEP_S = 10.0
TRUNCATION_HIGH = 0.1  # share of completions cut at max_tokens above which answers are likely lost
TRUNCATION_LOW = 0.01
CONGESTION_HIGH = 0.2  # share of steps throttled or retrograde above which concurrency is too high


@dataclass(frozen=True)
class StepTimes:
    """Seconds per step of one condition, per phase, and where they came from."""

    warm_start_s: float
    rl_s: float
    warm_start_median_s: float
    rl_median_s: float
    source: str  # "condition", "pooled" or "default"


def _phase_seconds(phase: PhaseFigures | None, override: float | None) -> tuple[float, float] | None:
    """(seconds per step, median step_time_s) of a phase; the override replaces the median."""
    if phase is None or not phase.recent_step_times:
        return None
    if override is not None:
        return override * phase.overhead, override
    return phase.seconds_per_step, phase.median_step_time_s


def step_times(runs: Sequence[RunFigures], everyone: Sequence[RunFigures], override: float | None) -> StepTimes:
    """A condition's step times from its pilot runs, else from all pilot runs, else the default."""
    fallback = override if override is not None else DEFAULT_STEP_S
    found: dict[str, tuple[float, float]] = {}
    sources: list[str] = []
    for group, name in ((runs, "condition"), (everyone, "pooled")):
        for phase in ("warm_start", "rl"):
            seconds = None if phase in found else _phase_seconds(pooled_phase(getattr(r, phase) for r in group), override)
            if seconds is not None:
                found[phase] = seconds
                sources.append(name)
    source = sources[0] if sources else "default"
    warm = found.get("warm_start") or found.get("rl") or (fallback, fallback)
    rl = found.get("rl") or found.get("warm_start") or (fallback, fallback)
    return StepTimes(warm[0], rl[0], warm[1], rl[1], source)


class WarmStart(Protocol):
    """The [training] keys of a run's warm start (`TrainingSection` has them)."""

    @property
    def sft_warmup_steps(self) -> int: ...
    @property
    def sft_target_correct_rate(self) -> float: ...


def warm_start_steps(training: WarmStart, max_steps: int, seed: int, pilots: Sequence[RunFigures]) -> int:
    """The warm start's expected length in a run of `max_steps`."""
    cap = max(0, min(int(training.sft_warmup_steps), max_steps))
    if cap == 0 or training.sft_target_correct_rate <= 0 or not pilots:
        return cap
    target = training.sft_target_correct_rate  # a pilot warm start that stopped at its own cap measures nothing
    same = [r for r in pilots if r.seed == seed and reached_target(r, target)]
    if same:
        return min(cap, same[0].warm_start_steps)
    return round(statistics.fmean(min(cap, r.warm_start_steps) if reached_target(r, target) else cap for r in pilots))


def overheads(calibration: Calibration | None) -> Overheads:
    if calibration is None:
        return Overheads()
    camps = calibration.campaigns
    return Overheads(
        campaign_startup_s=median_of(c.startup_s for c in camps) or 0.0,
        campaign_teardown_s=median_of(c.teardown_s for c in camps) or 0.0,
        run_startup_s=median_of(r.startup_s for r in calibration.runs) or 0.0,
        run_teardown_s=median_of(r.teardown_s for r in calibration.runs) or 0.0,
        handover_s=median_of(c.handover_s for c in camps) or 0.0,
    )


def checkpoint_use(campaign: CampaignSection, training: TrainingSection, num_runs: int,
                   calibration: Calibration | None) -> CheckpointUse | None:
    """The run's own checkpoints (the kept ones and `final`) and Tune's copies of them (bounded alike)."""
    size = max((r.checkpoint_bytes for r in calibration.runs if r.checkpoint_bytes), default=0) if calibration else 0
    if not size or training.save_every <= 0:
        return None
    own = kept_checkpoints(campaign.max_steps, training.save_every, training.keep_last_checkpoints) + 1
    tune_copies = min(own, training.keep_last_checkpoints) if training.keep_last_checkpoints > 0 else own
    return CheckpointUse(size, own + (0 if campaign.storage else tune_copies), num_runs)


class FiguresJson(TypedDict):
    runs: int
    warm_start_steps: list[int]
    max_token_hit_rate: float | None
    tokens_per_s: float | None
    bp_regimes: dict[str, float]
    bp_actions: dict[str, float]


@dataclass(frozen=True)
class ConditionFigures:
    """The pilot's figures of one condition's runs (or all of them)."""

    runs: int
    warm_start_steps: tuple[int, ...]
    max_token_hit_rate: float | None  # the runs' mean
    tokens_per_s: float | None  # the runs' median
    bp_regimes: dict[str, float]  # share of the steps in each back-pressure regime
    bp_actions: dict[str, float]  # share of the steps with each back-pressure action

    def to_json(self) -> FiguresJson:
        return {"runs": self.runs, "warm_start_steps": list(self.warm_start_steps),
                "max_token_hit_rate": self.max_token_hit_rate, "tokens_per_s": self.tokens_per_s,
                "bp_regimes": self.bp_regimes, "bp_actions": self.bp_actions}


@dataclass(frozen=True)
class Capacity:
    estimate: Estimate
    step_times: dict[str, StepTimes]
    calibration: Calibration | None
    how: str  # where the figures came from, in words
    recommendations: tuple[str, ...]
    figures: dict[str, ConditionFigures]  # per condition (and "all"): the pilot's figures


def condition_figures(runs: Sequence[RunFigures]) -> ConditionFigures:
    return ConditionFigures(
        runs=len(runs),
        warm_start_steps=tuple(r.warm_start_steps for r in runs),
        max_token_hit_rate=mean_of(r.max_token_hit_rate for r in runs),
        tokens_per_s=median_of(r.tokens_per_s for r in runs),
        bp_regimes=frequencies(r.bp_regimes for r in runs),
        bp_actions=frequencies(r.bp_actions for r in runs),
    )


def _flagged(figures: dict[str, ConditionFigures], share: Callable[[ConditionFigures], float | None],
             threshold: float) -> str:
    """"cond 12%, cond 30%" for the conditions whose share reaches the threshold ("" for none)."""
    hits = {name: share(f) for name, f in figures.items() if name != "all"}
    hits = {name: value for name, value in hits.items() if value is not None and value >= threshold}
    return ", ".join(f"{name} {value:.0%}" for name, value in hits.items())


def recommendations(campaign: CampaignSection, training: TrainingSection, figures: dict[str, ConditionFigures],
                    est: Estimate, pilot_slots: set[int]) -> list[str]:
    """Seed 000's checklist from the pilot's figures."""
    out: list[str] = []
    max_tokens = training.max_tokens
    cut = _flagged(figures, lambda f: f.max_token_hit_rate, TRUNCATION_HIGH)
    if cut:
        out.append(f"truncation: completions hit max_tokens = {max_tokens} ({cut}): they are cut off; raise "
                   "[training] max_tokens if the answers need the room")
    congested = _flagged(figures, lambda f: f.bp_actions.get("throttle", 0.0) + f.bp_regimes.get("retrograde", 0.0),
                         CONGESTION_HIGH)
    if congested:
        out.append(f"concurrency: steps throttled or retrograde ({congested}): concurrency is too high; lower "
                   "[campaign] max_workers or [backend] max_concurrent")
    everyone = figures.get("all")
    all_hit = everyone.max_token_hit_rate if everyone is not None else None
    if all_hit is not None and all_hit < TRUNCATION_LOW:
        out.append(f"truncation: completions almost never reach max_tokens = {max_tokens} ({all_hit:.1%}): "
                   "a lower max_tokens cuts latency and memory")
    if pilot_slots and est.slots.count not in pilot_slots:
        out.append(f"the pilot ran {sorted(pilot_slots)} run(s) at once, this plan {est.slots.count}: on shared "
                   "hardware (CPU, one GPU) the step times change with it; a pilot at the same max_workers is exact")
    out.append(f"wall time with max_workers = {campaign.max_workers or 'one per run'}: "
               f"{est.wall_time_s:,.0f} s ({est.wall_time_s / 3600:.2f} h), {est.slots.count} run(s) at once "
               f"(limited by {est.slots.limited_by})")
    return out


def earlier_runs(root: Path, campaign: CampaignSection, file: str | Path) -> Path | None:
    """The latest earlier campaign of this one under `root`, its log_dir (same [campaign] name, or the same file)."""
    if not root.is_dir():
        return None
    wanted = Path(file).resolve()
    found: list[tuple[str, Path]] = []
    for path in root.glob(f"*/{MANIFEST}"):
        try:
            manifest = read_manifest(path.parent)
        except (FileNotFoundError, ValueError):
            continue
        same_name = bool(campaign.name) and manifest.name == campaign.name
        same_file = bool(manifest.campaign_toml) and Path(manifest.campaign_toml).resolve() == wanted
        if same_name or same_file:
            found.append((manifest.created, path.parent))
    return max(found)[1] if found else None


def dry_plan(cfg: RetrainConfig, file: str | Path) -> CampaignPlan:
    """The campaign's plan as `Campaign.run()` builds it, without the checks that look beyond the config
    (explain reports those as warnings); ValueError naming every problem that would refuse it."""
    try:
        return build_plan(cfg, probe=False)
    except CampaignError as exc:
        raise ValueError(f"{file}: the campaign would be refused:\n" + "\n".join(f"  - {p}" for p in exc.problems)) from None


class PlannedResources(TypedDict):
    cpus: float
    gpus: float
    placement: str


def planned_resources(plan: CampaignPlan) -> PlannedResources:
    """CPUs, GPUs and placement mode of one run of the plan: its bundle's GPU share when packed
    (`[campaign] runs_per_gpu`), else the GPUs the registry placed it on."""
    run = plan.all_runs[0]
    gpus = parse_devices(run.devices)
    share: float = run.gpu_share if gpus == 1 and run.gpu_share < 1.0 else gpus
    return {"cpus": plan.schedule.cpus_per_run, "gpus": share, "placement": mode_for_gpus(gpus, run.in_process)}


class PlannedRun(Protocol):
    """What the estimate reads of a run: a `RunPlan` of the plan, or a `config.matrix.RunSpec`."""

    @property
    def run_name(self) -> str: ...
    @property
    def condition_label(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def config(self) -> RetrainConfig: ...


class TrainedConfig(Protocol):
    """What the estimate reads of the campaign's config: its [training] section."""

    @property
    def training(self) -> TrainingSection: ...


def plan_capacity(cfg: TrainedConfig, campaign: CampaignSection, specs: Sequence[PlannedRun], *,
                  calibration: Calibration | None, how: str, median_step_time: float | None, gpus_per_run: float,
                  gpus_available: float | None, concurrency: int | None = None) -> Capacity:
    """The estimate for the runs `specs` of campaign config `cfg`, whose [campaign] section is
    `campaign`; `concurrency`: the plan's runs at once (`Schedule.max_concurrent`), else its formula."""
    pilots = calibration.runs if calibration else ()
    by_condition: dict[str, list[RunFigures]] = {}
    for pilot in pilots:
        by_condition.setdefault(pilot.condition, []).append(pilot)
    times: dict[str, StepTimes] = {}
    work: list[RunWork] = []
    for spec in specs:
        mine = tuple(by_condition.get(spec.condition_label, ()))
        if spec.condition_label not in times:
            times[spec.condition_label] = step_times(mine, pilots, median_step_time)
        st = times[spec.condition_label]
        warm = warm_start_steps(spec.config.training, campaign.max_steps, spec.seed, mine or pilots)
        work.append(RunWork(spec.run_name, warm, campaign.max_steps - warm, st.warm_start_s, st.rl_s))
    at_once = concurrency if concurrency is not None else concurrent_runs(campaign.parallel, campaign.max_workers,
                                                                          len(specs))
    plan_slots = slots(at_once, gpus_per_run, gpus_available)
    est = estimate(work, slot_plan=plan_slots, stagger_s=float(campaign.stagger_seconds), overheads=overheads(calibration),
                   checkpoint=checkpoint_use(campaign, cfg.training, len(specs), calibration))
    figures: dict[str, ConditionFigures] = {}
    if pilots:
        for label in dict.fromkeys(s.condition_label for s in specs):
            mine = [r for r in pilots if r.condition == label]
            if mine:
                figures[label] = condition_figures(mine)
        figures["all"] = condition_figures(pilots)
    pilot_slots = {camp.max_concurrent for camp in calibration.campaigns} if calibration else set[int]()
    recs = recommendations(campaign, cfg.training, figures, est, pilot_slots)
    recs += capped_pilot_warnings(cfg.training.sft_warmup_steps, cfg.training.sft_target_correct_rate,
                                  campaign.max_steps, pilots)
    return Capacity(est, times, calibration, how, tuple(recs), figures)


def load_calibration(logging: LoggingSection, campaign: CampaignSection, file: str | Path,
                     calibrate: str | None) -> tuple[Calibration | None, str]:
    """The figures explain uses and how it found them; ValueError for a --calibrate DIR without runs."""
    if calibrate:
        return read_calibration(calibrate), f"calibrated from {calibrate} (--calibrate)"
    earlier = earlier_runs(default_root(logging), campaign, file)
    if earlier is not None:
        try:
            return read_calibration(earlier), f"calibrated from earlier runs of this campaign: {earlier}"
        except ValueError:
            pass
    return None, ("uncalibrated: no pilot (pass --calibrate DIR after a pilot of a few seeds and part of "
                  "max_steps, or --median-step-time S)")


class StepTimesJson(TypedDict):
    warm_start_s_per_step: float
    rl_s_per_step: float
    warm_start_median_step_time_s: float
    rl_median_step_time_s: float
    source: str


class CapacityJson(TypedDict):
    """The capacity section of `retrain-ray explain --json` (the keys it printed before calibration first)."""

    concurrency_per_step: int
    total_campaign_steps: int
    median_step_time_s: float
    warm_start_median_step_time_s: float
    effective_parallelism: int
    estimated_wall_time_s: float
    calibrated: bool
    calibration: str
    parts: EstimateJson
    step_times: dict[str, StepTimesJson]
    pilot: dict[str, FiguresJson]
    recommendations: list[str]


def capacity_dict(cap: Capacity, training: TrainingSection, campaign: CampaignSection,
                  num_conditions: int) -> CapacityJson:
    """The JSON form (the keys explain printed before calibration came first, then the parts)."""
    est = cap.estimate
    rl = [t.rl_median_s for t in cap.step_times.values()]
    warm = [t.warm_start_median_s for t in cap.step_times.values()]
    return {
        "concurrency_per_step": training.rows_per_step,
        "total_campaign_steps": num_conditions * len(campaign.seeds) * campaign.max_steps,
        "median_step_time_s": statistics.median(rl) if rl else DEFAULT_STEP_S,
        "warm_start_median_step_time_s": statistics.median(warm) if warm else DEFAULT_STEP_S,
        "effective_parallelism": est.slots.count,
        "estimated_wall_time_s": est.wall_time_s,
        "calibrated": cap.calibration is not None,
        "calibration": cap.how,
        "parts": est.to_dict(),
        "step_times": {label: {"warm_start_s_per_step": t.warm_start_s, "rl_s_per_step": t.rl_s,
                               "warm_start_median_step_time_s": t.warm_start_median_s,
                               "rl_median_step_time_s": t.rl_median_s, "source": t.source}
                       for label, t in cap.step_times.items()},
        "pilot": {label: f.to_json() for label, f in cap.figures.items()},
        "recommendations": list(cap.recommendations),
    }


def _duration(seconds: float) -> str:
    return f"{seconds:,.0f} s ({seconds / 3600:.2f} h)" if seconds >= 3600 else f"{seconds:,.0f} s"


def capacity_text(cap: CapacityJson) -> str:
    """The text form of `capacity_dict`."""
    parts = cap["parts"]
    lines = [
        f"capacity estimate ({cap['calibration']})",
        f"  concurrency per step {cap['concurrency_per_step']}, total campaign steps {cap['total_campaign_steps']}, "
        f"{parts['slots']} run(s) at once (limited by {parts['slots_limited_by']})",
        "  step times (median step_time_s -> wall seconds per step, with the between-step overhead):",
    ]
    for label, t in cap["step_times"].items():
        lines.append(f"    {label}: warm start {t['warm_start_median_step_time_s']:.2f} -> {t['warm_start_s_per_step']:.2f} s, "
                     f"RL {t['rl_median_step_time_s']:.2f} -> {t['rl_s_per_step']:.2f} s  ({t['source']})")
    lines += [
        f"  steps: warm start {_duration(parts['warm_start_step_seconds'])}, RL {_duration(parts['rl_step_seconds'])} "
        "(summed over runs)",
        f"  campaign start-up {parts['campaign_startup_s']:.1f} s + runs scheduled {_duration(parts['schedule_s'])} "
        f"(stagger waits {parts['stagger_wait_s']:.0f} s) + teardown {parts['campaign_teardown_s']:.1f} s",
        f"  estimated wall time: {_duration(cap['estimated_wall_time_s'])}",
    ]
    disk = parts.get("checkpoint_disk")
    if disk:
        lines.append(f"  checkpoint disk: {disk['bytes_per_checkpoint'] / 2**20:.1f} MiB x {disk['kept_per_run']} kept "
                     f"x {disk['runs']} runs = {disk['total_bytes'] / 2**30:.2f} GiB")
    for label, f in cap["pilot"].items():
        hit = f["max_token_hit_rate"]
        speed = f["tokens_per_s"]
        regimes = ", ".join(f"{k} {v:.0%}" for k, v in f["bp_regimes"].items()) or "none logged"
        lines.append(f"  measured {label}: {f['runs']} run(s), max_token_hit_rate "
                     f"{'-' if hit is None else f'{hit:.2f}'}, tokens/s {'-' if speed is None else f'{speed:,.0f}'}, "
                     f"back-pressure regimes: {regimes}")
    lines += [f"  -> {r}" for r in cap["recommendations"]]
    return "\n".join(lines)
