"""Squeezing one adapter: analyse every layer, recommend a rank, write the compressed adapter and a
JSON report (`squeeze.json`) next to it.

Settings are the `[squeeze]` keys: `adapter_path` (an adapter, a checkpoint or a run directory),
`source_rank` (0 = read from the adapter; otherwise it must match), `target_ranks` ([] = powers of
two below the source rank, plus it), `min_variance_retention` (0.95), `output_path` ("" =
`<run or adapter dir>/squeeze`), `compress_to` (0 = the recommended rank) and `device` (where the
QR/SVD run).

The linear algebra of LoRA-Squeeze (spec 5.4), on one layer's factors (no files):

Convention of the spec: A is m x r, B is r x n, the update is A @ B (m x n). PEFT stores
`lora_A.weight` (r x in) and `lora_B.weight` (out x r) with update B_peft @ A_peft (out x in); the
adapter module transposes (A = lora_A.weight.T, B = lora_B.weight.T), so A @ B is that update
transposed, with the same singular values.

    QR(A) = Q_A R_A,  QR(B^T) = Q_B R_B,  R_A R_B^T = U S V^T   (an r x r SVD instead of m x n)
    A @ B = Q_A U S V^T Q_B^T                                   (so S are the update's singular values)
    V(k)  = sum_{i<k} s_i^2 / sum_i s_i^2                       (energy retained at rank k)
    A'    = Q_A U_k sqrt(S_k),  B' = sqrt(S_k) V_k^T Q_B^T        (the best rank-k factors, Eckart-Young)
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from retrain_ray.run.resume.checkpoint import CheckpointManager

REPORT = "squeeze.json"


class SqueezeError(ValueError):
    """Bad squeeze input (path, ranks), with what to do."""


@dataclass(frozen=True)
class SqueezeSettings:
    adapter_path: str = ""
    source_rank: int = 0
    target_ranks: tuple[int, ...] = ()
    min_variance_retention: float = 0.95
    output_path: str = ""
    compress_to: int = 0
    device: str = "cpu"

    @classmethod
    def from_section(cls, section: Any) -> SqueezeSettings:
        """From a config's `[squeeze]` section (a SqueezeSection)."""
        data = section.model_dump()
        data["target_ranks"] = tuple(data["target_ranks"])
        return cls(**data)


@dataclass
class SqueezeReport:
    adapter: str
    source_rank: int
    target_ranks: list[int]
    min_variance_retention: float
    recommended_rank: int
    compressed_rank: int
    mean_retention: dict[int, float]
    layers: dict[str, dict[str, Any]] = field(default_factory=dict)
    output_path: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def find_adapter(path: Path) -> Path:
    """The adapter directory of a run directory (its final, else newest complete checkpoint), of a
    checkpoint directory, or the adapter directory itself."""
    path = Path(path)
    if (path / "adapter_config.json").is_file():
        return path
    if (path / "adapter" / "adapter_config.json").is_file():
        return path / "adapter"
    checkpoint = CheckpointManager(path, keep_last=0).latest_valid()
    if checkpoint is not None and (checkpoint / "adapter" / "adapter_config.json").is_file():
        return checkpoint / "adapter"
    found = "a full fine-tuning checkpoint (finetune = \"full\")" if checkpoint is not None else "no complete checkpoint"
    raise SqueezeError(f"no LoRA adapter in {path} ({found}); squeeze needs a run trained with "
                       "finetune = \"lora\", or an adapter directory with adapter_config.json")


def _default_output(adapter: Path) -> Path:
    """`<run dir>/squeeze` for an adapter inside a run's checkpoints, else `<adapter>_squeeze`."""
    parts = adapter.resolve().parts
    if "checkpoints" in parts:
        return Path(*parts[: parts.index("checkpoints")]) / "squeeze"
    return adapter.with_name(adapter.name + "_squeeze")


def _check_ranks(settings: SqueezeSettings, source_rank: int) -> list[int]:
    if settings.source_rank and settings.source_rank != source_rank:
        raise SqueezeError(f"[squeeze] source_rank = {settings.source_rank}, but the adapter has rank {source_rank}; "
                           "set source_rank = 0 to read it from the adapter")
    ranks = sorted(set(settings.target_ranks)) or default_target_ranks(source_rank)
    bad = [k for k in ranks if not 1 <= k <= source_rank]
    if bad:
        raise SqueezeError(f"[squeeze] target_ranks {bad}: each must lie in 1..{source_rank} (the adapter's rank)")
    if not 0 <= settings.compress_to <= source_rank:
        raise SqueezeError(f"[squeeze] compress_to = {settings.compress_to}: must lie in 0..{source_rank} "
                           "(0 = the recommended rank)")
    return ranks


