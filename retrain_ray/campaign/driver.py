"""`Campaign`: the public facade that runs a campaign on Ray Tune, one trial per run, and resumes it.

    results = Campaign.from_toml("configs/smoke-campaign.toml").run()
    print(results.summary(by="condition"))
    for error in results.errors:                # RunError per failed run: listed, never hidden
        print(error.run_name, error.message)

`run()` validates everything first, packs the code of the plugins the config names for the trials
(campaign/plugin_bundle.py), connects to Ray (`address`, else `RAY_ADDRESS`, else a new
local Ray), checks the placements against the cluster, starts the recorder (and the control actors
the config needs), then either starts a new Tune experiment or, when the campaign directory already
holds one, restores it with `Tuner.restore(..., resume_errored=True)`: finished runs are kept,
unfinished and failed runs continue from their last checkpoint. A run that `manifest.json` records
completed is never run again, even where Tune's last synced experiment state predates its end; a
torn Tune state (a driver killed mid-copy) is set aside and Tune starts afresh (campaign/resume/tune_copies.py).
A config that differs from the one the campaign ran with is refused naming each changed key, before Ray
starts; a raised `[campaign] max_steps` extends every run instead (campaign/resume/edits.py).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import threading
from collections.abc import Callable, Generator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, cast

import ray
from ray.actor import ActorHandle

from retrain_ray.campaign.afterwards import run_afterwards
from retrain_ray.campaign.capacity.placement import decide_placement
from retrain_ray.campaign.control import ControlPlane, start_control_plane, start_gate
from retrain_ray.campaign.local_ray import alive_node_resources, connect, trial_modules
from retrain_ray.campaign.observer import CampaignObserver, ConsoleCampaignObserver
from retrain_ray.campaign.plan import (
    DEFAULT_RUNNER,
    CampaignError,
    CampaignPlan,
    Runner,
    RunPlan,
    build_plan,
    run_record,
)
from retrain_ray.campaign.plugin_bundle import build_bundle
from retrain_ray.campaign.recorder import start_recorder
from retrain_ray.campaign.resume.edits import Extension, check_edits, record_extension
from retrain_ray.campaign.resume.interrupted import CampaignInterrupted, record_interruption, was_interrupted
from retrain_ray.campaign.resume.tune_copies import set_aside, torn_state
from retrain_ray.campaign.shared_trainers import start_shared_trainers
from retrain_ray.checks.preflight import campaign_problems
from retrain_ray.config import ConfigError, RetrainConfig, load_config
from retrain_ray.logs.dir_lock import DirectoryInUse, DirLock
from retrain_ray.logs.manifest import Manifest, damaged_manifest, read_manifest, write_json_atomic
from retrain_ray.logs.parquet_export import export_campaign
from retrain_ray.models.context import config_uses_peft
from retrain_ray.plugins.bundle import PluginBundle
from retrain_ray.run.trainers.registry import condition_warnings
from retrain_ray.util.secrets import has_redactions, redact, restore_secrets

if TYPE_CHECKING:
    from retrain_ray.results.campaign_results import CampaignResults

__all__ = ["Campaign", "CampaignError"]
RESUME_CONFIG = ".resume_config.json"



def _load_whole(campaign_dir: Path) -> Manifest:
    """The campaign directory's manifest, refused as damaged (nothing overwritten) when it is not JSON, has
    no "runs" list or an empty one: a campaign records every run it plans before the first starts."""
    try:
        manifest = Manifest.load(campaign_dir)
    except ValueError as exc:
        raise CampaignError([str(exc)]) from None
    if not manifest.record.runs:
        raise CampaignError([damaged_manifest(campaign_dir / "manifest.json", 'its "runs" list is empty')])
    return manifest

class Campaign:
    """A campaign: one config, conditions x seeds runs. Keyword-only, validated on construction."""

    def __init__(self, config: RetrainConfig, *, name: str | None = None, root: str | Path | None = None,
                 runner: str | Runner = DEFAULT_RUNNER, source: str = "") -> None:
        self.config = config
        self.runner = runner
        self.source = source
        self.plan: CampaignPlan = build_plan(config, name=name, root=root or None)
        self.observer: CampaignObserver = ConsoleCampaignObserver()  # `run(observer=...)` sets it

    @classmethod
    def from_toml(cls, path: str | Path, overrides: dict[str, object] | None = None, *, name: str | None = None,
                  root: str | Path | None = None, runner: str | Runner = DEFAULT_RUNNER) -> Campaign:
        return cls(load_config(path, dict(overrides or {})), name=name, root=root, runner=runner,
                   source=str(Path(path).resolve()))

    @classmethod
    def from_dir(cls, campaign_dir: str | Path, *, runner: str | Runner = DEFAULT_RUNNER) -> Campaign:
        """The campaign stored in `campaign_dir` (for `retrain-ray resume DIR`)."""
        campaign_dir = Path(campaign_dir).resolve()
        snapshot = campaign_dir / RESUME_CONFIG
        if not snapshot.is_file():
            raise CampaignError([f"{snapshot} not found: {campaign_dir} is not a resumable campaign directory"])
        config_json = cast("dict[str, object]", json.loads(snapshot.read_text()))  # written by `_open_dir`
        source = read_manifest(campaign_dir).campaign_toml
        if has_redactions(config_json):
            config_json = _with_secrets(config_json, source, snapshot)
        config = RetrainConfig.model_validate(config_json)
        return cls(config, name=campaign_dir.name, root=campaign_dir.parent, source=source, runner=runner)

    @property
    def campaign_dir(self) -> Path:
        return self.plan.campaign_dir

    def run(self, *, address: str | None = None, progress: bool = True, dashboard: bool = False,
            observer: CampaignObserver | None = None) -> CampaignResults:
        """Runs (or resumes) the campaign to the end and returns its results. Blocks.

        A Ray this call started (no cluster address) is shut down before it returns, so a CLI driver
        leaves no Ray processes behind; a Ray that was already connected is left as it was. Every
        condition is preflighted first (`CampaignError` with all problems, before Ray starts).
        `dashboard`: a local Ray this call starts runs the Ray dashboard (off: it starts faster).
        The campaign directory is locked for the call (logs/dir_lock.py): a second driver of the same
        campaign gets a `CampaignError` naming this one. Stopped by Ctrl-C (or SIGTERM or SIGHUP at the CLI), it
        raises `CampaignInterrupted` (a KeyboardInterrupt) once Tune has saved its state.
        `observer` receives the campaign's messages (campaign/observer.py); without one they are printed,
        the progress messages only with `progress`.
        """
        self.observer = observer if observer is not None else ConsoleCampaignObserver(progress=progress)
        problems = campaign_problems(self.config)
        if problems:
            raise CampaignError(problems)
        self._existing()  # a changed config is refused before Ray starts and before anything is written
        for text in condition_warnings((r.condition, r.config) for r in self.plan.runs):  # runs that train nothing
            self.observer.on_warning(text)
        plugins = self._plugins()
        lock = DirLock(self.campaign_dir, what="campaign",
                       fix="give this campaign another name ([campaign].name or --name)")
        try:
            lock.acquire()  # before Ray starts: a second driver of this campaign stops at once
        except DirectoryInUse as exc:
            raise CampaignError([str(exc)]) from None
        try:
            peft = any(config_uses_peft(r.config) for r in self.plan.runs)
            handlers = stop_handlers()
            with stop_signals_blocked(handlers):  # the local Ray's daemons started here inherit the mask
                started = connect(address, dashboard=dashboard, preload=trial_modules(peft=peft), observer=self.observer)
            restore_stop_handlers(handlers)
            try:
                return self._run(plugins, can_scale=not started)
            finally:
                if started:
                    ray.shutdown()  # pyright: ignore[reportUnknownMemberType]
        finally:
            lock.release()

    def _plugins(self) -> PluginBundle | None:
        """The code of the plugins the runs name, packed for the trials (campaign/plugin_bundle.py)."""
        try:
            bundle = build_bundle(r.config for r in self.plan.runs)
        except ValueError as exc:
            raise CampaignError([str(exc)]) from exc
        if bundle is not None:
            self.observer.on_plugins(bundle.describe())
        return bundle

    def _run(self, plugins: PluginBundle | None, *, can_scale: bool) -> CampaignResults:
        self.plan = _place(self.plan, cpu_fallback=bool(self.config.campaign and self.config.campaign.cpu_fallback), can_scale=can_scale,
                           observer=self.observer)
        manifest, resuming = self._open_dir()
        self.observer.on_start(self.plan.name, len(self.plan.runs), self.campaign_dir,
                               resuming=resuming or len(manifest.record.sessions) > 1)
        namespace = cast("str", ray.get_runtime_context().namespace)  # pyright: ignore[reportUnknownMemberType]
        actors = self._start_actors(namespace)
        try:
            from retrain_ray.campaign.experiment import build_tuner  # deferred: loads Tune

            build_tuner(self.plan, manifest, namespace=namespace, control=actors.control, runner=self.runner,
                        observer=self.observer, resuming=resuming, plugins=plugins).fit()
        finally:
            actors.stop()
        if was_interrupted(self.campaign_dir):  # Tune stopped on Ctrl-C or SIGTERM: nothing to finish or compact
            record_interruption(self.campaign_dir)
            raise CampaignInterrupted(self.campaign_dir)
        Manifest.load(self.campaign_dir).finish()
        _compact(self.plan)
        run_afterwards(self.campaign_dir, self.config, observer=self.observer)
        self.observer.on_results(self.campaign_dir)
        from retrain_ray.results.campaign_results import CampaignResults  # deferred: loads Tune

        return CampaignResults.from_dir(self.campaign_dir)

    def _existing(self) -> tuple[Manifest, Extension | None] | None:
        """The campaign directory's manifest and the extension the config asks of it (None: a new
        campaign); CampaignError when the directory holds another campaign or the config changed in
        a way that is refused (campaign/resume/edits.py)."""
        cdir = self.campaign_dir
        if not (cdir / "manifest.json").is_file():
            return None
        manifest = _load_whole(cdir)
        recorded = manifest.record.name
        if recorded != self.plan.name:
            raise CampaignError([f"{cdir / 'manifest.json'} belongs to campaign {recorded!r}, not "
                                 f"{self.plan.name!r}: it was copied from another campaign; remove it or "
                                 "choose another [campaign].name"])
        extension = None
        if manifest.record.config is not None:
            extension = check_edits(manifest.record.config, self._config_json(), campaign=self.plan.name,
                                    campaign_dir=cdir, local_tune=bool(self.plan.local_tune_path))
        known = {r.run_name for r in manifest.record.runs}
        started, possible = {r.run_name for r in self.plan.runs}, {r.run_name for r in self.plan.all_runs}
        if not started <= known <= possible:  # an adaptive campaign's manifest also holds the seeds it added
            raise CampaignError([f"{cdir} holds a campaign with other runs; choose another [campaign].name"])
        return manifest, extension

    def _config_json(self) -> dict[str, object]:
        return cast("dict[str, object]", redact(self.config.model_dump(mode="json")))

    def _open_dir(self) -> tuple[Manifest, bool]:
        cdir = self.campaign_dir
        existing = self._existing()
        if existing is None:
            cdir.mkdir(parents=True, exist_ok=True)
            manifest = Manifest.create(cdir, self._header(), [run_record(r) for r in self.plan.runs])
            resuming = False
        elif existing[1] is not None:
            manifest = existing[0]
            self._extend(manifest, existing[1])
            resuming = False
        else:
            manifest = existing[0]
            from retrain_ray.campaign.experiment import can_restore  # deferred: loads Tune

            resuming = can_restore(self.plan) and self._tune_state_whole(manifest)
            if resuming and self.plan.adaptive is not None:
                resuming = self._fresh_adaptive_tune(manifest)
        # secrets redacted: `from_dir` takes them back from the campaign's TOML file on resume
        write_json_atomic(cdir / RESUME_CONFIG, self._config_json())
        os.chmod(cdir / RESUME_CONFIG, 0o600)
        manifest.start_session()
        return manifest, resuming

    def _extend(self, manifest: Manifest, extension: Extension) -> None:
        """Records the extension and sets Tune's state aside: Tune never runs a finished trial again, so a
        fresh Tune experiment runs every run on from its own newest checkpoint (campaign/resume/edits.py)."""
        runs = [r.run_name for r in manifest.record.runs]
        aside = set_aside(Path(self.plan.local_tune_path), runs, kind="extended")
        finished = record_extension(manifest, extension, self._config_json())
        self.observer.on_notice(
            f"extending {self.plan.name} from {extension.from_steps} to {extension.to_steps} steps: "
            f"{len(finished)} finished run(s) continue after their final checkpoints, the others after their "
            f"newest (Tune's state set aside in {aside})")

    def _fresh_adaptive_tune(self, manifest: Manifest) -> bool:
        """False, after setting Tune's state aside: a resumed adaptive campaign starts a fresh Tune experiment
        whose searcher takes the runs still to run from the manifest (campaign/adaptive/scheduler.py), and each run
        continues after its own newest checkpoint (as after a torn state, campaign/resume/tune_copies.py)."""
        local = self.plan.local_tune_path
        if not local:  # remote storage: its trial copies stay where Tune's restore finds them
            return True
        ended = ("completed", "stopped")
        set_aside(Path(local), [r.run_name for r in manifest.record.runs if r.status not in ended])
        return False

    def _tune_state_whole(self, manifest: Manifest) -> bool:
        """False (after setting the torn state aside) when Tune's experiment state does not load."""
        local = self.plan.local_tune_path
        if not local:  # remote storage: Tune's own restore reads it
            return True
        tune_dir = Path(local)
        problem = torn_state(tune_dir)
        if not problem:
            return True
        aside = set_aside(tune_dir, [r.run_name for r in manifest.record.runs if r.status != "completed"])
        self.observer.on_warning(
            f"Tune's experiment state is torn ({problem}: the driver was killed while Tune copied it); set aside in "
            f"{aside}. Starting Tune afresh: runs the manifest records completed are not run again, the others "
            "continue after their own newest verified checkpoint (step 0 without one)")
        return False

    def _header(self) -> dict[str, object]:
        p = self.plan
        return {
            "name": p.name, "campaign_dir": str(p.campaign_dir), "campaign_toml": self.source,
            "conditions": p.conditions, "seeds": p.seeds, "max_steps": p.max_steps, "num_runs": len(p.runs),
            "max_concurrent": p.schedule.max_concurrent, "stagger_seconds": p.schedule.stagger_seconds,
            "max_failures": p.schedule.max_failures,
            "config": self._config_json(),
            **({"adaptive": {"plan": p.adaptive.to_json(), "decisions": []}} if p.adaptive else {}),
        }

    def _start_actors(self, namespace: str) -> _Actors:
        p = self.plan
        recorder = start_recorder(p.actor_scope, p.campaign_dir, namespace=namespace)
        gate = (start_gate(p.actor_scope, p.schedule.stagger_seconds, namespace=namespace)
                if p.schedule.stagger_seconds > 0 else None)
        control = start_control_plane(self.config, p.actor_scope, namespace=namespace, campaign_dir=p.campaign_dir)
        trainers = start_shared_trainers(p, namespace=namespace, backpressure=control.backpressure is not None)
        control = dataclasses.replace(control, shared_trainers=trainers)
        return _Actors(recorder, gate, control)


