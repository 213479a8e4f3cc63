"""Which of a run's own checkpoints a campaign trial resumes from when Tune gives it none
(campaign/resume/own_checkpoint.py): the newest verified one whose step is logged, and only in the run's own
directory with a matching config; another run's or config's directory is an error, never reused."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
from helpers import TINY_RUN, write_campaign

from retrain_ray.campaign.plan import build_plan
from retrain_ray.campaign.resume.own_checkpoint import (
    ForeignRunDir,
    config_differences,
    own_checkpoint,
    tune_copy,
)
from retrain_ray.config import load_config
from retrain_ray.logs import write_run_meta
from retrain_ray.logs.stream import logged_through
from retrain_ray.run.resume.checkpoint import CheckpointManager
from retrain_ray.run.state import TrainerState
from retrain_ray.util.secrets import redact


def _plan_config(tmp_path: Path, **training):
    toml = write_campaign(tmp_path / f"c{len(training)}.toml", base=TINY_RUN,
                          campaign={"name": "own", "seeds": [1], "max_steps": 6},
                          training={**TINY_RUN["training"], **training})
    (run,) = build_plan(load_config(toml), root=tmp_path).runs
    return run


def _run_dir(work: Path, run_name: str, config: dict, steps: tuple[int, ...] = (1, 3)) -> Path:
    write_run_meta(work, {"run_name": run_name, "config": redact(config)})
    manager = CheckpointManager(work, keep_last=0)
    for step in steps:
        manager.save(f"checkpoint_step_{step}", TrainerState(step=step), _payload(step))
    return work


def _payload(step: int):
    def write(directory: Path) -> None:
        (directory / "weights.bin").write_bytes(bytes([step]) * 64)

    return write


def _chosen(*args, **kwargs) -> str | None:
    found = own_checkpoint(*args, **kwargs)
    if found is None:
        return None
    assert found[1] == int(found[0].name.removeprefix("checkpoint_step_"))  # its step comes with it
    return found[0].name


def test_the_newest_verified_logged_checkpoint_of_the_same_run_is_chosen(tmp_path, caplog):
    plan = _plan_config(tmp_path)
    config = plan.config.model_dump(mode="json")
    work = _run_dir(tmp_path / "work", plan.run_name, config, steps=(1, 3, 5))
    assert _chosen(work, plan.run_name, config, logged_through=5) == "checkpoint_step_5"
    # a checkpoint past the last step logged without a gap is skipped: its rows were never logged
    assert _chosen(work, plan.run_name, config, logged_through=4) == "checkpoint_step_3"
    (work / "checkpoints" / "checkpoint_step_3" / "weights.bin").write_bytes(b"damaged")
    with caplog.at_level(logging.WARNING):
        assert _chosen(work, plan.run_name, config, logged_through=4) == "checkpoint_step_1"
    assert "skipping damaged checkpoint" in caplog.text and "checkpoint_step_3" in caplog.text
    assert own_checkpoint(work, plan.run_name, config, logged_through=0) is None  # from step 0
    # raising max_steps continues a run: not a different config
    raised = {**config, "training": {**config["training"], "max_steps": 60}}
    assert _chosen(work, plan.run_name, raised, logged_through=5) == "checkpoint_step_5"
    assert own_checkpoint(tmp_path / "empty", plan.run_name, config, logged_through=5) is None


def test_a_run_directory_of_another_config_or_run_is_an_error_and_left_as_it_is(tmp_path):
    plan = _plan_config(tmp_path)
    other = _plan_config(tmp_path, lr=1e-2)
    work = _run_dir(tmp_path / "work", plan.run_name, other.config.model_dump(mode="json"))
    before = sorted(p.name for p in (work / "checkpoints").iterdir())
    config = plan.config.model_dump(mode="json")
    with pytest.raises(ForeignRunDir, match=r"another config \(differs in training\.lr\)") as caught:
        own_checkpoint(work, plan.run_name, config, logged_through=5)
    assert str(work) in str(caught.value) and "Move the directory away" in str(caught.value)
    assert sorted(p.name for p in (work / "checkpoints").iterdir()) == before  # nothing removed

    meta = json.loads((work / "run_meta.json").read_text())
    (work / "run_meta.json").write_text(json.dumps({**meta, "run_name": "someone_else", "config": redact(config)}))
    with pytest.raises(ForeignRunDir, match="run 'someone_else', not"):
        own_checkpoint(work, plan.run_name, config, logged_through=5)
    (work / "run_meta.json").unlink()
    with pytest.raises(ForeignRunDir, match="an unknown run"):
        own_checkpoint(work, plan.run_name, config, logged_through=5)


def _tune_copies(tune_dir: Path, aside: str, run_name: str, source: Path, meta: dict | None) -> list[Path]:
    """Tune's copies of `source`'s checkpoints (checkpoint_000000 ...) as set_aside leaves them in `aside`."""
    copies = []
    for index, checkpoint in enumerate(CheckpointManager(source, keep_last=0).step_checkpoints()):
        copy = tune_dir / aside / run_name / f"checkpoint_{index:06d}"
        shutil.copytree(checkpoint, copy)
        if meta is not None:
            (copy / ".metadata.json").write_text(json.dumps(meta))
        copies.append(copy)
    return copies


def test_tune_copies_set_aside_stand_in_for_a_work_directory_on_another_node(tmp_path, caplog):
    plan = _plan_config(tmp_path)
    config = plan.config.model_dump(mode="json")
    source = _run_dir(tmp_path / "source", plan.run_name, config, steps=(1, 3))
    tune, work = tmp_path / "tune", tmp_path / "work"  # work: nothing there (the other node's)
    meta = {"run_name": plan.run_name, "config": redact(config)}
    first, second = _tune_copies(tune, ".torn-20261124T010000", plan.run_name, source, meta)
    _tune_copies(tune, ".torn-20261124T000000", plan.run_name, _run_dir(tmp_path / "older", plan.run_name, config,
                                                                          steps=(1, 3, 5)), meta)
    # the newest set-aside directory only; the newest copy whose step is logged
    assert tune_copy(tune, work, plan.run_name, config, logged_through=5) == (second, 3)
    assert tune_copy(tune, work, plan.run_name, config, logged_through=2) == (first, 1)
    assert tune_copy(tune, work, plan.run_name, config, logged_through=0) is None
    (second / "weights.bin").write_bytes(b"damaged")
    with caplog.at_level(logging.WARNING):
        assert tune_copy(tune, work, plan.run_name, config, logged_through=5) == (first, 1)
    assert "skipping damaged checkpoint" in caplog.text and str(second) in caplog.text
    assert tune_copy(tmp_path / "no-tune", work, plan.run_name, config, logged_through=5) is None

    other = redact(_plan_config(tmp_path, lr=1e-2).config.model_dump(mode="json"))
    (first / ".metadata.json").write_text(json.dumps({**meta, "config": other}))
    with pytest.raises(ForeignRunDir, match=r"another config \(differs in training\.lr\)") as caught:
        tune_copy(tune, work, plan.run_name, config, logged_through=5)
    assert str(first) in str(caught.value)
    # no metadata in the copy: the run's run_meta.json, when its work directory is here, says whose it is
    (first / ".metadata.json").unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert tune_copy(tune, work, plan.run_name, config, logged_through=5) is None
    assert "neither it nor" in caplog.text
    write_run_meta(work, meta)
    assert tune_copy(tune, work, plan.run_name, config, logged_through=5) == (first, 1)
    write_run_meta(work, {**meta, "run_name": "someone_else"})
    with pytest.raises(ForeignRunDir, match="run 'someone_else', not"):
        tune_copy(tune, work, plan.run_name, config, logged_through=5)


def test_config_differences_ignore_only_the_settings_that_do_not_change_the_steps():
    base = {"training": {"lr": 1.0, "max_steps": 4, "seed": 1}, "logging": {"log_dir": "a"}, "campaign": {"x": 1}}
    assert config_differences(base, {**base, "logging": {"log_dir": "b"}, "campaign": None,
                                      "training": {**base["training"], "max_steps": 9}}) == []
    assert config_differences(base, {**base, "training": {"lr": 1.0, "max_steps": 4, "seed": 2}}) == ["training.seed"]
    assert config_differences(base, {**base, "model": {"model": "m"}}) == ["model.model"]


def test_logged_through_is_the_last_step_with_every_step_before_it(tmp_path):
    from retrain_ray.logs import METRICS_SCHEMA, ArrowStreamWriter, row_to_record

    assert logged_through(tmp_path) == -1
    for steps in ([0, 1, 2], [2, 3, 5]):  # two segments: a resume that rewrote step 2; step 4 missing
        with ArrowStreamWriter(tmp_path / "metrics.arrows", METRICS_SCHEMA) as writer:
            writer.write_rows([row_to_record({"step": s, "run": "r"}) for s in steps])
    assert logged_through(tmp_path) == 3
