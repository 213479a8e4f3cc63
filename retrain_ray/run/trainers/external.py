"""Runners that train outside the RunLoop: `trainer = "command"` and dotted-path plugin runners.

Both get a folder of their own, `<run dir>/trainer/` (their `log_dir`), so what they write never collides
with the run's Arrow logs and the `metrics.jsonl` mirror retrain-ray writes next to them.

* `trainer = "command"` (the original's CommandRunner): the run's config is written as JSON to
  `<run dir>/trainer/retrain_config.json` (the original's flat field names, with `log_dir` and
  `adapter_path` the run's own, plus the sectioned config under `"retrain_ray"`; secret values redacted:
  pass secrets through the environment). `trainer_command` is formatted with `{config_path}`, `{log_dir}`,
  `{adapter_path}` and `{model}`, each value shell-quoted (so write `--out {adapter_path}`, not
  `'{adapter_path}'`), and run through `/bin/sh -c` as the original does (pipes, `&&` and `$VARS` work) in
  the working directory of the process (in a campaign a trial's is Ray's: use absolute paths). Its stdout
  and stderr go to the console and to `trainer/stdout.log` / `trainer/stderr.log`. It runs until it exits, in
  a process group of its own: a run stopped meanwhile stops it and its children (SIGTERM, then SIGKILL).
* a dotted path `package.module:Class` (or `package.module.Class`): the class is built without arguments
  (an object with a `run` method is used as it is) and `run(config)` is called with the config under the
  original's flat field names (config/key_names.py), `log_dir` and `adapter_path` the run's own.

A runner that writes `<log_dir>/metrics.jsonl` (one JSON object per step, with an integer `step`) has its
rows in the run's logs: the command's are read while it runs, a plugin's when `run` returns. Numeric keys
keep their names (unknown ones land in the `extras` map, as every metric does); non-numeric values other
than the log's own string columns are dropped.

Outcome, as the original's: a command that exits non-zero fails the run (`TrainerCommandError` with its exit
code and the last lines of its stderr); a command that exits 0 without an adapter at `{adapter_path}`, or a
plugin whose `run` returns no path, fails it too (`MissingPolicyError`, the original's "missing_policy_ref").
A campaign marks such a run failed like any other failure. A retry starts the runner again from scratch
(retrain-ray has no checkpoint of an external trainer to resume from).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, cast

from retrain_ray.config.key_names import FIELD_INDEX, OriginalConfigView
from retrain_ray.logs.schemas import row_to_record  # pyright: ignore[reportUnknownVariableType]  (pyarrow)
from retrain_ray.plugins.loader import load_object
from retrain_ray.run.types import RunObserver, RunOutcome
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

log = logging.getLogger(__name__)

TRAINER_DIR = "trainer"
CONFIG_FILE = "retrain_config.json"
RUNNER_METRICS = "metrics.jsonl"
STDERR_TAIL = 20
POLL_S = 0.5
STOP_GRACE_S = 10.0
_RESERVED = frozenset({"run", "step", "condition", "wall_time", "extras"})  # ours: the row's identity


class ExternalRunnerError(RuntimeError):
    """An external runner failed: the run fails with this message (the CLI prints it without a traceback)."""


class TrainerCommandError(ExternalRunnerError):
    """The trainer command exited non-zero."""

    def __init__(self, returncode: int, command: str, stderr_tail: list[str]) -> None:
        self.returncode, self.command, self.stderr_tail = returncode, command, stderr_tail
        tail = "\n".join(f"  | {line}" for line in stderr_tail) or "  (no output on stderr)"
        super().__init__(f"[training] trainer_command exited with status {returncode}: {command}\n"
                         f"last lines of its stderr:\n{tail}")

    def __reduce__(self) -> tuple[type[TrainerCommandError], tuple[int, str, list[str]]]:
        """Rebuilt from its own fields: Ray and Tune pickle and copy a trial's exception."""
        return type(self), (self.returncode, self.command, self.stderr_tail)


class MissingPolicyError(ExternalRunnerError):
    """The external runner finished without the adapter it should have written (the original's "missing_policy_ref")."""


