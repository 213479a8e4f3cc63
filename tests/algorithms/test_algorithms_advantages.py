"""Exact-value tests of the advantage pipeline (spec 12.1, test_advantages / test_credit_invariants)."""

from __future__ import annotations

import math

import pytest

from retrain_ray.algorithms import (
    RegexPlanningDetector,
    compute_group_advantages,
    entropy_mask,
    grpo,
    gtpo_weighting,
    hicra,
    mask_threshold,
    maxrl,
    parse_strategic_grams,
    planning_mask,
    reinforce_pp,
    sepa_amp,
    sepa_amp_c,
    sepa_pool,
    split_stats,
)
from retrain_ray.algorithms.uncertainty import UncertaintyInput, predictive_variance, shannon_entropy
from retrain_ray.run.plugin_modes import resolve_modes

approx = pytest.approx


def test_grpo_exact_values():
    advs = grpo([1, 0, 0, 1])
    assert sum(advs) == approx(0.0) and advs[0] > 0 and advs[1] < 0
    assert advs == [0.5, -0.5, -0.5, 0.5]
    assert grpo([0.5, 0.5, 0.5]) == [0.0, 0.0, 0.0]
    assert grpo([1]) == [0.0]
    assert grpo([]) == []
    assert reinforce_pp([1, 0, 0, 1]) == grpo([1, 0, 0, 1])


def test_maxrl_exact_values():
    assert maxrl([0, 0, 0]) == [0.0, 0.0, 0.0]
    assert abs(maxrl([1, 1, 0])[0]) < abs(maxrl([1, 0])[0])
    assert maxrl([1, 0]) == approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
    assert maxrl([]) == []


def test_gtpo_exact_values():
    assert gtpo_weighting(1.0, [0.5, 0.5, 0.5]) == approx([1.0, 1.0, 1.0])
    assert gtpo_weighting(2.0, [0.1, 3.0], beta=0.0) == [2.0, 2.0]
    assert gtpo_weighting(1.0, [0.0, 0.0, 0.0]) == [1.0, 1.0, 1.0]
    assert gtpo_weighting(1.0, []) == []
    # h = [1, 3], mu = 2: w = 1 + 0.1 (h/2 - 1) = [0.95, 1.05]
    assert gtpo_weighting(2.0, [1.0, 3.0]) == approx([1.9, 2.1])
    # beta = 2 clamps a weight at 0: w = max(0, 1 + 2 (0.1/1.05... - 1))
    assert gtpo_weighting(1.0, [0.0, 2.0], beta=2.0)[0] == 0.0


def test_hicra_exact_values():
    assert hicra([1, 1, 1], [0, 1, 0], alpha=0.2) == approx([1.0, 1.2, 1.0])
    assert hicra([-1, -1], [0, 1], alpha=0.2) == approx([-1.0, -0.8])
    with pytest.raises(ValueError, match="planning mask"):
        hicra([1, 1], [0])
    with pytest.raises(ValueError, match="hicra.alpha"):
        hicra([-1.0], [1], alpha=1.5)


def test_sepa_exact_values():
    assert sepa_pool([0.1, 0.5, 0.9], [1, 0, 0], 1.0) == approx([0.1, 0.7, 0.7])
    assert sepa_pool([0.2, 0.8], [0, 0], 0.5) == approx([0.35, 0.65])
    assert sepa_amp([0.1, 0.5, 0.9], [1, 0, 0], 1.0) == approx([0.1, 0.3, 1.1])
    assert sepa_amp_c([0.05, 0.95], [0, 0], 1.0) == approx([0.0, 1.4])
    assert sepa_amp([0.05, 0.95], [0, 0], 1.0) == approx([-0.4, 1.4])
    assert sepa_pool([0.2, 0.8], [1, 1], 1.0) == [0.2, 0.8]  # no execution tokens
    assert sepa_pool([0.2, 0.8], [0, 0], 7.0) == approx([0.5, 0.5])  # lambda clipped to 1


def test_entropy_stats_exact_values():
    exec_stats, plan_stats = split_stats([0.1, 0.3, 0.5]), split_stats([0.2, 0.4])
    assert exec_stats.mean == approx(0.3) and exec_stats.count == 3
    assert exec_stats.var == approx(((0.2**2) * 2) / 3)
    assert plan_stats.mean == approx(0.3) and plan_stats.count == 2
    assert split_stats([]).count == 0 and split_stats([]).mean == 0.0
    assert split_stats([100.0]).mean == 50.0  # capped


