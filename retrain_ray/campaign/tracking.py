"""Tune callback (in the driver) that keeps the manifest current and tells the campaign's observer of
run transitions (campaign/observer.py).

Attempts count trial starts (first start, each retry, each campaign resume). A run is "failed"
only when Tune gives up on it (max_failures exhausted); a retried run is "running" with its last
error kept. A run already completed when this driver session started keeps its record untouched:
Tune may restore it as unfinished (its state synced before the run ended), and its trial then only
reports the recorded result (campaign/trial.py). A run an adaptive campaign stopped (campaign/adaptive/scheduler.py)
keeps its status `stopped` when Tune ends its trial. It also enforces `trial_start_timeout_s`: if runs
are pending and none has started or reported for that long, the campaign stops with an error
instead of waiting forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import cast

from ray.tune import Callback, Stopper
from ray.tune.experiment import Trial

from retrain_ray.campaign.observer import CampaignObserver
from retrain_ray.campaign.resume.pointer import is_pointer, pointer_target
from retrain_ray.logs.manifest import Manifest


def _run_name(trial: Trial) -> str:
    return str(trial.config["run_name"])  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]  # Tune types config loosely

# A run's last report to Tune carries its final metrics beyond those Tune needs as one JSON string under this
# key (campaign/trial.py): Tune keeps a moving window and an analysis of every numeric key of every trial in
# its experiment state (about 1 KB a key: 65 KB a run with the run loop's 60 metrics), which it rewrites whole
# at every snapshot; the manifest unpacks them, so its `result` holds them all as before.
RUN_METRICS = "run_metrics_json"


def _result_summary(result: Mapping[str, object]) -> dict[str, int | float | str]:
    skip = {"run_done", "run_status", "config", "trial_id", "experiment_tag", "date", "hostname", "node_ip", RUN_METRICS}
    return {k: v for k, v in {**_run_metrics(result), **result}.items() if isinstance(v, (int, float, str))
            and k not in skip and not k.startswith(("time_", "timestamp", "pid", "training_iteration", "iterations_"))}


def _run_metrics(result: Mapping[str, object]) -> dict[str, object]:
    """The final metrics a run's last report packs as one JSON string (campaign/trial.py: RUN_METRICS)."""
    packed = result.get(RUN_METRICS)
    try:
        data: object = json.loads(packed) if isinstance(packed, str) else {}
    except json.JSONDecodeError:
        return {}
    return cast("dict[str, object]", data) if isinstance(data, dict) else {}


# How stale the manifest's progress of a running run may be (its `result`): Tune reports every checkpoint and
# the manifest file is rewritten whole, so each report is staged and written with the next status change or
# within FLUSH_S (logs/manifest.py: Manifest.stage_run); status changes are written at once.
FLUSH_S = 1.0


