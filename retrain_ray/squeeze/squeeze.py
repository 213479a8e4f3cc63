"""Squeezing one adapter: analyse every layer, recommend a rank, write the compressed adapter and a
JSON report (`squeeze.json`) next to it.

Settings are the `[squeeze]` keys: `adapter_path` (an adapter, a checkpoint or a run directory),
`source_rank` (0 = read from the adapter; otherwise it must match), `target_ranks` ([] = powers of
two below the source rank, plus it), `min_variance_retention` (0.95), `output_path` ("" =
`<run or adapter dir>/squeeze`), `compress_to` (0 = the recommended rank) and `device` (where the
QR/SVD run).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from retrain_ray.run.resume.checkpoint import CheckpointManager
from retrain_ray.squeeze.adapter import AdapterError, read_adapter, write_adapter
from retrain_ray.squeeze.analysis import (
    compress_layer,
    default_target_ranks,
    layer_spectrum,
    mean_retention,
    recommend_rank,
    retained_energy,
)

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

