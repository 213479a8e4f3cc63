"""Character-level tokenizer for the offline demo model.

One token per character: printable ASCII (without tab/CR/VT/FF) plus newline, and four special tokens
(`<pad>`, `<bos>`, `<eos>`, `<unk>`). It is a `tokenizers` WordLevel model whose pre-tokenizer splits
every character off, wrapped in `PreTrainedTokenizerFast`, so it saves and loads through the ordinary
`save_pretrained` / `AutoTokenizer.from_pretrained` path with no hub access. Left padding is set in the
constructor, which is the only way it survives `save_pretrained` (DESIGN.md, ML stack facts). Decoding
fuses tokens with no separator and no clean-up, so spaces round-trip exactly. No chat template: prompts
are encoded as plain text (see `encode_prompt`).

The offline default model: a randomly initialised tiny Llama with a character tokenizer.

`build_tiny_model` writes a complete Hugging Face model folder (config, safetensors weights, tokenizer)
that loads back through `AutoModelForCausalLM.from_pretrained(path)` / `AutoTokenizer.from_pretrained`.
A Llama config is used on purpose: with a Qwen2 config transformers 5.x swaps the saved custom
tokenizer for its own, which drops spaces (DESIGN.md). Weights depend only on (hidden_size, num_layers,
seed): the global RNG is forked, seeded and restored, so building does not disturb the caller's RNG.

Names: "builtin:tiny" is hidden 128, 2 layers; "builtin:tiny-h256-l4" picks hidden 256, 4 layers.
"""

from __future__ import annotations

import hashlib
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from retrain_ray.models.context import BUILTIN_CONTEXT

if TYPE_CHECKING:
    from transformers import LlamaConfig, PreTrainedTokenizerFast


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


_TINY_NAME = re.compile(r"^builtin:tiny(?:-h(?P<hidden>\d+))?(?:-l(?P<layers>\d+))?(?:-s(?P<seed>\d+))?$")


@dataclass(frozen=True)
class TinySpec:
    """Shape of a built-in tiny model, parsed from its name."""

    hidden_size: int = 128
    num_layers: int = 2
    seed: int = 0

    @property
    def dirname(self) -> str:
        return f"tiny-h{self.hidden_size}-l{self.num_layers}-s{self.seed}"


def parse_builtin_name(name: str) -> TinySpec:
    """"builtin:tiny[-h<hidden>][-l<layers>][-s<seed>]" -> TinySpec; a clear error otherwise."""
    match = _TINY_NAME.match(name)
    if match is None:
        raise ValueError(
            f"unknown built-in model {name!r}: use 'builtin:tiny' or e.g. 'builtin:tiny-h256-l4' "
            "(hidden size, layers, optional -s<seed>)"
        )
    spec = TinySpec(
        hidden_size=int(match["hidden"] or 128),
        num_layers=int(match["layers"] or 2),
        seed=int(match["seed"] or 0),
    )
    if spec.hidden_size % 32 != 0 or spec.hidden_size <= 0 or spec.num_layers <= 0:
        raise ValueError(f"built-in model {name!r}: hidden size must be a positive multiple of 32, layers > 0")
    return spec


def tiny_config(vocab_size: int, hidden_size: int, num_layers: int, pad_id: int, bos_id: int,
                eos_id: int) -> LlamaConfig:
    """Llama config of the tiny model: 4 heads of hidden/4, MLP width 2x hidden, tied embeddings."""
    # deferred: transformers costs seconds of imports; a run of an already built model never needs it
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=BUILTIN_CONTEXT,
        tie_word_embeddings=True,
        pad_token_id=pad_id,
        bos_token_id=bos_id,
        eos_token_id=eos_id,
    )


def build_tiny_model(directory: str | Path, *, hidden_size: int = 128, num_layers: int = 2, seed: int = 0) -> Path:
    """Builds the tiny model and its tokenizer into `directory` (created if missing); returns the path."""
    # deferred: transformers costs seconds of imports; a run of an already built model never needs it
    from transformers import LlamaForCausalLM

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = build_char_tokenizer()
    config = tiny_config(
        len(tokenizer), hidden_size, num_layers, single_id(tokenizer.pad_token_id, "pad_token_id"),
        single_id(tokenizer.bos_token_id, "bos_token_id"), single_id(tokenizer.eos_token_id, "eos_token_id"),
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config).to(torch.float32)  # pyright: ignore[reportArgumentType]  # transformers types `to` oddly
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def state_dict_sha256(model: torch.nn.Module) -> str:
    """Hash of every tensor of a state dict (name, dtype, shape, bytes), for determinism checks."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        t = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}|{t.dtype}|{tuple(t.shape)}".encode())
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()
