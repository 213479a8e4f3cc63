"""`digit_chain`: a two-turn environment shipped with retrain-ray, small enough for the built-in tiny
model on CPU (no download); configs/multiturn.toml trains it (and says what it measured).

Turn 1 shows a digit string ("472"); the answer is its first digit. Turn 2 shows the conversation so
far (the prompt, the completion verbatim) and the answer the environment read, and asks for the digit
after it ("472\\boxed{4}|4>" expects 5), so the second
turn builds on the first: a wrong first answer moves the target of the second. Answers are written
`\\boxed{d}` (the built-in tasks' format, so the SFT warm start teaches it) or as the completion's
first character. A turn scores 1 when right, 0 otherwise; an answer that is no digit is the action
"?" (it still takes its turn, and the next turn then has no right answer). The episode's reward is the
mean over its turns. Replays are exact, so TL-GRPO can branch on
the ten digits (`action_space`) or on sampled completions (`llm`).

`[environment] args`: `num_examples` (train, default 256), `num_eval` (default 32), `digits` (string
length, 1-6, default 3), `seed` (default 0), `turn_advantages` (MT-GRPO: each turn's reward minus the
group's mean reward on that turn; default false).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from retrain_ray.data.types import Example
from retrain_ray.environments.types import Episode, TurnResult
from retrain_ray.rewards.boxed import extract_boxed

DIGITS = [str(d) for d in range(10)]
NO_DIGIT = "?"
TURNS = 2


def parse_digit(completion: str) -> str:
    """The digit a completion answers: its `\\boxed{}` content, else its first non-blank character;
    `NO_DIGIT` when that is no digit."""
    text = extract_boxed(completion) if "\\boxed{" in completion else completion.strip()[:1]
    text = text.strip()
    return text if text in DIGITS else NO_DIGIT


def turn_target(example: Example, turn: int, before: Sequence[str]) -> str | None:
    """The right answer of `turn` after the answers `before` (None: none can be right)."""
    if turn == 0:
        return example.reference
    previous = before[-1] if before else NO_DIGIT
    return None if previous not in DIGITS else str((int(previous) + 1) % 10)


def turn_rewards(example: Example, answers: Sequence[str]) -> list[float]:
    return [float(a == turn_target(example, t, answers[:t])) for t, a in enumerate(answers)]


@dataclass
class DigitChainEpisode:
    example: Example
    answers: list[str]
    transcript: str

    def prompt(self) -> str:
        return self.example.prompt

    def step(self, completion: str) -> TurnResult:
        if len(self.answers) >= TURNS:
            raise RuntimeError("digit_chain: step after the episode is done")
        answer = parse_digit(completion)
        self.answers.append(answer)
        reward = turn_rewards(self.example, self.answers)[-1]
        if len(self.answers) == TURNS:
            return TurnResult(answer, reward, done=True)
        self.transcript = f"{self.transcript}{completion}|{answer}>"
        return TurnResult(answer, reward, done=False, observation=self.transcript)

    def reward(self) -> float:
        return sum(turn_rewards(self.example, self.answers)) / TURNS


class DigitChain:
    """The environment (see the module docstring)."""

    name = "digit_chain"

    def __init__(self, args: Mapping[str, object]) -> None:
        unknown = sorted(set(args) - {"num_examples", "num_eval", "digits", "seed", "turn_advantages"})
        if unknown:
            raise ValueError(f"environment.args: digit_chain has no argument {unknown[0]!r} (it takes num_examples, "
                             "num_eval, digits, seed, turn_advantages)")
        self.num_examples = _int_arg(args, "num_examples", 256, 1, 1_000_000)
        self.num_eval = _int_arg(args, "num_eval", 32, 0, 1_000_000)
        self.digits = _int_arg(args, "digits", 3, 1, 6)
        self.seed = _int_arg(args, "seed", 0, 0, 2**32 - 1)
        self.mt_grpo = bool(args.get("turn_advantages", False))

    def examples(self) -> tuple[list[Example], list[Example]]:
        rng = random.Random(f"digit_chain:{self.digits}:{self.seed}")

        def draw() -> Example:
            text = str(rng.randint(1, 9)) + "".join(rng.choice(DIGITS) for _ in range(self.digits - 1))
            return Example(text, text[0])

        eval_examples = [draw() for _ in range(self.num_eval)]
        return [draw() for _ in range(self.num_examples)], eval_examples

    def reset(self, example: Example) -> DigitChainEpisode:
        return DigitChainEpisode(example, [], example.prompt)

    def turn_advantages(self, episodes: Sequence[Episode]) -> list[list[float]]:
        if not self.mt_grpo:
            return [[] for _ in episodes]
        rows = [turn_rewards(e.example, e.answers) for e in episodes if isinstance(e, DigitChainEpisode)]
        means = [sum(r[t] for r in rows if t < len(r)) / max(1, sum(t < len(r) for r in rows)) for t in range(TURNS)]
        return [[r - means[t] for t, r in enumerate(row)] for row in rows]

    def legal_actions(self, example: Example, before: Sequence[str]) -> list[str]:
        return list(DIGITS)

    def replay(self, example: Example, actions: Sequence[str]) -> float:
        return sum(turn_rewards(example, [a if a in DIGITS else NO_DIGIT for a in actions][:TURNS]))

    def parse_action(self, completion: str) -> str | None:
        return parse_digit(completion)


def _int_arg(args: Mapping[str, object], key: str, default: int, low: int, high: int) -> int:
    value = args.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"environment.args.{key}: {value!r} is not an integer in [{low}, {high}] "
                         f"(default {default})")
    return value
