"""Fault scenarios, part 2 (see fault_scenarios.py): throttle lease holders SIGKILLed among 32 clients,
a shared endpoint failing 20% of its calls, a full disk and a read-only run directory."""

from __future__ import annotations

import hashlib
import os
import random
import resource
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import ray
from campaign_helpers import PYTHON, REPO, steps_once
from fault_scenarios import Trial
from helpers import TINY_RUN, free_port, wait_for, write_campaign, write_config

# ---- 4. throttle lease holders SIGKILLed among 32 clients -----------------------------------------------
TTL_S, CAPACITY, PROCESSES, HOLDERS_PER_PROCESS = 1.0, 4, 8, 4


@ray.remote(num_cpus=0, max_concurrency=HOLDERS_PER_PROCESS + 2)
class Holders:
    """One worker process whose threads hold slots in a loop (4 of the 32 clients)."""

    def __init__(self, handle) -> None:
        self.handle = handle

    def pid(self) -> int:
        return os.getpid()

    def churn(self, holder: str, hold_s: float) -> None:
        from retrain_ray.throttle import ThrottleClient

        client = ThrottleClient(self.handle, holder, timeout_s=120, lease_ttl_s=TTL_S)
        while True:
            with client.hold():
                time.sleep(hold_s)


def _spawn(handle, k: int, rng: random.Random) -> tuple:
    actor = Holders.remote(handle)
    pid = ray.get(actor.pid.remote(), timeout=120)
    for j in range(HOLDERS_PER_PROCESS):
        actor.churn.remote(f"p{k}-{j}", rng.uniform(0.02, 0.2))
    return actor, pid


def _stats(handle):
    return ray.get(handle.stats.remote(), timeout=30)


def _owner(lease) -> int:
    """The Holders process (its key in `procs`) of a lease: holder names are `p<key>-<thread>`."""
    return int(lease.holder.split("-")[0][1:])


def _kill_one(handle, procs: dict, rng: random.Random) -> Trial:
    # A lease of a process killed earlier can still be listed (taken between that trial's snapshot and
    # its kill, reclaimed within the TTL): only a live process's lease picks the next victim.
    leases = wait_for(lambda: [x for x in ray.get(handle.leases.remote(), timeout=30) if _owner(x) in procs],
                      timeout_s=60, what="a lease of a live process", poll_s=0.02)
    k = _owner(rng.choice(leases))
    theirs = {lease.lease_id for lease in leases if _owner(lease) == k}
    before = _stats(handle)
    killed_at = time.monotonic()  # CLOCK_MONOTONIC is system-wide: comparable with the actor's times
    os.kill(procs.pop(k)[1], signal.SIGKILL)
    # every lease of the killed process, including one it took after the snapshot above, must go
    wait_for(lambda: all(_owner(x) != k for x in ray.get(handle.leases.remote(), timeout=30)),
             timeout_s=60, what="the killed holder's leases to expire", poll_s=0.02)
    polled = time.monotonic() - killed_at
    # "capacity back" is when the actor reclaimed the last of them (its own record), not when the poll,
    # queued behind 32 clients' calls, saw it; with none reclaimed (all released), the poll's time
    reclaims = [r for r in ray.get(handle.reclaims.remote(), timeout=30) if _owner(r.lease) == k]
    recovery = max((r.reclaimed_at - killed_at for r in reclaims), default=polled)
    try:
        wait_for(lambda: _stats(handle).granted > before.granted, timeout_s=30, what="a grant after the kill", poll_s=0.05)
        deadlock = ""
    except TimeoutError as exc:
        deadlock = str(exc)
    stats = _stats(handle)
    problems = [p for p in (deadlock, recovery > TTL_S + 1.0 and f"reclaimed after {recovery:.2f} s",
                            stats.peak_in_flight > CAPACITY and f"peak {stats.peak_in_flight}") if p]
    return Trial(not problems, recovery, f"killed p{k} holding {len(theirs)} lease(s), {len(reclaims)} reclaimed by "
                 f"TTL; {_timeline(reclaims, killed_at, polled)}; " + ("; ".join(problems) or "ok"))


