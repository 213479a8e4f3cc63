"""The public surface users and scripts depend on: signatures, metric names, CLI verbs.

A refactor that breaks one of these breaks users' code or dashboards; change them on purpose only.
"""

from __future__ import annotations

import importlib
import inspect

import retrain_ray
from retrain_ray.logs import METRICS_SCHEMA

# Metric names of the original trainer (spec section 8) that users' dashboards and scripts read.
ORIGINAL_METRICS = (
    "step", "condition", "algorithm_mode", "advantage_mode", "transform_mode", "uncertainty_kind",
    "policy_loss_mode", "loss", "mean_reward", "correct_rate", "running_correct_rate",
    "reward_tie_group_rate", "reward_uniform_group_rate", "reward_tie_pair_rate", "reward_unique_fraction_mean",
    "sepa_lambda", "sepa_gate_open", "num_datums", "batch_size", "group_size", "max_token_hit_rate",
    "step_time_s", "sample_time_s", "train_time_s", "train_share", "sample_share", "tokens_per_step",
    "tokens_per_second", "process_max_rss_mb", "bp_warmup", "bp_action", "bp_regime", "bp_p_star",
    "bp_sigma", "bp_kappa", "bp_utilization", "bp_throughput", "clip_fraction", "policy/cov_fraction",
    "policy/abs_kl", "adv_cap_fraction", "adv_cap_magnitude", "exec_surprisal_mean", "exec_surprisal_var",
    "plan_surprisal_mean", "plan_surprisal_var", "post_exec_surprisal_mean", "post_plan_surprisal_mean",
    "exec_entropy_mean", "plan_entropy_mean",
)


def _params(fn) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(fn).parameters)


def test_metrics_schema_keeps_the_original_metric_names():
    missing = [name for name in ORIGINAL_METRICS if name not in METRICS_SCHEMA.names]
    assert not missing


def test_public_names_are_exported():
    for name in ("Campaign", "CampaignResults", "CampaignError", "RetrainConfig", "ConfigError", "load_config",
                 "train_run", "RunOutcome", "compute_group_advantages", "USLController"):
        assert getattr(retrain_ray, name) is not None, name


def test_campaign_facade_signatures():
    init = _params(retrain_ray.Campaign.__init__)
    assert list(init)[:2] == ["self", "config"]
    assert all(p.kind is p.KEYWORD_ONLY for n, p in init.items() if n not in ("self", "config"))
    run = _params(retrain_ray.Campaign.run)
    assert {"address", "progress"} <= set(run)
    assert all(p.kind is p.KEYWORD_ONLY for n, p in run.items() if n != "self")
    assert {"from_toml", "from_dir"} <= set(dir(retrain_ray.Campaign))
    results = retrain_ray.CampaignResults
    for method in ("get_dataframe", "summary", "get_best_result", "history", "from_dir"):
        assert callable(getattr(results, method)), method
    assert "by" in _params(results.summary)
    assert {"metric", "mode"} <= set(_params(results.get_best_result))


def test_train_run_signature():
    params = _params(retrain_ray.train_run)
    assert list(params)[0] == "config"
    expected = {"run_name", "run_dir", "observers", "advisor", "throttle", "resume_from", "policy", "local_logs"}
    assert expected == {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}


def test_compute_group_advantages_signature_and_defaults():
    params = _params(retrain_ray.compute_group_advantages)
    assert list(params)[:3] == ["rewards", "logprobs", "planning_mask"]
    defaults = {n: p.default for n, p in params.items() if p.default is not inspect.Parameter.empty}
    assert defaults["sepa_lambda"] == 0.0
    assert defaults["gtpo_beta"] == 0.1
    assert defaults["hicra_alpha"] == 0.2
    assert defaults["uncertainty_kind"] == "surprisal"
    assert {"advantage_mode", "transform_mode"} <= {n for n, p in params.items() if p.kind is p.KEYWORD_ONLY}


def test_usl_controller_defaults_are_the_originals():
    params = _params(retrain_ray.USLController)
    defaults = {n: p.default for n, p in params.items()}
    assert defaults["warmup_steps"] == 10
    assert defaults["ema_decay"] == 0.9
    assert defaults["throttle_margin"] == 0.85
    assert defaults["increase_margin"] == 0.5
    assert defaults["min_batch_size"] == 1
    assert defaults["max_batch_size"] == 64
    controller = retrain_ray.USLController()
    for method in ("observe", "recommend", "state_dict", "load_state_dict"):
        assert callable(getattr(controller, method)), method


def test_cli_verbs():
    from retrain_ray import cli

    ours = {"train", "campaign", "resume", "explain", "results", "status", "plot"}
    originals = {"backends", "doctor", "init", "plugins", "resume-check", "status", "top", "explain", "diff",
                 "trace", "squeeze"}  # spec 11 (squeeze is routed by TOML content there)
    assert ours | originals <= set(cli.VERBS)
    for module, function, _ in cli.VERBS.values():
        assert callable(getattr(importlib.import_module(f"retrain_ray.cli.{module}"), function))
