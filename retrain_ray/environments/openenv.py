"""`provider = "openenv"`: an environment served by an OpenEnv server (`[environment] id` is its URL),
played over OpenEnv's WebSocket protocol (environments/openenv_client.py).

Each example is one reset of the server: example `i` resets with `{"seed": seed + i, **reset}`, and its
prompt is the text the reset observation holds under `observation_key`. `examples()` resets once per
example on one connection to read those prompts, so the run can check them against the model's
context before it trains; the example's reference is its seed (the server keeps the answer to itself,
which is why an OpenEnv run has no SFT warm start from its examples). Every episode is then a session of
its own (one connection, one environment instance on the server): its completions go to the server
verbatim as the action field `action_key`, each step's reward is the turn's reward (none counts 0), the
next prompt is the step observation's `observation_key` text (with `append_history`, the conversation
so far followed by that text, for servers that reply with the new message only), and the episode's
reward is the sum of its step rewards. A session closes when the episode is done or its reward is
read, whichever is first.

MT-GRPO (`turn_advantages = true`): each turn's reward minus the group's mean reward on that turn.
TL-GRPO replays actions on fresh sessions from the same reset, so it needs a server whose episodes are
reproducible from their reset arguments; with `branch_mode = "action_space"` it needs `actions`, the
legal actions to branch on (OpenEnv does not publish them).

`[environment] args`: `num_examples` (256), `num_eval` (32), `seed` (0), `reset` (a JSON object of
further reset arguments, {}), `action_key` ("message"), `observation_key` ("prompt"), `append_history`
(false), `turn_advantages` (false), `actions` ([]), `connect_timeout_s` (10), `message_timeout_s` (60),
`retries` (3, with backoff from 0.5 s doubling).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from retrain_ray.data.types import Example
from retrain_ray.environments.openenv_client import Link, OpenEnvError, Reply, Session
from retrain_ray.environments.types import Episode, TurnResult

ARGS = ("num_examples", "num_eval", "seed", "reset", "action_key", "observation_key", "append_history",
        "turn_advantages", "actions", "connect_timeout_s", "message_timeout_s", "retries")


@dataclass(frozen=True)
class Options:
    """`[environment] args` of an OpenEnv environment, checked (defaults in the module docstring)."""

    num_examples: int = 256
    num_eval: int = 32
    seed: int = 0
    reset: dict[str, Any] = field(default_factory=dict[str, Any])
    action_key: str = "message"
    observation_key: str = "prompt"
    append_history: bool = False
    turn_advantages: bool = False
    actions: tuple[str, ...] = ()


def parse_options(url: str, args: Mapping[str, object]) -> tuple[Options, Link]:
    """The options, and the link to the server at `url` with its waits, from `[environment] args`; a bad
    one names its key."""
    unknown = sorted(set(args) - set(ARGS))
    if unknown:
        raise ValueError(f"environment.args: openenv has no argument {unknown[0]!r} (it takes {', '.join(ARGS)})")
    reset: Any = args.get("reset", {})
    actions: Any = args.get("actions", [])
    if not isinstance(reset, dict):
        raise ValueError(f"environment.args.reset: {reset!r} is not a JSON object (the server's reset arguments)")
    if not isinstance(actions, list) or not all(isinstance(a, str) for a in actions):
        raise ValueError(f"environment.args.actions: {actions!r} is not a list of strings")
    options = Options(
        num_examples=_int(args, "num_examples", 256, 1), num_eval=_int(args, "num_eval", 32, 0),
        seed=_int(args, "seed", 0, 0), reset={str(k): v for k, v in reset.items()},
        action_key=_text(args, "action_key", "message"), observation_key=_text(args, "observation_key", "prompt"),
        append_history=_bool(args, "append_history"), turn_advantages=_bool(args, "turn_advantages"),
        actions=tuple(str(a) for a in actions))
    link = Link(url, connect_timeout_s=_seconds(args, "connect_timeout_s", 10.0),
                message_timeout_s=_seconds(args, "message_timeout_s", 60.0), retries=_int(args, "retries", 3, 0, 20))
    return options, link


@dataclass
class OpenEnvEpisode:
    """One episode: one session on the server."""

    env: OpenEnv
    example: Example
    session: Session
    first_prompt: str
    rewards: list[float] = field(default_factory=list[float])
    done: bool = False
    history: str = field(init=False, default="")

    def __post_init__(self) -> None:
        self.history = self.first_prompt

    def prompt(self) -> str:
        return self.first_prompt

    def step(self, completion: str) -> TurnResult:
        if self.done:
            raise RuntimeError(f"openenv: step after the episode of {self.example.prompt[:40]!r} is done")
        reply = self.session.step({self.env.options.action_key: completion})
        self.rewards.append(self.env.reward_of(reply))
        if reply.done:
            self.finish()
            return TurnResult(completion, self.rewards[-1], done=True)
        text = self.env.text_of(reply)
        self.history = f"{self.history}{completion}{text}"
        return TurnResult(completion, self.rewards[-1], done=False,
                          observation=self.history if self.env.options.append_history else text)

    def reward(self) -> float:
        self.finish()  # the run reads an episode's reward once it is over (done or truncated)
        return sum(self.rewards)

    def finish(self) -> None:
        self.done = True
        self.session.close()


class OpenEnv:
    """The environment at `[environment] id` (see the module docstring)."""

    def __init__(self, url: str, args: Mapping[str, object]) -> None:
        self.options, self.link = parse_options(url, args)
        self.name = f"openenv {url}"

    def examples(self) -> tuple[list[Example], list[Example]]:
        o = self.options
        session = Session(self.link)
        try:
            examples = [Example(self.text_of(session.reset(self.reset_data(str(o.seed + i)))), str(o.seed + i))
                        for i in range(o.num_examples + o.num_eval)]
        finally:
            session.close()
        return examples[: o.num_examples], examples[o.num_examples:]

    def reset(self, example: Example) -> OpenEnvEpisode:
        session = Session(self.link)
        try:
            reply = session.reset(self.reset_data(example.reference))
            if reply.done:
                raise self.link.error(f"ended the episode of seed {example.reference} at its reset")
            return OpenEnvEpisode(self, example, session, self.text_of(reply))
        except BaseException:
            session.close()
            raise

    def turn_advantages(self, episodes: Sequence[Episode]) -> list[list[float]]:
        if not self.options.turn_advantages:
            return [[] for _ in episodes]
        rows = [e.rewards if isinstance(e, OpenEnvEpisode) else [] for e in episodes]
        turns = max((len(r) for r in rows), default=0)
        means = [sum(r[t] for r in rows if t < len(r)) / max(1, sum(t < len(r) for r in rows)) for t in range(turns)]
        return [[r - means[t] for t, r in enumerate(row)] for row in rows]

    def legal_actions(self, example: Example, before: Sequence[str]) -> list[str]:
        if not self.options.actions:
            raise ValueError("environment.args.actions: TL-GRPO with tl_grpo_branch_mode = \"action_space\" needs "
                             "the server's legal actions (an OpenEnv server does not publish them); list them, or "
                             "set tl_grpo_branch_mode = \"llm\"")
        return list(self.options.actions)

    def replay(self, example: Example, actions: Sequence[str]) -> float:
        session = Session(self.link)
        total = 0.0
        try:
            reply = session.reset(self.reset_data(example.reference))
            for action in actions:
                if reply.done:
                    break
                reply = session.step({self.options.action_key: action})
                total += self.reward_of(reply)
        finally:
            session.close()
        return total

    def parse_action(self, completion: str) -> str | None:
        return completion  # the completion is the action, verbatim

    def reset_data(self, reference: str) -> dict[str, Any]:
        try:
            seed = int(reference)
        except ValueError:
            raise ValueError(f"openenv: example reference {reference!r} is no reset seed; OpenEnv examples come "
                             "from the server (environment.args num_examples), not from [data]") from None
        return {**self.options.reset, "seed": seed}

    def text_of(self, reply: Reply) -> str:
        key = self.options.observation_key
        if key not in reply.observation:
            raise self.link.error(f"sent an observation without {key!r} (it has {sorted(reply.observation)}); set "
                                  "[environment] args.observation_key to the field that holds the text")
        return str(reply.observation[key])

    def reward_of(self, reply: Reply) -> float:
        reward = 0.0 if reply.reward is None else reply.reward
        if not math.isfinite(reward):
            raise self.link.error(f"sent reward {reward!r}; every turn reward must be a finite number")
        return reward


def _int(args: Mapping[str, object], key: str, default: int, low: int, high: int = 2**31 - 1) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"environment.args.{key}: {value!r} is not an integer in [{low}, {high}] (default {default})")
    return value


def _seconds(args: Mapping[str, object], key: str, default: float) -> float:
    value = args.get(key, default)
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < math.inf:
        raise ValueError(f"environment.args.{key}: {value!r} is not a positive number of seconds (default {default:g})")
    return float(value)


def _text(args: Mapping[str, object], key: str, default: str) -> str:
    value = args.get(key, default)
    if not isinstance(value, str) or not value:
        raise ValueError(f"environment.args.{key}: {value!r} is not a field name (default {default!r})")
    return value


def _bool(args: Mapping[str, object], key: str) -> bool:
    value = args.get(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"environment.args.{key}: {value!r} is not true or false")
    return value


__all__ = ["OpenEnv", "OpenEnvEpisode", "OpenEnvError", "Options", "parse_options"]
