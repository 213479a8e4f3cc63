"""Contract between the RunLoop and the world around it.

The RunLoop knows nothing about Ray: the campaign layer passes in observers (Arrow files, Tune
reports, the Ray recorder actor), a back-pressure advisor and a throttle, all behind these
Protocols. Rows are plain dicts of str -> (int | float | str | bool) so they pickle cheaply.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from retrain_ray.logs.types import MetricsRow, RunObserver

__all__ = ["MetricsRow", "RunObserver", "RunOutcome", "RunStatus"]

RunStatus = Literal["completed", "failed", "stopped"]


@dataclass(frozen=True)
class RunOutcome:
    """What a finished (or failed) run reports to its caller. Picklable."""

    run_name: str
    status: RunStatus
    last_step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    checkpoint_dir: Path | None = None
    error: str = ""
    first_step_at: float | None = None  # time.time() when this process finished its first step (row or not)