@dataclasses.dataclass(frozen=True)
class _Actors:
    """The campaign's actors of one driver session: the recorder, the stagger gate, the control plane."""

    recorder: ActorHandle[object]
    gate: ActorHandle[object] | None
    control: ControlPlane

    def stop(self) -> None:
        """Closes the recorder's logs, then ends the recorder, the gate and the shared trainers."""
        ray.get(self.recorder.close.remote(), timeout=120)  # pyright: ignore[reportUnknownArgumentType]  # an actor method
        trainers = [cast("ActorHandle[object]", t) for handles in self.control.shared_trainers.values() for t in handles]
        for handle in (self.recorder, self.gate, *trainers):
            if handle is not None:
                ray.kill(handle)  # pyright: ignore[reportUnknownMemberType]  # typed for ActorHandle[Unknown]


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def stop_handlers() -> dict[int, object]:
    """The Python handlers of SIGTERM and SIGHUP now (the CLI's, cli/interrupts.py), to put back after Ray connects."""
    return {signum: signal.getsignal(signum) for signum in STOP_SIGNALS}


@contextmanager
def stop_signals_blocked(handlers: dict[int, object]) -> Generator[None]:
    """SIGTERM and SIGHUP blocked in this thread for the body, when the caller handles them (the CLI does).

    A scheduler's SIGTERM (or a closed terminal's SIGHUP) goes to the driver's whole process group, and the
    local Ray `ray.init` starts (GCS, raylet, their workers) is in that group: its GCS died with the driver's
    stop, and the driver, stopping gracefully, was then ended by Ray's core worker 60 s later ("Failed to
    connect to GCS", exit 1). Processes started while the signals are blocked inherit the mask, as Ray's own
    start-up blocks SIGINT in them (a terminal's Ctrl-C); the driver unblocks them at once after. Ray still
    stops its daemons at shutdown (SIGTERM, then SIGKILL after 1 s)."""
    signals = {signum for signum, handler in handlers.items() if callable(handler)}
    if not signals or threading.current_thread() is not threading.main_thread():
        yield
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, signals)


