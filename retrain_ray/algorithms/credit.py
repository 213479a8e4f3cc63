"""Token-credit primitives (spec 2.5): GTPO weighting, HICRA, SEPA pooling/amplification, entropy mask.

* `gtpo_weighting(A, h, beta)`: w_t = max(0, 1 + beta (h_t / mean(h) - 1)), token advantage A w_t. With
  h >= 0 and beta < 1 no weight is clamped, so mean(w) = 1 (up to the 1e-8 guard) and each completion's
  token-mean stays A with its sign. Surprisal is capped at 50 first.
* `hicra(t, mask, alpha)`: planning tokens get t + alpha |t| (boosts positive credit, softens blame).
  Departure: alpha must lie in [0, 1] (above 1 it would flip negative credit to positive; the
  original did not check).
* `sepa_pool / sepa_amp / sepa_amp_c`: move the *execution* tokens' (mask 0) uncertainty towards
  (pool) or away from (amp; amp_c clamps at 0) their mean by lambda in [0, 1]; planning tokens untouched.
* `entropy_mask(advs, u, rho)`: keep only tokens whose uncertainty is in the top rho fraction of the
  group (a proxy of the "80/20 high-entropy tokens" result); the threshold is per group, not per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from retrain_ray.algorithms.types import MAX_SURPRISAL

GTPO_MEAN_FLOOR = 1e-7
GTPO_GUARD = 1e-8


def gtpo_weighting(advantage: float, uncertainty_T: Sequence[float], beta: float = 0.1) -> list[float]:
    """Spread one completion's advantage over its tokens in proportion to their uncertainty."""
    n = len(uncertainty_T)
    if n == 0:
        return []
    if beta == 0:
        return [float(advantage)] * n
    h_T = [min(float(x), MAX_SURPRISAL) for x in uncertainty_T]
    mu = sum(h_T) / n
    if mu < GTPO_MEAN_FLOOR:
        return [float(advantage)] * n
    return [advantage * max(0.0, 1.0 + beta * (h / (mu + GTPO_GUARD) - 1.0)) for h in h_T]


def _check_lengths(name: str, values: Sequence[float], mask: Sequence[int]) -> None:
    if len(values) != len(mask):
        raise ValueError(f"{name}: {len(values)} values but a planning mask of {len(mask)} tokens.")


def hicra(token_advs_T: Sequence[float], mask_T: Sequence[int], alpha: float = 0.2) -> list[float]:
    """Amplify credit on planning tokens by alpha |t|."""
    _check_lengths("hicra", token_advs_T, mask_T)
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"hicra.alpha must be in [0, 1] (got {alpha}); above 1 it flips the sign of negative credit.")
    return [t + alpha * abs(t) if m else float(t) for t, m in zip(token_advs_T, mask_T, strict=True)]


def _exec_mean(h_T: Sequence[float], mask_T: Sequence[int]) -> float | None:
    exec_vals = [min(float(h), MAX_SURPRISAL) for h, m in zip(h_T, mask_T, strict=True) if not m]
    return sum(exec_vals) / len(exec_vals) if exec_vals else None


def _sepa_apply(
    name: str, h_T: Sequence[float], mask_T: Sequence[int], lam: float, fn: Callable[[float, float, float], float]
) -> list[float]:
    _check_lengths(name, h_T, mask_T)
    lam = min(max(float(lam), 0.0), 1.0)
    mu_e = _exec_mean(h_T, mask_T)
    if lam == 0.0 or mu_e is None:
        return [float(h) for h in h_T]
    return [float(h) if m else fn(float(h), mu_e, lam) for h, m in zip(h_T, mask_T, strict=True)]


def sepa_pool(h_T: Sequence[float], mask_T: Sequence[int], lam: float) -> list[float]:
    """Execution tokens: lam * mean_exec + (1 - lam) * h."""
    return _sepa_apply("sepa_pool", h_T, mask_T, lam, lambda h, mu, lam: lam * mu + (1.0 - lam) * h)


def sepa_amp(h_T: Sequence[float], mask_T: Sequence[int], lam: float) -> list[float]:
    """Execution tokens: (1 + lam) * h - lam * mean_exec (may go negative)."""
    return _sepa_apply("sepa_amp", h_T, mask_T, lam, lambda h, mu, lam: (1.0 + lam) * h - lam * mu)


def sepa_amp_c(h_T: Sequence[float], mask_T: Sequence[int], lam: float) -> list[float]:
    """`sepa_amp` clamped at zero."""
    return _sepa_apply("sepa_amp_c", h_T, mask_T, lam, lambda h, mu, lam: max(0.0, (1.0 + lam) * h - lam * mu))


def mask_threshold(values: Sequence[float], rho: float) -> float:
    """The uncertainty a token needs to keep its advantage: top-rho of `values` (descending)."""
    if rho <= 0:
        return float("inf")
    if rho >= 1:
        return float("-inf")
    if not values:
        return 0.0
    ranked = sorted((float(v) for v in values), reverse=True)
    return ranked[max(1, int(len(ranked) * rho)) - 1]


def entropy_mask(
    token_advs_G_T: Sequence[Sequence[float]], uncertainty_G_T: Sequence[Sequence[float]], rho: float
) -> tuple[list[list[float]], dict[str, float]]:
    """Zero the advantage of tokens below the group's top-rho uncertainty threshold."""
    flat = [float(u) for row in uncertainty_G_T for u in row]
    threshold = mask_threshold(flat, rho)
    out: list[list[float]] = []
    masked = 0
    for advs_T, u_T in zip(token_advs_G_T, uncertainty_G_T, strict=True):
        _check_lengths("entropy_mask", advs_T, u_T)  # type: ignore[arg-type]
        row = [float(a) if u >= threshold else 0.0 for a, u in zip(advs_T, u_T, strict=True)]
        masked += sum(1 for u in u_T if u < threshold)
        out.append(row)
    fraction = masked / len(flat) if flat else 0.0
    return out, {"entropy_mask_threshold": threshold, "entropy_mask_fraction": fraction}
