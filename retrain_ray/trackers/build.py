"""The trackers a run's config asks for, ready to pass to `train_run(observers=...)`; and, at config time,
which of them ask for a package that is not installed (`missing_trackers`)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain_ray.logs.types import RunObserver
from retrain_ray.trackers.identity import RunIdentity
from retrain_ray.trackers.mlflow_tracker import MlflowTracker
from retrain_ray.trackers.tensorboard_tracker import TensorBoardTracker
from retrain_ray.trackers.wandb_tracker import WandbTracker
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig


def build_trackers(cfg: RetrainConfig, identity: RunIdentity, run_dir: Path, *,
                   mlflow_experiment_id: str = "") -> list[RunObserver]:
    """W&B / MLflow / TensorBoard observers for `cfg.logging` (none asked for: an empty list).

    `mlflow_experiment_id`: the experiment a campaign's driver created for all its runs (see
    `mlflow_tracker.ensure_experiment`); "" finds or creates it here.

    A missing package raises here too (config validation already refuses it where the config is
    loaded; this catches a worker node whose environment differs from the driver's).
    """
    missing = missing_trackers(cfg.logging)
    if missing:
        wanted = ", ".join(f"{m.key} needs `pip install 'retrain-ray[{m.extra}]'`" for m in missing)
        raise ImportError(f"tracker not installed on this node: {wanted}")
    lg = cfg.logging
    # the run's whole config with secrets redacted (what the manifest stores)
    config = redact(cfg.model_dump(mode="json")) if (lg.wandb_project or lg.mlflow_tracking_uri) else {}
    trackers: list[RunObserver] = []
    try:
        if lg.wandb_project:
            trackers.append(WandbTracker(lg, identity, run_dir, config))
        if lg.mlflow_tracking_uri:
            trackers.append(MlflowTracker(cfg, identity, config, mlflow_experiment_id))
        if lg.tensorboard:
            trackers.append(TensorBoardTracker(identity, run_dir))
    except BaseException:
        for started in trackers:  # one tracker failed to start: close the ones already open
            started.close()
        raise
    return trackers

@dataclass(frozen=True)
class TrackerRequest:
    key: str  # the `[logging]` key that asks for it
    value: Any
    module: str
    extra: str


def requested_trackers(logging: Any) -> list[TrackerRequest]:
    wanted = []
    if logging.wandb_project:
        wanted.append(TrackerRequest("logging.wandb_project", logging.wandb_project, "wandb", "wandb"))
    if logging.mlflow_tracking_uri:
        wanted.append(TrackerRequest("logging.mlflow_tracking_uri", logging.mlflow_tracking_uri, "mlflow", "mlflow"))
    if logging.tensorboard:
        wanted.append(TrackerRequest("logging.tensorboard", True, "tensorboard", "tensorboard"))
    return wanted


def is_installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules (blocked)
        return False


def missing_trackers(logging: Any) -> list[TrackerRequest]:
    """The requested trackers whose package cannot be imported here."""
    return [r for r in requested_trackers(logging) if not is_installed(r.module)]
