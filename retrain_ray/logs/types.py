"""What a run produces, as the logs see it: rows and the observer hooks that receive them.

A leaf module: `run/` (the loop) and `logs/` (the Arrow, console and other observers) both import it,
so neither imports the other's internals.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

MetricsRow = Mapping[str, Any]


class RunObserver:
    """Receives everything a run produces. Implementations: Arrow files, console, Tune, Ray actor, trackers.

    Every hook is a no-op here and takes keyword extras (`**info`), as Ray Tune's `Callback` does: an
    observer overrides only the hooks it needs, and a hook or an extra added later breaks none.
    """

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        """One metrics row per trained step (RL or SFT warm start), keyed by `step`."""

    def on_generations(self, rows: list[MetricsRow], **info: Any) -> None:
        """Sampled completions of a step (`[logging] log_generations`)."""

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        """One row per evaluation on the eval split."""

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        """Called after a checkpoint directory is complete (atomically renamed into place)."""

    def close(self, **info: Any) -> None:
        """The run ended (completed or failed): flush and release what the observer holds."""