def _timeline(reclaims: list, killed_at: float, polled: float) -> str:
    """Where the time went: last renewal or grant heard (relative to the kill), leases granted to the
    dead process's queued requests after the kill, reclaim after expiry, the poll."""
    if not reclaims:
        return f"poll saw them gone {polled:.2f} s after the kill"
    heard = max(r.lease.expires_at - r.lease.ttl_s for r in reclaims) - killed_at
    late = max(r.reclaimed_at - r.lease.expires_at for r in reclaims)
    after = [r.lease.granted_at - killed_at for r in reclaims if r.lease.granted_at > killed_at]
    granted = f"{len(after)} granted after the kill (last +{max(after):.2f} s)" if after else "none granted after the kill"
    return (f"last renewal or grant heard {heard:+.2f} s from the kill, {granted}, reclaimed {late:.2f} s after "
            f"expiry, poll saw it {polled:.2f} s after the kill")


def throttle_kills(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    """`trials` kills, one at a time, each of a process holding a lease; a fresh process replaces it."""
    from ray import cloudpickle

    from retrain_ray.actors.throttle import start_throttle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the workers cannot import tests/
    handle = start_throttle(f"faults-{uuid.uuid4().hex[:8]}", "inference", CAPACITY, namespace="faults",
                            lease_ttl_s=TTL_S)
    procs = {k: _spawn(handle, k, rng) for k in range(PROCESSES)}
    out = []
    try:
        for _ in range(trials):
            out.append(_kill_one(handle, procs, rng))
            k = PROCESSES - 1 + len(out)  # a new key each time: a killed process's name is never reused
            procs[k] = _spawn(handle, k, rng)
    finally:
        for actor, _pid in procs.values():
            ray.kill(actor)
        ray.kill(handle)
    return out


# ---- 5. a shared endpoint failing 20% of its calls (Serve, injected 502 / 504 / stalls) -----------------
CLIENT_TIMEOUT_S, STALL_S, FAULT_RATE = 2.0, 3.0, 0.2
CLEAN_CALLS = 12  # each trial's first calls succeed: the pooled warmup reaches capacity 2 before errors start


def _write_endpoint_campaign(path: Path, url: str, name: str) -> Path:
    return write_campaign(
        path, base=TINY_RUN, backend={"lease_ttl_s": 3}, inference={"engine": "openai", "url": url, "max_concurrent": 4},
        training={"max_tokens": 3, "sft_warmup_steps": 0}, logging={"log_dir": "logs"},
        backpressure={"enabled": True, "warmup_steps": 2, "min_batch_size": 1, "max_batch_size": 4},
        campaign={"name": name, "seeds": [1, 2], "max_steps": 8, "parallel": True, "max_workers": 2,
                  "cpus_per_run": 0.5, "max_failures": 2, "trial_start_timeout_s": 240})


def short_timeout_runner(config, **kwargs):
    """train_run whose HTTP client times out after CLIENT_TIMEOUT_S, so the endpoint's stalls time out."""
    import httpx

    from retrain_ray.run.build import build_policy
    from retrain_ray.run.train import train_run

    policy = build_policy(config, throttle=kwargs["throttle"], run_name=kwargs["run_name"])
    policy[0]._client = httpx.Client(timeout=CLIENT_TIMEOUT_S)
    return train_run(config, **{**kwargs, "policy": policy})


def _endpoint_trial(url: str, root: Path, name: str) -> Trial:
    import httpx

    from retrain_ray.backpressure.arrow_log import read_decision_log
    from retrain_ray.campaign import Campaign
    from retrain_ray.logs import read_stream

    root.mkdir(parents=True, exist_ok=True)
    _write_endpoint_campaign(root / "c.toml", url, name)
    injected = httpx.get(f"{url}/v1/stats", params={"reset": "true"}, timeout=30).json()["injected"]
    started = time.monotonic()
    results = Campaign.from_toml(root / "c.toml", root=root, runner=short_timeout_runner).run(progress=False)
    elapsed = time.monotonic() - started
    injected = httpx.get(f"{url}/v1/stats", timeout=30).json()["injected"] - injected
    problems = [f"{r.run_name} {r.status}" for r in results.runs if r.status != "completed"]
    problems += [steps_once(root / name / "runs" / r.run_name, 8) for r in results.runs]
    retries = 0.0
    for r in results.runs:
        extras = read_stream(root / name / "runs" / r.run_name)["extras"].to_pylist()
        retries += max((dict(e or {}).get("openai_retries", 0.0) for e in extras), default=0.0)
    bp = read_decision_log(root / name / "backpressure.arrows").to_pandas()
    caps = bp["capacity"].tolist()
    # after an error row, the next decisions keep capacity <= max(1, capacity // 2) (error_cut 0.5)
    errors = bp["endpoint_errors"].tolist()
    cut = all(c <= max(1, caps[i] // 2) for i, e in enumerate(errors) if e > 0 for c in caps[i + 1:i + 3])
    problems += [] if bp["endpoint_errors"].sum() > 0 else ["the advisor was told of no endpoint error"]
    problems += [] if retries > 0 else ["no retry counted in the metrics rows"]
    problems += [] if cut else [f"no capacity cut after an error (capacities {caps})"]
    problems = [p for p in problems if p]
    return Trial(not problems, elapsed, f"{injected} faults injected, {int(retries)} retries logged, capacities "
                 f"{min(caps)}..{max(caps)}; " + ("; ".join(problems) or "ok"))


def failing_endpoint(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    from ray import cloudpickle

    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    url = start_inference_endpoint("builtin:tiny", port=free_port(), name="faulty", request_delay_s=0.05,
                                   fault_rate=FAULT_RATE, fault_stall_s=STALL_S, fault_after=CLEAN_CALLS)
    try:
        return [_endpoint_trial(url, root / f"t{i}", f"endpoint{i}-{uuid.uuid4().hex[:6]}") for i in range(trials)]
    finally:
        stop_inference_endpoint()


# ---- 6. a full disk and a read-only run directory (`retrain-ray train`, no Ray) -------------------------
DISK_STEPS = 8


def _write_train(path: Path, *, steps: int, run_dir: Path) -> Path:
    return write_config(path, base=TINY_RUN, logging={"log_dir": str(run_dir)}, training={"max_steps": steps})


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True).returncode == 0


def _train(toml: Path, log: Path, *, resume: Path | None = None, fsize: int | None = None) -> tuple[int, str, float]:
    def limit() -> None:  # the non-root stand-in for a full disk: a file size limit, EFBIG, not SIGXFSZ
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    cmd = [PYTHON, "-m", "retrain_ray.cli", "train", str(toml), *(["--resume", str(resume)] if resume else [])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, cwd=REPO, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=600,
                            preexec_fn=limit if fsize else None).returncode
    return rc, log.read_text(), time.monotonic() - started


def _in_place_problems(run_dir: Path) -> list[str]:
    """Half-written files: a checkpoint in place that does not verify, a state file that is not JSON."""
    import json

    from retrain_ray.run.resume.checkpoint import CheckpointManager, verify_checkpoint

    problems = [f"{c.name}: {verify_checkpoint(c)}" for c in CheckpointManager(run_dir).candidates()
                if verify_checkpoint(c)]
    for name in ("trainer_state.json", "run_meta.json"):
        try:
            if (run_dir / name).exists():
                json.loads((run_dir / name).read_text())
        except ValueError:
            problems.append(f"{name} is half-written")
    return problems


def _clear_error(rc: int, log: str, words: tuple[str, ...]) -> list[str]:
    problems = [] if rc == 1 else [f"exit {rc}"]
    problems += ["a traceback"] if "Traceback" in log else []
    problems += [] if any(w in log for w in words) else [f"no {' / '.join(words)} in: {log[-400:]!r}"]
    return problems


def _tree_digest(directory: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in directory.rglob("*") if p.is_file()):
        h.update(str(path).encode() + path.read_bytes())
    return h.hexdigest()


def disk_full_once(rng: random.Random, root: Path) -> Trial:
    mnt, size_mb = root / "mnt", rng.randint(6, 13)
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = _mount("-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mnt))
    run_dir = mnt / "run"
    toml = _write_train(root / "t.toml", steps=DISK_STEPS, run_dir=run_dir)
    try:
        rc, log, _ = _train(toml, root / "full.log", fsize=None if mounted else 2 * 2**20)
        problems = _clear_error(rc, log, ("No space left on device", "File too large"))
        problems += _in_place_problems(run_dir)
        if mounted:
            _mount("-o", f"remount,size={256}m", str(mnt))
        rc2, log2, resume_s = _train(toml, root / "resume.log", resume=run_dir)
        problems += [f"resume exit {rc2}: {log2[-400:]!r}"] if rc2 else []
        problems += [steps_once(run_dir, DISK_STEPS)] + _in_place_problems(run_dir)
        problems = [p for p in problems if p]
        how = f"tmpfs of {size_mb} MB" if mounted else "RLIMIT_FSIZE 2 MB"
        return Trial(not problems, resume_s, f"{how}; " + ("; ".join(problems) or "ok"))
    finally:
        if mounted:
            _mount("-o", "remount,rw", str(mnt)) and subprocess.run(["umount", str(mnt)], capture_output=True)


def read_only_once(rng: random.Random, root: Path) -> Trial:
    """A run stopped after k steps; its directory made read-only; `--resume` must fail clearly and change
    nothing; made writable again, `--resume` completes it."""
    mnt, k = root / "mnt", 2 * rng.randint(1, 3)
    mnt.mkdir(parents=True, exist_ok=True)
    mounted = _mount("-t", "tmpfs", "-o", "size=256m", "tmpfs", str(mnt))
    run_dir = mnt / "run"
    _write_train(root / "part.toml", steps=k, run_dir=run_dir)
    _write_train(root / "t.toml", steps=DISK_STEPS, run_dir=run_dir)
    try:
        rc0, log0, _ = _train(root / "part.toml", root / "part.log")
        before = _tree_digest(run_dir)
        made_ro = _mount("-o", "remount,ro", str(mnt)) if mounted else _chmod_tree(run_dir, 0o555)
        rc, log, _ = _train(root / "t.toml", root / "ro.log", resume=run_dir)
        problems = [] if rc0 == 0 and made_ro else [f"setup: exit {rc0}, read-only {made_ro}"]
        problems += _clear_error(rc, log, ("Read-only file system", "Permission denied"))
        problems += [] if _tree_digest(run_dir) == before else ["the read-only attempt changed files"]
        _mount("-o", "remount,rw", str(mnt)) if mounted else _chmod_tree(run_dir, 0o755)
        rc2, log2, resume_s = _train(root / "t.toml", root / "resume.log", resume=run_dir)
        problems += [f"resume exit {rc2}: {log2[-400:]!r}"] if rc2 else []
        problems += [steps_once(run_dir, DISK_STEPS)] + _in_place_problems(run_dir)
        problems = [p for p in problems if p]
        return Trial(not problems, resume_s, f"read-only after {k} steps ({'ro mount' if mounted else 'chmod'}); "
                     + ("; ".join(problems) or "ok"))
    finally:
        if mounted:
            _mount("-o", "remount,rw", str(mnt)) and subprocess.run(["umount", str(mnt)], capture_output=True)


def _chmod_tree(directory: Path, mode: int) -> bool:
    for path in [directory, *directory.rglob("*")]:
        if path.is_dir():
            path.chmod(mode)
    return True


def disk_full(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    return [disk_full_once(rng, root / f"t{i}") for i in range(trials)]


def read_only(trials: int, rng: random.Random, root: Path) -> list[Trial]:
    return [read_only_once(rng, root / f"t{i}") for i in range(trials)]
