"""Helpers for campaign tests that start their own Ray processes (drivers, `ray start`, clusters).

Processes are started with `start_new_session=True`; cleanup kills exactly the processes of that
session (the session id is the leader's pid) plus any process whose command line names the Ray
temp dir the test created, and nothing else: never `ray stop`, never a kill by name.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYTHON = sys.executable


def short_temp_dir(prefix: str) -> Path:
    """A Ray temp dir with a short path (Ray's socket paths must stay under ~107 characters)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))


def isolated_env(ray_tmp: Path, **extra: str) -> dict[str, str]:
    """Environment for a child driver: no RAY_ADDRESS (so it cannot join this session's Ray), its own
    Ray temp dir, auth disabled, offline."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(ray_tmp), RAY_AUTH_MODE="disabled", HF_HUB_OFFLINE="1",
               RAY_USAGE_STATS_ENABLED="0", PYTHONUNBUFFERED="1", **extra)
    return env


def _stat_session(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(text.rsplit(")", 1)[1].split()[3])  # fields after "(comm)": state ppid pgrp session


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned_pids(session_id: int, ray_tmp: Path | None = None) -> list[int]:
    """Live (not zombie) PIDs in the session we started, or whose command line names our Ray temp dir."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        pid = int(entry)
        ours = _stat_session(pid) == session_id or (ray_tmp is not None and str(ray_tmp) in _cmdline(pid))
        if ours and _state(pid) not in (None, "Z"):
            found.append(pid)
    return found


def kill_owned(session_id: int, ray_tmp: Path | None = None, timeout_s: float = 20.0) -> list[int]:
    """SIGKILLs the processes `owned_pids` finds until none is left (or the timeout); returns them."""
    killed: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = owned_pids(session_id, ray_tmp)
        if not alive:
            return sorted(killed)
        for pid in alive:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.2)
    raise TimeoutError(f"processes of session {session_id} still alive after {timeout_s} s")


def remove_temp_dir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def start(cmd: list[str], *, env: dict[str, str], log: Path, cwd: Path = REPO) -> subprocess.Popen:
    """Starts `cmd` in a new session, stdout+stderr to `log`."""
    fh = open(log, "w")  # noqa: SIM115 (closed with the process by the caller's wait)
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def read_manifest(campaign_dir: Path) -> dict | None:
    try:
        return json.loads((campaign_dir / "manifest.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None