def test_entropy_mask_exact_values():
    advs = [[1.0, 1.0, 1.0, 1.0]]
    out, metrics = entropy_mask(advs, [[1, 2, 3, 4]], 0.5)
    assert out == [[0.0, 0.0, 1.0, 1.0]]
    assert metrics == {"entropy_mask_threshold": 3.0, "entropy_mask_fraction": 0.5}
    assert entropy_mask(advs, [[1, 2, 3, 4]], 0.0)[0] == [[0.0] * 4]
    assert entropy_mask(advs, [[1, 2, 3, 4]], 1.0)[0] == advs
    assert mask_threshold([], 0.5) == 0.0
    assert entropy_mask([[1.0, 2.0, 3.0]], [[0.7, 0.7, 0.7]], 0.2)[0] == [[1.0, 2.0, 3.0]]


def test_entropy_mask_threshold_is_per_group_across_completions():
    out, _ = entropy_mask([[1.0, 1.0], [-1.0, -1.0]], [[0.1, 5.0], [4.0, 0.2]], 0.5)
    assert out == [[0.0, 1.0], [-1.0, 0.0]]


def test_predictive_variance_exact_values():
    lps = [math.log(0.5), math.log(0.9), math.log(0.1), -100.0, 0.0]
    assert predictive_variance(UncertaintyInput(lps)) == approx([0.25, 0.09, 0.09, 0.0, 0.0], abs=1e-12)


def test_shannon_entropy_from_entropies_or_distributions_or_error():
    assert shannon_entropy(UncertaintyInput([-1.0, -2.0], entropies_T=[0.3, 80.0])) == [0.3, 50.0]
    dist = shannon_entropy(UncertaintyInput([-0.7], distributions_T=[[0.5, 0.5, 0.0]]))
    assert dist == approx([math.log(2)])
    with pytest.raises(ValueError, match="entropies"):
        shannon_entropy(UncertaintyInput([-1.0]))


def test_planning_mask_exact_values():
    assert planning_mask(["let", "me", "think", "about", "this"]) == [1, 1, 1, 0, 0]
    assert planning_mask(["▁let", "▁me", "▁think"]) == [1, 1, 1]
    assert planning_mask(["that's", "not", "right,", "let", "me", "check."]) == [1] * 6
    assert planning_mask(["Ġthe", "Ġanswer", "Ġis", "Ġ4"]) == [0, 0, 0, 0]
    assert planning_mask([]) == []


def test_planning_grams_override():
    assert parse_strategic_grams("") == list(RegexPlanningDetector().grams)
    assert parse_strategic_grams('["hmm so"]') == ["hmm so"]
    assert parse_strategic_grams("hmm so, ok then") == ["hmm so", "ok then"]
    detector = RegexPlanningDetector.from_grams_text("hmm so")
    assert detector(["hmm", "so", "let", "me", "think"]) == [1, 1, 0, 0, 0]
    with pytest.raises(ValueError, match="strategic_grams"):
        parse_strategic_grams("[1, 2]")


def test_pipeline_none_broadcasts_and_reports_surprisal_stats():
    result = compute_group_advantages(
        [1.0, 0.0], [[-0.1, -0.3], [-2.0]], [[0, 1], [0]], advantage_mode="grpo", transform_mode="none"
    )
    assert result.token_advantages == [[0.5, 0.5], [-0.5]]
    assert result.stats.exec_pre.mean == approx(1.05) and result.stats.plan_pre.mean == approx(0.3)
    assert result.stats.as_metrics()["post_exec_surprisal_mean"] == approx(1.05)


def test_pipeline_gtpo_hicra_exact_values():
    # grpo A = [0.5, -0.5]; completion 0 surprisal [1, 3] -> w [0.95, 1.05]; token 1 is planning.
    result = compute_group_advantages(
        [1.0, 0.0], [[-1.0, -3.0], [-2.0, -2.0]], [[0, 1], [0, 0]],
        advantage_mode="grpo", transform_mode="gtpo_hicra", gtpo_beta=0.1, hicra_alpha=0.2,
    )
    assert result.token_advantages[0] == approx([0.475, 0.525 * 1.2])
    assert result.token_advantages[1] == approx([-0.5, -0.5])


