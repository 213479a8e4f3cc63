"""`[optimizer_batch]` (spec feature 44): a capture run writes its one step's logical batch; a replay run from
the same checkpoint trains on it instead of sampling and ends bit for bit where the capture did; pins and
config differences are checked before the replay starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers import TINY_RUN, final_weights, write_config

from retrain_ray.checks.preflight import PreflightError, check_run
from retrain_ray.cli.train import train_main
from retrain_ray.config import ConfigError, load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.optimizer_batch import CAPTURE_DIR, MANIFEST_FILE, read_capture
from retrain_ray.run.train import train_run

TRAINING = {**TINY_RUN["training"], "save_every": 0, "sft_warmup_steps": 0, "seed": 3}


def _config(tmp_path: Path, name: str, *, training=None, optimizer_batch=None, resume: Path | None = None):
    path = write_config(tmp_path / f"{name}.toml", base=TINY_RUN, logging={"log_dir": str(tmp_path / name)},
                        training={**TRAINING, "max_steps": 1, **(training or {})},
                        optimizer_batch=optimizer_batch, resume={"from": str(resume)} if resume else None)
    return path


def _train(tmp_path: Path, name: str, **kw) -> Path:
    cfg = load_config(_config(tmp_path, name, **kw))
    resume = Path(cfg.resume.from_) if cfg.resume.from_ else None
    train_run(cfg, run_name=name, run_dir=tmp_path / name, resume_from=resume)
    return tmp_path / name


@pytest.fixture(scope="module")
def captured(tmp_path_factory):
    """A one-step base run, a capture from its final checkpoint, and a replay of that capture."""
    tmp = tmp_path_factory.mktemp("optimizer_batch")
    base = _train(tmp, "base")
    capture = _train(tmp, "capture", optimizer_batch={"capture": True}, resume=base)
    replay = _train(tmp, "replay", optimizer_batch={"replay_path": str(capture)}, resume=base)
    return tmp, base, capture, replay


def _last_row(run_dir: Path) -> dict:
    return read_stream(run_dir).to_pylist()[-1]


def test_replay_ends_bit_for_bit_where_the_capture_did(captured):
    _, base, capture, replay = captured
    after_capture, after_replay = final_weights(capture), final_weights(replay)
    assert after_capture.keys() == after_replay.keys()
    assert all(torch.equal(after_capture[k], after_replay[k]) for k in after_capture)
    assert any(not torch.equal(after_capture[k], final_weights(base)[k]) for k in after_capture)  # it trained
    captured_row, replayed_row = _last_row(capture), _last_row(replay)
    assert captured_row["step"] == replayed_row["step"] == 1  # the one step after the base run's
    digest = captured_row["optimizer/logical_batch_sha256"]
    assert digest and replayed_row["optimizer/logical_batch_sha256"] == digest
    assert read_capture(capture).manifest["logical_sha256"] == digest
    assert dict(captured_row["extras"])["optimizer_batch/captured"] == 1.0
    assert dict(replayed_row["extras"])["optimizer_batch/replayed"] == 1.0
    assert replayed_row["loss"] == captured_row["loss"]
    assert replayed_row["mean_reward"] == captured_row["mean_reward"]  # the batch's rewards, from the capture


def test_pins_and_config_differences_are_checked_before_the_replay(captured):
    tmp, base, capture, _ = captured
    manifest_sha = read_capture(capture).manifest_sha256
    digest = read_capture(capture).manifest["logical_sha256"]

    def problems(**kw) -> str:
        cfg = load_config(_config(tmp, "again", resume=base, **kw))
        with pytest.raises(PreflightError) as info:
            check_run(cfg)
        return str(info.value)

    pinned = {"replay_path": str(capture), "expected_logical_sha256": digest,
              "expected_manifest_sha256": manifest_sha}
    check_run(load_config(_config(tmp, "again", resume=base, optimizer_batch=pinned)))  # the right pins pass
    wrong = problems(optimizer_batch={**pinned, "expected_logical_sha256": "0" * 64})
    assert "optimizer_batch.expected_logical_sha256" in wrong and digest in wrong
    wrong = problems(optimizer_batch={**pinned, "expected_manifest_sha256": "f" * 64})
    assert "optimizer_batch.expected_manifest_sha256" in wrong and manifest_sha in wrong
    differs = problems(optimizer_batch={"replay_path": str(capture)}, training={"lr": 1e-3})
    assert "training.lr" in differs and "allow_config_differences" in differs
    check_run(load_config(_config(tmp, "again", resume=base, training={"lr": 1e-3},
                                  optimizer_batch={"replay_path": str(capture),
                                                   "allow_config_differences": ["training.lr"]})))
    check_run(load_config(_config(tmp, "again", resume=base, training={"lr": 1e-3},  # a whole section
                                  optimizer_batch={"replay_path": str(capture), "allow_config_differences": ["training"]})))


def test_the_replay_must_start_from_the_captures_checkpoint(captured):
    tmp, _, capture, _ = captured
    other = _train(tmp, "other", training={"seed": 4})  # another run's checkpoint after the same step

    def preflight(resume: Path, **section) -> None:
        check_run(load_config(_config(tmp, "again", resume=resume,
                                      optimizer_batch={"replay_path": str(capture), **section})))

    with pytest.raises(PreflightError, match=r"resume\.from = .*files differ from those the capture started from"):
        preflight(other)
    preflight(other, allow_config_differences=["resume.from"])  # a deliberate change of the start is allowed
    with pytest.raises(PreflightError, match="resumes at step 2, but the capture is of step 1"):
        preflight(capture)  # the capture run's own final checkpoint: one step later


def test_a_changed_capture_or_a_missing_one_is_refused(captured, tmp_path):
    _, base, capture, _ = captured
    copy = tmp_path / "copy"
    copy.mkdir()
    for f in (capture / CAPTURE_DIR).iterdir():
        copy.joinpath(f.name).write_bytes(f.read_bytes())
    manifest = json.loads((copy / MANIFEST_FILE).read_text())
    manifest["logical_sha256"] = "0" * 64
    (copy / MANIFEST_FILE).write_text(json.dumps(manifest))
    for path, expected in ((copy, "logical digest differs"), (tmp_path / "nowhere", "cannot read the capture")):
        cfg = load_config(_config(tmp_path, "r", resume=base, optimizer_batch={"replay_path": str(path)}))
        with pytest.raises(PreflightError, match=expected):
            check_run(cfg)


def test_the_cli_refuses_a_wrong_pin_without_a_traceback(captured, capsys):
    tmp, base, capture, _ = captured
    path = _config(tmp, "cli", resume=base, optimizer_batch={"replay_path": str(capture),
                                                             "expected_logical_sha256": "ab" * 32})
    assert train_main([str(path), "--quiet"]) == 2
    out = capsys.readouterr()
    assert "optimizer_batch.expected_logical_sha256" in out.err + out.out and "Traceback" not in out.err
    assert not (tmp / "cli").exists() or not any((tmp / "cli").iterdir())  # nothing written


@pytest.mark.parametrize(("section", "key"), [
    ({"expected_logical_sha256": "ab"}, "optimizer_batch.expected_logical_sha256"),  # no capture, no replay
    ({"capture": True, "replay_path": "x"}, "optimizer_batch.capture"),
    ({"capture": True, "expected_manifest_sha256": "ab"}, "optimizer_batch.expected_manifest_sha256"),
])
def test_settings_that_cannot_work_are_config_errors_naming_the_key(tmp_path, section, key):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, "bad", optimizer_batch=section, resume=tmp_path))
    assert key in str(info.value)


def test_capture_needs_one_step_from_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, "bad", training={"max_steps": 2}, optimizer_batch={"capture": True}))
    assert {"training.max_steps", "resume.from"} <= {i.location for i in info.value.issues}
