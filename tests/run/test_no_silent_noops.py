"""A run or campaign that will train nothing says so (issue 34, item 7): up front (the config's warnings,
`explain`, a campaign's start), when the run starts, and in its end summary."""

from __future__ import annotations

import logging

import pytest
from helpers import GRPO, write_campaign, write_config

from retrain_ray.config import load_config, load_config_with_warnings
from retrain_ray.results.untrained import untrained_note
from retrain_ray.run.trainers.registry import condition_warnings, no_training_warnings
from retrain_ray.run.trainers.rules import TrainerSettings

SMALL = {"batch_size": 2, "group_size": 2, "max_tokens": 4, "save_every": 0}


def _warnings(tmp_path, **training) -> list[str]:
    return load_config_with_warnings(write_config(tmp_path / "c.toml", training={**SMALL, **training}))[1]


def test_group_size_one_is_a_config_warning(tmp_path):
    [warning] = [w for w in _warnings(tmp_path, group_size=1) if "group_size" in w]
    assert warning.startswith("training.group_size = 1: each group has one completion, so every group-relative "
                              "advantage is 0 and no RL step trains")
    ok = load_config(write_config(tmp_path / "ok.toml", training=SMALL))
    assert not no_training_warnings(TrainerSettings(ok.training, ok.algorithm, ok.environment, ok.campaign))
    assert not [w for w in _warnings(tmp_path, group_size=1, trainer="sft", sft_data_path="x.jsonl")
                if "group_size" in w]  # a supervised run has no groups


def test_a_run_that_is_all_warm_start_is_a_config_warning(tmp_path):
    [warning] = [w for w in _warnings(tmp_path, max_steps=3, sft_warmup_steps=3) if "sft_warmup_steps" in w]
    assert warning.startswith("training.sft_warmup_steps = 3 covers all 3 steps (training.max_steps): every step "
                              "is a warm-start (SFT) step and no RL step runs, so reward and correct_rate stay empty")
    [capped] = [w for w in _warnings(tmp_path, max_steps=3, sft_warmup_steps=5, sft_target_correct_rate=0.5)
                if "sft_warmup_steps" in w]
    assert "unless the correct rate reaches sft_target_correct_rate = 0.5 first" in capped
    assert not [w for w in _warnings(tmp_path, max_steps=4, sft_warmup_steps=3) if "sft_warmup_steps" in w]


def test_a_campaign_all_warm_start_by_its_own_max_steps_says_so(tmp_path):
    """`[campaign] max_steps` replaces the runs' `[training] max_steps`: the warning counts the campaign's."""
    toml = write_campaign(tmp_path / "c.toml", training={**SMALL, "max_steps": 50, "sft_warmup_steps": 10},
                          campaign={"name": "c", "seeds": [1], "max_steps": 10})
    cfg, warnings = load_config_with_warnings(toml)
    assert any("covers all 10 steps ([campaign] max_steps)" in w for w in warnings)
    from retrain_ray.config.matrix import expand_runs

    runs = [(r.condition_label, r.config) for r in expand_runs(cfg)]
    [line] = condition_warnings(runs)
    assert line.startswith("every condition: training.sft_warmup_steps = 10 covers all 10 steps")


def test_condition_warnings_name_the_conditions_that_train_nothing(tmp_path):
    cfg = load_config(write_config(tmp_path / "c.toml", training=SMALL))
    single = cfg.model_copy(update={"training": cfg.training.model_copy(update={"group_size": 1})})
    lines = condition_warnings([("grpo", cfg), ("grpo", cfg), ("one", single), ("one", single)])
    assert len(lines) == 1 and lines[0].startswith("condition one: training.group_size = 1")
    assert condition_warnings([("grpo", cfg)]) == []


@pytest.mark.parametrize("rows,note", [
    ([{"phase": "rl", "trained": t} for t in [False] * 12 + [True] * 8],
     "12 of 20 steps trained nothing: every group tied"),
    ([{"phase": "sft", "trained": True}] * 5, "all 5 steps were warm start (SFT): no RL step ran"),
    ([{"phase": "sft", "trained": True}] * 2 + [{"phase": "rl", "trained": False}] * 3,
     "3 of 5 steps trained nothing: every group tied"),
    ([{"phase": "rl", "trained": True}] * 3, None),
    ([{}] * 3, None),  # a log written before `phase` and `trained`: every step trained
    ([], None),
], ids=["twelve_of_twenty", "all_warm_start", "warm_start_then_tied", "all_trained", "old_log", "no_rows"])
def test_untrained_note_counts_the_steps(rows, note):
    assert untrained_note(rows) == note


def test_explain_shows_a_group_size_of_one(tmp_path, capsys):
    from retrain_ray.cli import main

    assert main(["explain", str(write_config(tmp_path / "c.toml", training={**SMALL, "group_size": 1}))]) == 0
    assert "training.group_size = 1: each group has one completion" in capsys.readouterr().out


def test_a_run_at_group_size_one_says_so_at_start_and_in_its_summary(tmp_path, capsys, caplog):
    from retrain_ray.cli import main

    toml = write_config(tmp_path / "one.toml", algorithm=GRPO, logging={"log_dir": str(tmp_path / "run")},
                        training={**SMALL, "group_size": 1, "max_steps": 2})
    with caplog.at_level(logging.WARNING, logger="retrain_ray.run.train"):
        assert main(["train", str(toml)]) == 0
    assert "training.group_size = 1: each group has one completion" in caplog.text  # at run start
    assert "warning: 2 of 2 steps trained nothing: every group tied" in capsys.readouterr().out  # at the end


def test_a_campaign_says_so_before_ray_starts(tmp_path, monkeypatch, capsys):
    from retrain_ray.campaign import Campaign, driver

    class NoRay(Exception):
        pass

    def no_ray(*args, **kwargs):
        raise NoRay

    monkeypatch.setattr(driver, "connect", no_ray)
    toml = write_campaign(tmp_path / "c.toml", training=SMALL, logging={"log_dir": str(tmp_path / "logs" / "x")},
                          conditions=[GRPO, {**GRPO, "group_size": 1}],
                          campaign={"name": "c", "seeds": [1, 2], "max_steps": 2})
    campaign = Campaign.from_toml(toml, root=tmp_path)
    with pytest.raises(NoRay):
        campaign.run(progress=False)
    [line] = [x for x in capsys.readouterr().out.splitlines() if "group_size" in x]
    assert line.startswith("[campaign] warning: condition grpo+none~group_size=1: training.group_size = 1")
