"""Fault scenarios of the command line (issue 26): a `retrain-ray train` interrupted at a random step by
Ctrl-C or SIGTERM, and a second writer started on a run directory in use at a random moment.

Like tests/fault_scenarios.py, each function takes (trials, rng, root) and returns one `Trial` per trial
with its invariant checked; benchmarks/faults.py repeats them and tests/campaign/test_faults.py runs each once.
Steps are slowed by tests/fixtures/plugins/slow_reward.py so a random step can be hit on a loaded machine.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from campaign_helpers import (
    cli_cmd,
    cli_env,
    continue_command,
    remove_temp_dir,
    run_rows,
    short_temp_dir,
    slow_workdir,
    start,
    steps_once,
)
from fault_scenarios import Trial
from helpers import TINY_RUN, wait_for, write_config

from retrain_ray.logs import read_stream

STEPS = 8
SIGNALS = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class SlowTrain:
    """A `retrain-ray train` of STEPS slowed steps running in its own working directory."""

    proc: subprocess.Popen
    work: Path
    run_dir: Path
    ray_tmp: Path
    log: Path

    def output(self) -> str:
        return self.log.read_text()


@contextmanager
def slow_train(root: Path, *, after_rows: int) -> Iterator[SlowTrain]:
    """Starts the run and yields once it has logged `after_rows` rows; ends it on the way out."""
    work = slow_workdir(root)
    toml = write_config(work / "run.toml", base=TINY_RUN, reward={"type": "slow_reward.make"},
                        training={"max_steps": STEPS, "save_every": 2}, logging={"log_dir": "logs/run"})
    run_dir, ray_tmp, log = work / "logs" / "run", short_temp_dir("rfc"), root / "train.log"
    proc = start(cli_cmd("train", str(toml), "--quiet"), env=cli_env(ray_tmp), log=log, cwd=work)
    try:
        wait_for(lambda: run_rows(run_dir) >= after_rows or proc.poll() is not None, timeout_s=240,
                 what=f"{after_rows} rows")
        yield SlowTrain(proc, work, run_dir, ray_tmp, log)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        remove_temp_dir(ray_tmp)


def _interrupt_once(root: Path, at_rows: int, signum: int) -> Trial:
    with slow_train(root, after_rows=at_rows) as train:
        if train.proc.poll() is not None:
            return Trial(False, None, f"finished before the signal: {train.output()[-2000:]}")
        os.killpg(train.proc.pid, signum)  # as a terminal's Ctrl-C does: the whole process group
        signalled = time.monotonic()
        rc = train.proc.wait(timeout=120)
    out = train.output()
    command = continue_command(out)
    if rc != 128 + signum or "Traceback" in out or command is None:
        return Trial(False, None, f"rc {rc} (want {128 + signum}), continue command {command}: {out[-2000:]}")
    resumed = subprocess.run(command, cwd=train.work, env=cli_env(root), capture_output=True, text=True, timeout=400)
    problem = steps_once(train.run_dir, STEPS)
    if resumed.returncode != 0 or problem:
        return Trial(False, None, f"continue: rc {resumed.returncode}, {problem}: {resumed.stderr[-2000:]}")
    name = signal.Signals(signum).name
    return Trial(True, time.monotonic() - signalled, f"{name} after {at_rows} rows: exit {rc}, continued, every step once")


def train_interrupt(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """Ctrl-C or SIGTERM at a random step: exit 130/143 with no traceback, and the printed command (a resume, or
    a fresh start when no checkpoint was saved yet) runs the run to its end with every step once."""
    return [_interrupt_once(root / f"t{i}", rng.randint(1, STEPS - 3), rng.choice(SIGNALS)) for i in range(trials)]


def _second_writer_once(root: Path, at_rows: int) -> Trial:
    with slow_train(root, after_rows=at_rows) as first:
        started = time.monotonic()
        second = subprocess.run(cli_cmd("train", str(first.work / "run.toml"), "--quiet", "--seed", "7"),
                                cwd=first.work, env=cli_env(first.ray_tmp), capture_output=True, text=True,
                                timeout=120)
        refused_s = time.monotonic() - started
        first_rc = first.proc.wait(timeout=300)
    out = " ".join((second.stdout + second.stderr).split())
    if second.returncode != 2 or "Traceback" in out or f"locked by pid {first.proc.pid}" not in out:
        return Trial(False, None, f"second writer: rc {second.returncode}: {out[-2000:]}")
    steps = read_stream(first.run_dir, key=None)["step"].to_pylist()
    if first_rc != 0 or steps != list(range(STEPS)):
        return Trial(False, None, f"first writer: rc {first_rc}, steps {steps}: {first.output()[-2000:]}")
    return Trial(True, refused_s, f"second writer after {at_rows} rows refused in {refused_s:.1f} s; one row per step")


def second_writer(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """A second `train` (another seed) on a run directory in use, at a random step: it exits 2 at once naming
    the holder and writes nothing; the first finishes with exactly one row per step."""
    return [_second_writer_once(root / f"t{i}", rng.randint(1, STEPS - 3)) for i in range(trials)]
