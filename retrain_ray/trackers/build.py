"""The trackers a run's config asks for, ready to pass to `train_run(observers=...)`; at config time,
which of them ask for a package that is not installed (`missing_trackers`); and the three trackers.

TensorBoard: event files under `<run dir>/tensorboard/` (`[logging] tensorboard = true`).

Scalars `train/<column>` and `eval/<column>` by step; the run's identity as text (`run/condition`,
`run/seed`, ...). In a campaign the run dirs sit under the campaign directory, so
`tensorboard --logdir <campaign_dir>` shows every run, named by its path.

W&B: one W&B run per run, metrics under `train/*` and `eval/*`, checkpoints as artifacts.

Keys (`[logging]`): `wandb_project` turns it on; `wandb_entity`, `wandb_run_name` (default: the run
name), `wandb_group` (default: the campaign name), `wandb_tags` (comma-separated; a campaign adds the
condition label and `seed<N>`), `wandb_mode` ("" = W&B's own default or `WANDB_MODE`, else
online/offline/disabled). The condition is also the W&B `job_type`, so the UI groups a campaign by
condition inside its group. `checkpoint_artifacts`: "auto" uploads each checkpoint and the final
adapter and only warns when an upload fails; "wandb" does the same and fails the run instead; "off"
uploads nothing.

MLflow: one MLflow run per run in the campaign's experiment, metrics under `train/*` and `eval/*`.

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

import hashlib
import importlib.util
import logging
import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast

from retrain_ray.logs.types import RunObserver
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import LoggingSection


def build_trackers(cfg: RetrainConfig, identity: RunIdentity, run_dir: Path, *,
                   mlflow_experiment_id: str = "") -> list[RunObserver]:
    """W&B / MLflow / TensorBoard observers for `cfg.logging` (none asked for: an empty list).

    `mlflow_experiment_id`: the experiment a campaign's driver created for all its runs (see
    `ensure_experiment` below); "" finds or creates it here.

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


SUBDIR = "tensorboard"


class TensorBoardTracker(RunObserver):
    def __init__(self, identity: RunIdentity, run_dir: Path) -> None:
        # deferred: loads torch, which importing this module does not need
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(Path(run_dir) / SUBDIR))
        for name, value in identity.tags.items():
            self.writer.add_text(f"run/{name}", value, 0)

    def _log(self, row: Mapping[str, Any], prefix: str) -> None:
        step = int(row["step"])
        for name, value in metric_values(row, prefix).items():
            self.writer.add_scalar(name, value, step)

    def on_step(self, row: Mapping[str, Any], **info: Any) -> None:
        self._log(row, "train")

    def on_eval(self, row: Mapping[str, Any], **info: Any) -> None:
        self._log(row, "eval")

    def on_checkpoint(self, step: int, directory: Any, **info: Any) -> None:
        self.writer.flush()

    def close(self, **info: Any) -> None:
        self.writer.close()


log = logging.getLogger(__name__)


class WandbTracker(RunObserver):
    def __init__(self, lg: LoggingSection, identity: RunIdentity, run_dir: Path, config: Mapping[str, Any]) -> None:
        # deferred: wandb is an optional extra, imported only when used
        import wandb

        self.wandb = wandb
        self.identity = identity
        self.artifacts = lg.checkpoint_artifacts if lg.checkpoint_artifacts != "off" else ""
        tags = [t.strip() for t in lg.wandb_tags.split(",") if t.strip()] or [identity.condition, f"seed{identity.seed}"]
        self.run = wandb.init(
            project=lg.wandb_project,
            entity=lg.wandb_entity or None,
            name=lg.wandb_run_name or identity.run_name,
            group=lg.wandb_group or identity.campaign or None,
            job_type=safe_name(identity.condition)[:64],
            tags=tags,
            config={**dict(config), "run": identity.tags},
            id=f"rr-{identity.key}",
            resume="allow",
            mode=cast("Literal['online', 'offline', 'disabled', 'shared'] | None", lg.wandb_mode or None),  # checked at load
            dir=None if os.environ.get("WANDB_DIR") else str(run_dir),
            reinit="create_new",
        )

    def on_step(self, row: Mapping[str, Any], **info: Any) -> None:
        self.run.log(metric_values(row, "train"), step=int(row["step"]))

    def on_eval(self, row: Mapping[str, Any], **info: Any) -> None:
        self.run.log(metric_values(row, "eval"), step=int(row["step"]))

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        if not self.artifacts:
            return
        try:
            self._upload(step, Path(directory))
        except Exception as exc:
            if self.artifacts == "wandb":
                raise RuntimeError(f"checkpoint_artifacts = \"wandb\": uploading {directory} failed: {exc}") from exc
            log.warning("W&B checkpoint upload of %s failed (checkpoint_artifacts = \"auto\"): %s", directory, exc)

    def _upload(self, step: int, directory: Path) -> None:
        artifact = self.wandb.Artifact(f"{safe_name(self.identity.run_name)}-checkpoint", type="model",
                                       metadata={"step": step, "checkpoint": directory.name, **self.identity.tags})
        artifact.add_dir(str(directory))
        self.run.log_artifact(artifact, aliases=["latest", directory.name])  # checkpoint_step_<n> or final

    def close(self, **info: Any) -> None:
        self.run.finish()


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


# Who a tracked run is, and the metric names a row becomes.
NOT_METRICS = frozenset({"step", "wall_time", "seed"})


@dataclass(frozen=True)
class RunIdentity:
    """One run as trackers see it. `campaign` is "" for a single run outside a campaign."""

    run_name: str
    condition: str
    seed: int
    campaign: str = ""

    @property
    def key(self) -> str:
        """Stable across retries and campaign resumes: finds the same tracked run again."""
        return hashlib.sha1(f"{self.campaign}/{self.run_name}".encode()).hexdigest()[:16]

    @property
    def tags(self) -> dict[str, str]:
        return {"campaign": self.campaign, "condition": self.condition, "seed": str(self.seed),
                "run_name": self.run_name}


def metric_values(row: Mapping[str, Any], prefix: str) -> dict[str, float]:
    """The numeric columns of a row as `{prefix}/{column}` -> float (bools as 0/1)."""
    out = {}
    for name, value in row.items():
        if name in NOT_METRICS or isinstance(value, str) or value is None:
            continue
        if isinstance(value, (bool, int, float)):
            out[f"{prefix}/{name}"] = float(value)
    return out


def safe_name(text: str) -> str:
    """`text` with the characters W&B artifact names refuse replaced by '-'."""
    return re.sub(r"[^A-Za-z0-9._-]", "-", text)
