"""LoRA factors with chosen singular values, and PEFT-format adapters written from them: shared by the squeeze
tests and the campaign tests that squeeze a run's adapter."""

from __future__ import annotations

import json

import torch
from safetensors.torch import save_file


def orthonormal(rows: int, cols: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    q, _ = torch.linalg.qr(torch.randn(rows, cols, generator=gen, dtype=torch.float64))
    return q


def factors_with_singular_values(s: list[float], m: int, n: int, rank: int, seed: int = 0):
    """A (m x rank), B (rank x n) with A @ B = U diag(s) V^T; singular values beyond len(s) are 0."""
    u, v = orthonormal(m, rank, seed), orthonormal(n, rank, seed + 1)
    diag = torch.zeros(rank, dtype=torch.float64)
    diag[: len(s)] = torch.tensor(s, dtype=torch.float64)
    mix = orthonormal(rank, rank, seed + 2)  # a factorisation that is not already the SVD
    return (u * diag) @ mix, mix.T @ v.T


def write_peft_adapter(directory, layers, rank, alpha=16.0, rslora=False):
    """A PEFT-format LoRA adapter: lora_A.weight (r x in), lora_B.weight (out x r) per module."""
    directory.mkdir(parents=True)
    tensors = {}
    for name, (a, b) in layers.items():  # a: in x r, b: r x out (spec orientation)
        tensors[f"base_model.model.{name}.lora_A.weight"] = a.T.float().contiguous()
        tensors[f"base_model.model.{name}.lora_B.weight"] = b.T.float().contiguous()
    save_file(tensors, str(directory / "adapter_model.safetensors"))
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "use_rslora": rslora, "target_modules": ["q_proj"]}
    (directory / "adapter_config.json").write_text(json.dumps(config))
