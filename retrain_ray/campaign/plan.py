"""The campaign plan: its directory, its runs (conditions x seeds) and its scheduling settings.

Built and validated before Ray starts (STYLE habit 12): every problem is collected and reported at
once in a `CampaignError`.

Campaign directory (departure from the original's cwd-relative `logs/campaign_<UTC>`, hazard 13.3):
`<root>/<name>` where `root` is the `root=` argument, else `[logging].log_dir` (so `logs/smoke`
gives `logs/smoke/campaign_<UTC>`); and `name` is `[campaign].name`, else
`campaign_<UTC %Y%m%d_%H%M%S>`. A named campaign therefore lives in a stable directory, and
re-running the same command resumes it. Run `r` lives in `<campaign_dir>/runs/<r>/`: the recorder
writes its Arrow logs there, and the run's own working directory (checkpoints, local logs) is
`<campaign_dir>/runs/<r>/work/` on whichever node runs it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.fs  # pyright: ignore[reportMissingTypeStubs]

from retrain_ray.backends.registry import placed_devices
from retrain_ray.campaign.adaptive.plan import AdaptivePlan, adaptive_plan
from retrain_ray.campaign.capacity.packing import Packing, packed_config, plan_packing
from retrain_ray.campaign.capacity.placement import Placement, parse_devices
from retrain_ray.campaign.capacity.sharing import SharingPlan, plan_sharing
from retrain_ray.campaign.shared_trainers import SHARED_MEMBER_CPUS, member_plans
from retrain_ray.checks.preflight import model_problems
from retrain_ray.checks.shared_trainer import member_problems
from retrain_ray.config.campaign_schema import RULES, name_problem
from retrain_ray.config.matrix import RunSpec, expand_runs
from retrain_ray.logs.manifest import RunRecord
from retrain_ray.run.types import RunOutcome
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import LoggingSection


class CampaignError(Exception):
    """Everything wrong with a campaign, reported at once."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("campaign cannot start:\n" + "\n".join(f"  - {p}" for p in problems))


TUNE_DIR = "tune"  # Tune's experiment directory, under the campaign directory or `[campaign] storage`
# What a trial calls to train its run (`module:function`; `Campaign(..., runner=...)` gives another)
DEFAULT_RUNNER = "retrain_ray.run.train:train_run"
# what runs one run: train_run (run/train.py) or a test's stand-in, by dotted `module:function` name or itself
Runner = Callable[..., RunOutcome]


@dataclass(frozen=True)
class RunPlan:
    """One run of the matrix. Frozen and picklable: it travels to the run's Tune trial."""

    run_name: str
    condition: str
    seed: int
    overrides: dict[str, object]
    config: RetrainConfig  # this run's whole config, its own dirs
    run_dir: Path  # on the driver's machine; recorder output
    work_dir: Path  # train_run's run_dir on the node that runs it
    devices: str
    placement: Placement | None = None
    in_process: bool = False  # every GPU in the run's own process (never split actors): plugin backends/engines
    gpu_share: float = 1.0  # the GPU of a one-GPU run packed with others ([campaign] runs_per_gpu: 1/N)
    cpus: float = 1.0  # [campaign] cpus_per_run

    @property
    def gpus(self) -> float:
        """The GPUs the run holds: its devices, a packed one-GPU run's share of its card, 0 on CPU."""
        count = parse_devices(self.devices)
        return self.gpu_share if count == 1 else float(count)

    @property
    def condition_label(self) -> str:
        """The condition's label, as `config.matrix.RunSpec` names it."""
        return self.condition


@dataclass(frozen=True)
class Schedule:
    """How runs are handed to Tune."""

    max_concurrent: int
    stagger_seconds: float
    max_failures: int
    cpus_per_run: float
    trial_start_timeout_s: float


def actor_scope(name: str, campaign_dir: Path) -> str:
    """`CampaignPlan.actor_scope` of the campaign `name` in `campaign_dir`."""
    digest = hashlib.sha1(str(campaign_dir.resolve()).encode(), usedforsecurity=False).hexdigest()[:8]
    return f"{name}@{digest}"


