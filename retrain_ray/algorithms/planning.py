"""Regex planning-token detector (spec 2.10): marks tokens that belong to "strategic" phrases.

Token strings are cleaned (SentencePiece `▁` and byte-BPE `Ġ` become spaces, then stripped). For each
start token, up to `window` non-empty fragments (window = max(5, longest gram's word count)) are joined
with spaces; at the first end index where any `\\b<gram>\\b` matches (case-insensitive, anywhere in the
joined text, as in the original), tokens start..end are marked 1. Because the match is not anchored at
the start, up to window-1 tokens *before* a gram can be marked too; this is kept for parity.
The semantic (embedding) detector is `algorithms/planning_semantic.py`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import cast

DEFAULT_STRATEGIC_GRAMS: tuple[str, ...] = (
    "wait let me",
    "let me think",
    "on second thought",
    "let me check",
    "let me verify",
    "is this right",
    "double check",
    "try another approach",
    "go back and",
    "start over",
    "that's not right",
    "that doesn't work",
    "another way to",
    "or we could",
    "what if we",
    "notice that",
    "the key is",
    "the key insight",
)
MIN_WINDOW = 5
DETECTORS = ("regex", "semantic", "none")
"""`[planning] detector`: this regex one, the embedding one (planning_semantic.py), or none."""


def parse_strategic_grams(text: str) -> list[str]:
    """`[logging].strategic_grams`: a JSON array or comma-separated grams; empty gives the defaults."""
    text = (text or "").strip()
    if not text:
        return list(DEFAULT_STRATEGIC_GRAMS)
    if text.startswith("["):
        try:
            parsed: object = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"[logging].strategic_grams is not a valid JSON array ({exc}); or use CSV.") from exc
        items = cast("list[object]", parsed) if isinstance(parsed, list) else None
        if items is None or not all(isinstance(g, str) for g in items):
            raise ValueError("[logging].strategic_grams must be a JSON array of strings.")
        grams = [str(g) for g in items]
    else:
        grams = text.split(",")
    cleaned = [g.strip() for g in grams if g.strip()]
    if not cleaned:
        raise ValueError(f"[logging].strategic_grams={text!r} holds no gram; leave it empty for the defaults.")
    return cleaned


def clean_token(token: str) -> str:
    return token.replace("▁", " ").replace("Ġ", " ").strip()


class RegexPlanningDetector:
    """Planning mask from strategic grams; `planning_mask(tokens)` returns one 0/1 per token."""

    def __init__(self, grams: Sequence[str] | None = None) -> None:
        self.grams = list(DEFAULT_STRATEGIC_GRAMS if grams is None else grams)
        if not self.grams:
            raise ValueError("RegexPlanningDetector needs at least one gram (or None for the defaults).")
        alternation = "|".join(re.escape(g.strip()) for g in self.grams)
        self._pattern = re.compile(rf"\b(?:{alternation})\b", re.IGNORECASE)
        self.window = max(MIN_WINDOW, max(len(g.split()) for g in self.grams))

    @classmethod
    def from_grams_text(cls, text: str) -> RegexPlanningDetector:
        """Build from `[logging].strategic_grams` (JSON array, CSV, or empty for the defaults)."""
        return cls(parse_strategic_grams(text))

    def __call__(self, tokens: Sequence[str]) -> list[int]:
        return self.planning_mask(tokens)

    def planning_mask(self, tokens: Sequence[str]) -> list[int]:
        fragments = [clean_token(t) for t in tokens]
        mask = [0] * len(fragments)
        for start in range(len(fragments)):
            end = self._first_match_end(fragments, start)
            if end is not None:
                for j in range(start, end + 1):
                    mask[j] = 1
        return mask

    def _first_match_end(self, fragments: list[str], start: int) -> int | None:
        if not fragments[start]:
            return None
        joined: list[str] = []
        for end in range(start, len(fragments)):
            if not fragments[end]:
                continue
            joined.append(fragments[end])
            if self._pattern.search(" ".join(joined)):
                return end
            if len(joined) >= self.window:
                return None
        return None


def planning_mask(tokens: Sequence[str], grams: Sequence[str] | None = None) -> list[int]:
    """Convenience wrapper: the default (or given) grams' mask for one completion's token strings."""
    return RegexPlanningDetector(grams).planning_mask(tokens)
