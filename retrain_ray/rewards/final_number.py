"""The `final_number` reward: 1.0 when the last number in the completion equals the reference, else 0.0.

For answers written as sentences ("3 + 5 = 8.", "The sum is 8"): the number a reader takes as the
answer is the last one. Numbers are compared as values, so "8.0" matches "8" and "1,000" matches "1000";
a reference that is not a number is compared as stripped text against the last number's text. A
`\\boxed{8}` answer scores too (its content is the last number), so the reward does not depend on format.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from retrain_ray.rewards.types import check_batch

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def last_number(text: str) -> str:
    """The last number written in `text` (commas between digits dropped), or "" when there is none."""
    found = _NUMBER.findall(text)
    return found[-1].replace(",", "") if found else ""


def _value(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").strip())
    except InvalidOperation:
        return None


def numbers_equal(answer: str, reference: str) -> bool:
    """Equal as numbers when both parse, else equal as stripped text."""
    a, r = _value(answer), _value(reference)
    if a is not None and r is not None:
        return a == r
    return answer.strip() == reference.strip()


class FinalNumberReward:
    """Correctness of the completion's last number against the reference."""

    name = "final_number"

    def score(self, completion: str, reference: str) -> float:
        answer = last_number(completion)
        return 1.0 if answer and numbers_equal(answer, reference) else 0.0

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        return [self.score(c, r) for c, r in zip(completions, references, strict=True)]
