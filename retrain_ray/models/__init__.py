"""Models: the offline tiny default (and its torch-only Llama and LoRA), loading of local, packaged and Hub models,
prompt encoding.

Names are imported lazily (PEP 562) so that `retrain_ray.models.context`, which `explain` and the
campaign's pre-Ray checks use, can be imported without torch and transformers.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, cast

_EXPORTS = {
    "encode_prompt": "context",
    "load_model_and_tokenizer": "loading",
    "resolve_model_path": "loading",
    "build_tiny_model": "tokenizer",
    "parse_builtin_name": "tokenizer",
    "state_dict_sha256": "tokenizer",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrain_ray.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"retrain_ray.models.{_EXPORTS[name]}"), name)


# The tokenizer contract: what retrain-ray calls on a tokenizer.
#
# A Hugging Face tokenizer (`PreTrainedTokenizerBase`), the torch-free `LightTokenizer` of the built-in
# model, the Tinker SDK's tokenizer and a plugin's own all satisfy it. Nothing here imports transformers.
if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class Tokenizer(Protocol):
    """Encode prompts, decode samples, name the special tokens; a chat template when it has one.

    `chat_template` is None for a tokenizer without one; `apply_chat_template` is only called when it is
    set. The return types are the union of what transformers and `LightTokenizer` return: callers narrow.
    """

    @property
    def eos_token_id(self) -> int | None: ...

    @property
    def pad_token_id(self) -> int | None: ...

    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, token_ids: list[int], skip_special_tokens: bool = False) -> str | list[str]: ...

    def batch_decode(self, sequences: list[list[int]], skip_special_tokens: bool = False) -> list[str]: ...

    def convert_ids_to_tokens(self, ids: list[int]) -> str | Sequence[str | None] | None: ...

    def apply_chat_template(
        self, conversation: list[dict[str, str]], *, tokenize: bool = True, add_generation_prompt: bool = False
    ) -> object: ...


def hf_tokenizer(tokenizer: PreTrainedTokenizerBase) -> Tokenizer:
    """A Hugging Face tokenizer as a `Tokenizer`: transformers 5 serves `eos_token_id` and `pad_token_id`
    through `__getattr__`, which a type checker cannot match against a Protocol."""
    return cast("Tokenizer", tokenizer)