def test_pipeline_gtpo_sepa_pools_before_weighting():
    # lambda = 1 pools execution surprisal to its mean, so execution tokens share one weight.
    result = compute_group_advantages(
        [1.0, 0.0], [[-1.0, -3.0, -0.5], [-2.0]], [[0, 0, 1], [0]],
        advantage_mode="grpo", transform_mode="gtpo_sepa", sepa_lambda=1.0,
    )
    row = result.token_advantages[0]
    assert row[0] == approx(row[1])
    assert result.stats.exec_post.var == approx(0.0)
    assert result.stats.exec_pre.var == approx(2 / 3)  # group exec values [1, 3, 2]


def test_pipeline_entropy_mask_uses_rho_from_params():
    kwargs = dict(advantage_mode="grpo", transform_mode="entropy_mask", gtpo_beta=0.0)
    off = compute_group_advantages([1.0, 0.0], [[-1.0, -4.0], [-2.0, -3.0]], None, **kwargs)
    assert off.token_advantages == [[0.5, 0.5], [-0.5, -0.5]] and off.extra_metrics == {}
    on = compute_group_advantages(
        [1.0, 0.0], [[-1.0, -4.0], [-2.0, -3.0]], None, transform_params={"surprisal_mask_rho": 0.5}, **kwargs
    )
    assert on.token_advantages == [[0.0, 0.5], [0.0, -0.5]]
    assert on.extra_metrics == {"entropy_mask_threshold": 3.0, "entropy_mask_fraction": 0.5}


def test_pipeline_shannon_needs_entropies():
    kwargs = dict(advantage_mode="grpo", transform_mode="gtpo", uncertainty_kind="entropy")
    with pytest.raises(ValueError, match="entropies"):
        compute_group_advantages([1.0, 0.0], [[-1.0], [-2.0]], None, **kwargs)
    result = compute_group_advantages([1.0, 0.0], [[-1.0, -1.0], [-2.0]], None, entropies=[[1.0, 3.0], [2.0]], **kwargs)
    assert result.token_advantages[0] == approx([0.475, 0.525])


def test_uncertainty_override_in_transform_params():
    modes = resolve_modes("grpo", "gtpo", "", "surprisal", {"uncertainty_metric": "pred_var"})
    assert modes.uncertainty_kind == "predictive_variance"
    with pytest.raises(ValueError, match="conflicts"):
        resolve_modes("grpo", "gtpo", "", "entropy", {"token_uncertainty": "nll"})
    with pytest.raises(ValueError, match="varentropy"):
        resolve_modes("grpo", "gtpo", "", "varentropy")


def test_resolve_modes_flags_and_errors():
    assert resolve_modes("maxrl", "gtpo_sepa").uses_sepa_controller
    assert resolve_modes("maxrl", "gtpo_hicra").needs_planning
    assert not resolve_modes("grpo", "none").token_varying
    recipe = resolve_modes("grpo", "none", "maxrl_gtpo_sepa")
    assert recipe.needs_planning and recipe.uses_sepa_controller and recipe.label == "maxrl_gtpo_sepa"
    assert resolve_modes("grpo", "gtpo").label == "grpo+gtpo"
    with pytest.raises(ValueError, match="transform_mode='gtpo_sepaa'"):
        resolve_modes("grpo", "gtpo_sepaa")
    with pytest.raises(ValueError, match="not supported"):
        resolve_modes("grpo", "gtpo", uncertainty_kind="varentropy")
    with pytest.raises(ValueError, match="cannot import"):
        resolve_modes("nosuchpkg.mod:fn", "none")


def test_shape_mismatch_errors_name_the_completion():
    with pytest.raises(ValueError, match="completion 1"):
        compute_group_advantages([1, 0], [[-1.0], [-1.0, -2.0]], [[0], [0]], advantage_mode="grpo", transform_mode="gtpo")
    with pytest.raises(ValueError, match="2 rewards"):
        compute_group_advantages([1, 0], [[-1.0]], None, advantage_mode="grpo", transform_mode="none")