class ManifestCallback(Callback):
    def __init__(self, manifest: Manifest, *, observer: CampaignObserver, start_timeout_s: float) -> None:
        self.manifest = manifest
        self.observer = observer
        self.start_timeout_s = start_timeout_s
        self._last_activity = time.monotonic()
        self._finished: set[str] = set()

    def setup(self, stop: Stopper | None = None, num_samples: int | None = None,
              total_num_samples: int | None = None, **info: object) -> None:
        """Re-reads the manifest: after `Tuner.restore` this callback is an unpickled copy."""
        self.manifest = Manifest.load(self.manifest.path.parent)
        self._finished = {r.run_name for r in self.manifest.record.runs if r.status in ("completed", "stopped")}
        self._last_activity = time.monotonic()

    def _recorded(self, trial: Trial) -> bool:
        """True for a run completed before this session: its manifest entry is final."""
        return _run_name(trial) in self._finished


    def on_trial_start(self, iteration: int, trials: list[Trial], trial: Trial, **info: object) -> None:
        name = _run_name(trial)
        if self._recorded(trial):
            self._last_activity = time.monotonic()
            self.observer.on_run(name, "already completed (manifest.json), not run again")
            return
        attempts = self.manifest.run(name).attempts + 1
        self.manifest.update_run(name, status="running", attempts=attempts, started_at=time.time())
        self._last_activity = time.monotonic()
        self.observer.on_run(name, f"started (attempt {attempts})")

    def on_trial_result(self, iteration: int, trials: list[Trial], trial: Trial, result: dict[str, object], **info: object) -> None:
        if self._recorded(trial):
            return
        self._last_activity = time.monotonic()
        self.manifest.stage_run(_run_name(trial), result=_result_summary(result))  # written within FLUSH_S

    def on_trial_complete(self, iteration: int, trials: list[Trial], trial: Trial, **info: object) -> None:
        if self._recorded(trial):
            return
        name = _run_name(trial)
        last = cast("dict[str, object]", trial.last_result or {})  # pyright: ignore[reportUnknownMemberType]  # Tune's result dict
        checkpoint = getattr(trial, "checkpoint", None)  # the run's last reported checkpoint (for squeeze)
        stopped = self.manifest.run(name).status == "stopped"  # by an adaptive campaign (campaign/adaptive/scheduler.py)
        self.manifest.update_run(name, status="stopped" if stopped else "completed", result=_result_summary(last),
                                 finished_at=time.time(),
                                 checkpoint=_checkpoint_path(checkpoint.path) if checkpoint is not None else "")
        if stopped:
            step = last.get("step", -1)
            steps = (int(step) if isinstance(step, (int, float)) else -1) + 1  # `step`: the 0-based index of its last step
            self.observer.on_run(name, f"stopped after {steps} steps: {self.manifest.run(name).stop_reason}")
            return
        own = last.get("resumed_own_step")  # Tune had no checkpoint of it (campaign/resume/own_checkpoint.py)
        source = ("its own checkpoint" if last.get("resumed_from", "own") == "own"
                  else f"Tune's set-aside copy {last.get('resumed_path', '?')}")
        how = "" if own is None else f" (continued after {source} of step {own}: Tune had none)"
        if own is not None and str(last.get("resumed_path", "")).endswith("/final"):
            how = f" (extended: continued after its final checkpoint of step {own})"
        self.observer.on_run(name, f"completed at step {last.get('step', '?')}{how}")

    def on_trial_recover(self, iteration: int, trials: list[Trial], trial: Trial, **info: object) -> None:
        if self._recorded(trial):
            return
        name = _run_name(trial)
        self.manifest.update_run(name, error=_error_text(trial))
        self.observer.on_run(name, "failed, retrying from its last checkpoint")

    def on_trial_error(self, iteration: int, trials: list[Trial], trial: Trial, **info: object) -> None:
        if self._recorded(trial):
            return
        name = _run_name(trial)
        self.manifest.update_run(name, status="failed", error=_error_text(trial))
        self.observer.on_run(name, f"FAILED ({self.manifest.run(name).error.splitlines()[-1:]})")

    def on_experiment_end(self, trials: list[Trial], **info: object) -> None:
        self.manifest.flush_if_due(0.0)  # the driver then reads the file back to finish it

    def on_step_end(self, iteration: int, trials: list[Trial], **info: object) -> None:
        self.manifest.flush_if_due(FLUSH_S)
        states = [str(t.status) for t in trials]  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        if "RUNNING" in states or "PENDING" not in states:
            self._last_activity = time.monotonic()
            return
        if time.monotonic() - self._last_activity > self.start_timeout_s:
            raise TimeoutError(
                f"no run could start for {self.start_timeout_s:.0f} s (Ray cannot place the pending "
                "runs' resources); raise [campaign].trial_start_timeout_s or free resources"
            )


def _error_text(trial: Trial) -> str:
    path = getattr(trial, "error_file", None)
    try:
        text = open(path).read() if path else ""
    except OSError:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return "\n".join(lines[-3:]) if lines else "unknown error (see the Tune trial logs)"


def _checkpoint_path(path: str) -> str:
    """The run's checkpoint Tune's copy stands for: the target of a pointer (campaign/resume/pointer.py), else the copy."""
    if "://" not in path and is_pointer(Path(path)):
        try:
            return str(pointer_target(Path(path)))
        except ValueError:
            return path
    return path
