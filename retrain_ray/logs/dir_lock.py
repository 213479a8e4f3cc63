"""One writer per directory: an exclusive lock on a run's or a campaign's directory for the life of a process.

    with hold_directory(run_dir, what="run"):   # DirectoryInUse (naming the holder) if another process has it
        ...

The lock is `filelock`'s (an OS `flock` on `<dir>/.retrain-ray.lock`), taken without waiting. The kernel
releases it when its process ends, however it ends (kill -9 included), so a dead holder never blocks the
next writer. Next to it, `<dir>/.retrain-ray.holder.json` names the holder (pid, host, process start,
command) so a second writer can say who has the directory; it is removed on a clean release, so finding
one when the lock is free means the last holder died holding it: the directory is taken over with a
warning naming that process. On shared storage see docs/reliability.md ("One writer per directory").
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from retrain_ray.util.file_kinds import directory_problem
from retrain_ray.util.secrets import REDACTED, is_secret_name, scrub

LOCK_FILE = ".retrain-ray.lock"
HOLDER_FILE = ".retrain-ray.holder.json"
LOCK_FILES = frozenset({LOCK_FILE, HOLDER_FILE})

log = logging.getLogger(__name__)


class DirectoryInUse(Exception):
    """Another live process holds the directory's lock. The message names it and the ways out."""

    def __init__(self, directory: Path, what: str, holder: dict[str, Any] | None, fix: str = "") -> None:
        self.directory = directory
        self.holder = holder
        who = describe(holder) if holder else "a process that has not named itself yet (it is starting)"
        stop = f"stop it (`kill {holder['pid']}`" if holder and holder.get("pid") else "stop it ("
        on_host = f" on {holder['host']}" if holder and holder.get("host") != socket.gethostname() else ""
        super().__init__(
            f"{directory} is in use: {what} directory locked by {who}. Only one process may write a {what} "
            f"directory. Wait for it to finish, {stop}{on_host}; it can be continued afterwards), or "
            f"{fix or 'use another directory'}."
        )


def describe(holder: dict[str, Any]) -> str:
    """'pid 123 on host h, started 2026-11-24 10:00:00 (retrain-ray train a.toml)'."""
    started = holder.get("started_at")
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)) if isinstance(started, (int, float)) else "?"
    command = holder.get("command") or ""
    return (f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {when}"
            + (f" ({command})" if command else ""))


def _command() -> str:
    """This process's command line with secret-looking flag values and URL credentials redacted."""
    words, hide_next = [], False
    for arg in sys.argv:
        name, eq, _ = arg.partition("=")
        if hide_next:
            words.append(REDACTED)
        elif arg.startswith("--") and eq and is_secret_name(name):
            words.append(f"{name}={REDACTED}")
        else:
            words.append(scrub(arg))
        hide_next = arg.startswith("--") and not eq and is_secret_name(arg)
    return " ".join(words)


def _holder() -> dict[str, Any]:
    started = process_started_at()
    return {"pid": os.getpid(), "host": socket.gethostname(), "started_at": started or time.time(),
            "locked_at": time.time(), "command": _command()}


def read_holder(directory: Path) -> dict[str, Any] | None:
    """The holder file of `directory` (None when there is none or it cannot be read)."""
    try:
        data = json.loads((Path(directory) / HOLDER_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _gone(holder: dict[str, Any]) -> bool | None:
    """Whether the holder's process has ended: None when it ran on another host (this one cannot tell)."""
    if holder.get("host") != socket.gethostname():
        return None
    pid = holder.get("pid")
    started = process_started_at(pid) if isinstance(pid, int) and pid > 0 else None
    if started is None:
        return True
    return abs(started - float(holder.get("started_at") or 0)) > 2.0  # that pid is now another process


def _warn_takeover(directory: Path, what: str, holder: dict[str, Any]) -> None:
    gone = _gone(holder)
    state = {True: "which is gone (killed, or its machine stopped)",
             None: "on another host; its lock is released, so that process or its host has ended",
             False: "which is still running but no longer holds the lock"}[gone]
    log.warning("taking over %s directory %s: it was left locked by %s, %s", what, directory, describe(holder), state)


class DirLock:
    """The exclusive lock of one directory (created if missing). Not reentrant: one holder per process."""

    def __init__(self, directory: Path | str, *, what: str, fix: str = "") -> None:
        self.directory = Path(directory)
        self.what = what
        self.fix = fix
        self._lock: FileLock | None = None
        self._created = False

    def acquire(self) -> None:
        """Takes the lock at once or raises `DirectoryInUse`; a holder that died holding it is named in a warning."""
        problem = directory_problem(self.directory)
        if problem:
            raise NotADirectoryError(f"{self.what} directory {problem}: move the file away or "
                                     f"{self.fix or 'use another directory'}")
        self._created = not self.directory.exists()
        self.directory.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.directory / LOCK_FILE))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            raise DirectoryInUse(self.directory, self.what, read_holder(self.directory), self.fix) from None
        self._lock = lock
        previous = read_holder(self.directory)
        if previous is not None:
            _warn_takeover(self.directory, self.what, previous)
        holder_path = self.directory / HOLDER_FILE
        tmp = holder_path.with_name(f"{HOLDER_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(_holder(), indent=2))
        os.replace(tmp, holder_path)

    def release(self) -> None:
        """Removes the holder file, then unlocks; a directory this lock created and nothing else wrote to goes too."""
        if self._lock is None:
            return
        (self.directory / HOLDER_FILE).unlink(missing_ok=True)
        lock, self._lock = self._lock, None
        empty = self._created and {p.name for p in self.directory.iterdir()} <= LOCK_FILES
        if empty:  # unlinked while still held: a process that opened it meanwhile finds it gone and retries
            (self.directory / LOCK_FILE).unlink(missing_ok=True)
        lock.release()
        if empty:
            try:
                self.directory.rmdir()
            except OSError:
                pass  # something was written into it meanwhile: it stays


@contextmanager
def hold_directory(directory: Path | str, *, what: str, fix: str = "") -> Iterator[DirLock]:
    """`DirLock(directory).acquire()` for the body of the `with`; released however the body ends."""
    lock = DirLock(directory, what=what, fix=fix)
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


# When this process was created, as Unix time: what "time to first step" is measured from.
#
# Linux only (`/proc`): the process's start, in clock ticks since boot, placed on the wall clock through
# the current uptime. `/proc/stat`'s `btime` would be simpler but is whole seconds, which put start-up
# figures up to a second too high.
__all__ = ["process_started_at"]


def process_started_at(pid: int | None = None) -> float | None:
    """time.time() at which this process (or process `pid`) was created; None where /proc cannot tell."""
    try:
        ticks = int(Path(f"/proc/{pid or 'self'}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return None
    return time.time() - (uptime - ticks / os.sysconf("SC_CLK_TCK"))
