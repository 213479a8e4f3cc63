"""Batch transforms, reward ties, SEPA scheduler, recipes, plugins, preflight (spec 12.1)."""

from __future__ import annotations

import math

import pytest

from retrain_ray.algorithms import (
    SEPAController,
    batch_normalize,
    cap_advantages,
    is_uniform_group,
    reward_tie_stats,
)
from retrain_ray.algorithms.registry import TransformSpec
from retrain_ray.checks.probe import preflight
from retrain_ray.run.plugin_modes import ALGORITHMS, TRANSFORMS, compute_group_advantages

approx = pytest.approx


# --- REINFORCE++ batch normalisation (test_reinforce_pp) -------------------------------------------

def test_batch_normalize_mean0_std1_and_zeros_preserved():
    advs = [[0.0, 0.0, 1.0, 3.0], [0.0, -2.0, 6.0]]
    out, metrics = batch_normalize(advs)
    values = [a for row in out for a in row if a != 0.0]
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    assert mean == approx(0.0, abs=1e-9) and std == approx(1.0, abs=1e-6)
    assert out[0][:2] == [0.0, 0.0] and out[1][0] == 0.0
    assert metrics["batch_adv_count"] == 4.0 and metrics["batch_adv_mean"] == 2.0
    assert metrics["batch_adv_std"] == approx(math.sqrt(8.5))


def test_batch_normalize_opposing_and_uniform_values():
    assert batch_normalize([[1.0, -1.0]])[0][0] == approx([1.0, -1.0])
    assert batch_normalize([[0.0, 2.0], [2.0]])[0] == [[0.0, 0.0], [0.0]]
    assert batch_normalize([[0.0, 0.0]]) == ([[0.0, 0.0]], {"batch_adv_count": 0.0, "batch_adv_mean": 0.0,
                                                             "batch_adv_std": 0.0})


# --- advantage cap (test_advantage_cap) -------------------------------------------------------------

def test_cap_exact_values():
    out, m = cap_advantages([[10.0, -10.0, 1.0]], 5.0)
    assert out == [[5.0, -5.0, 1.0]] and m["adv_cap_fraction"] == approx(2 / 3) and m["adv_cap_magnitude"] == 10.0
    out, m = cap_advantages([[0.0, 0.0, 10.0, 1.0]], 5.0)
    assert out == [[0.0, 0.0, 5.0, 1.0]] and m["adv_cap_fraction"] == 0.5
    _, m = cap_advantages([[50.0, -50.0, 0.1, -0.1]], 5.0)
    assert m["adv_cap_fraction"] == 0.5 and m["adv_cap_magnitude"] == 50.0
    assert cap_advantages([[1.0]], 5.0)[1] == {"adv_cap_fraction": 0.0, "adv_cap_magnitude": 0.0}
    with pytest.raises(ValueError, match="adv_clip_max"):
        cap_advantages([[1.0]], 0.0)


# --- reward ties (test_reward_ties) -----------------------------------------------------------------

def test_reward_ties_exact_values():
    distinct = reward_tie_stats([[0.1, 0.4, 0.8, 1.2]]).metrics
    assert distinct["reward_unique_fraction_mean"] == 1.0 and distinct["reward_tie_pair_rate"] == 0.0
    near = reward_tie_stats([[0.2, 0.2 + 5e-7, 0.9]]).metrics
    assert near["reward_unique_fraction_mean"] == approx(2 / 3) and near["reward_tie_pair_rate"] == approx(1 / 3)
    assert near["reward_tie_groups"] == 1.0 and near["reward_uniform_groups"] == 0.0
    uniform = reward_tie_stats([[0.5, 0.5 + 4e-7, 0.5 + 8e-7]])
    assert uniform.uniform_G == [True] and uniform.metrics["reward_tie_pair_rate"] == 1.0
    assert uniform.metrics["reward_uniform_group_rate"] == 1.0
    empty = reward_tie_stats([[], [0.3]]).metrics
    assert empty["reward_tie_eligible_groups"] == 0.0 and empty["reward_tie_group_rate"] == 0.0


def test_reward_ties_over_several_groups():
    stats = reward_tie_stats([[1, 0, 0, 1], [1, 1, 1, 1], [0.1, 0.2, 0.3, 0.4]])
    assert stats.uniform_G == [False, True, False]
    assert stats.metrics["reward_tie_eligible_groups"] == 3.0
    assert stats.metrics["reward_tie_groups"] == 2.0
    assert stats.metrics["reward_tie_pair_rate"] == approx((2 + 6 + 0) / 18)
    assert stats.metrics["reward_unique_fraction_mean"] == approx((0.5 + 0.25 + 1.0) / 3)
    assert is_uniform_group([2.0]) and not is_uniform_group([])


