"""Models: the offline tiny default (and its torch-only Llama and LoRA), loading of local, packaged and Hub models,
prompt encoding.

Names are imported lazily (PEP 562) so that `retrain_ray.models.context`, which `explain` and the
campaign's pre-Ray checks use, can be imported without torch and transformers.
"""

from __future__ import annotations

import importlib
from typing import Any

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
