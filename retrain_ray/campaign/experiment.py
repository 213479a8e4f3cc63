"""The campaign's Ray Tune experiment: one trial per run, new or restored, with the campaign's callbacks.

The driver's Tune side: `Campaign` (campaign/driver.py) imports it only once the campaign is
validated and Ray is up, so a config or plugin error is reported without the second it takes to
import Tune.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import TypedDict, cast

from ray import tune
from ray.tune import Trainable
from ray.tune.experiment import Trial
from ray.tune.experimental.output import AirVerbosity, TuneTerminalReporter
from ray.tune.experimental.output import ProgressReporter as AirProgressReporter
from ray.tune.logger import JsonLoggerCallback
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import Searcher
from ray.tune.trainable.function_trainable import wrap_function

from retrain_ray.actors.restarts import read_restarts
from retrain_ray.campaign.adaptive.scheduler import AdaptiveBook, AdaptiveScheduler, AdaptiveSearcher
from retrain_ray.campaign.control import ControlPlane
from retrain_ray.campaign.local_ray import TUNE_ENV
from retrain_ray.campaign.observer import CampaignObserver
from retrain_ray.campaign.plan import TUNE_DIR, CampaignError, CampaignPlan, Runner, RunPlan
from retrain_ray.campaign.resume.tune_copies import TuneCopyPruner
from retrain_ray.campaign.tracking import ManifestCallback
from retrain_ray.campaign.trial import PlanRefs, TrialContext, run_trial
from retrain_ray.logs.manifest import Manifest
from retrain_ray.plugins.bundle import PluginBundle
from retrain_ray.trackers.build import ensure_experiment, experiment_name

# Tune writes its experiment state (which names each run's latest checkpoint) into a staging dir and
# copies it to `<campaign>/tune` only every `SyncConfig.sync_period` (default 300 s): with the default
# a driver killed in its first 5 minutes restarts every unfinished run from scratch. Tune's own
# `num_to_keep` deletes a checkpoint the last synced state may still name, and the restore fails
# ("checkpoint does not exist on storage anymore"; seen in tests/campaign/test_campaign_resume.py): Tune keeps
# every copy and `TuneCopyPruner` (campaign/resume/tune_copies.py) bounds them by keep_last_checkpoints,
# deleting only copies older than what the synced state names.
STATE_SYNC_S = 2
# A snapshot writes every trial's state (about 24 KB a run) and the sync copies the file: at a fixed 2 s the
# driver's snapshot time grew with the square of the runs (68 s of a 1,000-run campaign; benchmarks/scale.py).
# Past SNAPSHOT_RUNS runs both happen every STATE_SYNC_S x runs / SNAPSHOT_RUNS (20 s at 1,000 runs): a driver
# killed then restores each run from a checkpoint up to that much older. A TUNE_GLOBAL_CHECKPOINT_S the user
# set (other than campaign/local_ray.py's default) is kept.
SNAPSHOT_RUNS = 100
_PERIOD_ENV = "TUNE_GLOBAL_CHECKPOINT_S"
_PERIODS_SET: set[str] = set()  # the values this module wrote to _PERIOD_ENV (a later campaign may rescale them)


def state_period_s(runs: int) -> int:
    """How often (seconds) Tune snapshots and syncs its experiment state for a campaign of `runs` runs."""
    return max(STATE_SYNC_S, -(-STATE_SYNC_S * runs // SNAPSHOT_RUNS))


def _set_state_period(runs: int) -> int:
    """Sets Tune's snapshot period for the campaign's size; returns the sync period to go with it."""
    current = os.environ.get(_PERIOD_ENV)
    if current is not None and current != TUNE_ENV[_PERIOD_ENV] and current not in _PERIODS_SET:
        return STATE_SYNC_S  # the user's snapshot period stands; what it writes is synced as before
    period = state_period_s(runs)
    os.environ[_PERIOD_ENV] = str(period)
    _PERIODS_SET.add(str(period))
    return period
# REUSE_ACTORS_NOTE: a grid campaign reuses a trial's process for the next run (its imports and model
# caches stay warm). An adaptive campaign does not: it pauses trials at its rungs, and a paused function
# trial's thread is still blocked inside the run (model, engines, open logs); Tune's reuse asks
# `reset_config()` to end that thread within 2 s, which it cannot, and the next trial went to ERROR
# ("Could not re-use actor ..."), leaving the rung waiting for it. A fresh process per start of a paused
# trial costs one process start per rung; docs/campaigns.md argues it.


def can_restore(plan: CampaignPlan) -> bool:
    """Whether the campaign's Tune directory holds an experiment Tune can restore."""
    return tune.Tuner.can_restore(plan.tune_path)  # pyright: ignore[reportUnknownMemberType]


