"""`[backend] throttle_dir` (spec 6, with the fixes of spec 13 item 19): file-lock slots shared by threads and
processes; never more holders than slots, any free slot taken (not only slot 0), released on exceptions, and a
wait that ends in a clear timeout error."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from retrain_ray.config import RetrainConfig
from retrain_ray.run.train import run_throttle
from retrain_ray.throttle.filelock import FileLockThrottle, FileThrottleTimeout

ROOT = Path(__file__).resolve().parents[2]


def test_threads_never_exceed_the_slots_and_use_every_slot(tmp_path):
    throttle = FileLockThrottle(tmp_path / "locks", 2, timeout_s=60)
    assert sorted(p.name for p in (tmp_path / "locks").iterdir()) == ["slot_0.lock", "slot_1.lock"]
    pairs = threading.Barrier(2, timeout=30)  # broken unless two holders are inside at once (both slots used)
    lock, inside, peak, errors = threading.Lock(), [0], [0], []

    def work() -> None:
        try:
            with throttle.hold():
                with lock:
                    inside[0] += 1
                    peak[0] = max(peak[0], inside[0])
                pairs.wait()
                with lock:
                    inside[0] -= 1
        except Exception as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and peak[0] == 2


HOLDER = """
import os, sys, time
from retrain_ray.throttle.filelock import FileLockThrottle
throttle = FileLockThrottle(sys.argv[1], 2, timeout_s=120)
for _ in range(3):
    with throttle.hold():
        fd = os.open(sys.argv[2], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        os.write(fd, b"+")
        time.sleep(0.05)
        os.write(fd, b"-")
        os.close(fd)
"""


def test_processes_sharing_the_directory_never_exceed_the_slots(tmp_path):
    events = tmp_path / "events"
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path / "locks"), str(events)], env=env)
             for _ in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0] * 4
    running, peak = 0, 0
    for mark in events.read_text():  # appends land in the order they happened
        running += 1 if mark == "+" else -1
        peak = max(peak, running)
    assert len(events.read_text()) == 24 and running == 0 and 1 <= peak <= 2


def test_a_slot_is_released_when_the_body_raises(tmp_path):
    throttle = FileLockThrottle(tmp_path, 1, timeout_s=5)
    with pytest.raises(RuntimeError, match="boom"), throttle.hold():
        raise RuntimeError("boom")
    with FileLockThrottle(tmp_path, 1, timeout_s=5).hold():  # free again
        pass


def test_a_wait_past_the_timeout_is_a_clear_error(tmp_path):
    holder = FileLockThrottle(tmp_path, 1, timeout_s=5)
    waiter = FileLockThrottle(tmp_path, 1, timeout_s=0.3)
    with holder.hold(), pytest.raises(FileThrottleTimeout) as info:
        with waiter.hold():
            pass
    message = str(info.value)
    assert str(tmp_path) in message and "max_concurrent" in message and "acquire_timeout_s" in message
    with pytest.raises(ValueError, match="max_concurrent"):
        with holder.hold_many(2):
            pass


def test_a_standalone_run_uses_the_directory_and_a_campaign_its_actor(tmp_path):
    cfg = RetrainConfig.model_validate({"backend": {"throttle_dir": str(tmp_path / "t"), "max_concurrent": 3}})
    made = run_throttle(cfg.backend, None, "r")
    assert isinstance(made, FileLockThrottle) and made.capacity == 3 and len(list((tmp_path / "t").iterdir())) == 3
    actor = FileLockThrottle(tmp_path / "actor", 1, timeout_s=1)  # stands for the campaign's throttle
    assert run_throttle(cfg.backend, actor, "r") is actor
    assert run_throttle(RetrainConfig().backend, None, "r") is None
