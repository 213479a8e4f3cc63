"""Ctrl-C, SIGTERM and SIGHUP at the command line: one graceful stop, the exit code a shell expects.

`sigterm_as_ctrl_c()` makes SIGTERM and SIGHUP do what Ctrl-C does at that moment: they call SIGINT's
current handler, which is Python's (raise `KeyboardInterrupt`) in `train`, and Ray Tune's graceful stop while
a campaign's `Tuner.fit()` runs (Tune then checkpoints its experiment state and returns). Without it,
SIGTERM ended the process at once, leaving no word of where it stopped. A command stopped so exits 128 +
the signal: 130 for Ctrl-C, 143 for SIGTERM (a scheduler's stop, a Kubernetes eviction, `ray job stop`),
129 for SIGHUP (a closed terminal or SSH session).

`ray.init` installs its own SIGTERM handler (kill the local Ray, exit 1: no checkpoint, the manifest left
`running`): the campaign driver puts these handlers back once Ray is up (`restore_stop_handlers` in
campaign/driver.py).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTED_EXIT = 128 + signal.SIGINT  # 130, what a shell reports for a command ended by Ctrl-C
TERMINATED_EXIT = 128 + signal.SIGTERM  # 143
HUNG_UP_EXIT = 128 + signal.SIGHUP  # 129
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # answered like Ctrl-C
_NAMES = {signal.SIGTERM: "SIGTERM", signal.SIGHUP: "SIGHUP"}


class Stops:
    """The stop signals a command received (SIGTERM and SIGHUP are counted here; Ctrl-C is Python's or Tune's)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    @property
    def terminated(self) -> bool:
        return self.signum is not None

    def exit_code(self) -> int:
        return 128 + self.signum if self.signum is not None else INTERRUPTED_EXIT

    def name(self) -> str:
        return _NAMES.get(signal.Signals(self.signum), "SIGTERM") if self.signum is not None else "Ctrl-C (SIGINT)"


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[Stops]:
    """SIGTERM and SIGHUP call SIGINT's handler of the moment for the body of the `with` (main thread only)."""
    stops = Stops()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return

    def on_stop(signum: int, frame: FrameType | None) -> None:
        if stops.signum is None:  # the first one names the stop (a group's SIGHUP may follow a SIGTERM)
            stops.signum = signum
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIG_IGN or SIG_DFL for SIGINT: the signal still stops the command
            raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, on_stop) for signum in STOP_SIGNALS}
    try:
        yield stops
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)

