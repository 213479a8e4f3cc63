"""Rewards: boxed-answer extraction and the `[reward]` types (match, math, custom, judge)."""

from retrain_ray.rewards.boxed import MatchReward, boxed, extract_boxed
from retrain_ray.rewards.custom import CustomReward
from retrain_ray.rewards.mathverify import MathVerifyReward
from retrain_ray.rewards.registry import REWARD_BUILDERS, build_reward, build_reward_from_config
from retrain_ray.rewards.types import CORRECT_THRESHOLD, Reward, is_correct

__all__ = [
    "CORRECT_THRESHOLD",
    "REWARD_BUILDERS",
    "CustomReward",
    "MatchReward",
    "MathVerifyReward",
    "Reward",
    "boxed",
    "build_reward",
    "build_reward_from_config",
    "extract_boxed",
    "is_correct",
]
