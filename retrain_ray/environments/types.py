"""Contract of a multi-turn environment (`[environment]`, spec 1.5 multi-turn and 9).

An `Environment` hands out examples and starts an `Episode` per rollout (`reset`); the run loop samples
a completion for the episode's current prompt and calls `step` until the episode is done, so every
turn is one datum (the turn's prompt and completion) with its own reward delta. An environment may
give per-turn advantages for a finished group (MT-GRPO). One that can replay action sequences from an
episode's start without touching it (`Branchable`) lets TL-GRPO compare each turn's action with
alternatives from the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from retrain_ray.data.types import Example


@dataclass(frozen=True)
class TurnResult:
    """What the environment made of one completion.

    `action` is what it parsed from the completion (None: invalid, nothing done); `reward` the turn's
    reward delta; `observation` the next turn's whole prompt (the conversation so far and the
    environment's reply), None when `done`."""

    action: str | None
    reward: float
    done: bool
    observation: str | None = None


class Episode(Protocol):
    """One rollout of one example: a prompt per turn, a `TurnResult` per completion."""

    def prompt(self) -> str:
        """The first turn's prompt."""
        ...

    def step(self, completion: str) -> TurnResult: ...

    def reward(self) -> float:
        """The episode's reward once it is done (scored like a single-turn reward: > 0.5 is correct)."""
        ...


@runtime_checkable
class Environment(Protocol):
    """A multi-turn task: its examples and one `Episode` per rollout."""

    name: str

    def examples(self) -> tuple[list[Example], list[Example]]:
        """Train and eval examples (each example's prompt is its first turn's prompt)."""
        ...

    def reset(self, example: Example) -> Episode: ...

    def turn_advantages(self, episodes: Sequence[Episode]) -> list[list[float]]:
        """MT-GRPO: per-turn advantages of a finished group's episodes ([] for an episode without)."""
        ...


@runtime_checkable
class Branchable(Protocol):
    """An environment TL-GRPO can branch: replays from an example's start leave no trace."""

    def legal_actions(self, example: Example, before: Sequence[str]) -> list[str]:
        """The actions open after `before` (branch_mode = "action_space")."""
        ...

    def replay(self, example: Example, actions: Sequence[str]) -> float:
        """The cumulative reward of taking `actions` from the start (an action may be illegal: it scores
        as the environment scores an invalid turn)."""
        ...

    def parse_action(self, completion: str) -> str | None:
        """The action a completion names (branch_mode = "llm"); None when it names none."""
        ...
