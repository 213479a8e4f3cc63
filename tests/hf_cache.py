"""A Hugging Face cache laid out as huggingface_hub writes it, built in a temporary directory.

    <HF_HOME>/hub/models--<org>--<name>/snapshots/<commit>/<files>   and   refs/<branch or tag> = <commit>
"""

from __future__ import annotations

import json
from pathlib import Path

ORIGINAL_MODEL = "Qwen/Qwen3-4B-Instruct-2507"  # the original's default model id


def repo_cache_dir(hf_home: Path, repo_id: str) -> Path:
    return hf_home / "hub" / ("models--" + repo_id.replace("/", "--"))


def add_ref(hf_home: Path, repo_id: str, ref: str, commit: str) -> Path:
    """Points branch or tag `ref` at snapshot `commit`; returns that snapshot's folder (created)."""
    repo = repo_cache_dir(hf_home, repo_id)
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / ref).write_text(commit)
    snapshot = repo / "snapshots" / commit
    snapshot.mkdir(parents=True, exist_ok=True)
    return snapshot


def stub_original_model(hf_home: Path) -> Path:
    """A config-only entry for the original's model: enough for the availability check of `explain`."""
    snapshot = add_ref(hf_home, ORIGINAL_MODEL, "main", "0" * 40)
    (snapshot / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return hf_home
