"""Fault scenarios of issue 34: SIGTERM to a campaign driver, its recorder actor killed, and a trial that Tune
errors while the other runs wait at an adaptive rung.

Like tests/fault_scenarios.py, each function takes (trials, rng, root) and returns one `Trial` per trial with
its invariant checked; benchmarks/faults.py repeats them and tests/campaign/test_faults.py runs each once.
`recorder_kill` and `adaptive_trial_error` run on the caller's Ray (>= 4 CPUs); `driver_sigterm` starts its own.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from campaign_helpers import (
    REPO,
    cli_cmd,
    continue_command,
    own_session,
    read_manifest,
    repo_path,
    rows_logged,
    run_to_end,
    slow_workdir,
    steps_once,
)
from fault_scenarios import Trial
from helpers import GRPO, TINY_RUN, wait_for, write_campaign

STEPS = 6
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextmanager
def _in_repo() -> Iterator[None]:
    """In the repository, for relative `[plugins] search_paths` (a dotted plugin under an absolute folder
    fails to import: issue 34, item 5, another engineer's)."""
    cwd = Path.cwd()
    os.chdir(REPO)
    try:
        yield
    finally:
        os.chdir(cwd)


# ---- 1. SIGTERM (or SIGHUP) to the driver's process group at a random step -----------------------------
def _sigterm_once(root: Path, at_rows: int, signum: int) -> Trial:
    work = slow_workdir(root)
    campaign = {"name": "termed", "seeds": [1, 2], "max_steps": STEPS, "parallel": False, "max_failures": 0,
                "trial_start_timeout_s": 120}
    toml = write_campaign(work / "termed.toml", base=TINY_RUN, campaign=campaign, conditions=(GRPO,),
                          reward={"type": "slow_reward.make"})
    cdir, log = root / "termed", root / "driver1.log"
    with own_session(cli_cmd(str(toml), "--root", str(root)), log=log, prefix="rfs", cwd=work,
                     PYTHONPATH=repo_path()) as (driver, _):
        wait_for(lambda: rows_logged(cdir) >= at_rows or driver.poll() is not None, timeout_s=300,
                 what=f"{at_rows} rows")
        if driver.poll() is not None:
            return Trial(False, None, f"the driver ended before the signal: {log.read_text()[-1500:]}")
        os.killpg(driver.pid, signum)
        signalled = time.monotonic()
        rc = driver.wait(timeout=180)
    out, manifest = log.read_text(), read_manifest(cdir) or {}
    command = continue_command(out)
    if rc != 128 + signum or "Traceback" in out or command is None or manifest.get("status") != "interrupted":
        return Trial(False, None, f"rc {rc} (want {128 + signum}), manifest {manifest.get('status')}, "
                     f"continue command {command}: {out[-1500:]}")
    rc, left = run_to_end(command, log=root / "driver2.log", prefix="rfs", timeout_s=400, cwd=work,
                          PYTHONPATH=repo_path())
    after = read_manifest(cdir) or {"runs": []}
    problems = [f"resume exit {rc}"] if rc != 0 else []
    problems += [f"left running: {left}"] if left else []
    problems += [p for r in after["runs"] if (p := steps_once(cdir / "runs" / r["run_name"], STEPS))]
    name = signal.Signals(signum).name
    return Trial(not problems, time.monotonic() - signalled,
                 f"{name} after {at_rows} rows: exit {128 + signum}, resumed; " + ("; ".join(problems) or "ok"))


def driver_sigterm(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """SIGTERM or SIGHUP (random) to a CLI campaign's process group after a random number of rows: exit
    143/129 naming `retrain-ray resume`, the manifest `interrupted`, and the resume completes every step once."""
    return [_sigterm_once(root / f"t{i}", rng.randint(1, 2 * STEPS - 2), rng.choice(STOP_SIGNALS))
            for i in range(trials)]


# ---- 2. the recorder actor SIGKILLed at a random row --------------------------------------------------
def _kill_recorder(cdir: Path, at_rows: int, namespace: str, killed: list[tuple[int, float]]) -> None:
    import ray

    from retrain_ray.campaign.plan import actor_scope
    from retrain_ray.campaign.recorder import recorder_name

    deadline = time.monotonic() + 300
    while rows_logged(cdir) < at_rows and time.monotonic() < deadline:
        time.sleep(0.05)
    handle = ray.get_actor(recorder_name(actor_scope(cdir.name, cdir)), namespace=namespace)
    pid = ray.get(handle.pid.remote(), timeout=60)
    os.kill(pid, signal.SIGKILL)
    killed.append((pid, time.time()))


def _recorder_kill_once(root: Path, at_rows: int) -> Trial:
    import ray

    from retrain_ray.campaign import Campaign

    root.mkdir(parents=True, exist_ok=True)
    toml = write_campaign(root / "rec.toml", base=TINY_RUN, logging={"log_dir": f"{root}/logs"},
                          reward={"type": "slow_reward.make"}, plugins={"search_paths": ["tests/fixtures/plugins"]},
                          campaign={"name": "rec", "seeds": [1, 2], "max_steps": STEPS, "parallel": True,
                                    "max_workers": 2, "max_failures": 0}, conditions=(GRPO,))
    cdir, killed = root / "rec", []
    namespace = ray.get_runtime_context().namespace
    killer = threading.Thread(target=_kill_recorder, args=(cdir, at_rows, namespace, killed), daemon=True)
    killer.start()
    with _in_repo():
        results = Campaign.from_toml(toml, root=root).run(progress=False)
    killer.join(timeout=60)
    manifest = read_manifest(cdir) or {"runs": []}
    problems = [] if killed else ["the campaign ended before the kill"]
    problems += [f"{r['run_name']} {r['status']} after {r['attempts']} attempts" for r in manifest["runs"]
                 if r["status"] != "completed" or r["attempts"] != 1]
    problems += [] if results.errors == [] else [f"errors {results.errors}"]
    restarts = [r.get("actor") for r in manifest.get("control_restarts", [])]
    problems += [] if restarts == ["recorder"] else [f"manifest control_restarts {restarts}"]
    problems += [p for r in manifest["runs"] if (p := steps_once(cdir / "runs" / r["run_name"], STEPS))]
    recovery = _first_row_after(cdir, killed[0][1]) if killed else None
    return Trial(not problems, recovery, f"recorder killed after {at_rows} rows; " + ("; ".join(problems) or "ok"))


def _first_row_after(cdir: Path, moment: float) -> float | None:
    """Seconds from `moment` to the first metrics row any run wrote after it (a segment of the new recorder)."""
    from fault_scenarios import first_row_after

    times = [t for run_dir in (cdir / "runs").iterdir() if (t := first_row_after(run_dir, moment)) is not None]
    return min(times) if times else None


def recorder_kill(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """The campaign's recorder SIGKILLed after a random number of rows: Ray restarts it, no run fails or
    retries, every row is there once, and the manifest's `control_restarts` names it."""
    return [_recorder_kill_once(root / f"t{i}", rng.randint(1, 2 * STEPS - 2)) for i in range(trials)]


# ---- 3. a trial errored by Tune while the others wait at an adaptive rung ------------------------------
HOPELESS = {"advantage_mode": "zero_advantage.zero", "transform_mode": "none"}


def make_rung_kill_runner(victim: str, cdir: Path):
    """train_run whose `victim` SIGKILLs its own trial process once, at its first step after another run
    is paused at a rung (the manifest's `paused_at_rung`): Tune sees a dead actor and, with
    `max_failures = 0`, puts the trial in ERROR."""

    def runner(config, **kwargs):
        from retrain_ray.logs.types import RunObserver
        from retrain_ray.run.train import train_run

        marker = cdir / "rung_killed.json"

        class KillAtRung(RunObserver):
            def on_step(self, row, **info):
                if kwargs["run_name"] != victim or marker.exists():
                    return
                # the product's reader (this runs in the trial's worker, where the tests' helpers do not import):
                # the manifest with its pending run events folded in (paused_at_rung is a run event)
                from retrain_ray.logs.manifest import manifest_text
                from retrain_ray.logs.manifest import read_manifest as read_record

                manifest = json.loads(manifest_text(read_record(cdir), {}))
                if any("paused_at_rung" in r for r in manifest["runs"]):
                    marker.write_text(json.dumps({"step": row["step"], "at": time.time()}))
                    os.kill(os.getpid(), signal.SIGKILL)

        kwargs["observers"] = [*kwargs["observers"], KillAtRung()]
        return train_run(config, **kwargs)

    return runner


def _adaptive_error_once(root: Path, rng: random.Random) -> Trial:
    from ray import cloudpickle

    from retrain_ray.campaign import Campaign

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    root.mkdir(parents=True, exist_ok=True)
    toml = write_campaign(
        root / "rung.toml", base=TINY_RUN, plugins={"search_paths": ["configs/plugins"]},
        logging={"log_dir": f"{root}/logs"},
        campaign={"name": "rung", "seeds": [1, 2], "max_steps": STEPS, "parallel": True, "max_workers": 1,
                  "max_failures": 0, "adaptive": {"metric": "rl/nonzero_advantage_action_tokens", "window": 2,
                                                  "rungs": [2, 4], "min_seeds": 2, "max_seeds": 2}},
        conditions=(GRPO, HOPELESS))
    cdir = root / "rung"
    victim = rng.choice(["grpo+none_s2", "zero_advantage.zero+none_s2"])
    started = time.monotonic()
    with _in_repo():
        Campaign.from_toml(toml, root=root, runner=make_rung_kill_runner(victim, cdir)).run(progress=False)
    manifest = read_manifest(cdir) or {"runs": []}
    runs = {r["run_name"]: r for r in manifest["runs"]}
    killed = (cdir / "rung_killed.json").exists()
    problems = [] if killed else ["the victim was never killed at a rung"]
    problems += [] if runs.get(victim, {}).get("status") == "failed" else [f"{victim} {runs.get(victim, {}).get('status')}"]
    problems += [f"{n} {r['status']}" for n, r in runs.items() if n != victim and r["status"] not in ("completed", "stopped")]
    adaptive = manifest.get("adaptive") or {}
    problems += [] if adaptive.get("decisions") and adaptive.get("finished") else [f"adaptive {adaptive}"]
    return Trial(not problems, time.monotonic() - started,
                 f"{victim} killed at a rung, failed and counted; " + ("; ".join(problems) or "ok"))


def adaptive_trial_error(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """An adaptive campaign (2 conditions x 2 seeds, one slot, rungs [2, 4]) whose victim's trial process dies
    while another run waits at a rung: Tune errors the trial, the campaign counts it failed, decides the
    rungs without it and ends (no wait for a run that cannot arrive); recovery: the campaign's whole time."""
    return [_adaptive_error_once(root / f"t{i}", rng) for i in range(trials)]