@dataclass(frozen=True)
class CampaignPlan:
    name: str
    campaign_dir: Path
    runs: list[RunPlan]
    schedule: Schedule
    conditions: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    max_steps: int = 0
    # Tune's storage_path: the campaign directory, or `[campaign] storage`/<name> (a filesystem URI)
    tune_storage: str = ""
    # [campaign.adaptive]: the plan of decisions, and the runs of the seeds it may add (not started yet)
    adaptive: AdaptivePlan | None = None
    reserve: list[RunPlan] = field(default_factory=list)
    packing: Packing | None = None  # [campaign] runs_per_gpu > 1: how the one-GPU runs share cards
    tune_copies: str = "pointer"  # [campaign] tune_copies
    sharing: SharingPlan | None = None  # [campaign] shared_trainer: the runs train on the campaign's shared trainers

    @property
    def shared_trainer(self) -> bool:
        return self.sharing is not None

    @property
    def pointer_copies(self) -> bool:
        """Whether Tune keeps a pointer to each run checkpoint rather than a copy (campaign/resume/pointer.py):
        `[campaign] tune_copies = "pointer"` and Tune's storage is the campaign directory itself."""
        return self.tune_copies == "pointer" and self.tune_storage in ("", str(self.campaign_dir))

    @property
    def actor_scope(self) -> str:
        """The name the campaign's named actors (recorder, gate, throttles, back pressure, shared engine,
        split runs) are registered under: the campaign's name and its directory's digest, so two campaigns of
        one name (two users' `smoke`, two `ray job submit`s of one TOML with other log dirs) on one cluster
        never share an actor, while a resumed campaign (same directory) gets the same names."""
        return actor_scope(self.name, self.campaign_dir)

    @property
    def all_runs(self) -> list[RunPlan]:
        """The runs started now and those an adaptive campaign may add."""
        return [*self.runs, *self.reserve]

    @property
    def tune_path(self) -> str:
        """Tune's experiment directory (local path or URI): checkpoints and experiment state."""
        return f"{self.tune_storage or self.campaign_dir}/{TUNE_DIR}"

    @property
    def local_tune_path(self) -> str:
        """`tune_path` when it is on this machine's file system ("" for remote storage)."""
        return "" if "://" in self.tune_path else self.tune_path


def tune_storage(campaign: CampaignSection, name: str, campaign_dir: Path) -> tuple[str, list[str]]:
    """Tune's storage_path for the campaign and the problems with `[campaign] storage`.

    The campaign directory (manifest, the recorder's Arrow logs) always stays on the driver; only
    Tune's copies of run checkpoints and its experiment state go to `storage`."""
    uri = str(campaign.storage or "").rstrip("/")
    if not uri:
        return str(campaign_dir), []
    if "://" not in uri:
        return "", [f"[campaign].storage = {uri!r}: expected a filesystem URI like 's3://bucket/prefix', "
                    "'gs://bucket/prefix' or 'file:///shared/dir' (leave it empty for the campaign directory)"]
    try:
        pyarrow.fs.FileSystem.from_uri(uri)  # pyright: ignore[reportUnknownMemberType]  # pyarrow ships no type stubs
    except (ValueError, OSError, ImportError) as exc:
        return "", [f"[campaign].storage = {uri!r}: pyarrow cannot open it ({exc}); check the scheme, "
                    "the bucket name and the credentials, or install the filesystem's pyarrow support"]
    return f"{uri}/{name}", []


def default_root(logging: LoggingSection) -> Path:
    """Where campaigns live unless `root=` says: `[logging].log_dir`, else "logs"."""
    return Path(logging.log_dir or "logs")


def campaign_name(campaign: CampaignSection, name: str | None) -> str:
    chosen = name or campaign.name
    return chosen or time.strftime("campaign_%Y%m%d_%H%M%S", time.gmtime())


def _check_name(name: str) -> list[str]:
    problem = name_problem(name)
    if problem:
        return [f"campaign name {name!r} cannot be a directory name: {problem}; it must be {RULES}. Fix: "
                "set [campaign].name (or --name) to such a name"]
    return []