def build_tuner(plan: CampaignPlan, manifest: Manifest, *, namespace: str, control: ControlPlane, runner: str | Runner,
                observer: CampaignObserver, resuming: bool, plugins: PluginBundle | None) -> tune.Tuner:
    """The campaign's tuner: restored from `plan.tune_path` when `resuming`, else a new experiment."""
    adaptive = plan.adaptive
    ctx = TrialContext(campaign=plan.name, namespace=namespace, scope=plan.actor_scope, runs=PlanRefs.put(plan.all_runs),
                       control=control, runner=runner, timeout_s=plan.schedule.trial_start_timeout_s,
                       mlflow_experiments=mlflow_experiments(plan), finished=finished_runs(manifest),
                       plugins=plugins, tune_dir=plan.local_tune_path,
                       adaptive_metric=adaptive.metric if adaptive else "",
                       adaptive_window=adaptive.window if adaptive else 0,
                       pointer_copies=plan.pointer_copies)
    _drop_tune_restore_hint()
    period = _set_state_period(len(plan.all_runs))
    trainable = make_trainable(ctx, {r.run_name: _resources(r) for r in plan.all_runs})
    if resuming:
        return tune.Tuner.restore(plan.tune_path, trainable, resume_errored=True)  # pyright: ignore[reportUnknownMemberType]
    records = ManifestCallback(manifest, observer=observer, start_timeout_s=plan.schedule.trial_start_timeout_s)
    callbacks: list[tune.Callback] = [
        records,
        TuneCopyPruner({r.run_name: r.config.training.keep_last_checkpoints for r in plan.all_runs}, observer=observer),
        JsonLoggerCallback(),  # the only Tune logger kept (campaign/local_ray.py): fit()'s ResultGrid reads it
        RestartNotices(records, observer=observer, campaign_dir=plan.campaign_dir),
    ]
    line = observer.progress_line(plan.campaign_dir)
    if line is not None:
        callbacks.append(line)
    if adaptive:
        callbacks.insert(0, QuietTuneStart(callbacks))
    return tune.Tuner(
        trainable,
        param_space={} if adaptive else {"run_name": tune.grid_search([r.run_name for r in plan.runs])},  # pyright: ignore[reportUnknownMemberType]
        tune_config=tune.TuneConfig(max_concurrent_trials=None if adaptive else plan.schedule.max_concurrent,
                                    reuse_actors=adaptive is None,  # see REUSE_ACTORS_NOTE
                                    trial_name_creator=trial_name, trial_dirname_creator=trial_name,
                                    **_adaptive_tune(plan, records, observer)),
        run_config=tune.RunConfig(
            name=TUNE_DIR, storage_path=plan.tune_storage, verbose=0, callbacks=callbacks,
            failure_config=tune.FailureConfig(max_failures=plan.schedule.max_failures),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=None),  # TuneCopyPruner bounds them
            sync_config=tune.SyncConfig(sync_period=period),
        ),
    )


def _adaptive_tune(plan: CampaignPlan, records: ManifestCallback, observer: CampaignObserver) -> _AdaptiveTune:
    """The scheduler and searcher of an adaptive campaign (campaign/adaptive/scheduler.py); none for a grid."""
    if plan.adaptive is None:
        return _AdaptiveTune()
    book = AdaptiveBook(plan.adaptive, plan.runs, plan.reserve, records, say=observer.on_adaptive)
    return _AdaptiveTune(search_alg=AdaptiveSearcher(book),
                         scheduler=AdaptiveScheduler(book, plan.schedule.max_concurrent), num_samples=-1)


class _AdaptiveTune(TypedDict, total=False):
    """`tune.TuneConfig`'s arguments an adaptive campaign sets."""

    search_alg: Searcher
    scheduler: TrialScheduler
    num_samples: int


class RestartNotices(tune.Callback):
    """Tells the user when Ray restarted a control actor (actors/restarts.py): a console warning at once and
    the manifest's `control_restarts`, so a recorder killed mid-campaign is neither silent nor fatal."""

    CHECK_EVERY_S = 1.0

    def __init__(self, records: ManifestCallback, *, observer: CampaignObserver, campaign_dir: Path) -> None:
        self.records: ManifestCallback | None = records  # None in a copy Tune unpickled
        self.observer = observer
        self.campaign_dir = campaign_dir
        self.seen = len(read_restarts(campaign_dir))  # earlier sessions' restarts are already in the manifest
        self.checked_at = 0.0

    def __getstate__(self) -> dict[str, object]:  # Tune pickles callbacks with its experiment state
        return {**self.__dict__, "records": None, "observer": None}

    def on_step_end(self, iteration: int, trials: list[Trial], **info: object) -> None:
        if time.monotonic() - self.checked_at >= self.CHECK_EVERY_S:
            self.checked_at = time.monotonic()
            self.report()

    def on_experiment_end(self, trials: list[Trial], **info: object) -> None:
        self.report()

    def report(self) -> None:
        restarts = read_restarts(self.campaign_dir)
        new, self.seen = restarts[self.seen:], len(restarts)
        if not new or self.records is None:
            return
        for restart in new:
            self.observer.on_warning(f"the campaign's {restart.get('actor')} actor died and Ray restarted it "
                                     f"(new pid {restart.get('pid')}); its calls in flight were retried, the runs go on")
        manifest = self.records.manifest
        known = cast("list[dict[str, object]]", getattr(manifest.record, "control_restarts", None) or [])
        manifest.update(control_restarts=[*known, *new])


