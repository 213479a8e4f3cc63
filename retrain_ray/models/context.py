"""What a model can take, read without building it: its context length and a prompt codec.

`context_length` reads `config.json` of a resolved model folder (the built-in tiny model, a local folder, a
Hub snapshot): the keys transformers' configs map to `max_position_embeddings` (GPT-2's `n_positions`,
...), at the top level or under a multimodal model's `text_config`. `PromptCodec` wraps the model's
tokenizer (the light one for built-in models, else transformers') with what the data check needs: the
token ids the engine feeds for a prompt (chat template included), the content's ids alone, decoding,
and the longest vocabulary entry, which bounds how many characters one token can cover.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from retrain_ray.models.light_tokenizer import LightTokenizer

CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")
"""config.json keys of the number of positions, in transformers' order of preference."""


def context_length(folder: str | Path) -> int | None:
    """The model's number of positions from `<folder>/config.json`, or None when it names none."""
    path = Path(folder) / "config.json"
    try:
        raw: Any = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    for table in (raw, raw.get("text_config") if isinstance(raw, dict) else None):
        if not isinstance(table, dict):
            continue
        for key in CONTEXT_KEYS:
            value = table.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    return None


class PromptCodec:
    """The run's tokenizer as the prompt check uses it (see the module doc).

    `max_token_chars`: characters one token covers at most (its longest vocabulary entry, at least 1): a
    prompt of n characters has at least n / max_token_chars tokens, so it is refused without tokenising it."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase | LightTokenizer) -> None:
        self.tokenizer = tokenizer
        self.max_token_chars = max(1, max((len(token) for token in tokenizer.get_vocab()), default=1))

    def prompt_ids(self, text: str) -> list[int]:
        """What the engine feeds for this prompt (`encode_prompt`: chat template, generation prompt)."""
        # deferred: loads torch, which reading a model's context does not need
        from retrain_ray.models.loading import encode_prompt

        return encode_prompt(self.tokenizer, text)  # pyright: ignore[reportArgumentType]  # LightTokenizer quacks as one

    def content_ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))
