"""Prompts against the model's context (issue 26, class 5): a prompt's tokens plus the completion budget
(`[training] max_tokens`) must fit the model's positions, checked when the data loads, before any model
memory is taken. A prompt that does not fit is refused naming its row and the lengths, or, with
`[data] truncate_prompts = true`, cut to its last tokens.

Why the END is kept: the end of an RLVR prompt is what the completion continues from and where tasks put
the question and the answer format ("... put the final answer in \\boxed{}"); what comes first (context,
few-shot examples) is what can be lost. Cutting the end would drop the question itself.

A pathological prompt (150,000 characters) is refused without tokenising it: no token covers more
characters than the tokenizer's longest vocabulary entry, so `len(text) / max_token_chars` tokens is a
lower bound. A short prompt is passed without tokenising it either: each UTF-8 byte is at most one token
(byte-level BPE, SentencePiece's byte fallback, character vocabularies), doubled here for normalisers that
expand characters, plus the chat template's own tokens.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from retrain_ray.data.types import Example

log = logging.getLogger(__name__)
SHOWN = 5  # rows named in a refusal; the rest are counted


class PromptCodecLike(Protocol):
    """models/context.py's PromptCodec, as this module uses it."""

    max_token_chars: int
    def prompt_ids(self, text: str) -> list[int]: ...
    def content_ids(self, text: str) -> list[int]: ...
    def decode(self, ids: list[int]) -> str: ...


@dataclass(frozen=True)
class ContextLimit:
    """The model's positions and the completion budget a prompt shares them with."""

    context: int
    max_tokens: int
    model: str

    @property
    def prompt_budget(self) -> int:
        return self.context - self.max_tokens


class PromptTooLongError(ValueError):
    """A prompt (or several) that the model cannot take with the completion budget."""


@dataclass(frozen=True)
class _Overlong:
    index: int
    tokens: int
    exact: bool  # False: a lower bound from the character count, the prompt was not tokenised
    chars: int


def _prompt_tokens(text: str, codec: PromptCodecLike, limit: ContextLimit, overhead: int) -> tuple[int, bool]:
    """(tokens, exact): exact when the prompt was tokenised, else a bound that settles the question (a
    lower bound above the budget, or an upper bound within it)."""
    lower = math.ceil(len(text) / codec.max_token_chars)
    if lower > limit.prompt_budget:
        return lower, False
    upper = 2 * len(text.encode("utf-8", "surrogatepass")) + overhead + 2
    if upper <= limit.prompt_budget:
        return upper, False
    return len(codec.prompt_ids(text)), True


def _keep_end(text: str, codec: PromptCodecLike, budget: int, overhead: int) -> str | None:
    """The prompt's last tokens that fit `budget` with the template, or None when nothing fits."""
    tail = text[-(budget + 1) * codec.max_token_chars:]  # more characters than `budget` tokens can cover
    ids = codec.content_ids(tail)
    keep = budget - overhead
    for _ in range(4):  # decoding and re-encoding can merge tokens differently at the cut
        if keep <= 0:
            return None
        candidate = codec.decode(ids[-keep:])
        excess = len(codec.prompt_ids(candidate)) - budget
        if excess <= 0:
            return candidate
        keep -= excess
    return None


def fit_prompts(
    examples: Sequence[Example], *, limit: ContextLimit, codec: PromptCodecLike, truncate: bool,
    origin: Callable[[int], str],
) -> list[Example]:
    """`examples` whose prompts all fit `limit`, truncated at the start when `truncate`; else raises
    PromptTooLongError naming each row (`origin(index)`), its length, max_tokens, the context and the fix."""
    if limit.prompt_budget <= 0:
        raise PromptTooLongError(
            f"[training] max_tokens = {limit.max_tokens:,} leaves no room for a prompt in the {limit.context:,} "
            f"positions of model {limit.model!r}: lower [training] max_tokens below {limit.context:,}")
    overhead = len(codec.prompt_ids(""))
    fitted: list[Example] = []
    overlong: list[_Overlong] = []
    for index, example in enumerate(examples):
        tokens, exact = _prompt_tokens(example.prompt, codec, limit, overhead)
        if tokens <= limit.prompt_budget:
            fitted.append(example)
            continue
        cut = _keep_end(example.prompt, codec, limit.prompt_budget, overhead) if truncate else None
        if cut is None:
            overlong.append(_Overlong(index, tokens, exact, len(example.prompt)))
        else:
            fitted.append(Example(prompt=cut, reference=example.reference))
    if overlong:
        raise PromptTooLongError(_refusal(overlong, limit, origin, truncate))
    truncated = sum(a.prompt != b.prompt for a, b in zip(examples, fitted, strict=True))
    if truncated:
        log.warning("%d of %d prompts were longer than the %d tokens that model %r leaves beside [training] "
                    "max_tokens = %d (context %d): kept the last tokens of each ([data] truncate_prompts)",
                    truncated, len(examples), limit.prompt_budget, limit.model, limit.max_tokens, limit.context)
    return fitted


def _refusal(overlong: list[_Overlong], limit: ContextLimit, origin: Callable[[int], str], truncate: bool) -> str:
    count = "1 prompt does" if len(overlong) == 1 else f"{len(overlong):,} prompts do"
    lines = [f"{count} not fit model {limit.model!r}: its context is {limit.context:,} "
             f"positions and [training] max_tokens = {limit.max_tokens:,} leaves {limit.prompt_budget:,} for a prompt"]
    for row in overlong[:SHOWN]:
        length = f"{row.tokens:,} tokens" if row.exact else f"at least {row.tokens:,} tokens ({row.chars:,} characters)"
        total = "" if not row.exact else f", {row.tokens + limit.max_tokens:,} with max_tokens"
        lines.append(f"  {origin(row.index)}: the prompt is {length}{total}")
    if len(overlong) > SHOWN:
        lines.append(f"  ... and {len(overlong) - SHOWN} more")
    fix = ("even truncated, nothing of these prompts fits beside the chat template: lower [training] max_tokens"
           if truncate else "shorten or drop these rows, lower [training] max_tokens, or set [data] "
           "truncate_prompts = true to keep each prompt's last tokens")
    lines.append(f"fix: {fix}")
    return "\n".join(lines)