@dataclass(frozen=True)
class ExternalRun:
    """One external runner's run: where it writes, and what its rows are labelled with."""

    config: RetrainConfig  # `logging.log_dir` is the runner's folder, `backend.adapter_path` the run's adapter
    run_name: str
    condition: str
    observer: RunObserver

    @property
    def log_dir(self) -> Path:
        return Path(self.config.logging.log_dir)

    @property
    def adapter_path(self) -> Path:
        return Path(self.config.backend.adapter_path).expanduser()


def external_run(config: RetrainConfig, *, run_name: str, run_dir: Path, condition: str,
                 observer: RunObserver) -> ExternalRun:
    """The runner's view of the run: its own folder under `run_dir` as `log_dir`."""
    folder = run_dir / TRAINER_DIR
    folder.mkdir(parents=True, exist_ok=True)
    cfg = config.model_copy(update={"logging": config.logging.model_copy(update={"log_dir": str(folder)})})
    return ExternalRun(cfg, run_name, condition, observer)


def run_external(run: ExternalRun, runner: Callable[[ExternalRun, RowFeed], Path]) -> RunOutcome:
    """Runs the command or the plugin runner (`runner`, the trainer's spec's); raises when it fails (see the module
    docstring)."""
    rows = RowFeed(run.log_dir / RUNNER_METRICS, run)
    adapter = runner(run, rows)
    return RunOutcome(run.run_name, "completed", rows.last_step, rows.last_row, adapter)


def run_command_runner(run: ExternalRun, rows: RowFeed) -> Path:
    """`trainer = "command"`: the command to its end; the adapter it wrote at `{adapter_path}`."""
    run_command(run, rows)
    if not run.adapter_path.exists():
        raise MissingPolicyError(f"[training] trainer_command exited 0 but wrote no adapter at {run.adapter_path} "
                                 "({adapter_path}); save the trained adapter there")
    return run.adapter_path


def run_plugin_runner(run: ExternalRun, rows: RowFeed) -> Path:
    """A dotted-path runner: its `run(config)`, then the rows it wrote."""
    adapter = run_plugin(run)
    rows.feed()
    return adapter


# ---- the command ---------------------------------------------------------------------------------
def config_json(run: ExternalRun) -> dict[str, object]:
    """The original's flat fields (what its commands read) plus our sectioned config, secrets redacted."""
    cfg = run.config
    view = OriginalConfigView(cfg)
    flat = {name: getattr(view, name) for name in FIELD_INDEX}
    return redact({**flat, "log_dir": cfg.logging.log_dir, "adapter_path": cfg.backend.adapter_path,
                   "retrain_ray": cfg.model_dump(mode="json")})


def command_line(run: ExternalRun, config_path: Path) -> str:
    """`trainer_command` with its placeholders replaced by shell-quoted values."""
    values = {"config_path": str(config_path), "log_dir": str(run.log_dir), "adapter_path": str(run.adapter_path),
              "model": run.config.model.model}
    return run.config.training.trainer_command.format(**{k: shlex.quote(v) for k, v in values.items()})


def run_command(run: ExternalRun, rows: RowFeed) -> None:
    """Runs the command to its end, streaming its output and feeding its metrics rows as they appear."""
    config_path = run.log_dir / CONFIG_FILE
    config_path.write_text(json.dumps(config_json(run), indent=2, default=str) + "\n", encoding="utf-8")
    command = command_line(run, config_path)
    log.info("%s: running trainer command: %s", run.run_name, command)
    env = {**os.environ, "RETRAIN_RAY_RUN_NAME": run.run_name, "RETRAIN_RAY_LOG_DIR": str(run.log_dir)}
    # its own process group, so that stopping the run stops everything the shell started
    proc = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,  # noqa: S602
                            text=True, errors="replace", start_new_session=True)
    stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL)
    pumps = [_pump(cast("IO[str]", proc.stdout), run.log_dir / "stdout.log", sys.stdout, None),
             _pump(cast("IO[str]", proc.stderr), run.log_dir / "stderr.log", sys.stderr, stderr_tail)]
    try:
        while proc.poll() is None:
            rows.feed()
            time.sleep(POLL_S)
    except BaseException:  # interrupted (Ctrl-C, a trial stopped): the command does not outlive the run
        _stop(proc)
        raise
    finally:
        for pump in pumps:  # a background child of the command may hold its output open: not waited for long
            pump.join(timeout=STOP_GRACE_S)
    rows.feed()
    if proc.returncode != 0:
        raise TrainerCommandError(proc.returncode, command, list(stderr_tail))


