"""CLI overrides, campaign conditions and the run matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from retrain_ray.config import (
    CampaignSection,
    ConfigError,
    RetrainConfig,
    apply_condition,
    apply_overrides,
    condition_label,
    expand_runs,
    load_config,
    parse_overrides,
)
from retrain_ray.config.overrides import parse_param_value

ROOT = Path(__file__).resolve().parents[2]


def test_kebab_and_equals_forms():
    o = parse_overrides(["--max-steps", "40", "--lr=1e-5", "--bp-enabled", "true", "--optim-beta1", "0.8",
                         "--lora-alpha", "16", "--sepa-steps", "7", "--inference-engine", "vllm",
                         "--log-dir", "logs/x", "--resume", "runs/a"])
    cfg = apply_overrides(RetrainConfig(), o)
    assert cfg.training.max_steps == 40 and cfg.training.lr == 1e-5
    assert cfg.backpressure.enabled is True and cfg.optimizer.beta1 == 0.8 and cfg.lora.alpha == 16
    assert cfg.sepa.steps == 7 and cfg.inference.engine == "vllm"
    assert cfg.logging.log_dir == "logs/x" and cfg.resume.from_ == "runs/a"


def test_section_dot_key_form_reaches_campaign():
    o = parse_overrides(["--training.batch_size=3", "--campaign.max_steps", "5"])
    cfg = apply_overrides(RetrainConfig(), o)
    assert cfg.training.batch_size == 3 and cfg.campaign is not None and cfg.campaign.max_steps == 5


def test_repeatable_params_merge_into_tables():
    base = RetrainConfig.model_validate({"algorithm": {"transform_params": {"keep": 1}}})
    o = parse_overrides(["--transform-param", "eta=0.5", "--transform-param=flag=true",
                         "--advantage-param", "eps=1e-6", "--algorithm-param", "beta=2",
                         "--backend-opt", "gradient_checkpointing=false", "--transform-param", "name=abc"])
    cfg = apply_overrides(base, o)
    assert cfg.algorithm.transform_params == {"keep": 1, "eta": 0.5, "flag": True, "name": "abc"}
    assert cfg.algorithm.advantage_params == {"eps": 1e-6} and cfg.algorithm.params == {"beta": 2}
    assert cfg.backend.options == {"gradient_checkpointing": False}


@pytest.mark.parametrize(("text", "value"), [("true", True), ("no", False), ("3", 3), ("2.5", 2.5),
                                             ("[1, 2]", [1, 2]), ('{"a": 1}', {"a": 1}), ("abc", "abc")])
def test_param_values_are_typed(text, value):
    parsed = parse_param_value(text)
    assert parsed == value and type(parsed) is type(value)


def test_unknown_flags_get_suggestions_all_at_once():
    with pytest.raises(ConfigError) as info:
        parse_overrides(["--max-step", "4", "--bp-enabeld", "true", "--training.batchsize=3", "--lr"])
    hints = {i.location: i.hint for i in info.value.issues}
    assert hints["--max-step"] == "did you mean `--max-steps`?"
    assert hints["--bp-enabeld"] == "did you mean `--bp-enabled`?"
    assert hints["--training.batchsize"] == "did you mean `batch_size`?"
    assert "--lr" in hints


def test_bad_override_values_are_reported_with_keys():
    with pytest.raises(ConfigError) as info:
        apply_overrides(RetrainConfig(), parse_overrides(["--batch-size", "0", "--top-p", "x"]))
    assert set(info.value.locations) == {"training.batch_size", "training.top_p"}


def test_bool_flag_without_value():
    assert parse_overrides(["--bp-enabled", "--max-steps", "3"])["backpressure"] == {"enabled": "true"}


def test_labels_as_spec_5_1():
    assert condition_label({"advantage_mode": "maxrl", "transform_mode": "gtpo_sepa",
                            "uncertainty_kind": "predictive_variance"}) == \
        "maxrl+gtpo_sepa~uncertainty_kind=predictive_variance"
    assert condition_label({"advantage_mode": "grpo", "transform_mode": "none", "lr": 5e-5,
                            "bp_enabled": True}) == "grpo+none~bp_enabled=True,lr=5e-05"


def test_default_matrix_conditions_outer_and_campaign_max_steps_wins():
    cfg = RetrainConfig(training={"max_steps": 3}, campaign=CampaignSection(seeds=[7, 8], max_steps=11))
    runs = expand_runs(cfg, run_dir=lambda name: Path("/runs") / name)
    assert [r.run_name for r in runs] == [
        "grpo+none_s7", "grpo+none_s8", "maxrl+none_s7", "maxrl+none_s8", "maxrl+gtpo_s7", "maxrl+gtpo_s8",
        "maxrl+gtpo_hicra_s7", "maxrl+gtpo_hicra_s8", "maxrl+gtpo_sepa_s7", "maxrl+gtpo_sepa_s8"]
    first = runs[0].config
    assert first.training.max_steps == 11 and first.training.seed == 7 and first.campaign is None
    assert first.logging.log_dir == "/runs/grpo+none_s7"
    assert first.backend.adapter_path == "/runs/grpo+none_s7/adapter"
    assert len({r.config.backend.adapter_path for r in runs}) == len(runs)


def test_runs_get_the_whole_config_with_condition_tables():
    cfg = load_config(ROOT / "configs" / "original-campaign.toml", overrides=parse_overrides(
        ["--backend-opt", "gradient_checkpointing=false", "--advantage-param", "eps=0.01"]))
    runs = expand_runs(cfg)
    assert [r.condition_label for r in runs][::2] == [
        "maxrl+gtpo_sepa", "maxrl+gtpo_sepa~uncertainty_kind=predictive_variance",
        "maxrl+delight~lr=5e-05,transform_params={'delight_eta': 0.5}"]
    delight = runs[4].config
    assert delight.algorithm.transform_mode == "delight" and delight.training.lr == 5e-5
    assert delight.algorithm.transform_params == {"delight_eta": 0.5}
    assert delight.backend.options == {"gradient_checkpointing": False}
    assert delight.algorithm.advantage_params == {"eps": 0.01}
    assert runs[2].config.algorithm.uncertainty_kind == "predictive_variance"
    assert runs[0].config.model.lora_rank == 32 and runs[0].config.training.batch_size == 4


def test_section_table_condition_and_replace_semantics():
    base = RetrainConfig.model_validate({"algorithm": {"transform_params": {"a": 1}}})
    cfg = apply_condition(base, {"advantage_mode": "grpo", "transform_mode": "gtpo",
                                 "training": {"lr": 1e-3, "batch_size": 2}, "transform_params": {"b": 2}})
    assert cfg.training.lr == 1e-3 and cfg.training.batch_size == 2
    assert cfg.algorithm.transform_params == {"b": 2}


def test_wandb_names_per_run():
    cfg = RetrainConfig(logging={"wandb_project": "p"}, campaign=CampaignSection(seeds=[1]))
    run = expand_runs(cfg)[0]
    assert (run.config.logging.wandb_group, run.config.logging.wandb_run_name, run.config.logging.wandb_tags) \
        == ("", "grpo+none_s1", "grpo+none,seed1")


def test_single_run_expands_to_one(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('[algorithm]\nadvantage_mode = "grpo"\ntransform_mode = "none"\n[logging]\nlog_dir = "logs/smoke"\n')
    runs = expand_runs(load_config(path))
    assert len(runs) == 1 and runs[0].run_name == "grpo+none_s-1"
    assert runs[0].config.logging.log_dir == "logs/smoke"
    placed = expand_runs(runs[0].config, run_dir=lambda name: Path("/r") / name)[0].config
    assert placed.backend.adapter_path == "/r/grpo+none_s-1/adapter"


def test_every_bad_condition_is_named_when_the_plan_expands_runs():
    conditions = [{"advantage_mode": "grpo", "transform_mode": "none"},
                  {"advantage_mode": "grpo", "transform_mode": "none", "backpressure": {"min_batch_size": 9,
                                                                                       "max_batch_size": 2}},
                  {"advantage_mode": "maxrl", "transform_mode": "gtpo", "backpressure": {"min_batch_size": 5,
                                                                                       "max_batch_size": 1}}]
    cfg = RetrainConfig(campaign=CampaignSection(seeds=[1], conditions=conditions))
    with pytest.raises(ConfigError) as err:
        expand_runs(cfg)
    locations = [issue.location for issue in err.value.issues]
    assert len(locations) == 2
    assert locations[0].startswith("campaign.conditions[1] (") and "min_batch_size" in locations[0]
    assert locations[1].startswith("campaign.conditions[2] (maxrl+gtpo") and "min_batch_size" in locations[1]
