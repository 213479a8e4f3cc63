"""Helpers for campaign tests that start their own Ray processes (drivers, `ray start`, clusters).

Processes are started with `start_new_session=True`; cleanup kills exactly the processes of that
session (the session id is the leader's pid) plus any process whose command line names the Ray
temp dir the test created, and nothing else: never `ray stop`, never a kill by name.

The kill-and-resume scaffolding of tests/campaign/test_campaign_resume.py, tests/campaign/test_campaign_bounded_copies.py
and tests/fault_scenarios.py: `kill_driver_when` (start tests/campaign_driver.py, wait, SIGKILL),
`run_to_end` (the same or another command again, to its end), `rows_logged`, `steps_once`; for a test,
`kill_campaign_when` (the driver killed, or the test fails with its log) and `resume_campaign`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from helpers import wait_for

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
    """The manifest as JSON, its pending run events folded in (logs/manifest_events.py); None while absent."""
    from retrain_ray.logs.manifest import manifest_text
    from retrain_ray.logs.manifest import read_manifest as read_record

    try:
        return json.loads(manifest_text(read_record(campaign_dir), {}))
    except (OSError, ValueError):
        return None


# ---- a campaign driver killed, then run again -----------------------------------------------------------
def driver_cmd(toml: Path, root: Path, step_delay: float) -> list[str]:
    """tests/campaign_driver.py on `toml`, each step slowed by `step_delay` s."""
    return [PYTHON, str(REPO / "tests" / "campaign_driver.py"), str(toml), "--root", str(root),
            "--step-delay", str(step_delay)]


@contextmanager
def own_session(cmd: list[str], *, log: Path, prefix: str, cwd: Path = REPO,
                **env: str) -> Iterator[tuple[subprocess.Popen, Path]]:
    """Starts `cmd` in a new session with a Ray temp dir of its own (`isolated_env(..., **env)`); on
    leaving, kills every process of that session and temp dir and removes the dir."""
    ray_tmp = short_temp_dir(prefix)
    try:
        proc = start(cmd, env=isolated_env(ray_tmp, **env), log=log, cwd=cwd)
    except BaseException:
        remove_temp_dir(ray_tmp)
        raise
    try:
        yield proc, ray_tmp
    finally:
        kill_owned(proc.pid, ray_tmp)
        remove_temp_dir(ray_tmp)


def kill_driver_when(ready: Callable[[], object], cmd: list[str], *, log: Path, prefix: str, timeout_s: float,
                     what: str, poll_s: float = 0.2, **env: str) -> int | None:
    """Runs `cmd` (a driver; `env`: extra environment) in its own session and Ray until `ready()` is
    true, then SIGKILLs it and every process of its session and Ray temp dir. Returns None, or the
    driver's exit code when it ended before `ready()` was (no fault was injected then)."""
    with own_session(cmd, log=log, prefix=prefix, **env) as (proc, _):
        wait_for(lambda: ready() or proc.poll() is not None, timeout_s=timeout_s, what=what, poll_s=poll_s)
        ended = proc.poll()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    return ended


def run_to_end(cmd: list[str], *, log: Path, prefix: str, timeout_s: float, cwd: Path = REPO,
               **env: str) -> tuple[int | None, list[int]]:
    """Runs `cmd` in its own session and Ray temp dir to its end, then waits up to 30 s for that session
    and temp dir to empty. Returns (exit code, None after `timeout_s`; pids still alive then); whatever
    is left is killed and the temp dir removed."""
    with own_session(cmd, log=log, prefix=prefix, cwd=cwd, **env) as (proc, ray_tmp):
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None, owned_pids(proc.pid, ray_tmp)
        try:
            wait_for(lambda: not owned_pids(proc.pid, ray_tmp), timeout_s=30, what="the driver's Ray to exit")
        except TimeoutError:
            return rc, owned_pids(proc.pid, ray_tmp)
        return rc, []


def kill_campaign_when(ready: Callable[[], object], toml: Path, root: Path, step_delay: float, *, prefix: str,
                       timeout_s: float, what: str, **kwargs: Any) -> None:
    """`kill_driver_when` for the campaign driver of `toml` (log: root/driver1.log); fails the test with the
    end of that log when the driver ended before `ready()` was true. `kwargs`: poll_s and environment."""
    log = root / "driver1.log"
    ended = kill_driver_when(ready, driver_cmd(toml, root, step_delay), log=log, prefix=prefix, timeout_s=timeout_s,
                             what=what, **kwargs)
    assert ended is None, log.read_text()[-3000:]