def _stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM to the command's process group, SIGKILL after `STOP_GRACE_S`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=STOP_GRACE_S)
            return
        except subprocess.TimeoutExpired:
            continue


def _pump(source: IO[str], path: Path, echo: IO[str], tail: deque[str] | None) -> threading.Thread:
    """A thread copying `source` line by line to `path` and `echo` (and the last lines to `tail`)."""
    def copy() -> None:
        with source, path.open("a", encoding="utf-8") as out:
            for line in source:
                out.write(line)
                out.flush()
                echo.write(line)
                if tail is not None:
                    tail.append(line.rstrip("\n"))
        echo.flush()

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread


# ---- plugin runners ------------------------------------------------------------------------------
def run_plugin(run: ExternalRun) -> Path:
    """Builds the runner `[training] trainer` names and runs it; the adapter path it returns."""
    path = run.config.training.trainer
    obj = load_object(path, "[training] trainer")
    runner = obj() if isinstance(obj, type) else obj
    run_method = getattr(runner, "run", None)
    if not callable(run_method):
        raise TypeError(f"[training] trainer = {path!r}: {type(runner).__name__} has no run(config) method; a runner "
                        "class defines run(config) -> adapter path (str) or None")
    result = cast("Callable[[object], object]", run_method)(OriginalConfigView(run.config))
    result = getattr(result, "policy_ref", result)  # the original's later TrainingRunResult carries it there
    if not result:
        raise MissingPolicyError(f"[training] trainer = {path!r}: run(config) returned {result!r}, not the path of "
                                 "the trained adapter")
    return Path(str(result))


# ---- the runner's metrics rows -------------------------------------------------------------------
class RowFeed:
    """Reads the complete lines a runner appended to its metrics.jsonl and hands them to the run's observer."""

    def __init__(self, path: Path, run: ExternalRun) -> None:
        self.path = path
        self.run = run
        self.offset = 0
        self.last_step = -1
        self.last_row: dict[str, object] = {}
        self.skipped = 0
        self.lines = 0

    def feed(self) -> None:
        for number, line in self._new_lines():
            row = runner_row(line, self.run.condition)
            if row is None:
                self.skipped += 1
                if self.skipped == 1:
                    log.warning("%s: %s line %d is not a JSON object with an integer step; skipped (and any "
                                "more such lines)", self.run.run_name, self.path, number)
                continue
            self.run.observer.on_step(row)
            self.last_step, self.last_row = cast("int", row["step"]), row

    def _new_lines(self) -> Iterator[tuple[int, str]]:
        if not self.path.is_file():
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits for its newline
        self.offset += len(complete)
        for raw in complete.decode("utf-8", errors="replace").splitlines():
            self.lines += 1
            if raw.strip():
                yield self.lines, raw


def runner_row(line: str, condition: str) -> dict[str, object] | None:
    """One line of a runner's metrics.jsonl as a metrics row, or None when it is not one."""
    try:
        parsed: object = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    data = cast("dict[str, object]", parsed)
    step = data.get("step")
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        return None
    row: dict[str, object] = {"condition": condition, "step": step}
    row.update((key, value) for key, value in data.items() if key not in _RESERVED and _fits(key, value))
    return row


def _fits(key: str, value: object) -> bool:
    """Whether the metrics log takes `value` under `key` (a typed column, or a number for `extras`)."""
    if value is None or isinstance(value, (dict, list)):
        return False
    try:
        row_to_record({key: value})
    except (TypeError, ValueError):
        return False
    return True
