"""Ctrl-C and SIGTERM at the command line: one graceful stop, the exit code a shell expects.

`sigterm_as_ctrl_c()` makes SIGTERM do what Ctrl-C does at that moment: it calls SIGINT's current
handler, which is Python's (raise `KeyboardInterrupt`) in `train`, and Ray Tune's graceful stop while a
campaign's `Tuner.fit()` runs (Tune then checkpoints its experiment state and returns). Without it,
SIGTERM ended the process at once, leaving no word of where it stopped. A command stopped either way
exits 128 + the signal: 130 for Ctrl-C, 143 for SIGTERM.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

INTERRUPTED_EXIT = 128 + signal.SIGINT  # 130, what a shell reports for a command ended by Ctrl-C
TERMINATED_EXIT = 128 + signal.SIGTERM  # 143


class Stops:
    """The stop signals a command received (SIGTERM is counted here; Ctrl-C is Python's or Tune's)."""

    def __init__(self) -> None:
        self.terminated = False

    def exit_code(self) -> int:
        return TERMINATED_EXIT if self.terminated else INTERRUPTED_EXIT

    def name(self) -> str:
        return "SIGTERM" if self.terminated else "Ctrl-C (SIGINT)"


@contextmanager
def sigterm_as_ctrl_c() -> Iterator[Stops]:
    """SIGTERM calls SIGINT's handler of the moment for the body of the `with` (main thread only)."""
    stops = Stops()
    if threading.current_thread() is not threading.main_thread():
        yield stops
        return

    def on_sigterm(signum: int, frame: FrameType | None) -> None:
        stops.terminated = True
        handler = signal.getsignal(signal.SIGINT)
        if callable(handler):
            handler(signal.SIGINT, frame)
        else:  # SIG_IGN or SIG_DFL for SIGINT: a SIGTERM still stops the command
            raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        yield stops
    finally:
        signal.signal(signal.SIGTERM, previous)
