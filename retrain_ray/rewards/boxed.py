"""Answer extraction: the content of the last `\\boxed{...}` in a text, and the `match` reward on it.

Exactly the original's rule (spec section 9): find the *last* `\\boxed{` occurrence, scan forward
counting brace depth to the matching `}`; if the braces never balance, return the rest of the text;
strip the result; return "" when there is no `\\boxed{`. `\\fbox{}` and `\\boxed 5` are not handled
(as in the original).

The `match` reward (the original's default `BoxedMathReward`) is 1.0 when the content of the last
`\\boxed{}` of the completion equals the reference exactly after stripping whitespace, else 0.0. No
normalisation: "0.5" and "1/2" differ (use `math` for that).
"""

from __future__ import annotations

from retrain_ray.rewards.types import check_batch

BOXED_OPEN = "\\boxed{"


def extract_boxed(text: str) -> str:
    """Return the stripped content of the last `\\boxed{...}` in `text`, or "" if there is none."""
    start = text.rfind(BOXED_OPEN)
    if start < 0:
        return ""
    body_start = start + len(BOXED_OPEN)
    depth = 1
    for i in range(body_start, len(text)):
        char = text[i]
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[body_start:i].strip()
    return text[body_start:].strip()


def boxed(answer: str) -> str:
    """Wrap an answer the way the rewards expect to find it: `\\boxed{answer}`."""
    return f"{BOXED_OPEN}{answer}}}"


class MatchReward:
    """Exact string match of the last boxed answer against the reference."""

    name = "match"

    def score(self, completion: str, reference: str) -> float:
        return 1.0 if extract_boxed(completion).strip() == reference.strip() else 0.0

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        return [self.score(c, r) for c, r in zip(completions, references, strict=True)]
