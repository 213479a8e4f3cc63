"""`[reward] workers = N`: the same scores as one worker, crashed workers replaced, per-item timeouts."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from retrain_ray.config import ConfigError, build_config
from retrain_ray.rewards import build_reward
from retrain_ray.rewards.custom import CustomReward, RewardTimeoutError
from retrain_ray.rewards.mathverify import MathVerifyReward


def _write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))


def test_workers_give_the_same_scores_in_input_order(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "par_len_reward", """
        def score(completion, reference):
            return len(completion) / (1 + len(reference))
    """)
    completions = [f"c{'x' * i}" for i in range(24)]
    references = [str(i) for i in range(24)]
    serial = build_reward("custom", "par_len_reward").score_batch(completions, references)
    parallel = build_reward("custom", "par_len_reward", workers=2)
    try:
        assert parallel.score_batch(completions, references) == serial
        assert parallel.score_batch(completions[:3], references[:3]) == serial[:3]  # the pool is reused
    finally:
        parallel.close()  # type: ignore[attr-defined]


def test_math_reward_with_workers_matches_serial() -> None:
    completions = ["\\boxed{1/2}", "\\boxed{2}", "no answer", "\\boxed{\\frac{6}{4}}"]
    references = ["0.5", "3", "1", "1.5"]
    reward = MathVerifyReward(workers=2)
    try:
        assert reward.score_batch(completions, references) == MathVerifyReward().score_batch(completions, references)
    finally:
        reward.close()


def test_a_crashed_worker_is_replaced_and_each_item_scored_once(tmp_path, monkeypatch) -> None:
    marker, calls = tmp_path / "crashed", tmp_path / "calls"
    _write_module(tmp_path, monkeypatch, "par_crash_reward", f"""
        import os
        def score(completion, reference):
            if completion == "c5" and not os.path.exists({str(marker)!r}):
                open({str(marker)!r}, "w").close()
                os._exit(3)
            with open({str(calls)!r}, "a") as f:
                f.write(completion + "\\n")
            return float(completion[1:])
    """)
    completions = [f"c{i}" for i in range(12)]
    reward = CustomReward("par_crash_reward", workers=2)
    try:
        assert reward.score_batch(completions, ["r"] * 12) == [float(i) for i in range(12)]
    finally:
        reward.close()
    assert marker.exists()
    scored = calls.read_text().split()
    assert set(scored) == set(completions)
    # only the items in flight when the worker died (at most one per worker) run twice
    assert len(scored) <= len(completions) + 2


def test_a_worker_that_always_crashes_fails_with_a_clear_error(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "par_always_crash", """
        import os
        def score(completion, reference):
            os._exit(3)
    """)
    reward = CustomReward("par_always_crash", workers=2)
    with pytest.raises(RuntimeError, match="par_always_crash:score: a worker process died .*workers = 1"):
        reward.score_batch(["a", "b"], ["a", "b"])


def test_the_timeout_applies_per_item(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "par_slow_reward", """
        import time
        def score(completion, reference):
            if completion == "slow":
                time.sleep(60)
            return 1.0
    """)
    reward = CustomReward("par_slow_reward", timeout_s=1.0, workers=2)
    try:
        assert reward.score_batch(["a", "b", "c"], ["r"] * 3) == [1.0] * 3  # warms the pool up
        with pytest.raises(RewardTimeoutError, match="par_slow_reward:score did not return within 1 s for completion 2"):
            reward.score_batch(["a", "b", "slow", "d"], ["r"] * 4)
        assert reward.score_batch(["a"], ["r"]) == [1.0]  # a fresh pool replaced the stuck one
    finally:
        reward.close()


def test_async_custom_rewards_keep_their_event_loop(tmp_path, monkeypatch) -> None:
    _write_module(tmp_path, monkeypatch, "par_async_reward", """
        async def score(completion, reference):
            return 1.0 if completion == reference else 0.0
    """)
    reward = CustomReward("par_async_reward", workers=4)
    assert reward._workers is None
    assert reward.score_batch(["a", "b"], ["a", "c"]) == [1.0, 0.0]


def test_workers_key_is_validated() -> None:
    assert build_config({"reward": {"workers": 3}})[0].reward.workers == 3
    assert build_config({})[0].reward.workers == 1
    with pytest.raises(ConfigError, match="workers"):
        build_config({"reward": {"workers": 0}})
