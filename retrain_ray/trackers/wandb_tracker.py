"""W&B: one W&B run per run, metrics under `train/*` and `eval/*`, checkpoints as artifacts.

Keys (`[logging]`): `wandb_project` turns it on; `wandb_entity`, `wandb_run_name` (default: the run
name), `wandb_group` (default: the campaign name), `wandb_tags` (comma-separated; a campaign adds the
condition label and `seed<N>`), `wandb_mode` ("" = W&B's own default or `WANDB_MODE`, else
online/offline/disabled). The condition is also the W&B `job_type`, so the UI groups a campaign by
condition inside its group. `checkpoint_artifacts`: "auto" uploads each checkpoint and the final
adapter and only warns when an upload fails; "wandb" does the same and fails the run instead; "off"
uploads nothing.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from retrain_ray.logs.types import RunObserver
from retrain_ray.trackers.identity import RunIdentity, metric_values, safe_name

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import LoggingSection

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
