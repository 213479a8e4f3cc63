"""Shape of the RL step: verbs return frozen results, and only `RunLoop.apply` changes the run state.

`rollout` is checked on the real tiny model and the real `match` reward: every group it returns is
complete (texts decoded from the sampled ids, rewards from the reward, planning masks from the
detector) and frozen.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

import retrain_ray.run
from retrain_ray.algorithms import RegexPlanningDetector
from retrain_ray.backends.local import PolicySettings, build_shared_policy
from retrain_ray.data.types import Example
from retrain_ray.engines import SamplingParams
from retrain_ray.models import encode_prompt
from retrain_ray.rewards.boxed import MatchReward
from retrain_ray.run.rollout import CORRECT_THRESHOLD, rollout, rollout_metrics

RUN = Path(retrain_ray.run.__file__).parent
STATE_APPLIERS = {("loop.py", "RunLoop.apply")}


def _state_names(fn: ast.FunctionDef) -> set[str]:
    """`state` and every parameter annotated as a TrainerState."""
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    annotated = {a.arg for a in args if a.annotation is not None and "TrainerState" in ast.unparse(a.annotation)}
    return annotated | {"state"}


def _mutated_attribute(node: ast.AST, names: set[str]) -> str | None:
    """`state.attr` when `node` assigns it (plain, augmented, annotated or via setattr)."""
    targets: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        targets = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
        targets = [node.target]
    elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
        targets = [ast.Attribute(value=node.args[0], attr="<setattr>")]
    flat = [t for target in targets for t in ast.walk(target)]
    for t in flat:
        if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id in names:
            return f"{t.value.id}.{t.attr}"
    return None


def state_mutations(source: str, filename: str) -> list[tuple[str, str, int]]:
    """(file, Class.method, line) of every assignment to the run state outside STATE_APPLIERS."""
    found = []

    def visit(node: ast.AST, qualname: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{qualname}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name, names = f"{qualname}{child.name}", _state_names(child)
                for inner in ast.walk(child):
                    attr = _mutated_attribute(inner, names)
                    if attr and (filename, name) not in STATE_APPLIERS:
                        found.append((filename, f"{name}: {attr}", inner.lineno))
            else:
                visit(child, qualname)

    visit(ast.parse(source), "")
    return found


def test_only_runloop_apply_changes_the_run_state():
    """run/ has no verb that mutates run state it does not return (issue 16, Done when)."""
    sources = {p.name: p.read_text() for p in RUN.glob("*.py") if p.name != "state.py"}
    found = [m for name, text in sources.items() for m in state_mutations(text, name)]
    assert not found, f"only RunLoop.apply may assign to the run state; also assigned in: {found}"
    assert "def apply(" in sources["loop.py"]


@pytest.mark.parametrize("body", [
    "state.example_idx = 3",
    "state.total_correct += 1",
    "setattr(state, 'step', 2)",
    "s.current_batch_size: int = 4",
    "state.a, other = 1, 2",
])
def test_the_state_check_sees_each_way_of_assigning(body):
    source = f"class RunLoop:\n    def sample(self, s: TrainerState, state=None):\n        {body}\n"
    assert [m[1].split(":")[0] for m in state_mutations(source, "loop.py")] == ["RunLoop.sample"]
    assert not state_mutations(source.replace("def sample", "def apply"), "loop.py")


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory):
    return build_shared_policy("builtin:tiny", PolicySettings(finetune="full"), device="cpu",
                               cache_dir=tmp_path_factory.mktemp("models"))


def test_rollout_returns_complete_frozen_groups(tiny_policy):
    engine, _backend, tok = tiny_policy
    examples = [Example("What is 12 + 30?", "42"), Example("Say 7", "7")]
    prompt_ids = [encode_prompt(tok, ex.prompt) for ex in examples]
    detector = RegexPlanningDetector(["the", "is"])
    params = SamplingParams(max_tokens=6, temperature=1.0)
    out = rollout(engine, examples, prompt_ids, group_size=3, params=params, tokenizer=tok, reward=MatchReward(),
                  detect_planning=detector)
    assert [g.example for g in out.groups] == examples and [g.prompt_ids for g in out.groups] == prompt_ids
    for g in out.groups:
        assert len(g.samples_G) == len(g.texts_G) == len(g.rewards_G) == len(g.planning_masks_G) == 3
        assert g.texts_G == [tok.decode(list(s.token_ids), skip_special_tokens=True) for s in g.samples_G]
        assert g.rewards_G == MatchReward().score_batch(g.texts_G, [g.example.reference] * 3)
        assert g.planning_masks_G == [detector(tok.convert_ids_to_tokens(list(s.token_ids))) for s in g.samples_G]
        with pytest.raises(dataclasses.FrozenInstanceError):
            g.rewards_G = []  # type: ignore[misc]
    rewards = [r for g in out.groups for r in g.rewards_G]
    assert out.num_completions == 6 and out.correct_count == sum(r > CORRECT_THRESHOLD for r in rewards)
    assert out.sample_time_s >= 0 and out.score_time_s >= 0
    assert set(rollout_metrics(out.groups, 6)) == {"mean_reward", "correct_rate", "max_token_hit_rate",
                                                  "rl/completion_tokens"}


def test_rollout_without_a_detector_marks_no_planning_and_takes_flags_by_keyword(tiny_policy):
    engine, _backend, tok = tiny_policy
    examples = [Example("Say 7", "7")]
    ids = [encode_prompt(tok, "Say 7")]
    out = rollout(engine, examples, ids, group_size=2, params=SamplingParams(max_tokens=4), tokenizer=tok,
                  reward=MatchReward())
    assert out.groups[0].planning_masks_G == [[0] * len(s.token_ids) for s in out.groups[0].samples_G]
    with pytest.raises(TypeError):
        rollout(engine, examples, ids, 2, SamplingParams(max_tokens=4), tok, MatchReward())  # type: ignore[misc]
