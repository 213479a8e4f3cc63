"""MLflow: one MLflow run per run in the campaign's experiment, metrics under `train/*` and `eval/*`.

Keys (`[logging]`): `mlflow_tracking_uri` turns it on (`file:///abs/dir`, `http://host:5000`,
`databricks`, ...); `mlflow_experiment` (default: the campaign name, else "retrain-ray"). The
MlflowClient logs to an explicit run id, so nothing depends on MLflow's process-global active run.
A retried or resumed run finds its MLflow run again by the `retrain_ray.key` tag. A campaign's driver
creates the experiment once before any trial starts (`ensure_experiment`) and hands its id to every
run: trials that each created it on first use raced in a file store, and one run's record was lost.

A `file:` URI is MLflow's file store, which MLflow 3 keeps in maintenance mode and refuses unless
`MLFLOW_ALLOW_FILE_STORE=true`: naming one in the config is that opt-in (set here for this process,
so it also holds inside Ray workers whose environment was fixed at cluster start).
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from retrain_ray.logs.types import RunObserver
from retrain_ray.trackers.identity import RunIdentity, metric_values

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import LoggingSection

KEY_TAG = "retrain_ray.key"


class LoggedConfig(Protocol):
    """What the experiment helpers read of a run's config: its [logging] section."""

    @property
    def logging(self) -> LoggingSection: ...


def _client(uri: str) -> Any:
    # deferred: mlflow is an optional extra, imported only when used
    from mlflow import MlflowClient

    if uri.startswith("file:"):
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    return MlflowClient(tracking_uri=uri)


def experiment_name(cfg: LoggedConfig, campaign: str) -> str:
    return cfg.logging.mlflow_experiment or campaign or "retrain-ray"


def ensure_experiment(cfg: LoggedConfig, campaign: str, client: Any = None) -> str:
    """The id of the run's MLflow experiment, created if it does not exist yet."""
    client = client or _client(cfg.logging.mlflow_tracking_uri)
    name = experiment_name(cfg, campaign)
    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except Exception:  # another process created it first
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class MlflowTracker(RunObserver):
    """`experiment_id`: the experiment the campaign's driver created ("": find or create it here)."""

    def __init__(self, cfg: LoggedConfig, identity: RunIdentity, config: Mapping[str, Any],
                 experiment_id: str = "") -> None:
        self.client = _client(cfg.logging.mlflow_tracking_uri)
        experiment_id = experiment_id or ensure_experiment(cfg, identity.campaign, self.client)
        self.run_id = self._find_run(experiment_id, identity) or self._create_run(experiment_id, identity, config)

    def _find_run(self, experiment_id: str, identity: RunIdentity) -> str | None:
        runs = self.client.search_runs([experiment_id], filter_string=f"tags.`{KEY_TAG}` = '{identity.key}'",
                                       max_results=1)
        if not runs:
            return None
        self.client.update_run(runs[0].info.run_id, status="RUNNING")
        return runs[0].info.run_id

    def _create_run(self, experiment_id: str, identity: RunIdentity, config: Mapping[str, Any]) -> str:
        tags = {**identity.tags, KEY_TAG: identity.key}
        run = self.client.create_run(experiment_id, run_name=identity.run_name, tags=tags)
        self.client.log_dict(run.info.run_id, dict(config), "config.json")
        return run.info.run_id

    def _log(self, row: Mapping[str, Any], prefix: str) -> None:
        # deferred: mlflow is an optional extra, imported only when used
        from mlflow.entities import Metric

        now_ms = int(time.time() * 1000)
        step = int(row["step"])
        metrics = [Metric(k, v, now_ms, step) for k, v in metric_values(row, prefix).items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def on_step(self, row: Mapping[str, Any], **info: Any) -> None:
        self._log(row, "train")

    def on_eval(self, row: Mapping[str, Any], **info: Any) -> None:
        self._log(row, "eval")

    def on_checkpoint(self, step: int, directory: Any, **info: Any) -> None:
        self.client.set_tag(self.run_id, "retrain_ray.last_checkpoint", f"{step}:{directory}")

    def close(self, **info: Any) -> None:
        self.client.set_terminated(self.run_id)