def concurrent_runs(parallel: bool, max_workers: int, num_runs: int) -> int:
    """Runs at once: `max_workers` (0 = one per run) when parallel, else 1; at least 1, at most the runs.
    The one formula: the schedule below and `retrain-ray explain`'s estimate both use it."""
    workers = (max_workers or num_runs) if parallel else 1
    return max(1, min(workers, max(num_runs, 1)))


def _schedule(c: CampaignSection, num_runs: int) -> tuple[Schedule, list[str]]:
    problems: list[str] = []
    if c.max_workers < 0:
        problems.append(f"[campaign].max_workers = {c.max_workers}: must be >= 0 (0 = one worker per run)")
    if c.stagger_seconds < 0:
        problems.append(f"[campaign].stagger_seconds = {c.stagger_seconds}: must be >= 0")
    if c.max_failures < 0:
        problems.append(f"[campaign].max_failures = {c.max_failures}: must be >= 0 (retries per run)")
    if c.cpus_per_run <= 0:
        problems.append(f"[campaign].cpus_per_run = {c.cpus_per_run}: must be > 0")
    sched = Schedule(
        max_concurrent=concurrent_runs(c.parallel, c.max_workers, num_runs),
        stagger_seconds=float(c.stagger_seconds),
        max_failures=int(c.max_failures),
        cpus_per_run=_cpus_per_run(c),
        trial_start_timeout_s=float(c.trial_start_timeout_s),
    )
    return sched, problems


def _cpus_per_run(c: CampaignSection) -> float:
    """`cpus_per_run` as set; unset in a shared-trainer campaign, `SHARED_MEMBER_CPUS`: its trials hold no model
    and wait on the trainer, so a CPU each would cap the runs the trainer can batch at the node's CPU count."""
    if c.shared_trainer and "cpus_per_run" not in c.model_fields_set:
        return SHARED_MEMBER_CPUS
    return float(c.cpus_per_run)


def _run_plan(spec: RunSpec, campaign_dir: Path) -> tuple[RunPlan | None, list[str]]:
    try:
        placed = placed_devices(spec.config)
        parse_devices(placed.devices)
    except ValueError as exc:
        return None, [f"run {spec.run_name}: {exc}"]
    run_dir = campaign_dir / "runs" / spec.run_name
    plan = RunPlan(
        run_name=spec.run_name,
        condition=spec.condition_label,
        seed=spec.seed,
        overrides=dict(spec.condition_overrides),
        config=spec.config,
        run_dir=run_dir,
        work_dir=run_dir / "work",
        devices=placed.devices,
        in_process=placed.in_process,
    )
    return plan, []


