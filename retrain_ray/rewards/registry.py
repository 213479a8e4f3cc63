"""The reward registry: `[reward] type` -> builder. Unknown types fail with the list of known ones.

`judge` asks an LLM judge on an OpenAI-compatible endpoint (`retrain_ray.rewards.judge`); its
requests hold slots of the run's throttle.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from retrain_ray.plugins.loader import use_search_paths
from retrain_ray.rewards.boxed import MatchReward
from retrain_ray.rewards.custom import CustomReward
from retrain_ray.rewards.final_number import FinalNumberReward
from retrain_ray.rewards.judge import JudgeReward, JudgeSettings
from retrain_ray.rewards.mathverify import MathVerifyReward
from retrain_ray.rewards.types import Reward

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import PluginsSection, RewardSection


def _build_match(**_: Any) -> Reward:
    return MatchReward()


def _build_final_number(**_: Any) -> Reward:
    return FinalNumberReward()


def _build_math(workers: int = 1, **_: Any) -> Reward:
    return MathVerifyReward(workers=workers)


def _build_custom(custom_module: str, custom_function: str, timeout_s: float = 300.0, workers: int = 1,
                  **_: Any) -> Reward:
    return CustomReward(custom_module, custom_function, timeout_s=timeout_s, workers=workers)


def _build_judge(judge: JudgeSettings | None = None, throttle: Any = None, **_: Any) -> Reward:
    s = judge or JudgeSettings()
    return JudgeReward(s.url, model=s.model, prompt=s.prompt, api=s.api, max_tokens=s.max_tokens, throttle=throttle)


REWARD_BUILDERS: dict[str, Callable[..., Reward]] = {
    "match": _build_match,
    "final_number": _build_final_number,
    "math": _build_math,
    "custom": _build_custom,
    "judge": _build_judge,
}


def build_reward(type: str, custom_module: str = "", custom_function: str = "score",  # noqa: A002
                 timeout_s: float = 300.0, workers: int = 1, *, judge: JudgeSettings | None = None,
                 throttle: Any = None) -> Reward:
    """Build the reward named by `[reward] type`; `timeout_s` bounds a custom reward's batch (with
    `workers` > 1, each item); `workers` > 1 scores across that many processes (math and custom;
    match is a string compare, not worth a process). `judge` configures the judge reward, whose
    requests hold slots of `throttle`."""
    builder = REWARD_BUILDERS.get(type)
    if builder is None:
        raise ValueError(
            f"unknown [reward] type {type!r}; choose one of {sorted(REWARD_BUILDERS)}"
        )
    return builder(custom_module=custom_module, custom_function=custom_function or "score", timeout_s=timeout_s,
                   workers=workers, judge=judge, throttle=throttle)


def build_reward_from_config(section: RewardSection, plugins: PluginsSection, throttle: Any = None) -> Reward:
    """Build from the `[reward]` section (type, custom_module, custom_function, timeout_s, workers, the judge
    keys), a custom module looked up under `[plugins] search_paths`."""
    use_search_paths(plugins.search_paths)  # a custom module is looked up under them
    judge = JudgeSettings(section.judge_url, section.judge_model, section.judge_prompt, section.judge_api,
                          section.judge_max_tokens)
    return build_reward(section.type, section.custom_module, section.custom_function, section.timeout_s,
                        section.workers, judge=judge, throttle=throttle)