def resume_campaign(campaign_dir: Path, root: Path, *, prefix: str, timeout_s: float) -> tuple[int | None, list[int], str]:
    """`retrain-ray resume campaign_dir` to its end (log: root/driver2.log): `run_to_end`'s exit code and
    pids left, and the text of that log."""
    log = root / "driver2.log"
    rc, left = run_to_end([PYTHON, "-m", "retrain_ray.cli", "resume", str(campaign_dir)], log=log, prefix=prefix,
                          timeout_s=timeout_s)
    return rc, left, log.read_text()


def manifest_runs(campaign_dir: Path) -> dict[str, dict] | None:
    """The manifest's runs by name (None before the manifest is written)."""
    manifest = read_manifest(campaign_dir)
    return None if manifest is None else {r["run_name"]: r for r in manifest["runs"]}


def rows_logged(campaign_dir: Path) -> int:
    """Step rows logged so far by all runs of the campaign (a torn or half-written stream counts 0)."""
    from retrain_ray.logs import read_stream

    total = 0
    for run_dir in (campaign_dir / "runs").glob("*") if (campaign_dir / "runs").is_dir() else []:
        try:
            total += read_stream(run_dir).num_rows
        except (OSError, ValueError):
            continue
    return total


def steps_once(run_dir: Path, steps: int) -> str:
    """'' when the run's log holds every step 0..steps-1 exactly once after de-duplication and no other."""
    from retrain_ray.logs import read_stream

    try:
        logged = read_stream(run_dir)["step"].to_pylist()
    except (OSError, ValueError) as exc:
        return f"log unreadable: {exc}"
    return "" if logged == list(range(steps)) else f"steps logged {logged}"


def run_rows(run_dir: Path) -> int:
    """Rows in a run's log so far (0 while it has none or cannot be read yet)."""
    from retrain_ray.logs import read_stream

    try:
        return read_stream(run_dir).num_rows
    except (OSError, ValueError):
        return 0


def continue_command(text: str) -> list[str] | None:
    """The command an interrupted command printed to go on (`continue with: retrain-ray ...`, or `start it again
    with: retrain-ray ... --overwrite` when it stopped before its first checkpoint), as this interpreter runs it."""
    found = re.search(r"(?:continue with|start it again with): (retrain-ray .+)", text)
    return [PYTHON, "-m", "retrain_ray.cli", *shlex.split(found.group(1))[1:]] if found else None


def segment_steps(path: Path) -> list[int]:
    """Steps in one Arrow stream segment (a killed writer may have left a partial last batch)."""
    import pyarrow as pa

    steps = []
    with pa.OSFile(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        try:
            for batch in reader:
                steps += batch.column("step").to_pylist()
        except (pa.ArrowInvalid, OSError):
            pass
    return steps


# ---- the real CLI in a working directory of its own, with steps slowed by a reward plugin ------------------
def cli_cmd(*args: str) -> list[str]:
    """`retrain-ray ARGS` as this interpreter runs it (the repository's code, from any working directory)."""
    return [PYTHON, "-m", "retrain_ray.cli", *args]


def repo_path() -> str:
    """PYTHONPATH with the repository first: a CLI started in another working directory runs this code."""
    return os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p)


def cli_env(ray_tmp: Path) -> dict[str, str]:
    """`isolated_env` with `repo_path()`, for a CLI started in another working directory."""
    return isolated_env(ray_tmp, PYTHONPATH=repo_path())


def slow_workdir(workdir: Path) -> Path:
    """`workdir` with tests/fixtures/plugins/slow_reward.py in its `plugins/` (the default `[plugins] search_paths`): a
    config there with `reward = {type = "slow_reward.make"}` takes about 20 ms per completion."""
    (workdir / "plugins").mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / "tests" / "fixtures" / "plugins" / "slow_reward.py", workdir / "plugins" / "slow_reward.py")
    return workdir


def run_scenario(script: str, out: Path, *, prefix: str, timeout_s: float) -> dict:
    """Runs `python tests/<script> OUT` in its own session and Ray temp dir (a simulated Cluster cannot share
    the test session's Ray), kills whatever of it is left, and returns the last JSON line it printed."""
    ray_tmp = short_temp_dir(prefix)
    log = out / "scenario.log"
    proc = start([PYTHON, f"tests/{script}", str(out)], env=isolated_env(ray_tmp), log=log)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    finally:
        kill_owned(proc.pid, ray_tmp)
        remove_temp_dir(ray_tmp)
    text = log.read_text()
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    assert proc.returncode == 0 and lines, text[-4000:]
    return json.loads(lines[-1])