def restore_stop_handlers(handlers: dict[int, object]) -> None:
    """Puts the caller's own SIGTERM and SIGHUP handlers back over the ones `ray.init` installs (SIGTERM: kill
    the local Ray and `sys.exit(1)`: no checkpoint, the manifest left `running`, exit 1), so the CLI stops the
    campaign as Ctrl-C does. A handler the caller did not set (the default) is left to Ray. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum, handler in handlers.items():
        if callable(handler):
            signal.signal(signum, cast("Callable[[int, FrameType | None], object]", handler))


def _with_secrets(config_json: dict[str, object], source: str, snapshot: Path) -> dict[str, object]:
    """The snapshot with its redacted secrets read back from the campaign's TOML file."""
    fresh: dict[str, object] = {}
    if source and Path(source).is_file():
        try:
            fresh = load_config(source).model_dump(mode="json")
        except ConfigError:
            fresh = {}
    restored, missing = restore_secrets(config_json, fresh)
    if missing:
        raise CampaignError([
            f"{snapshot} stores {', '.join(missing)} redacted, and the campaign's TOML file "
            f"({source or 'unknown'}) no longer gives the same value: restore that file (same URLs and keys) "
            "and run `retrain-ray resume` again"
        ])
    return restored


def _place(plan: CampaignPlan, *, cpu_fallback: bool, can_scale: bool, observer: CampaignObserver) -> CampaignPlan:
    """Gives each run its placement for the connected cluster; errors name the missing resource.

    `can_scale`: the cluster may grow (this driver connected to it rather than starting it), so runs
    that fit no alive node wait for the autoscaler, bounded by `trial_start_timeout_s`.
    """
    nodes = alive_node_resources()
    problems: list[str] = []
    notes: set[str] = set()
    placed: list[RunPlan] = []
    for r in plan.all_runs:
        d = decide_placement(r.devices, cpus_per_run=plan.schedule.cpus_per_run, nodes=nodes,
                             cpu_fallback=cpu_fallback, can_scale=can_scale, in_process=r.in_process,
                             gpu_share=r.gpu_share)
        config = r.config
        if d.warning:
            notes.add(f"warning: {d.warning}")
            config = config.model_copy(update={"backend": config.backend.model_copy(update={"devices": "cpu"})})
        if d.wait:
            notes.add(f"{d.wait}; runs wait up to [campaign].trial_start_timeout_s = "
                      f"{plan.schedule.trial_start_timeout_s:g} s")
        if d.problem:
            problems.append(f"run {r.run_name}: {d.problem}")
        placed.append(dataclasses.replace(r, placement=d.placement, config=config))
    for note in sorted(notes):
        observer.on_notice(note)
    if problems:
        raise CampaignError(problems)
    return dataclasses.replace(plan, runs=placed[:len(plan.runs)], reserve=placed[len(plan.runs):])


def _compact(plan: CampaignPlan) -> None:
    """Rewrites the Parquet copies of every run's logs (de-duplicated, with campaign/condition/seed)."""
    export_campaign(plan.campaign_dir, plan.name)
