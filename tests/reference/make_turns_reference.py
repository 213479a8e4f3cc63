"""Writes turns_reference.json: the original retrain 0.3.0's TL-GRPO branch rewards and turn advantages.

Run with the original importable (never imported by the test suite), e.g. from its wheel:
    pip download retrain==0.3.0 --no-deps -d /tmp/orig && (cd /tmp/orig && unzip -o -q *.whl)
    PYTHONPATH=/tmp/orig .venv/bin/python tests/reference/make_turns_reference.py
The toy kernel and the episodes below were written for this file; each case calls the original's own
`verifiers_bridge._run_tl_grpo_branching` (action_space mode, with no more alternatives than
branch_size - 1, so no random choice) and `_compute_tl_grpo_advantages`. The test replays the same
kernel (`kernel_cumulative` is copied there) on action names.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

from retrain.verifiers_bridge import _compute_tl_grpo_advantages, _run_tl_grpo_branching

VALUES = {"a": 1.0, "b": 0.25, "c": -0.5, "wait": 0.0}
ACTIONS = ["a", "b", "c"]


def kernel_cumulative(names: list[str]) -> float:
    total, prev = 0.0, ""
    for i, name in enumerate(names):
        total += VALUES[name] + (0.75 if prev == "c" and name == "a" else 0.0) - 0.1 * i
        prev = name
    return total


def _name(op: dict[str, object]) -> str:
    return str(op["action"]) if op.get("kind") == "act" else "wait"


def _op(name: str) -> dict[str, object]:
    return {"kind": "wait"} if name == "wait" else {"kind": "act", "action": name}


def fork_execute(ops: list[dict[str, object]]) -> dict[str, object]:
    return {"run": {"cumulative_reward": kernel_cumulative([_name(o) for o in ops])}, "legal_actions": ACTIONS}


EPISODES = {
    "all_valid": ["a", "c", "a", "b"],
    "with_invalid": ["c", None, "a", "wait", "b"],
    "single": ["b"],
    "waits": ["wait", "wait", "c"],
}
INVALID_PENALTY = -0.2


def turn_log(actions: list[str | None]) -> list[dict[str, object]]:
    log, names, cumulative = [], [], 0.0
    for action in actions:
        if action is None:
            cumulative += INVALID_PENALTY
            log.append({"valid": False, "operation": None, "reward_delta": INVALID_PENALTY,
                        "cumulative_reward": cumulative})
            continue
        before = kernel_cumulative(names)
        names.append(action)
        # the primary episode's delta is measured by the kernel (plus the penalties so far)
        delta = kernel_cumulative(names) - before
        cumulative += delta
        log.append({"valid": True, "operation": _op(action), "reward_delta": delta, "cumulative_reward": cumulative})
    return log


def main() -> None:
    branch_cases = []
    for name, actions in EPISODES.items():
        for branch_size in (4, 6):
            for lookahead in (0, 1, 2):
                state = {"turn_log": turn_log(actions), "env": SimpleNamespace(fork_execute=fork_execute)}
                rewards = _run_tl_grpo_branching(state, [], None, None, None, branch_mode="action_space",
                                                 branch_size=branch_size, lookahead_steps=lookahead)
                branch_cases.append({"episode": name, "actions": actions, "turn_log": [
                    {"action": _name(e["operation"]) if e["operation"] else None, "reward_delta": e["reward_delta"],
                     "cumulative_reward": e["cumulative_reward"]} for e in state["turn_log"]],
                    "branch_size": branch_size, "lookahead_steps": lookahead, "branch_rewards": rewards})
    advantage_cases = []
    groups = [
        ([[0.5, 0.1, -0.3, 0.0], [1.0], [0.2, 0.2]], [0.25, -1.5, 0.0], 0.4),
        ([[0.0, 0.0, 0.0], [2.0, -1.0]], [1.0, 0.0], 0.0),
        ([[-0.7, 0.3, 0.3, 0.9, 1.1, -2.0]], [0.6], 0.93),
    ]
    for branches, rewards, baseline in groups:
        for use_baseline in (True, False):
            states = [{"reward": r, "advantage": r - 0.5} for r in rewards]
            per_state = [branches for _ in rewards]
            _compute_tl_grpo_advantages(states, per_state, outcome_baseline=baseline if use_baseline else None)
            advantage_cases.append({"branch_rewards": branches, "rewards": rewards, "env_advantages":
                                    [r - 0.5 for r in rewards], "baseline": baseline if use_baseline else None,
                                    "turn_advantages": [s["turn_advantages"] for s in states]})
    out = {"source": "retrain 0.3.0 verifiers_bridge", "branch_cases": branch_cases,
           "advantage_cases": advantage_cases}
    (Path(__file__).parent / "turns_reference.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
