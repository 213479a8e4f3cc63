"""Models named by a Hugging Face Hub id ("Qwen/Qwen3-4B-Instruct-2507"), resolved through the HF cache.

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

import os
import re
from pathlib import Path

from retrain_ray.util.file_kinds import env_directory

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
