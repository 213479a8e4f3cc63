"""Models: the offline tiny default, loading of local and packaged models, prompt encoding."""

from retrain_ray.models.loading import (
    SMOLLM2_NAME,
    default_cache_dir,
    encode_prompt,
    load_model_and_tokenizer,
    resolve_model_path,
    smollm2_gguf_path,
)
from retrain_ray.models.tiny import build_tiny_model, parse_builtin_name, state_dict_sha256
from retrain_ray.models.tokenizer import build_char_tokenizer

__all__ = [
    "SMOLLM2_NAME",
    "build_char_tokenizer",
    "build_tiny_model",
    "default_cache_dir",
    "encode_prompt",
    "load_model_and_tokenizer",
    "parse_builtin_name",
    "resolve_model_path",
    "smollm2_gguf_path",
    "state_dict_sha256",
]
