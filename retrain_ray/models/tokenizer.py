"""Character-level tokenizer for the offline demo model.

One token per character: printable ASCII (without tab/CR/VT/FF) plus newline, and four special tokens
(`<pad>`, `<bos>`, `<eos>`, `<unk>`). It is a `tokenizers` WordLevel model whose pre-tokenizer splits
every character off, wrapped in `PreTrainedTokenizerFast`, so it saves and loads through the ordinary
`save_pretrained` / `AutoTokenizer.from_pretrained` path with no hub access. Left padding is set in the
constructor, which is the only way it survives `save_pretrained` (DESIGN.md, ML stack facts). Decoding
fuses tokens with no separator and no clean-up, so spaces round-trip exactly. No chat template: prompts
are encoded as plain text (see `encode_prompt`).
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

PAD, BOS, EOS, UNK = "<pad>", "<bos>", "<eos>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
CHARACTERS: tuple[str, ...] = tuple(c for c in string.printable if c not in "\t\r\x0b\x0c")


def single_id(value: object, what: str) -> int:
    """A tokenizer's special token id (`pad_token_id`, ...) as one int; a missing or multiple id is refused."""
    if not isinstance(value, int):
        raise ValueError(f"the tokenizer's {what} is {value!r}, not a single token id: give the tokenizer that token")
    return value


def char_vocab() -> dict[str, int]:
    """Token -> id: special tokens first (pad = 0), then the characters in `string.printable` order."""
    return {tok: i for i, tok in enumerate(SPECIAL_TOKENS + CHARACTERS)}


def build_char_tokenizer() -> PreTrainedTokenizerFast:
    """A fresh character-level tokenizer (deterministic: no training, fixed vocabulary)."""
    # deferred: transformers costs a second of imports; a run reads the saved files with LightTokenizer
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=char_vocab(), unk_token=UNK))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        bos_token=BOS,
        eos_token=EOS,
        pad_token=PAD,
        unk_token=UNK,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