# --- SEPA scheduler (test_sepa) ----------------------------------------------------------------------

def test_sepa_linear_schedule():
    c = SEPAController(sepa_steps=100)
    assert [c.resolve_lambda(s) for s in (0, 50, 100, 200)] == [0.0, 0.5, 1.0, 1.0]
    d = SEPAController(sepa_steps=100, sepa_delay_steps=50)
    assert [d.resolve_lambda(s) for s in (0, 50, 100, 150)] == [0.0, 0.0, 0.5, 1.0]
    assert not SEPAController().enabled() and SEPAController(sepa_schedule="auto").enabled()


def test_sepa_gate_is_sticky_and_ignores_nan():
    c = SEPAController(sepa_steps=100, sepa_correct_rate_gate=0.3)
    assert c.resolve_lambda(50) == 0.0
    c.observe_correct_rate(0.2)
    c.observe_correct_rate(float("nan"))
    c.observe_correct_rate(None)
    assert c.resolve_lambda(50) == 0.0
    c.observe_correct_rate(0.3)
    assert c.resolve_lambda(50) == 0.5
    c.observe_correct_rate(0.1)
    assert c.gate_open and c.resolve_lambda(50) == 0.5


def test_sepa_auto_schedule():
    c = SEPAController(sepa_schedule="auto", sepa_warmup=2, sepa_ema_decay=0.0)
    c.update_auto_state([0, 10])
    c.update_auto_state([0, 10])
    assert c.var_0 == 25.0
    c.update_auto_state([5, 5])
    assert c.resolve_lambda(0) == 1.0
    d = SEPAController(sepa_steps=100, sepa_schedule="auto", sepa_warmup=1, sepa_ema_decay=0.0)
    d.update_auto_state([5, 5])
    assert d.resolve_lambda(50) == 1.0
    e = SEPAController(sepa_schedule="auto", sepa_warmup=5)
    e.update_auto_state([-1.0, float("nan"), float("inf"), 1e300, 2.0])
    assert e.warmup_seen == 1 and e.var_ema == 0.0


def test_sepa_state_round_trip_and_validation():
    c = SEPAController(sepa_steps=10, sepa_schedule="auto", sepa_warmup=1, sepa_correct_rate_gate=0.5)
    c.observe_correct_rate(0.9)
    c.update_auto_state([1.0, 3.0])
    state = c.state_dict()
    assert state["var_ema"] == 1.0 and state["gate_open"] is True and state["sepa_steps"] == 10
    fresh = SEPAController(sepa_steps=10, sepa_schedule="auto", sepa_warmup=1, sepa_correct_rate_gate=0.5)
    fresh.load_state_dict({**state, "sepa_steps": 999})
    assert fresh.state_dict() == state
    with pytest.raises(ValueError, match="var_0"):
        fresh.load_state_dict({"var_0": float("nan")})
    with pytest.raises(ValueError, match="schedule"):
        SEPAController(sepa_schedule="cosine")
    with pytest.raises(ValueError, match="correct_rate_gate"):
        SEPAController(sepa_correct_rate_gate=2.0)


# --- recipes, discover, plugins ----------------------------------------------------------------------

def test_recipe_equals_composition():
    args = ([1.0, 0.0, 0.5], [[-0.1, -2.0], [-1.0], [-0.5, -0.5, -3.0]], [[0, 1], [0], [1, 0, 0]])
    kw = dict(sepa_lambda=0.7, gtpo_beta=0.3)
    recipe = compute_group_advantages(*args, advantage_mode="grpo", transform_mode="none",
                                      algorithm_mode="maxrl_gtpo_sepa", **kw)
    composed = compute_group_advantages(*args, advantage_mode="maxrl", transform_mode="gtpo_sepa", **kw)
    assert recipe.token_advantages == composed.token_advantages


def test_discover_entropic_exact_values():
    kw = dict(advantage_mode="grpo", transform_mode="none", algorithm_mode="discover_entropic")
    flat = compute_group_advantages([0.5, 0.5], [[-1.0], [-1.0]], None, **kw)
    assert flat.token_advantages == [[0.0], [0.0]] and flat.extra_metrics["discover_beta"] == 0.0
    given = compute_group_advantages([1.0, 0.0], [[-1.0, -1.0], [-1.0]], None, algorithm_params={"beta": math.log(3)},
                                     **kw)
    # p = [3/4, 1/4] -> A = [0.5, -0.5]
    assert given.token_advantages == [approx([0.5, 0.5]), approx([-0.5])]
    searched = compute_group_advantages([1.0, 0.0, 0.0], [[-1.0]] * 3, None, **kw)
    assert searched.extra_metrics["discover_kl"] == approx(0.2, abs=1e-5)
    assert sum(row[0] for row in searched.token_advantages) == approx(0.0, abs=1e-12)