def squeeze_adapter(path: str | Path, settings: SqueezeSettings = SqueezeSettings()) -> SqueezeReport:
    """Analyses the adapter at (or in the run at) `path`, writes the compressed adapter and the report."""
    try:
        adapter = find_adapter(Path(path))
        config, layers = read_adapter(adapter)
    except AdapterError as exc:
        raise SqueezeError(str(exc)) from None
    source_rank = int(config["r"])
    ranks = _check_ranks(settings, source_rank)
    device = torch.device(settings.device)
    spectra = {name: layer_spectrum(a.to(device), b.to(device)) for name, (a, b) in sorted(layers.items())}
    means = mean_retention(list(spectra.values()), ranks)
    recommended = recommend_rank(means, settings.min_variance_retention, source_rank)
    k = settings.compress_to or recommended
    output = Path(settings.output_path) if settings.output_path else _default_output(adapter)
    dtype = next(iter(layers.values()))[0].dtype
    compressed: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
    for name, sp in spectra.items():
        a, b = compress_layer(sp, k)
        compressed[name] = (a.cpu(), b.cpu())
    write_adapter(output / f"adapter_r{k}", config, compressed, k, dtype)
    report = SqueezeReport(
        adapter=str(adapter), source_rank=source_rank, target_ranks=ranks,
        min_variance_retention=settings.min_variance_retention, recommended_rank=recommended, compressed_rank=k,
        mean_retention=means, output_path=str(output / f"adapter_r{k}"),
        layers={name: {"singular_values": [float(s) for s in sp.s.cpu()],
                       "retention": {r: retained_energy(sp.s, r) for r in ranks}}
                for name, sp in spectra.items()},
    )
    (output / REPORT).write_text(report.to_json())
    return report


@dataclass(frozen=True)
class LayerSpectrum:
    """One layer's update A @ B = Q_A U diag(S) Vh Q_B^T; S descending, in float64."""

    q_a: torch.Tensor  # m x r
    u: torch.Tensor  # r x r
    s: torch.Tensor  # r
    vh: torch.Tensor  # r x r
    q_b: torch.Tensor  # n x r
    rank: int  # the factors' r; S has min(m, n, r) values (fewer than r only for a layer narrower than r)


def layer_spectrum(a_m_r: torch.Tensor, b_r_n: torch.Tensor) -> LayerSpectrum:
    """The thin QR + small SVD decomposition of A @ B (computed in float64)."""
    if a_m_r.ndim != 2 or b_r_n.ndim != 2 or a_m_r.shape[1] != b_r_n.shape[0]:
        raise ValueError(f"LoRA factors must be m x r and r x n, got {tuple(a_m_r.shape)} and {tuple(b_r_n.shape)}")
    q_a, r_a = torch.linalg.qr(a_m_r.double())
    q_b, r_b = torch.linalg.qr(b_r_n.double().T)
    u, s, vh = torch.linalg.svd(r_a @ r_b.T, full_matrices=False)
    return LayerSpectrum(q_a=q_a, u=u, s=s, vh=vh, q_b=q_b, rank=int(a_m_r.shape[1]))


def retained_energy(s: torch.Tensor, k: int) -> float:
    """V(k): the share of the squared singular values kept by the top k (1.0 for an all-zero update)."""
    energy = s.double().square()
    total = float(energy.sum())
    if total <= 0.0:
        return 1.0
    return float(energy[: max(0, k)].sum()) / total


