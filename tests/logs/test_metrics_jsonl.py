"""`metrics.jsonl` beside the Arrow log: one JSON object per logged step, equal to the Arrow rows, one line
per step after a kill -9 and a resume, none with `[logging] jsonl = false`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import TINY_RUN, wait_for, write_config

from retrain_ray.campaign.recorder import RecorderCore
from retrain_ray.logs import ArrowRunObserver, read_stream
from retrain_ray.logs.observers import JSONL, json_object

REPO = Path(__file__).resolve().parents[2]


def _lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / JSONL).read_text().splitlines()]


def _arrow_objects(run_dir: Path) -> list[dict]:
    return [json.loads(json.dumps(json_object(r))) for r in read_stream(run_dir, "metrics").to_pylist()]


def _row(step: int, **extra: float) -> dict:
    return {"step": step, "phase": "rl", "condition": "grpo+none", "mean_reward": step / 10, **extra}


def test_one_line_per_step_equal_to_the_arrow_rows(tmp_path):
    observer = ArrowRunObserver(tmp_path, "r")
    for step in range(4):
        observer.on_step(_row(step, loss=float("nan") if step == 2 else 0.5, **{"echo/kept": 3.0}))
        assert len(_lines(tmp_path)) == step + 1  # flushed as the step is logged, before close
    observer.close()
    lines = _lines(tmp_path)
    assert lines == _arrow_objects(tmp_path)
    assert [line["step"] for line in lines] == [0, 1, 2, 3]
    assert lines[2]["loss"] is None and lines[1]["loss"] == 0.5  # JSON has no NaN: null
    assert lines[0]["echo/kept"] == 3.0 and "extras" not in lines[0]  # extras flattened, as the original
    assert lines[0]["run"] == "r" and lines[0]["wall_time"].endswith("+00:00")
    assert "NaN" not in (tmp_path / JSONL).read_text()


def test_a_resumed_writer_rewrites_the_file_from_the_arrow_log(tmp_path):
    first = ArrowRunObserver(tmp_path, "r")
    for step in range(6):
        first.on_step(_row(step))
    # killed: never closed; the resumed run re-logs steps 3.. from its checkpoint at step 2
    with open(tmp_path / JSONL, "a") as torn:
        torn.write('{"step": 6, "mean_rew')
    second = ArrowRunObserver(tmp_path, "r")
    for step in range(3, 8):
        second.on_step(_row(step, loss=1.0))
    second.close()
    lines = _lines(tmp_path)
    assert [line["step"] for line in lines] == list(range(8))
    assert lines == _arrow_objects(tmp_path)
    assert "loss" not in lines[2] and lines[3]["loss"] == 1.0  # the re-logged rows won, as in the Arrow log


def test_the_recorder_writes_it_beside_the_run_streams_unless_turned_off(tmp_path):
    core = RecorderCore(tmp_path, parquet_every_s=1e9)
    core.append("on", "metrics", [_row(0), _row(1)])
    core.append("on", "metrics", [_row(1, loss=2.0), _row(2)])  # a retried trial re-logs step 1
    core.append("off", "metrics", [_row(0)], jsonl=False)
    core.close()
    run_dir = tmp_path / "runs" / "on"
    assert [line["step"] for line in _lines(run_dir)] == [0, 1, 2] and _lines(run_dir)[1]["loss"] == 2.0
    assert _lines(run_dir) == _arrow_objects(run_dir)
    assert not (tmp_path / "runs" / "off" / JSONL).exists() and (tmp_path / "runs" / "off" / "metrics.arrows").exists()


def _train(toml: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "retrain_ray.cli", "train", str(toml), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _checkpoint_step(run_dir: Path) -> int:
    try:
        return int(json.loads((run_dir / "trainer_state.json").read_text())["step"])
    except (OSError, ValueError, KeyError):
        return -1


def _steps_past_checkpoint(run_dir: Path) -> bool:
    """A step is logged after the newest checkpoint: the resume will log it again."""
    try:
        logged = len((run_dir / JSONL).read_text().splitlines())
    except OSError:
        return False
    return _checkpoint_step(run_dir) >= 1 and logged - 1 > _checkpoint_step(run_dir)


@pytest.mark.extended  # two `retrain-ray train` processes: about a minute on 2 shared cores
def test_kill_9_of_retrain_ray_train_and_resume_leave_one_line_per_step(tmp_path):
    run_dir = tmp_path / "run"
    toml = write_config(tmp_path / "run.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)},
                        training={"max_steps": 400})
    proc = _train(toml)
    try:
        wait_for(lambda: _steps_past_checkpoint(run_dir) or proc.poll() is not None, timeout_s=240,
                 what="a logged step after a checkpoint", poll_s=0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == -signal.SIGKILL, out[-2000:]
    killed_at = max(r["step"] for r in read_stream(run_dir, "metrics", key=None).to_pylist())
    short = write_config(tmp_path / "resume.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)},
                         training={"max_steps": killed_at + 4})
    resumed = _train(short, "--resume", str(run_dir))
    out = resumed.communicate(timeout=300)[0]
    assert resumed.returncode == 0, out[-2000:]
    raw = read_stream(run_dir, "metrics", key=None)["step"].to_pylist()
    assert len(raw) > len(set(raw))  # the Arrow log holds steps twice: the resume re-logged some
    lines = _lines(run_dir)
    assert [line["step"] for line in lines] == sorted(set(raw)) == list(range(killed_at + 4))
    assert lines == _arrow_objects(run_dir)


def test_jsonl_false_writes_no_file(tmp_path):
    from retrain_ray.config import load_config
    from retrain_ray.run.train import train_run

    for jsonl in (False, True):
        run_dir = tmp_path / f"run-{jsonl}"
        toml = write_config(tmp_path / f"{jsonl}.toml", base=TINY_RUN, logging={"log_dir": str(run_dir), "jsonl": jsonl},
                            training={"max_steps": 3, "save_every": 0})
        train_run(load_config(toml), run_name="r", run_dir=run_dir)
        assert len(read_stream(run_dir, "metrics")) == 3
        assert (run_dir / JSONL).exists() is jsonl
