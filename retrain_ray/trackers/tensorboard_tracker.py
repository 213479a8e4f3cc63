"""TensorBoard: event files under `<run dir>/tensorboard/` (`[logging] tensorboard = true`).

Scalars `train/<column>` and `eval/<column>` by step; the run's identity as text (`run/condition`,
`run/seed`, ...). In a campaign the run dirs sit under the campaign directory, so
`tensorboard --logdir <campaign_dir>` shows every run, named by its path.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from retrain_ray.logs.types import RunObserver
from retrain_ray.trackers.identity import RunIdentity, metric_values

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
