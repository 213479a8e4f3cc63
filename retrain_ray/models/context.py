"""What a model can take, read without building it: its context length, a prompt codec, and the shapes the
back-pressure roofline needs (`ModelShapes`, counted by models/flops.py). Pure: no torch.

`context_length` reads `config.json` of a resolved model folder (the built-in tiny model, a local folder, a
Hub snapshot): the keys transformers' configs map to `max_position_embeddings` (GPT-2's `n_positions`,
...), at the top level or under a multimodal model's `text_config`. `PromptCodec` wraps the model's
tokenizer (the light one for built-in models, else transformers') with what the data check needs: the
token ids the engine feeds for a prompt (chat template included), the content's ids alone, decoding,
and the longest vocabulary entry, which bounds how many characters one token can cover.

What a model name says about how it loads, without importing torch (the campaign driver asks).

`lean_applies`: a model the torch-only lean Llama reproduces runs on it, and LoRA on it is the lean LoRA,
so neither transformers' model nor peft is imported (models/lean_loading.py): the built-in models, SmolLM2,
and any Llama folder (local, or a cached Hub snapshot) that models/lean_support.py accepts; any other model
(another architecture, RoPE scaling, `.bin` weights, `trust_remote_code`, `[backend.options] model_impl =
"transformers"`) loads through transformers, and LoRA on it is PEFT's.

Models named by a Hugging Face Hub id ("Qwen/Qwen3-4B-Instruct-2507"), resolved through the HF cache.

A Hub id resolves to a snapshot folder of the standard HF cache (`$HF_HUB_CACHE`, else `$HF_HOME/hub`,
else `~/.cache/huggingface/hub`): found there when already downloaded, downloaded into it when the
network is allowed. `HF_HUB_OFFLINE=1` or `[model] local_files_only = true` forbid downloading;
`[model] revision` picks the branch, tag or commit. Every node of a cluster runs the same resolution
against its own cache, so a shared cache (HF_HOME on a shared volume) or one download per node both work.

`model_problem` is the cheap check the CLI and the campaign make before Ray starts: it never
downloads weights, and its message names the id, the revision and how to get the model.
The environment is read at call time (huggingface_hub reads it once at import), so a process that
sets HF_HOME or HF_HUB_OFFLINE after importing transformers still gets what it asked for.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from retrain_ray.util.file_kinds import env_directory

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
        return encode_prompt(self.tokenizer, text)  # pyright: ignore[reportArgumentType]  # LightTokenizer quacks as one

    def content_ids(self, text: str) -> list[int]:
        return [int(i) for i in self.tokenizer.encode(text, add_special_tokens=False)]

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))


BUILTIN_PREFIX = "builtin:"
BUILTIN_CONTEXT = 2048
"""Positions of the built-in models (`builtin:*`, `max_position_embeddings` of models/tokenizer.py's
`tiny_config`): the check pass knows it without building one (building imports transformers)."""


LEAN_NAMES = ("smollm2:135m",)
"""Packaged models that are Llamas the lean model reproduces (checked again once the folder is built)."""


def lean_applies(name: str | Path, *, trust_remote_code: bool = False, model_impl: str = "auto") -> bool:
    """Whether a run of this model takes the lean path (trained in full or with LoRA, the only modes), read
    from its name and, for a folder or a cached Hub snapshot, its files (a Hub id not downloaded yet: no)."""
    if model_impl == "transformers" or trust_remote_code:
        return False
    text = str(name)
    if model_impl == "lean" or text.startswith(BUILTIN_PREFIX) or text in LEAN_NAMES:
        return True
    # deferred: lean_support is only needed for a folder
    from retrain_ray.models.lean_support import lean_problem

    path = Path(text).expanduser()
    if (path / "config.json").is_file():
        return lean_problem(path) is None
    snapshot = cached_snapshot(text) if looks_like_hub_id(text) else None
    return snapshot is not None and lean_problem(snapshot) is None


def uses_peft(name: str | Path, finetune: str, *, trust_remote_code: bool = False, model_impl: str = "auto") -> bool:
    """Whether a run of this model and `[model] finetune` imports peft (and with it transformers)."""
    return finetune == "lora" and not lean_applies(name, trust_remote_code=trust_remote_code, model_impl=model_impl)


def config_uses_peft(config: Any) -> bool:
    """`uses_peft` for a run's config: `[model] model` and `finetune`, `[backend.options] trust_remote_code`
    and `model_impl`."""
    m, options = config.model, config.backend.options
    return uses_peft(m.model, m.finetune, trust_remote_code=bool(options.get("trust_remote_code")),
                     model_impl=str(options.get("model_impl", "auto")))


@dataclass(frozen=True)
class ModelShapes:
    """What the roofline needs of a model: counted on the meta device (models/flops.py). Picklable."""

    parameters: int
    trainable: int  # parameters the optimizer updates: all (full) or the LoRA adapters'
    bytes_per_param: int  # 4 for float32 weights, 2 for bf16 / fp16
    kv_bytes_per_token: int  # 2 (K and V) x layers x kv_heads x head_dim x bytes_per_param
    full: bool  # full fine-tuning (else LoRA)
    # Values a training forward keeps for the backward, per token (gradient checkpointing off): per layer
    # about 10 hidden-wide (norms, q/k/v/o, residuals) and 4 MLP-wide (gate, up, activation, product) tensors,
    # plus 3 vocabulary-wide ones (logits, log-probabilities, their gradient). Elements, not bytes.
    activation_elements_per_token: int = 0


# A Hub repo id: "name" or "org/name"; letters, digits, '-', '_', '.'.
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
# Formats a causal-LM load never reads; skipping them keeps a download to the weights it needs.
_IGNORED_FILES = ["*.pth", "*.pt", "*.gguf", "*.onnx", "*.msgpack", "*.h5", "*.ot", "original/*", "onnx/*"]
_TRUE = {"1", "ON", "YES", "TRUE"}


class ModelUnavailableError(FileNotFoundError):
    """The model cannot be had here; the message says how to get it."""


def looks_like_hub_id(name: str) -> bool:
    """True for "org/name" or "name" that is not an existing local path."""
    return bool(_HUB_ID.match(name)) and not Path(name).expanduser().exists()


def hub_offline(local_files_only: bool = False) -> bool:
    """Downloading is forbidden: HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set, or the config asks."""
    env = (os.environ.get(k, "").strip().upper() for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))
    return local_files_only or any(v in _TRUE for v in env)


def hub_cache_dir() -> Path:
    """The HF hub cache this process uses, read from the environment now."""
    for key in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        found = env_directory(key)
        if found is not None:
            return found
    home = env_directory("HF_HOME") or (env_directory("XDG_CACHE_HOME") or Path.home() / ".cache") / "huggingface"
    return home / "hub"


def how_to_get(repo_id: str, revision: str) -> str:
    rev = f" --revision {revision}" if revision else ""
    return (f"download it where the network is allowed with `huggingface-cli download {repo_id}{rev}` "
            f"(or `hf download {repo_id}{rev}`) into the cache this process reads ({hub_cache_dir()}; set "
            "HF_HOME or HF_HUB_CACHE to point at another), on every node or on a volume they share")


def cached_snapshot(repo_id: str, revision: str = "") -> Path | None:
    """The cached snapshot folder holding `config.json` for (repo_id, revision), or None."""
    # deferred: loads huggingface_hub, which importing this module does not need
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir(), revision=revision or None)
    return Path(found).parent if isinstance(found, str) else None


def resolve_hub_model(repo_id: str, revision: str = "", *, local_files_only: bool = False) -> Path:
    """The snapshot folder of `repo_id` at `revision`, downloading it when allowed and missing."""
    # deferred: loads huggingface_hub, which importing this module does not need
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    offline = hub_offline(local_files_only)
    cached = cached_snapshot(repo_id, revision)
    if cached is not None and offline:
        return cached
    try:
        folder = snapshot_download(repo_id, revision=revision or None, cache_dir=hub_cache_dir(),
                                   local_files_only=offline, ignore_patterns=_IGNORED_FILES)
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as exc:
        if cached is not None:  # network trouble, but a complete snapshot is already here
            return cached
        raise ModelUnavailableError(_unavailable(repo_id, revision, offline, exc)) from exc
    return Path(folder)


def _unavailable(repo_id: str, revision: str, offline: bool, exc: BaseException | None = None) -> str:
    at = f" at revision {revision!r}" if revision else ""
    why = ("it is not in the Hugging Face cache and downloading is off (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE "
           "or [model] local_files_only)" if offline else f"it could not be downloaded ({type(exc).__name__}: "
           f"{str(exc).splitlines()[0] if exc else ''})")
    return f"model {repo_id!r}{at} cannot be loaded: {why}; {how_to_get(repo_id, revision)}"


def hub_model_problem(repo_id: str, revision: str = "", *, local_files_only: bool = False) -> str | None:
    """None when the model is cached or (online) exists on the Hub at that revision; else the reason."""
    if cached_snapshot(repo_id, revision) is not None:
        return None
    offline = hub_offline(local_files_only)
    if offline:
        return _unavailable(repo_id, revision, offline=True)
    # deferred: loads huggingface_hub, which importing this module does not need
    from huggingface_hub import HfApi

    try:
        HfApi().model_info(repo_id, revision=revision or None, timeout=20)
    except Exception as exc:  # not found, gated, no network: each one means the runs could not load it
        return _unavailable(repo_id, revision, offline=False, exc=exc)
    return None


def model_problem(name: str, revision: str = "", *, local_files_only: bool = False) -> str | None:
    """Why `name` (built-in, local folder or Hub id) cannot be loaded here, or None. No torch import."""
    if name.startswith("builtin:") or name.startswith("smollm2:"):
        return None  # built locally on first use
    path = Path(name).expanduser()
    if path.exists():
        return None if (path / "config.json").is_file() else f"model folder {str(path)!r} has no config.json"
    if looks_like_hub_id(name):
        return hub_model_problem(name, revision, local_files_only=local_files_only)
    return (f"model {name!r} is neither a built-in name ('builtin:tiny', 'smollm2:135m'), a local model "
            "folder, nor a Hugging Face Hub id ('org/name')")


def encode_prompt(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Token ids of a user prompt: the chat template (with generation prompt) if any, else plain text."""
    if getattr(tokenizer, "chat_template", None):
        ids = cast(Any, tokenizer.apply_chat_template(  # ids, or a BatchEncoding holding them
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        ))
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    return [int(i) for i in tokenizer.encode(text, add_special_tokens=False)]
