"""The sentence-embedding model of the semantic planning detector (`[planning] model`).

`[planning] model` is a local folder (a Hugging Face model folder: config.json, tokenizer, weights) or a
Hub id; a bare name such as the default "all-MiniLM-L6-v2" means "sentence-transformers/<name>", as the
sentence-transformers package reads it. A Hub id resolves through the Hugging Face cache (downloaded when
the network is allowed: `models/context.py`). The model is run with transformers' `AutoModel` and mean-pooled
over the attention mask, then L2-normalised: what sentence-transformers does for the MiniLM models,
without depending on that package. It runs on the CPU of the run's process.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain_ray.models.context import ModelUnavailableError, model_problem, resolve_hub_model

SENTENCE_TRANSFORMERS_ORG = "sentence-transformers"
BATCH_SIZE = 64
MAX_LENGTH = 256

if TYPE_CHECKING:  # the preflight imports this module for `embedding_model_problem`: keep torch out of it
    import torch


def embedding_model_id(name: str) -> str:
    """A local folder as given; a bare Hub name under the sentence-transformers organisation."""
    if Path(name).expanduser().exists() or "/" in name:
        return name
    return f"{SENTENCE_TRANSFORMERS_ORG}/{name}"


def _fix(name: str) -> str:
    return (f"set [planning] model to a local folder holding the embedding model (config.json, tokenizer, "
            f"weights), or make {embedding_model_id(name)!r} available in the Hugging Face cache")


def embedding_model_problem(name: str) -> str | None:
    """Why `[planning] model` cannot be loaded here (no download, no torch work), or None."""
    problem = model_problem(embedding_model_id(name))
    return None if problem is None else f"planning.model = {name!r}: {problem}. Fix: {_fix(name)}"


def resolve_embedding_model(name: str) -> Path:
    """The folder of `[planning] model`, downloading a Hub model when allowed; ValueError with the fix."""
    path = Path(name).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ValueError(f"[planning] model = {name!r}: the folder has no config.json. Fix: {_fix(name)}")
        return path
    try:
        return resolve_hub_model(embedding_model_id(name))
    except ModelUnavailableError as exc:
        raise ValueError(f"[planning] model = {name!r}: {exc}. Fix: {_fix(name)}") from None


class MeanPoolEmbedder:
    """Texts -> L2-normalised mean-pooled embeddings, [N, D] float32 on the CPU."""

    def __init__(self, folder: Path) -> None:
        # deferred: transformers is heavy and only the semantic detector needs it here
        from transformers import AutoModel, AutoTokenizer

        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(folder))
        self.model: Any = AutoModel.from_pretrained(str(folder)).eval()

    def __call__(self, texts: list[str]) -> torch.Tensor:
        import torch  # deferred: see the TYPE_CHECKING import

        parts = [self._embed(texts[i:i + BATCH_SIZE]) for i in range(0, len(texts), BATCH_SIZE)]
        return torch.cat(parts) if parts else torch.zeros(0, 0)

    def _embed(self, texts: list[str]) -> torch.Tensor:
        import torch  # deferred: see the TYPE_CHECKING import

        enc = self.tokenizer(texts, padding=True, truncation=True, max_length=MAX_LENGTH, return_tensors="pt")
        with torch.inference_mode():
            hidden_B_S_D = self.model(**enc).last_hidden_state.float()
        mask_B_S_1 = enc["attention_mask"].unsqueeze(-1).float()
        mean_B_D = (hidden_B_S_D * mask_B_S_1).sum(1) / mask_B_S_1.sum(1).clamp_min(1e-9)
        return torch.nn.functional.normalize(mean_B_D, dim=-1)


def load_embedder(name: str) -> MeanPoolEmbedder:
    """`[planning] model` resolved and loaded (ValueError naming the key and the fix when it cannot be)."""
    return MeanPoolEmbedder(resolve_embedding_model(name))
