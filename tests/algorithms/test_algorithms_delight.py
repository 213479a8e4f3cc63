"""Delight gating equals the original on held-out groups (spec 2.4/2.5 table, issue 28).

`tests/reference/delight_reference.json` holds the original retrain 0.3.0's outputs (token advantages,
`dg_*` metrics and surprisal statistics) for four groups written for this test and 16 settings of every
delight variant; `tests/reference/make_delight_reference.py` made it by calling the original's own
`compute_composable_advantages` / `compute_algorithm_advantages` (how to rerun it is in its docstring).
The comparison is exact: same floating-point operations in the same order.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain_ray.algorithms import compute_group_advantages, resolve_modes

REFERENCE = json.loads((Path(__file__).parents[1] / "reference" / "delight_reference.json").read_text())
CASES = REFERENCE["cases"]


def _stats(result) -> dict[str, float]:
    s = result.stats
    return {"exec_mean": s.exec_pre.mean, "exec_var": s.exec_pre.var, "plan_mean": s.plan_pre.mean,
            "plan_var": s.plan_pre.var, "post_exec_mean": s.exec_post.mean, "post_plan_mean": s.plan_post.mean}


@pytest.mark.parametrize("case", CASES, ids=[f"{c['group']}-{c['case']}" for c in CASES])
def test_delight_equals_the_original(case):
    group = REFERENCE["groups"][case["group"]]
    algorithm = case["algorithm_mode"]
    result = compute_group_advantages(
        group["rewards"], group["logprobs"], group["masks"],
        advantage_mode=case["advantage_mode"], transform_mode=case["transform_mode"], algorithm_mode=algorithm,
        sepa_lambda=case["sepa_lambda"],
        transform_params={} if algorithm else case["transform_params"],
        algorithm_params={"transform_params": case["transform_params"]} if algorithm else None,
    )
    assert result.token_advantages == case["token_advs"]
    assert result.extra_metrics == case["extra_metrics"]
    assert _stats(result) == case["stats"]


def test_delight_modes_resolve_with_their_needs():
    assert resolve_modes("grpo", "delight").uses_sepa_controller is False
    assert resolve_modes("grpo", "delight_sepa").uses_sepa_controller is True
    hard = resolve_modes("maxrl", "hard_delight")
    assert hard.uses_sepa_controller and hard.token_varying and not hard.needs_planning and hard.builtin
    assert resolve_modes("grpo", "none", "reinforce_pp_delight_sepa").uses_sepa_controller is True
    assert resolve_modes("grpo", "none", "reinforce_pp_delight").token_varying is True


@pytest.mark.parametrize(("params", "key"), [
    ({"delight_norm_mode": "zscore"}, "delight_norm_mode"),
    ({"delight_normalize": "yes"}, "delight_normalize"),
    ({"delight_eta_mode": "auto"}, "delight_eta_mode"),
    ({"delight_eta_mode": "adaptive", "delight_eta_ema_decay": 1.0}, "delight_eta_ema_decay"),
])
def test_bad_delight_params_name_the_key(params, key):
    with pytest.raises(ValueError, match=key):
        compute_group_advantages([1.0, 0.0], [[-0.5], [-1.0]], None, advantage_mode="grpo",
                                 transform_mode="delight", transform_params=params)
