"""Writes delight_reference.json: the original retrain 0.3.0's delight outputs on held-out groups.

Run with the original installed in a throwaway venv (never imported by the test suite):
    python -m venv /tmp/origvenv && /tmp/origvenv/bin/pip install retrain==0.3.0 -c constraints/cpu.txt
    /tmp/origvenv/bin/python tests/reference/make_delight_reference.py
The groups below were written for this file (not taken from the original's tests); each case calls the
original's own `compute_composable_advantages` / `compute_algorithm_advantages`.
"""

from __future__ import annotations

import json
from pathlib import Path

from retrain.advantages import compute_algorithm_advantages, compute_composable_advantages

GROUPS = {
    "mixed": {
        "rewards": [1.0, 0.0, 0.0, 1.0, 0.5],
        "logprobs": [[-0.1, -2.3, -0.01, -4.0], [-1.5, -0.2, -0.7], [-0.05, -3.1, -0.9, -0.4, -60.0],
                     [-0.3], [-0.8, -0.02]],
        "masks": [[0, 1, 0, 0], [0, 0, 0], [1, 1, 0, 0, 0], [0], [0, 1]],
    },
    "sparse": {
        "rewards": [0.0, 0.0, 1.0],
        "logprobs": [[-0.001, -0.002, -0.003, -9.5], [-2.0, -2.0, -2.0], [-0.6, -0.0001, -7.25, -1.1, -0.3, -0.3]],
        "masks": [[0, 0, 0, 0], [0, 0, 0], [0, 0, 1, 1, 0, 0]],
    },
    "tied": {
        "rewards": [1.0, 1.0],
        "logprobs": [[-0.5, -1.0], [-2.0]],
        "masks": [[0, 0], [0]],
    },
    "instruct": {
        "rewards": [0.2, 0.9, 0.4, 0.0],
        "logprobs": [[-0.03, -0.05, -0.02, -0.9], [-0.01, -0.2, -0.04], [-0.06, -0.07, -0.05, -0.08, -0.5],
                     [-0.02, -1.7]],
        "masks": [[0, 0, 0, 0], [0, 0, 0], [0, 0, 0, 0, 0], [0, 0]],
    },
}

COMPOSABLE = [
    ("delight_default", "grpo", "delight", 0.0, {}),
    ("delight_eta_half", "grpo", "delight", 0.0, {"delight_eta": 0.5}),
    ("delight_scale", "grpo", "delight", 0.0, {"delight_norm_mode": "scale"}),
    ("delight_mad", "grpo", "delight", 0.0, {"delight_norm_mode": "mad_scale", "delight_eta": 2.0}),
    ("delight_normalize_flag", "maxrl", "delight", 0.0, {"delight_normalize": True}),
    ("delight_adaptive", "grpo", "delight", 0.0, {"delight_eta_mode": "adaptive"}),
    ("delight_adaptive_gap", "grpo", "delight", 0.0,
     {"delight_eta_adaptive": True, "delight_eta_target_ordering_gap": 0.4, "delight_norm_mode": "scale"}),
    ("delight_adaptive_ema", "grpo", "delight", 0.0,
     {"delight_eta_mode": "adaptive", "delight_eta_prev": 0.7, "delight_eta_ema_decay": 0.8,
      "delight_eta_target_neutral_frac": 0.3, "delight_eta_min": 0.1, "delight_eta_max": 3.0}),
    ("delight_sepa_ramp", "grpo", "delight_sepa", 0.3, {}),
    ("delight_sepa_zero", "grpo", "delight_sepa", 0.0, {}),
    ("delight_sepa_override", "maxrl", "delight_sepa", 0.1,
     {"delight_lambda": 1.0, "delight_norm_mode": "mad_scale", "delight_eta_mode": "adaptive",
      "delight_eta_prev": 2.0, "delight_eta_ema_decay": 0.5}),
    ("hard_delight_full", "grpo", "hard_delight", 1.0, {}),
    ("hard_delight_blend", "grpo", "hard_delight", 0.5, {"delight_k_frac": 0.5}),
    ("hard_delight_override", "maxrl", "hard_delight", 0.0, {"delight_lambda": 0.8, "delight_k_frac": 0.34}),
]

ALGORITHMS = [
    ("rpp_delight", "reinforce_pp_delight", 0.0, {"delight_eta": 0.75}),
    ("rpp_delight_sepa", "reinforce_pp_delight_sepa", 0.6, {"delight_eta_mode": "adaptive"}),
]


def _result(res) -> dict:
    s = res.stats
    return {
        "token_advs": res.token_advs,
        "extra_metrics": res.extra_metrics,
        "stats": {"exec_mean": s.exec_mean, "exec_var": s.exec_var, "plan_mean": s.plan_mean, "plan_var": s.plan_var,
                  "post_exec_mean": s.post_exec_mean, "post_plan_mean": s.post_plan_mean},
    }


def main() -> None:
    cases = []
    for gname, g in GROUPS.items():
        for name, adv, transform, lam, params in COMPOSABLE:
            res = compute_composable_advantages(
                g["rewards"], g["logprobs"], g["masks"], advantage_mode=adv, transform_mode=transform,
                sepa_lambda=lam, transform_params=params,
            )
            cases.append({"group": gname, "case": name, "advantage_mode": adv, "transform_mode": transform,
                          "algorithm_mode": "", "sepa_lambda": lam, "transform_params": params, **_result(res)})
        for name, alg, lam, params in ALGORITHMS:
            res = compute_algorithm_advantages(
                g["rewards"], g["logprobs"], g["masks"], algorithm_mode=alg, sepa_lambda=lam,
                params={"transform_params": params},
            )
            cases.append({"group": gname, "case": name, "advantage_mode": "grpo", "transform_mode": "none",
                          "algorithm_mode": alg, "sepa_lambda": lam, "transform_params": params, **_result(res)})
    out = {"source": "retrain==0.3.0 (PyPI), retrain.advantages", "groups": GROUPS, "cases": cases}
    Path(__file__).with_name("delight_reference.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
