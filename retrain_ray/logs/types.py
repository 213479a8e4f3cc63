"""What a run produces, as the logs see it: rows and the observer hooks that receive them.

A leaf module: `run/` (the loop) and `logs/` (the Arrow, console and other observers) both import it,
so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

MetricsRow = Mapping[str, Any]


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