TRIAL_CLASS_NAME = "RetrainRun"


def make_trainable(ctx: TrialContext, factories: dict[str, tune.PlacementGroupFactory]) -> type[Trainable]:
    """`run_trial` with the campaign's context and each run's resources, as the class Tune would
    wrap it into (`wrap_function`, a fresh class per call) under the product's name: Ray names an
    actor after its class, so the dashboard's actor list and `ray.util.state.list_actors()` show
    each trial's process as `RetrainRun`, not Tune's `ImplicitFunc`."""
    wrapped = wrap_function(tune.with_parameters(run_trial, context=ctx))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
    # Plain bundles, not PlacementGroupFactory objects, travel with the trainable: Tune unpickles it from its
    # registry at every trial it creates, and unpickling a thousand factories (each re-binds its signature)
    # took a 1,000-run campaign's driver 38% of its time (benchmarks/scale.py).
    specs = {name: (f.bundles, f.strategy) for name, f in factories.items()}

    def resources(cfg: dict[str, str]) -> tune.PlacementGroupFactory:
        bundles, strategy = specs[cfg["run_name"]]
        return tune.PlacementGroupFactory(bundles, strategy)

    trainable = cast("type[Trainable]", tune.with_resources(wrapped, resources=resources))  # pyright: ignore[reportUnknownMemberType]
    for cls in (wrapped, trainable):  # Ray takes the actor's class name from __qualname__
        cls.__name__ = cls.__qualname__ = TRIAL_CLASS_NAME
    return trainable


class QuietTuneStart(TuneTerminalReporter):
    """Tune's console reporter without its start table: an adaptive campaign's searcher suggests runs until it
    says it is done, so Tune's table states `Number of trials 9223372036854775807` (its unbounded count) and
    the path of its own state, neither of which the user asked about; the campaign's `[campaign]` lines say
    what starts, pauses and stops. Tune starts the first reporter among the callbacks, so this one is first;
    at verbose=0 nothing else of it prints.

    Tune still appends its own reporter to the same list and, finding this one first, never gives its own a
    start time (it keeps the `None` of its generic setup), so the first trial error would crash the driver in
    that reporter's `on_trial_error`; `setup` passes the start time on to it."""

    def __init__(self, callbacks: list[tune.Callback]) -> None:
        super().__init__(AirVerbosity.SILENT)  # pyright: ignore[reportUnknownMemberType]  # Tune types config loosely
        self.callbacks = callbacks  # the list Tune appends its reporter to

    def setup(self, start_time: float | None = None, total_samples: int | None = None, **kwargs: object) -> None:
        super().setup(start_time=start_time, total_samples=total_samples, **kwargs)  # pyright: ignore[reportUnknownMemberType]
        if start_time is None:
            return
        for other in self.callbacks:
            if isinstance(other, AirProgressReporter) and other is not self:
                other.setup(start_time=start_time)  # pyright: ignore[reportUnknownMemberType]

    def experiment_started(self, *args: object, **kwargs: object) -> None:
        """Says nothing (see the class)."""


class _NoRestoreHint(logging.Filter):
    """Drops Tune's advice after an interrupted fit (`Tuner.restore(...)`, "Trials did not complete"): the
    campaign says which runs stopped where and that `retrain-ray resume DIR` continues them
    (campaign/resume/interrupted.py)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return "Tuner.restore" not in message and "Trials did not complete" not in message


def _drop_tune_restore_hint() -> None:
    tune_log = logging.getLogger("ray.tune.tune")  # the module that prints them (ray/tune/tune.py)
    if not any(isinstance(f, _NoRestoreHint) for f in tune_log.filters):
        tune_log.addFilter(_NoRestoreHint())


def mlflow_experiments(plan: CampaignPlan) -> dict[str, str]:
    """Each MLflow-tracked run's experiment id, created here once, before any trial could race to."""
    ids: dict[str, str] = {}
    made: dict[tuple[str, str], str] = {}
    for r in plan.all_runs:
        lg = r.config.logging
        if lg.mlflow_tracking_uri:
            key = (lg.mlflow_tracking_uri, experiment_name(r.config, plan.name))
            ids[r.run_name] = made[key] = made.get(key) or ensure_experiment(r.config, plan.name)
    return ids


def finished_runs(manifest: Manifest) -> dict[str, dict[str, object]]:
    """Runs the manifest records completed or stopped (with their results): a resume never runs them again."""
    return {r.run_name: dict(r.result) for r in manifest.record.runs
            if r.status in ("completed", "stopped")}


def trial_name(trial: Trial) -> str:
    """Tune trials (and their directories) are named after their runs, not `run_trial_<id>`."""
    return str(trial.config["run_name"])  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]  # Tune types config loosely


def _resources(run: RunPlan) -> tune.PlacementGroupFactory:
    if run.placement is None:  # `_place` gives every run one before the tuner is built
        raise CampaignError([f"run {run.run_name!r} has no placement; the campaign places runs before Tune starts"])
    return tune.PlacementGroupFactory(run.placement.bundle_dicts, run.placement.strategy)
