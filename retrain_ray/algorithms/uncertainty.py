"""Per-token uncertainty kinds fed to GTPO / SEPA / the entropy mask (spec 2.3).

| kind                  | value per token                                         | needs              |
| `surprisal`           | min(-logprob, 50)                                       | sampled logprobs   |
| `predictive_variance` | p(1-p), p = clip(exp(max(lp, -50)), 0, 1)               | sampled logprobs   |
| `shannon_entropy`     | min(H, 50): H precomputed by the engine, else -sum p log p of the full distribution | entropies |

Aliases are canonicalised by `canonical_kind`. `varentropy` is a recognised name that is not implemented
(as in the original), so asking for it is a clear error. The kind may also be set through
`transform_params.{uncertainty_kind, uncertainty_metric, token_uncertainty}`; see `resolve_kind`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from retrain_ray.algorithms.types import MAX_SURPRISAL, UncertaintyInput

ALIASES: dict[str, str] = {
    "surprisal": "surprisal",
    "token_surprisal": "surprisal",
    "neg_logprob": "surprisal",
    "negative_logprob": "surprisal",
    "nll": "surprisal",
    "predictive_variance": "predictive_variance",
    "pred_var": "predictive_variance",
    "bernoulli_variance": "predictive_variance",
    "shannon_entropy": "shannon_entropy",
    "shannon": "shannon_entropy",
    "entropy": "shannon_entropy",
    "token_entropy": "shannon_entropy",
    "varentropy": "varentropy",
}
OVERRIDE_KEYS = ("uncertainty_kind", "uncertainty_metric", "token_uncertainty")
DEFAULT_KIND = "surprisal"


def canonical_kind(name: str) -> str:
    """Canonical built-in name for an alias; dotted plugin paths are returned unchanged."""
    key = name.strip()
    if key.lower() in ALIASES:
        return ALIASES[key.lower()]
    if "." in key or ":" in key:
        return key
    raise ValueError(
        f"uncertainty_kind={name!r} is not known. Use one of {sorted(set(ALIASES.values()) - {'varentropy'})} "
        "(or an alias), or a plugin path 'package.module:function'."
    )


def resolve_kind(uncertainty_kind: str, transform_params: Mapping[str, object] | None) -> str:
    """The effective kind: a transform_params override replaces the default; conflicts are errors."""
    base = canonical_kind(uncertainty_kind or DEFAULT_KIND)
    overrides = {
        key: canonical_kind(str(value)) for key, value in (transform_params or {}).items() if key in OVERRIDE_KEYS
    }
    distinct = set(overrides.values())
    if len(distinct) > 1:
        raise ValueError(f"transform_params set conflicting uncertainty kinds {overrides}; keep one of them.")
    if not distinct:
        return base
    override = distinct.pop()
    if base != DEFAULT_KIND and base != override:
        raise ValueError(
            f"[algorithm].uncertainty_kind={uncertainty_kind!r} conflicts with transform_params {overrides}; "
            "set the kind in one place only."
        )
    return override


def surprisal(data: UncertaintyInput) -> list[float]:
    return [min(-float(lp), MAX_SURPRISAL) for lp in data.logprobs_T]


def predictive_variance(data: UncertaintyInput) -> list[float]:
    out: list[float] = []
    for lp in data.logprobs_T:
        p = min(max(math.exp(max(float(lp), -MAX_SURPRISAL)), 0.0), 1.0)
        out.append(p * (1.0 - p))
    return out


def _entropy_of(dist: Sequence[float]) -> float:
    return -sum(float(p) * math.log(float(p)) for p in dist if float(p) > 0.0)


def shannon_entropy(data: UncertaintyInput) -> list[float]:
    n = len(data.logprobs_T)
    if data.entropies_T is not None:
        values = [float(h) for h in data.entropies_T]
    elif data.distributions_T is not None:
        values = [_entropy_of(dist) for dist in data.distributions_T]
    else:
        raise ValueError(
            "uncertainty_kind='shannon_entropy' needs per-token entropies (entropies=...) or full token "
            "distributions, and none were given. Sample with an engine that returns entropies (the PyTorch "
            "engine), or use uncertainty_kind='surprisal'."
        )
    if len(values) != n:
        raise ValueError(f"shannon_entropy: got {len(values)} entropies for a completion of {n} tokens.")
    return [min(h, MAX_SURPRISAL) for h in values]


BUILTINS = {
    "surprisal": surprisal,
    "predictive_variance": predictive_variance,
    "shannon_entropy": shannon_entropy,
}
UNSUPPORTED = {
    "varentropy": "it is a reserved name without an implementation (as in the original); use 'surprisal', "
    "'predictive_variance' or 'shannon_entropy'."
}
