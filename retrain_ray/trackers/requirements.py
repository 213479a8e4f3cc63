"""Which trackers a config asks for, and whether their packages are installed (config time)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import Any


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
