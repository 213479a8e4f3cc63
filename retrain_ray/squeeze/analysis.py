"""The linear algebra of LoRA-Squeeze (spec 5.4), on one layer's factors.

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

from collections.abc import Sequence
from dataclasses import dataclass

import torch


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