def build_plan(config: RetrainConfig, *, name: str | None = None, root: str | Path | None = None,
               probe: bool = True) -> CampaignPlan:
    """Validates the campaign and expands its runs; raises CampaignError listing every problem.

    `probe=False` (a dry run: `retrain-ray explain`) skips the checks that look beyond the config, the
    model on this machine or the Hub and the `[campaign] storage` filesystem; explain reports what this
    machine lacks as warnings instead."""
    campaign = config.campaign
    if campaign is None:
        raise CampaignError(["the config has no [campaign] section; add one (spec 5.1) or use `retrain-ray train`"])
    cname = campaign_name(campaign, name)
    problems = _check_name(cname)
    if root is not None and "://" in str(root):
        problems.append(f"--root {root}: the campaign directory (manifest, Arrow logs) stays on the driver, so "
                        "it must be a local path; send checkpoints to a bucket with [campaign].storage = "
                        f"{str(root)!r} (flag --campaign.storage)")
        root = None
    campaign_dir = (Path(root) if root else default_root(config.logging)).resolve() / cname
    adaptive = adaptive_plan(config.campaign)
    expanded = config
    if adaptive is not None:  # every run it may start: the seeds it adds have their runs planned now
        seeds = [*adaptive.start_seeds, *adaptive.spare_seeds]
        expanded = config.model_copy(update={"campaign": campaign.model_copy(update={"seeds": seeds})})
    specs = expand_runs(expanded, run_dir=lambda run_name: campaign_dir / "runs" / run_name / "work")
    runs: list[RunPlan] = []
    for spec in specs:
        bad_name = name_problem(spec.run_name)  # config/campaign_schema.py names the key at load; this is the plan's net
        if bad_name:
            problems.append(f"run name {spec.run_name!r} of condition {spec.condition_label!r} cannot be a directory "
                            f"name: {bad_name}; it must be {RULES}. Fix: change the condition's values that put it there")
            continue
        plan, errs = _run_plan(spec, campaign_dir)
        problems += errs
        if plan is not None:
            runs.append(plan)
    names = [r.run_name for r in runs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append(f"run names repeat: {dupes}; make [[campaign.conditions]] or [campaign].seeds unique")
    if not specs:
        problems.append("the campaign has no runs: [campaign].seeds or [[campaign.conditions]] is empty")
    schedule, errs = _schedule(campaign, len(runs))
    problems += errs
    sharing, errs = _sharing(campaign, runs, schedule.max_concurrent)
    problems += errs
    storage, errs = tune_storage(campaign, cname, campaign_dir) if probe else (str(campaign_dir), [])
    problems += errs
    if probe and not problems:  # the model check may ask the Hub: only for an otherwise valid campaign
        problems += model_problems([r.config for r in runs])
    packing = None
    if not problems and campaign.runs_per_gpu > 1 and sharing is None:  # a shared trainer's members share its GPU
        runs, packing = _pack(runs, campaign)
        problems += packing.problems()
    if problems:
        raise CampaignError(problems)
    runs = [dataclasses.replace(r, cpus=schedule.cpus_per_run) for r in runs]
    runs = member_plans(runs, shared=campaign.shared_trainer)  # a shared trainer's members hold no model
    reserve = [r for r in runs if adaptive is not None and r.seed not in adaptive.start_seeds]
    runs = [r for r in runs if adaptive is None or r.seed in adaptive.start_seeds]
    return CampaignPlan(
        name=cname,
        campaign_dir=campaign_dir,
        runs=runs,
        adaptive=adaptive,
        reserve=reserve,
        schedule=schedule,
        conditions=list(dict.fromkeys(r.condition for r in runs)),
        seeds=list(dict.fromkeys(r.seed for r in runs)),
        max_steps=int(campaign.max_steps),
        tune_storage=storage,
        packing=packing,
        tune_copies=campaign.tune_copies,
        sharing=sharing,
    )


def _sharing(campaign: CampaignSection, runs: list[RunPlan], concurrent: int) -> tuple[SharingPlan | None, list[str]]:
    """`[campaign] shared_trainer = true`: its trainers' plan, and why its runs cannot share one
    (checks/shared_trainer.py) or one trainer cannot fit its GPU (campaign/capacity/sharing.py)."""
    if not campaign.shared_trainer or not runs:
        return None, []
    problems = member_problems({r.run_name: r.config for r in runs})
    if problems:
        return None, problems
    sharing = plan_sharing([r.config for r in runs], campaign, concurrent)
    return sharing, sharing.problems()


def _pack(runs: list[RunPlan], campaign: CampaignSection) -> tuple[list[RunPlan], Packing]:
    """The one-GPU runs packed `runs_per_gpu` to a card: their bundle share and vLLM's memory share."""
    n = campaign.runs_per_gpu
    gpus = [parse_devices(r.devices) for r in runs]  # runs of several GPUs keep them whole
    packing = plan_packing([r.config for r in runs], gpus, runs_per_gpu=n, card_gib=float(campaign.gpu_memory_gib))
    packed = [dataclasses.replace(r, gpu_share=packing.fraction, config=packed_config(r.config, n)) if g == 1 else r
              for r, g in zip(runs, gpus, strict=True)]
    return packed, packing


def run_record(run: RunPlan, **extra: object) -> RunRecord:
    """A run's manifest entry, before its status fields (`logs/manifest.py` `new_run` adds them)."""
    return RunRecord.model_validate({
        "run_name": run.run_name, "condition": run.condition, "seed": run.seed, "overrides": redact(run.overrides),
        "run_dir": str(run.run_dir), "placement": run.placement.mode if run.placement else "",
        "max_steps": int(run.config.training.max_steps), "gpus": run.gpus, "cpus": run.cpus, **extra})
