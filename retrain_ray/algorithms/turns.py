"""Turn-level credit for multi-turn episodes: MT-GRPO and TL-GRPO (spec 1.5 multi-turn, feature 31).

Pure functions; the run loop gathers the episodes and the environment's replays, these turn them into
per-turn advantages.

  * MT-GRPO: when the environment returns an advantage for every turn of an episode, each turn's
    completion tokens carry that turn's advantage; otherwise the episode-level token advantages are
    cut into the turns in order (all or nothing per episode, as the original).
  * TL-GRPO: each turn of an episode is compared with alternative actions replayed from the same state
    (`branch_rewards`): the turn's advantage is the primary action's z-score among them plus
    `turn_weight` times the episode's outcome advantage, `reward - baseline`, where the baseline is an
    EMA of episode rewards (`ema_update`) carried across steps and checkpoints.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

TURN_WEIGHT = 0.5
EPS = 1e-8


def turn_token_advantages(
    turn_lengths: Sequence[int],
    token_advantages: Sequence[float],
    turn_advantages: Sequence[float] | None,
) -> list[list[float]]:
    """Each turn's completion-token advantages: the environment's per-turn advantage broadcast over the
    turn when it covers every turn (MT-GRPO), else the episode's token advantages cut in turn order."""
    if turn_advantages and len(turn_advantages) >= len(turn_lengths):
        return [[float(turn_advantages[t])] * n for t, n in enumerate(turn_lengths)]
    out: list[list[float]] = []
    offset = 0
    for n in turn_lengths:
        out.append([float(a) for a in token_advantages[offset: offset + n]])
        offset += n
    return out


def tl_grpo_turn_advantages(
    branch_rewards_T: Sequence[Sequence[float]], outcome_advantage: float, turn_weight: float = TURN_WEIGHT
) -> list[float]:
    """One episode's per-turn advantages. `branch_rewards_T[t]` holds the reward deltas of turn t's
    primary action (index 0) and its alternatives; a turn without alternatives gets the weighted outcome
    advantage alone."""
    out: list[float] = []
    weighted = turn_weight * outcome_advantage
    for rewards in branch_rewards_T:
        if len(rewards) < 2:
            out.append(weighted)
            continue
        mean = sum(rewards) / len(rewards)
        std = (sum((r - mean) ** 2 for r in rewards) / len(rewards)) ** 0.5
        out.append((rewards[0] - mean) / (std + EPS) + weighted)
    return out


def outcome_advantages(rewards: Sequence[float], baseline: float) -> list[float]:
    """TL-GRPO's outcome advantage of each episode: its reward minus the EMA baseline."""
    return [float(r) - baseline for r in rewards]


def ema_update(ema: float, rewards: Sequence[float], decay: float) -> float:
    """The baseline after seeing `rewards` in order: `ema <- decay * ema + (1 - decay) * r` for each."""
    for r in rewards:
        ema = decay * ema + (1 - decay) * float(r)
    return ema


@dataclass(frozen=True)
class TurnAction:
    """One turn of a primary episode as the environment judged it: the action it parsed from the
    completion (None: invalid, no action taken), its reward delta and the cumulative reward after it."""

    action: str | None
    reward_delta: float
    cumulative_reward: float


Replay = Callable[[Sequence[str]], float]
"""The cumulative reward of replaying these actions from the episode's start (the state is not touched)."""
LegalActions = Callable[[Sequence[str]], list[str]]
"""The actions open after these actions from the episode's start."""
Alternatives = Callable[[int, Sequence[str]], Sequence[str | None]]
"""Turn index and the actions before it -> the alternative actions to replay there (None: unparseable)."""


def branch_rewards(
    turns: Sequence[TurnAction],
    replay: Replay,
    alternatives: Alternatives,
    *,
    lookahead_steps: int,
) -> list[list[float]]:
    """Per turn, the reward delta of the primary action (first) and of each alternative from
    `alternatives(turn_index, actions_before)`, every one replayed from the same state (an alternative
    the environment could not parse, None, scores 0.0). With
    `lookahead_steps > 0` each is followed by the primary episode's next valid actions, so a delayed
    effect counts, and the primary action is re-measured with the same continuation. An invalid turn
    keeps its own delta only."""
    valid = [t.action for t in turns if t.action is not None]
    out: list[list[float]] = []
    before: list[str] = []
    for index, turn in enumerate(turns):
        if turn.action is None:
            out.append([turn.reward_delta])
            continue
        start = turn.cumulative_reward - turn.reward_delta
        position = len(before)
        continuation = valid[position + 1: position + 1 + lookahead_steps] if lookahead_steps > 0 else []
        primary = replay([*before, turn.action, *continuation]) - start if continuation else turn.reward_delta
        rewards = [primary]
        for alt in alternatives(index, before):
            rewards.append(0.0 if alt is None else replay([*before, alt, *continuation]) - start)
        out.append(rewards)
        before.append(turn.action)
    return out


def action_space_alternatives(
    legal: LegalActions, primary: Sequence[str | None], branch_size: int, rng: random.Random
) -> Alternatives:
    """`branch_mode = "action_space"`: the legal actions other than the primary one, at most
    `branch_size - 1` of them (a seeded sample when there are more)."""

    def pick(turn: int, before: Sequence[str]) -> Sequence[str | None]:
        others = [a for a in legal(before) if a != primary[turn]]
        if len(others) > branch_size - 1:
            others = rng.sample(others, branch_size - 1)
        return others

    return pick
