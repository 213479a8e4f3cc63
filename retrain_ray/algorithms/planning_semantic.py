"""Semantic planning-token detector (spec 2.10, `[planning] detector = "semantic"`).

The completion's token strings are joined back into text and cut into windows of 12 words, one starting
every 6 words (the last window ends at the last word; a completion of fewer than 3 words has none). Each
window, and two sets of anchor phrases, are embedded by a sentence-embedding model; the anchors' normalised
mean embeddings are the planning and execution centroids. A window is planning when its cosine to the
planning centroid exceeds its cosine to the execution centroid by more than `threshold` (0.02) and is above
0.25; every token of a planning window is marked 1.

The planning anchors are the strategic grams (`[logging] strategic_grams`, the regex detector's phrases)
plus a few planning sentences; the execution anchors are calculation sentences. The original used its own
anchor lists. Where it split each token string into words on its own (so a word cut into sub-word tokens
became several words), this joins the tokens first: "think" + "ing" is one word, as the model should read it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

WINDOW_WORDS = 12
STRIDE_WORDS = 6
MIN_WORDS = 3
MIN_PLAN_COSINE = 0.25

PLANNING_SENTENCES: tuple[str, ...] = (
    "let me step back and rethink the approach",
    "this result looks wrong, I should check my reasoning",
    "a better strategy would be to split the problem into cases",
    "first I need a plan for how to attack this",
    "maybe there is a simpler way to see this",
    "the important observation is that the problem has a symmetry",
    "before computing, let me decide which method to use",
    "I made a mistake earlier, let me go back",
)
EXECUTION_SENTENCES: tuple[str, ...] = (
    "adding 17 and 25 gives 42",
    "multiply both sides of the equation by 3",
    "substitute x = 4 into the expression",
    "so the remainder is 5",
    "the product of 6 and 7 is 42",
    "dividing by 2 we get 18",
    "expanding the square gives x^2 + 2x + 1",
    "the derivative of 3x^2 is 6x",
    "combining like terms yields 5y - 3",
    "hence the final answer is 12",
    "subtracting 9 from both sides leaves 2x = 10",
    "the sum of the first ten integers is 55",
)

Embed = Callable[[list[str]], torch.Tensor]
"""Texts -> one L2-normalised embedding per text, shape [N, D]."""

_MARKERS = re.compile("[\u2581\u0120\u010a]")  # SentencePiece "▁", byte-BPE "Ġ" (space) and "Ċ" (newline)
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class Window:
    """One window: its text and the tokens it covers, `start` inclusive, `end` exclusive."""

    text: str
    start: int
    end: int


def words_with_tokens(tokens: Sequence[str]) -> list[tuple[str, int, int]]:
    """(word, first token, last token) of each word of the joined token strings."""
    owner: list[int] = []
    pieces: list[str] = []
    for index, token in enumerate(tokens):
        piece = _MARKERS.sub(" ", token)
        pieces.append(piece)
        owner.extend([index] * len(piece))
    text = "".join(pieces)
    return [(m.group(), owner[m.start()], owner[m.end() - 1]) for m in _WORD.finditer(text)]


def build_windows(tokens: Sequence[str], words: int = WINDOW_WORDS, stride: int = STRIDE_WORDS) -> list[Window]:
    """Windows of `words` words every `stride` words, the last one reaching the last word."""
    found = words_with_tokens(tokens)
    if len(found) < MIN_WORDS:
        return []
    windows: list[Window] = []
    start = 0
    while True:
        end = min(start + words, len(found))
        part = found[start:end]
        windows.append(Window(" ".join(w for w, _, _ in part), part[0][1], part[-1][2] + 1))
        if end == len(found):
            return windows
        start += stride


def mark_windows(num_tokens: int, windows: Sequence[Window], plan_cos_W: Sequence[float],
                 exec_cos_W: Sequence[float], threshold: float) -> list[int]:
    """1 on every token of a window closer to planning than execution by `threshold`, and planning-like."""
    mask = [0] * num_tokens
    for window, plan, execution in zip(windows, plan_cos_W, exec_cos_W, strict=True):
        if plan > execution + threshold and plan > MIN_PLAN_COSINE:
            mask[window.start:window.end] = [1] * (window.end - window.start)
    return mask


def centroid(embeddings_N_D: torch.Tensor) -> torch.Tensor:
    """The normalised mean of the embeddings."""
    return torch.nn.functional.normalize(embeddings_N_D.float().sum(dim=0), dim=0)


class SemanticPlanningDetector:
    """Planning mask from window embeddings; `planning_mask(tokens)` returns one 0/1 per token."""

    def __init__(self, embed: Embed, *, threshold: float = 0.02, plan_phrases: Sequence[str],
                 exec_phrases: Sequence[str] = EXECUTION_SENTENCES) -> None:
        if not plan_phrases or not exec_phrases:
            raise ValueError("SemanticPlanningDetector needs planning and execution anchor phrases")
        self.embed = embed
        self.threshold = threshold
        self.plan_D = centroid(embed(list(plan_phrases)))
        self.exec_D = centroid(embed(list(exec_phrases)))

    def __call__(self, tokens: Sequence[str]) -> list[int]:
        return self.planning_mask(tokens)

    def planning_mask(self, tokens: Sequence[str]) -> list[int]:
        windows = build_windows(tokens)
        if not windows:
            return [0] * len(tokens)
        emb_W_D = self.embed([w.text for w in windows]).float()
        plan_W = [float(c) for c in emb_W_D @ self.plan_D]
        exec_W = [float(c) for c in emb_W_D @ self.exec_D]
        return mark_windows(len(tokens), windows, plan_W, exec_W, self.threshold)
