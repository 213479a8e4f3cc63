"""Contract between the RunLoop and the world around it.

The RunLoop knows nothing about Ray: the campaign layer passes in observers (Arrow files, Tune
reports, the Ray recorder actor), a back-pressure advisor and a throttle, all behind these
Protocols. Rows are plain dicts of str -> (int | float | str | bool) so they pickle cheaply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

MetricsRow = Mapping[str, Any]
RunStatus = Literal["completed", "failed", "stopped"]


@runtime_checkable
class RunObserver(Protocol):
    """Receives everything a run produces. Implementations: Arrow files, console, Tune, Ray actor."""

    def on_step(self, row: MetricsRow) -> None:
        """One metrics row per trained step (RL or SFT warm start), keyed by `step`."""
        ...

    def on_generations(self, rows: list[MetricsRow]) -> None: ...

    def on_eval(self, row: MetricsRow) -> None: ...

    def on_checkpoint(self, step: int, directory: Path) -> None:
        """Called after a checkpoint directory is complete (atomically renamed into place)."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class RunOutcome:
    """What a finished (or failed) run reports to its caller. Picklable."""

    run_name: str
    status: RunStatus
    last_step: int
    metrics: dict[str, Any] = field(default_factory=dict)
    checkpoint_dir: Path | None = None
    error: str = ""
