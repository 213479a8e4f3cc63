"""vLLM's log lines go to the run's `vllm.log`, not the console.

vLLM logs through the `vllm` logger hierarchy and, unless `VLLM_CONFIGURE_LOGGING=0`, gives that logger
a handler that prints INFO and up on stdout: some twenty start-up lines, in the middle of a run's
progress bar. Once an embedded engine is wanted (`take_over_vllm_logging`, called before vLLM is
imported), the product owns that logger:

* `VLLM_CONFIGURE_LOGGING` defaults to 0, so vLLM adds no console handler (one it added already, when
  vLLM was imported first, is removed);
* records at `VLLM_LOGGING_LEVEL` (INFO unless set) and up go to `<run dir>/vllm.log` once the run
  names it (`log_vllm_to`); records from before (vLLM's import, or a process that never names a file)
  are held, the last `HELD_RECORDS` of them, and written first;
* ERROR and up also go to stderr: an engine that fails still says so on the console;
* vLLM's FutureWarnings (deprecated torch names it uses) are not shown.

`VLLM_CONFIGURE_LOGGING=1` in the environment keeps vLLM's own console logging instead.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections import deque
from pathlib import Path

VLLM_LOG_FILE = "vllm.log"
HELD_RECORDS = 1000
_FORMAT = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")


class _RunLogHandler(logging.Handler):
    """Writes to the run's file once there is one; holds the records that come before it."""

    def __init__(self) -> None:
        super().__init__()
        self._file: logging.FileHandler | None = None
        self._held: deque[logging.LogRecord] = deque(maxlen=HELD_RECORDS)

    def emit(self, record: logging.LogRecord) -> None:
        if self._file is None:
            self._held.append(record)
        else:
            self._file.handle(record)

    def open(self, path: Path | None) -> None:
        """Writes to `path` from now on, the held records first; None: holds the records again."""
        new = _file_handler(path) if path is not None else None
        self.acquire()
        try:
            old, self._file = self._file, new
            if new is not None:
                for record in self._held:
                    new.handle(record)
                self._held.clear()
        finally:
            self.release()
        if old is not None:
            old.close()

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def _file_handler(path: Path) -> logging.FileHandler:
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, encoding="utf-8", delay=True)  # appends; no file until a record comes
    handler.setFormatter(_FORMAT)
    return handler


class _Stderr(logging.StreamHandler):  # pyright: ignore[reportMissingTypeArgument]
    """stderr as it is when a record comes (tests and the CLI may have replaced it since start-up)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


_run_log = _RunLogHandler()
_errors = _Stderr()
_errors.setLevel(logging.ERROR)
_errors.setFormatter(logging.Formatter("vLLM %(levelname)s %(name)s: %(message)s"))


def take_over_vllm_logging() -> bool:
    """Routes the `vllm` logger to the run's log file (see the module docstring); False when the user keeps
    vLLM's own console logging (`VLLM_CONFIGURE_LOGGING=1`). Idempotent."""
    if os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0") != "0":
        return False
    logger = logging.getLogger("vllm")
    for handler in list(logger.handlers):
        if handler not in (_run_log, _errors):
            logger.removeHandler(handler)  # vLLM's stdout handler, from an import before this call
    for handler in (_run_log, _errors):
        if handler not in logger.handlers:
            logger.addHandler(handler)
    logger.setLevel(os.environ.get("VLLM_LOGGING_LEVEL", "INFO").upper())
    logger.propagate = False
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"vllm\.")
    return True


def log_vllm_to(path: Path | None) -> None:
    """vLLM's records of this process go to `path` from now on (and those held so far, first); None: the
    run is over, hold them again."""
    _run_log.open(path)
