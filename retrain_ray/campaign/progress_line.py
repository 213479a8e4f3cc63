"""One progress line for the whole campaign, printed by the driver (a Tune callback).

On a terminal the line is redrawn in place every `tty_every_s`; off a terminal (`ray job logs`, CI,
a pipe) a new line is printed every `log_every_s`, so job logs show progress without flooding. The
line is `retrain-ray status`'s summary: runs done / running / failed / pending and the campaign ETA
from the runs' recent step times (retrain_ray/results/status.py). Reading it never stops a campaign:
a failure to read the logs skips that line.

An adaptive campaign's runs that wait at a rung are named on it (`paused at rung 120: grpo+none_s1,
maxrl+none_s1 (waiting for maxrl+none_s2)`, `paused_summary`): the scheduler writes `paused_at_rung` and
`paused_why` into each run's manifest entry as it pauses the run and clears them as it resumes it
(campaign/adaptive/scheduler.py).
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from ray.tune import Callback
from ray.tune.experiment import Trial

from retrain_ray.logs.manifest import RunRecord, read_manifest
from retrain_ray.results.live import summary_line
from retrain_ray.results.status import campaign_status

log = logging.getLogger(__name__)
TTY_EVERY_S = 2.0
LOG_EVERY_S = 30.0


class CampaignProgress(Callback):
    def __init__(self, campaign_dir: Path, *, stream: TextIO | None = None, tty_every_s: float = TTY_EVERY_S,
                 log_every_s: float = LOG_EVERY_S) -> None:
        self.campaign_dir = Path(campaign_dir)
        self.stream = stream
        self.tty_every_s = tty_every_s
        self.log_every_s = log_every_s
        self._last: float | None = None  # the first call always shows (monotonic time starts at boot)
        self._drawn = False

    def __getstate__(self) -> dict[str, object]:  # Tune pickles callbacks with its experiment state
        return {**self.__dict__, "stream": None}

    def _out(self) -> TextIO:
        return self.stream or sys.stdout

    def _tty(self) -> bool:
        isatty = getattr(self._out(), "isatty", None)
        return bool(isatty and isatty())

    def line(self) -> str:
        paused = paused_summary(read_manifest(self.campaign_dir).runs)  # an adaptive campaign's runs at a rung
        return "[campaign] " + summary_line(campaign_status(self.campaign_dir, running_only=True)) + paused

    def on_step_end(self, iteration: int, trials: list[Trial], **info: object) -> None:
        every = self.tty_every_s if self._tty() else self.log_every_s
        if self._last is not None and time.monotonic() - self._last < every:
            return
        self._last = time.monotonic()
        self.show()

    def show(self) -> None:
        try:
            text = self.line()
        except Exception as exc:  # progress is cosmetic; the campaign goes on
            log.debug("campaign progress line skipped: %s", exc)
            return
        out = self._out()
        if self._tty():
            out.write("\r\x1b[2K" + text)
            self._drawn = True
        else:
            out.write(text + "\n")
        out.flush()

    def on_experiment_end(self, trials: list[Trial], **info: object) -> None:
        self.show()
        if self._drawn:
            self._out().write("\n")
            self._out().flush()


PAUSED_KEYS = ("paused_at_rung", "paused_why")


def paused_at(run: RunRecord) -> int | None:
    """The rung `run` waits at (None: not paused)."""
    rung = getattr(run, "paused_at_rung", None)
    return rung if isinstance(rung, int) and run.status not in ("completed", "stopped", "failed") else None


def paused_summary(runs: Iterable[RunRecord]) -> str:
    """`; paused at rung R: run, run (why)` per rung with paused runs; "" when none is."""
    by_rung: dict[int, list[RunRecord]] = {}
    for run in runs:
        rung = paused_at(run)
        if rung is not None:
            by_rung.setdefault(rung, []).append(run)
    parts: list[str] = []
    for rung, paused in sorted(by_rung.items()):
        why = str(getattr(paused[-1], "paused_why", "") or "")
        waiting = why.split(" for ", 1)[1] if " for " in why else "the decision"
        parts.append(f"paused at rung {rung}: {', '.join(r.run_name for r in paused)} (waiting for {waiting})")
    return "".join(f"; {p}" for p in parts)