def _plugin_advantage(rewards, params):
    return [float(r) * params.get("scale", 2.0) for r in rewards]


def _plugin_uncertainty(data):
    return [1.0 + i for i in range(len(data.logprobs_T))]


def _plugin_transform(ctx):
    return [[a * (1 + 0.1 * t) for t in range(len(lp))] for a, lp in zip(ctx.advantages_G, ctx.logprobs_G_T, strict=True)]


def test_dotted_path_plugins():
    here = __name__
    result = compute_group_advantages(
        [1.0, 0.0], [[-1.0, -1.0], [-1.0]], None, advantage_mode=f"{here}:_plugin_advantage",
        transform_mode="gtpo", uncertainty_kind=f"{here}._plugin_uncertainty", gtpo_beta=1.0,
        advantage_params={"scale": 3.0},
    )
    # A = [3, 0]; uncertainty [1, 2], mu 1.5 -> w = h / 1.5
    assert result.token_advantages == [approx([2.0, 4.0]), [0.0]]
    ctx = compute_group_advantages([1.0, 3.0], [[-1.0, -1.0], [-1.0]], None, advantage_mode="grpo",
                                   transform_mode=f"{here}:_plugin_transform")
    assert ctx.token_advantages == [approx([-1.0, -1.1]), [1.0]]


_NOT_A_PLUGIN = 3
_TRANSFORM_SPEC = TransformSpec("mine", use_gtpo=True)


def _planning_algorithm(ctx):
    return [[1.0] * len(lp) for lp in ctx.logprobs_G_T]


_planning_algorithm.needs_planning = True


def test_plugin_specs_pass_through_functions_are_wrapped_and_other_objects_are_refused():
    here = __name__
    assert TRANSFORMS.resolve(f"{here}:_TRANSFORM_SPEC") is _TRANSFORM_SPEC
    wrapped = TRANSFORMS.resolve(f"{here}:_plugin_transform")
    assert (wrapped.name, wrapped.compute_context, wrapped.needs_planning) == (f"{here}:_plugin_transform",
                                                                               _plugin_transform, False)
    algorithm = ALGORITHMS.resolve(f"{here}:_planning_algorithm")
    assert (algorithm.needs_planning, algorithm.uses_sepa_controller) == (True, False)
    with pytest.raises(ValueError, match=r"transform_mode='.*:_NOT_A_PLUGIN': expected an instance of TransformSpec "
                                         r"or a function of the TransformContext, got int"):
        TRANSFORMS.resolve(f"{here}:_NOT_A_PLUGIN")
    with pytest.raises(ValueError, match=r"algorithm_mode='.*:_NOT_A_PLUGIN': expected an instance of AlgorithmSpec"):
        ALGORITHMS.resolve(f"{here}:_NOT_A_PLUGIN")


# --- preflight (spec 1.3) -----------------------------------------------------------------------------

def test_preflight_scalar_backend_and_entropy_engine():
    assert preflight(True, "maxrl", "gtpo_sepa") == []
    assert preflight(False, "grpo", "none") == []
    assert preflight(False, "grpo", "none", "discover_entropic") == []
    [err] = preflight(False, "maxrl", "gtpo_sepa")
    assert "one advantage per sequence" in err and "maxrl+gtpo_sepa" in err
    [err] = preflight(True, "grpo", "gtpo", uncertainty_kind="shannon", engine_provides_entropy=False)
    assert "shannon_entropy" in err
    errors = preflight(False, "grpo", f"{__name__}:_plugin_transform")
    assert len(errors) == 2 and "probe group 0 varies" in errors[0]
    assert preflight(True, "grpo", "none", "reinforce_pp_delight") == []
    [err] = preflight(False, "grpo", "none", "reinforce_pp_delight_sepa")
    assert "one advantage per sequence" in err


def _raising_transform(ctx):
    raise RuntimeError("boom")


def test_preflight_reports_a_raising_pipeline():
    errors = preflight(True, "grpo", f"{__name__}:_raising_transform")
    assert len(errors) == 2 and "RuntimeError: boom" in errors[0]