def compress_layer(spec: LayerSpectrum, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Rank-k factors (A' m x k, B' k x n) whose product is the best rank-k approximation of A @ B."""
    if not 1 <= k <= spec.rank:
        raise ValueError(f"target rank {k} must be between 1 and the source rank {spec.rank}")
    j = min(k, spec.s.numel())
    root = spec.s[:j].sqrt()
    a_new = spec.q_a @ spec.u[:, :j] * root
    b_new = root[:, None] * (spec.vh[:j] @ spec.q_b.T)
    missing = k - root.numel()  # rank above min(m, n): the extra directions carry nothing
    if missing > 0:
        a_new = torch.cat([a_new, a_new.new_zeros(a_new.shape[0], missing)], dim=1)
        b_new = torch.cat([b_new, b_new.new_zeros(missing, b_new.shape[1])], dim=0)
    return a_new, b_new


def default_target_ranks(source_rank: int) -> list[int]:
    """Powers of two below the source rank, then the source rank (spec 5.4): 8 -> [1, 2, 4, 8]."""
    ranks, k = [], 1
    while k < source_rank:
        ranks.append(k)
        k *= 2
    return [*ranks, source_rank]


def recommend_rank(mean_retention: dict[int, float], threshold: float, source_rank: int) -> int:
    """The smallest target rank whose layer-mean V(k) reaches `threshold`, else the source rank."""
    for k in sorted(mean_retention):
        if mean_retention[k] >= threshold:
            return k
    return source_rank


def mean_retention(spectra: Sequence[LayerSpectrum], ranks: Sequence[int]) -> dict[int, float]:
    """Layer-mean V(k) for each target rank."""
    return {k: sum(retained_energy(sp.s, k) for sp in spectra) / len(spectra) for k in ranks}


# PEFT adapter directories for squeeze: read the LoRA factor pairs, write a lower-rank copy.
#
# Keys come in pairs `<module>.lora_A.weight` (r x in) and `<module>.lora_B.weight` (out x r). PEFT
# scales the update by lora_alpha / r (lora_alpha / sqrt(r) with use_rslora); the compressed adapter's
# factors reproduce the unscaled product, so its lora_alpha is rescaled to keep the same scale at the
# new rank. Adapters with per-module ranks (rank_pattern), DoRA or extra trainable modules are refused:
# compressing them would silently drop parts of the adapter.
CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
_A, _B = ".lora_A.weight", ".lora_B.weight"


class AdapterError(ValueError):
    """An adapter directory that squeeze cannot read or compress, with what to do."""


def read_adapter(directory: Path) -> tuple[dict[str, Any], dict[str, tuple[torch.Tensor, torch.Tensor]]]:
    """(adapter_config, {module: (A m x r, B r x n)}) in the spec's orientation (A = lora_A.weight.T)."""
    directory = Path(directory)
    if not (directory / CONFIG).is_file() or not (directory / WEIGHTS).is_file():
        raise AdapterError(f"{directory} holds no PEFT LoRA adapter ({CONFIG} and {WEIGHTS}); "
                           "squeeze needs a run trained with finetune = \"lora\"")
    config = json.loads((directory / CONFIG).read_text())
    _refuse_unsupported(config, directory)
    tensors = load_file(str(directory / WEIGHTS))
    layers, others = {}, []
    for key, a in tensors.items():
        if key.endswith(_A):
            module = key.removesuffix(_A)
            b = tensors.get(module + _B)
            if b is None:
                raise AdapterError(f"{directory / WEIGHTS}: {key} has no matching {module + _B}")
            layers[module] = (a.T, b.T)
        elif not key.endswith(_B):
            others.append(key)
    if others:
        raise AdapterError(f"{directory / WEIGHTS} holds non-LoRA tensors (e.g. {others[0]}): squeeze would drop them")
    if not layers:
        raise AdapterError(f"{directory / WEIGHTS} holds no lora_A/lora_B pairs")
    return config, layers


def _refuse_unsupported(config: dict[str, Any], directory: Path) -> None:
    if config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{directory}: peft_type {config.get('peft_type')!r} is not LoRA")
    if config.get("use_dora"):
        raise AdapterError(f"{directory}: DoRA adapters carry magnitude vectors squeeze does not compress")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise AdapterError(f"{directory}: per-module ranks (rank_pattern/alpha_pattern) are not supported")


def scaled_alpha(config: dict[str, Any], new_rank: int) -> float:
    """lora_alpha at `new_rank` that keeps the adapter's scale (alpha / r, or alpha / sqrt(r) with rsLoRA)."""
    alpha, rank = float(config.get("lora_alpha", config["r"])), int(config["r"])
    ratio = new_rank / rank
    return alpha * (math.sqrt(ratio) if config.get("use_rslora") else ratio)


def write_adapter(directory: Path, config: dict[str, Any], layers: dict[str, tuple[torch.Tensor, torch.Tensor]],
                  new_rank: int, dtype: torch.dtype) -> None:
    """Writes a PEFT adapter of rank `new_rank` (factors in the spec's orientation) atomically."""
    directory = Path(directory)
    tmp = directory.with_name(f".{directory.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = {}
    for module, (a_m_k, b_k_n) in layers.items():
        tensors[module + _A] = a_m_k.T.to(dtype).contiguous()
        tensors[module + _B] = b_k_n.T.to(dtype).contiguous()
    save_file(tensors, str(tmp / WEIGHTS))
    new_config = {**config, "r": new_rank, "lora_alpha": scaled_alpha(config, new_rank)}
    (tmp / CONFIG).write_text(json.dumps(new_config, indent=2, sort_keys=True))
    if directory.exists():
        shutil.rmtree(directory)
    os.replace(tmp, directory)
