"""One Tune trial = one run: the function trainable the campaign hands to `tune.Tuner`.

At trial start it waits for its stagger slot, then calls the runner (`train_run`) with observers
that forward rows to the recorder actor, export gauges and report each checkpoint to Tune
(`tune.report(metrics, checkpoint=...)`). Where the run continues from is one decision,
`campaign/resume/point.py: decide_resume`: Tune's last reported checkpoint (a retry, a campaign
restore), an earlier one of the run's own when the recorder finds its metrics log torn before it,
the run's own newest verified checkpoint or a set-aside Tune copy when Tune has none (a fresh Tune
experiment after a torn state), else step 0. A run that fails raises (the contract in run/types.py);
the exception reaches Tune, which retries it up to `[campaign].max_failures` times.

Tune reuses a trial's process for the next run (`reuse_actors`): imports and the Ray worker start
are paid once per concurrent slot, not once per run. Each run sets everything it depends on itself
(seeds in `train_run`, torch threads here from the CPUs of its bundle), so a run in a reused
process computes exactly what it computes in a fresh one (tests/campaign/test_campaign_reuse.py).
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import tempfile
from collections import deque
from collections.abc import Generator, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import ray
from ray import ObjectRef, tune

from retrain_ray.actors.backpressure import RemoteAdvisor
from retrain_ray.actors.worker_env import PRELOAD_MODULE
from retrain_ray.backends.types import Policy
from retrain_ray.campaign.control import ControlPlane, wait_for_start_slot
from retrain_ray.campaign.dashboard import RunGauges
from retrain_ray.campaign.driver_paths import with_driver_paths
from retrain_ray.campaign.plan import DEFAULT_RUNNER, Runner, RunPlan
from retrain_ray.campaign.recorder import RecorderClient, recorder_name
from retrain_ray.campaign.resume.point import ResumePoint, decide_resume
from retrain_ray.campaign.resume.pointer import write_pointer
from retrain_ray.campaign.tracking import RUN_METRICS
from retrain_ray.checks.preflight import check_run
from retrain_ray.logs.dir_lock import process_started_at
from retrain_ray.logs.types import MetricsRow, RunObserver
from retrain_ray.plugins.bundle import PluginBundle, activate
from retrain_ray.plugins.loader import use_plugin_root
from retrain_ray.run.types import RunOutcome
from retrain_ray.trackers import RunIdentity, build_trackers
from retrain_ray.util.secrets import redact

_RUNS_IN_PROCESS = [0]  # runs this trial process has started (1 = fresh process; more = reused by Tune)
REPORTED = ("mean_reward", "correct_rate", "loss", "tokens_per_second", "step_time_s", "running_correct_rate")
# A run's last report carries its other final metrics as one JSON string under RUN_METRICS (campaign/tracking.py)
KEPT = ("step", *REPORTED, "adaptive_value", "first_step_at", "resumed_own_step", "resumed_from", "resumed_path")


class PlanRefs(Mapping[str, RunPlan]):
    """Each run's plan in Ray's object store, fetched by the one trial that runs it. Picklable: only the refs
    travel with the trial context, which every trial deserializes as it starts; holding the plans themselves,
    a 1,000-run campaign's trials spent 64% of their time unpickling every run's plan (benchmarks/scale.py)."""

    FETCH_TIMEOUT_S = 600.0

    def __init__(self, refs: Mapping[str, ObjectRef[RunPlan]]) -> None:
        self.refs = dict(refs)

    @classmethod
    def put(cls, plans: Iterable[RunPlan]) -> PlanRefs:
        return cls({p.run_name: ray.put(p) for p in plans})  # pyright: ignore[reportUnknownMemberType]

    def __getitem__(self, run_name: str) -> RunPlan:
        return ray.get(self.refs[run_name], timeout=self.FETCH_TIMEOUT_S)

    def __iter__(self) -> Iterator[str]:
        return iter(self.refs)

    def __len__(self) -> int:
        return len(self.refs)


@dataclass(frozen=True)
class TrialContext:
    """Everything a trial needs besides its run name. Frozen and picklable (goes via the object store)."""

    campaign: str
    namespace: str
    # the name the campaign's named actors are registered under (CampaignPlan.actor_scope)
    scope: str
    runs: Mapping[str, RunPlan]  # PlanRefs in a campaign: each trial fetches only its own run's plan
    control: ControlPlane
    runner: str | Runner = DEFAULT_RUNNER
    timeout_s: float = 600.0
    # run name -> the MLflow experiment id the driver created for it (runs without MLflow: absent)
    mlflow_experiments: Mapping[str, str] = field(default_factory=dict[str, str])
    # run name -> its recorded result, for runs manifest.json records completed when this driver
    # session started: Tune's experiment state may not know yet (see `run_trial`)
    finished: Mapping[str, Mapping[str, object]] = field(default_factory=dict[str, Mapping[str, object]])
    # the driver's working directory: where the config's [plugins] search_paths are (trials run elsewhere)
    plugin_root: str = field(default_factory=os.getcwd)
    # the code of the plugins the config names, packed by the driver (any node imports it from here)
    plugins: PluginBundle | None = None
    # Tune's experiment directory when local (its set-aside `.torn-*` copies: campaign/resume/tune_copies.py); else ""
    tune_dir: str = ""
    # [campaign.adaptive]: the column each report carries as `adaptive_value` (its mean over the last
    # `adaptive_window` rows: campaign/adaptive/scheduler.py compares conditions on it); "" for a grid campaign
    adaptive_metric: str = ""
    adaptive_window: int = 0
    # Tune's storage is the campaign directory: Tune keeps a pointer to each run's own checkpoint, not a
    # second copy of it (campaign/resume/pointer.py)
    pointer_copies: bool = False


class TuneReporter(RunObserver):
    """RunObserver: remembers the last row and reports it to Tune with each checkpoint."""

    def __init__(self, resumed: Mapping[str, int | str] | None = None, meta: Mapping[str, object] | None = None,
                 *, metric: str = "", window: int = 0, pointer: bool = False) -> None:
        self.last: dict[str, int | float] = {}
        self.resumed = dict(resumed or {})  # reported with every checkpoint (ResumePoint.reported)
        self.meta = dict(meta or {})  # run name and config, written into each checkpoint Tune copies
        self.metric = metric
        self.recent: deque[float] = deque(maxlen=max(1, window))  # a run resumed mid-window starts it anew
        self.pointer = pointer  # report a pointer to the checkpoint, not the checkpoint (campaign/resume/pointer.py)

    def on_step(self, row: MetricsRow, **info: object) -> None:
        self.last = {k: v for k in ("step", *REPORTED) if isinstance(v := row.get(k), (int, float))}
        self._remember(row)

    def on_eval(self, row: MetricsRow, **info: object) -> None:
        self._remember(row)

    def _remember(self, row: MetricsRow) -> None:
        value: object = row.get(self.metric) if self.metric else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            self.recent.append(float(value))

    def window_value(self) -> dict[str, float]:
        """`adaptive_value` (the metric's mean over the window) when the run has logged it."""
        return {"adaptive_value": sum(self.recent) / len(self.recent)} if self.recent else {}

    def on_checkpoint(self, step: int, directory: Path, **info: object) -> None:
        metrics = {**self.last, **self.resumed, **self.window_value(), "step": step, "run_done": False}
        if not self.pointer:
            self._report(metrics, directory)
            return
        with tempfile.TemporaryDirectory(prefix="retrain-pointer-") as staging:  # Tune copies it to its storage
            write_pointer(Path(staging), run_name=str(self.meta.get("run_name", "")), step=step, target=directory)
            self._report(metrics, Path(staging))

    def _report(self, metrics: Mapping[str, object], directory: Path) -> None:
        checkpoint = tune.Checkpoint.from_directory(str(directory))  # pyright: ignore[reportUnknownMemberType]
        if self.meta:  # its copy then says which run and config it is of (own_checkpoint.tune_copy)
            checkpoint.set_metadata(self.meta)
        tune.report(metrics, checkpoint=checkpoint)  # pyright: ignore[reportUnknownMemberType]


def resolve_runner(runner: str | Runner) -> Runner:
    if callable(runner):
        return runner
    module, _, attr = runner.partition(":")
    return cast("Runner", getattr(importlib.import_module(module), attr))  # a dotted `module:function` name


def _observers(ctx: TrialContext, plan: RunPlan, reporter: TuneReporter) -> list[RunObserver]:
    """Recorder, Tune reports, gauges and the experiment trackers the run's config asks for."""
    handle = ray.get_actor(recorder_name(ctx.scope), namespace=ctx.namespace)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    identity = RunIdentity(plan.run_name, plan.condition, plan.seed, campaign=ctx.campaign)
    return [
        RecorderClient(handle, plan.run_name, timeout_s=ctx.timeout_s, jsonl=plan.config.logging.jsonl),  # pyright: ignore[reportUnknownArgumentType]
        reporter,
        RunGauges(ctx.scope, plan.run_name, plan.condition),
        *build_trackers(plan.config, identity, plan.work_dir,
                        mlflow_experiment_id=ctx.mlflow_experiments.get(plan.run_name, "")),
    ]


class _RemoteMethod(Protocol):
    def remote(self, run: str) -> ObjectRef[object]: ...


class _RecorderHandle(Protocol):
    """The recorder actor's methods the resume decision calls (campaign/recorder.py: RecorderActor)."""

    repair_metrics: _RemoteMethod
    logged_through: _RemoteMethod


class _RecorderLog:
    """The campaign's recorder actor as the `RunLog` the resume decision reads (campaign/resume/point.py)."""

    def __init__(self, ctx: TrialContext) -> None:
        handle = ray.get_actor(recorder_name(ctx.scope), namespace=ctx.namespace)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
        self.handle = cast("_RecorderHandle", handle)  # a Ray actor handle: its methods are untyped
        self.timeout_s = ctx.timeout_s

    def repair_metrics(self, run: str) -> int | None:
        return cast("int | None", ray.get(self.handle.repair_metrics.remote(run), timeout=self.timeout_s))

    def logged_through(self, run: str) -> int:
        return cast("int", ray.get(self.handle.logged_through.remote(run), timeout=self.timeout_s))


def resume_from(ctx: TrialContext, plan: RunPlan, tune_checkpoint: Path | None) -> ResumePoint:
    """Where the run continues (campaign/resume/point.py): Tune's checkpoint, an earlier one of the run's
    own when its metrics log was torn before it, else the run's own or a set-aside Tune copy, else step 0."""
    return decide_resume(tune_checkpoint, _RecorderLog(ctx), run_name=plan.run_name, work_dir=Path(plan.work_dir),
                         tune_dir=Path(ctx.tune_dir) if ctx.tune_dir else None,
                         config=plan.config.model_dump(mode="json"))


def _run(ctx: TrialContext, plan: RunPlan, tune_checkpoint: Path | None) -> tuple[RunOutcome, TuneReporter]:
    plan = with_driver_paths(plan, ctx.plugin_root)  # the trial runs elsewhere than the driver
    point = resume_from(ctx, plan, tune_checkpoint)
    if ctx.plugins is not None:
        activate(ctx.plugins)
    use_plugin_root(ctx.plugin_root)
    reporter = TuneReporter(point.reported(), {"run_name": plan.run_name, "config": redact(plan.config.model_dump(mode="json"))},
                            metric=ctx.adaptive_metric, window=ctx.adaptive_window, pointer=ctx.pointer_copies)
    runner = resolve_runner(ctx.runner)
    if ctx.runner == DEFAULT_RUNNER:  # train_run trains what it is given: this node's preflight is ours
        check_run(plan.config)
    throttle = ctx.control.throttle_for(plan.run_name)
    try:
        with split_policy(ctx, plan) as policy:
            outcome = runner(
                plan.config,
                run_name=plan.run_name,
                run_dir=plan.work_dir,
                observers=_observers(ctx, plan, reporter),
                advisor=advisor_for(ctx, plan),
                throttle=throttle,
                resume_from=point.path,
                policy=policy,
                local_logs=False,
            )
    finally:
        if throttle is not None:  # the pool's idle slots go back before this process may exit
            throttle.release_idle()
    return outcome, reporter


def advisor_for(ctx: TrialContext, plan: RunPlan) -> RemoteAdvisor | None:
    """The run's back-pressure client; a shared trainer's member reports under its trainer, which the pooled
    fit steers (the most members per batched step)."""
    if not ctx.control.shared_trainers:
        return ctx.control.advisor_for(plan.run_name)
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.campaign.shared_trainers import trainer_resource

    node_id = ray.get_runtime_context().get_node_id()
    return ctx.control.advisor_for(plan.run_name, trainer_resource(ctx.control.shared_trainers, ctx.scope,
                                                                   plan.run_name, node_id))


def cpu_threads(plan: RunPlan) -> int:
    """Torch threads of a run: the CPUs its trial bundle holds (at least 1), so concurrent runs never
    oversubscribe the cores Ray gave them (torch's default is every core of the machine)."""
    bundles = plan.placement.bundle_dicts if plan.placement else []
    cpus = float(bundles[0].get("CPU", 1)) if bundles else 1.0
    return max(1, int(cpus))


def _set_threads(count: int) -> None:
    import torch  # here: the driver imports this module and never loads torch

    torch.set_num_threads(count)


def _limit_gpu_memory(share: float) -> None:
    """A run packed with others on one card (`[campaign] runs_per_gpu = N`, share 1/N) keeps its process to
    its share of the card's memory: the trainer's budget, which an embedded vLLM's own (smaller) share is in."""
    import torch  # here: the driver imports this module and never loads torch

    if share < 1.0 and torch.cuda.is_available():
        torch.cuda.set_per_process_memory_fraction(share)  # pyright: ignore[reportUnknownMemberType]  # torch leaves `fraction` untyped


def run_trial(config: Mapping[str, str], context: TrialContext) -> None:
    """Tune function trainable: `config` holds only `run_name`; the rest comes in `context`.

    A run the manifest records completed is never run again: the manifest is written when Tune
    reports the run complete, Tune's own experiment state reaches the campaign directory up to
    `STATE_SYNC_S` (campaign/experiment.py) + `TUNE_GLOBAL_CHECKPOINT_S` later, and a driver killed in between restores the
    run as unfinished. Such a trial reports the recorded result and returns without running a step.
    """
    recorded = context.finished.get(config["run_name"])
    if recorded is not None:
        numbers = {k: v for k, v in recorded.items() if isinstance(v, (int, float))}
        tune.report({**packed(numbers), "run_done": True, "run_status": "completed", "already_completed": True})  # pyright: ignore[reportUnknownMemberType]
        return
    plan = context.runs[config["run_name"]]
    _RUNS_IN_PROCESS[0] += 1
    _set_threads(cpu_threads(plan))
    _limit_gpu_memory(plan.gpu_share)
    wait_for_start_slot(context.scope, context.namespace, timeout_s=context.timeout_s)
    checkpoint = cast("tune.Checkpoint | None", tune.get_checkpoint())  # pyright: ignore[reportUnknownMemberType]
    if checkpoint is None:
        outcome, reporter = _run(context, plan, None)
    else:
        with checkpoint.as_directory() as resume_dir:
            outcome, reporter = _run(context, plan, Path(resume_dir))
    final = {k: v for k, v in outcome.metrics.items() if isinstance(v, (int, float))}
    timing = {"first_step_at": outcome.first_step_at} if outcome.first_step_at else {}
    numbers = {**reporter.last, **reporter.resumed, **final, **timing, **reporter.window_value()}
    tune.report({**packed(numbers),  # pyright: ignore[reportUnknownMemberType]
                 "step": outcome.last_step, "run_done": True,
                 "run_status": outcome.status, "process_runs": _RUNS_IN_PROCESS[0], "process_preloaded": _preloaded(),
                 "process_started_at": process_started_at() or 0.0})


def packed(numbers: Mapping[str, object]) -> dict[str, object]:
    """A run's final numbers as its last report carries them: those Tune and the campaign's callbacks read as
    they are, the rest as one JSON string under RUN_METRICS (campaign/tracking.py unpacks it)."""
    rest = {k: v for k, v in numbers.items() if k not in KEPT}
    return {**{k: v for k, v in numbers.items() if k in KEPT}, RUN_METRICS: json.dumps(rest)}


def _preloaded() -> bool:
    """Whether this process imported the trial's modules as it started (campaign/preload.py)."""
    return bool(getattr(sys.modules.get(PRELOAD_MODULE), "PRELOADED", None))


# Split placement for a trial: an InferenceActor and a TrainerActor on the trial's GPU bundles.
#
# For the cpu and gpu placements the run builds its own engine and backend in the trial process, so
# `split_policy` yields None. For split placement it starts the two actors pinned to bundles 1 and 2
# of the trial's placement group, writes where they landed (node, pid, GPU ids Ray gave each) to
# `<work_dir>/placement.json` (one entry per attempt), yields remote proxies `(engine, backend,
# tokenizer)` for `train_run(policy=...)`, and kills the actors when the run ends.
if TYPE_CHECKING:
    from retrain_ray.actors.run_actors import SplitActors
    from retrain_ray.campaign.plan import RunPlan

PLACEMENT_FILE = "placement.json"


@contextmanager
def shared_trainer_policy(ctx: TrialContext, plan: RunPlan) -> Generator[Policy]:
    """The run a member of its node's shared trainer while the block runs (campaign/shared_trainer_policy.py)."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.campaign.shared_trainer_policy import member_policy
    from retrain_ray.campaign.shared_trainers import trainer_for

    node_id = ray.get_runtime_context().get_node_id()
    actor = trainer_for(ctx.control.shared_trainers, plan.run_name, node_id)
    sampler = None
    if ctx.control.engine is not None:  # the campaign's shared vLLM engine samples, fed from the trainer
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.actors.shared_vllm import SharedVLLMEngine

        sampler = SharedVLLMEngine(ctx.control.engine, plan.run_name, throttle=ctx.control.throttle_for(plan.run_name),
                                   timeout_s=ctx.timeout_s)
    with member_policy(plan.config, actor, plan.run_name, timeout_s=ctx.timeout_s, sampler=sampler) as policy:
        yield policy


def _record_placement(work_dir: Path, actors: SplitActors) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / PLACEMENT_FILE
    attempts = cast("list[object]", json.loads(path.read_text())) if path.is_file() else []  # one entry per attempt
    attempts.append(actors.placements())
    path.write_text(json.dumps(attempts, indent=2))


@contextmanager
def split_policy(ctx: TrialContext, plan: RunPlan) -> Generator[Policy | None]:
    if ctx.control.shared_trainers:  # `[campaign] shared_trainer`: the run trains on its node's trainer
        with shared_trainer_policy(ctx, plan) as policy:
            yield policy
        return
    if ctx.control.engine is not None:  # the campaign's shared vLLM engine samples; the run trains here
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.actors.shared_vllm import shared_vllm_policy

        yield shared_vllm_policy(plan.config, ctx.control.engine, plan.run_name,
                                 throttle=ctx.control.throttle_for(plan.run_name), timeout_s=ctx.timeout_s)
        return
    if plan.placement is None or plan.placement.mode != "split":
        yield None
        return
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.actors.run_actors import start_split_actors, stop_split_actors

    actors = start_split_actors(plan.config, name=f"{ctx.scope}/{plan.run_name}",
                                namespace=ctx.namespace, timeout_s=ctx.timeout_s)
    try:
        _record_placement(Path(plan.work_dir), actors)
        yield actors.policy()
    finally:
        stop_split_actors(actors)
