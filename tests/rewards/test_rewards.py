"""Rewards: boxed extraction (spec 9), match, math_verify, custom (sync/async), judge, registry."""

from __future__ import annotations

import asyncio
import textwrap
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.rewards import (
    CORRECT_THRESHOLD,
    MathVerifyReward,
    boxed,
    build_reward,
    extract_boxed,
    is_correct,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("The answer is \\boxed{42}.", "42"),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{{a}{b{c}}} tail", "{a}{b{c}}"),
        ("first \\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{  7  }", "7"),
        ("\\boxed{3 {unbalanced  ", "3 {unbalanced"),
        ("no box here", ""),
        ("", ""),
        ("\\boxed{}", ""),
        ("\\boxed 5", ""),
        ("\\fbox{5}", ""),
        ("\\boxed{1} \\boxed{\\sqrt{2}+{1}} end", "\\sqrt{2}+{1}"),
    ],
)
def test_extract_boxed_cases(text: str, expected: str) -> None:
    assert extract_boxed(text) == expected


@given(st.text(alphabet=st.characters(blacklist_characters="{}\\"), max_size=30), st.text(max_size=30))
def test_extract_boxed_round_trips_brace_free_answers(answer: str, prefix: str) -> None:
    assert extract_boxed(prefix + boxed(answer)) == answer.strip()


def test_match_reward_exact_string() -> None:
    reward = build_reward("match")
    scores = reward.score_batch(
        ["\\boxed{4}", "so \\boxed{ 4 }", "\\boxed{5}", "4", "\\boxed{4.0}"], ["4", " 4", "4", "4", "4"]
    )
    assert scores == [1.0, 1.0, 0.0, 0.0, 0.0]


def test_score_batch_rejects_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        build_reward("match").score_batch(["a", "b"], ["a"])


def test_correct_threshold_is_strict() -> None:
    assert CORRECT_THRESHOLD == 0.5
    assert not is_correct(0.5) and is_correct(0.51)


def test_math_reward_equivalence_and_garbage() -> None:
    reward = build_reward("math")
    completions = ["\\boxed{1/2}", "\\boxed{\\frac{2}{4}}", "\\boxed{0.6}", "no answer", "\\boxed{)(}{", "\\boxed{x^2}"]
    references = ["0.5", "0.5", "0.5", "0.5", "0.5", "\\frac{}{"]
    assert reward.score_batch(completions, references) == [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_math_reward_caches_reference_parses() -> None:
    reward = MathVerifyReward()
    reward.score_batch(["\\boxed{3}", "\\boxed{4}"], ["3", "3"])
    assert list(reward._ref_cache) == ["3"]


def test_math_reward_off_main_thread_uses_worker_process() -> None:
    reward = MathVerifyReward()
    out: list[list[float]] = []
    thread = threading.Thread(target=lambda: out.append(reward.score_batch(["\\boxed{1/2}", "\\boxed{2}"], ["0.5", "3"])))
    thread.start()
    thread.join(timeout=120)
    reward.close()
    assert out == [[1.0, 0.0]]


def _write_module(tmp_path, monkeypatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_custom_reward_sync(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "my_sync_reward", """
        def score(completion, reference):
            return len(completion) == len(reference)
        def half(completion, reference):
            return "0.5"
    """)
    assert build_reward("custom", "my_sync_reward").score_batch(["ab", "abc"], ["xy", "xy"]) == [1.0, 0.0]
    assert build_reward("custom", "my_sync_reward:half").score_batch(["a"], ["b"]) == [0.5]
    assert build_reward("custom", "my_sync_reward", "half").score_batch(["a"], ["b"]) == [0.5]


def test_custom_reward_async(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "my_async_reward", """
        import asyncio
        async def score(completion, reference):
            await asyncio.sleep(0)
            return 1.0 if completion == reference else 0.25
    """)
    reward = build_reward("custom", "my_async_reward")
    assert reward.score_batch(["a", "b"], ["a", "c"]) == [1.0, 0.25]

    async def inside_running_loop() -> list[float]:
        return reward.score_batch(["x"], ["x"])

    assert asyncio.run(inside_running_loop()) == [1.0]


def test_custom_reward_errors_name_module_and_function(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "my_bad_reward", """
        def score(completion, reference):
            return "not a number"
    """)
    with pytest.raises(ImportError, match="no_such_reward_module"):
        build_reward("custom", "no_such_reward_module")
    with pytest.raises(AttributeError, match="'my_bad_reward' has no callable 'missing'"):
        build_reward("custom", "my_bad_reward", "missing")
    with pytest.raises(TypeError, match="my_bad_reward:score returned 'not a number'"):
        build_reward("custom", "my_bad_reward").score_batch(["a"], ["a"])
    with pytest.raises(ValueError, match="needs custom_module"):
        build_reward("custom", "")


def test_unknown_types_fail_clearly() -> None:  # the judge reward: tests/rewards/test_rewards_judge.py
    with pytest.raises(ValueError, match="unknown \\[reward\\] type 'exact'.*'match'"):
        build_reward("exact")
