"""Preflight probe (spec 1.3, checks 1-2 and the shannon-entropy rule), run before any model loads.

Two fixed synthetic groups (mixed rewards, varied logprobs, some planning tokens) go through the
configured pipeline with lambda = 0.5. Errors are returned as a list of messages, all at once:
* a mode name does not resolve, or the pipeline raises on the probe;
* `shannon_entropy` is asked of an engine that cannot return per-token entropies;
* the backend carries one scalar per sequence but the configuration makes advantages vary within a
  sequence (checked both statically, from the mode specs, and on the probe's output: max - min > 1e-6).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from retrain_ray.run.plugin_modes import ResolvedModes, compute_group_advantages, resolve_modes

PROBE_TOLERANCE = 1e-6
PROBE_LAMBDA = 0.5
class _Probe(TypedDict):
    rewards: list[float]
    logprobs: list[list[float]]
    masks: list[list[int]]


class _ProbeParams(TypedDict):
    advantage_params: Mapping[str, object] | None
    algorithm_params: Mapping[str, object] | None


PROBE_GROUPS: tuple[_Probe, ...] = (
    {
        "rewards": [1.0, 0.0, 0.0, 1.0],
        "logprobs": [[-0.1, -2.0, -0.5], [-1.5, -0.2], [-0.05, -3.0, -0.7, -1.1], [-0.9]],
        "masks": [[1, 0, 0], [0, 1], [0, 0, 1, 1], [0]],
    },
    {
        "rewards": [0.2, 0.9, 0.5],
        "logprobs": [[-0.3, -0.3, -2.5], [-1.0, -0.01], [-4.0, -0.6, -0.2]],
        "masks": [[0, 0, 1], [1, 0], [0, 1, 0]],
    },
)


def _probe_entropies(logprobs: list[list[float]]) -> list[list[float]]:
    return [[0.5 + abs(lp) for lp in row] for row in logprobs]


def _run_probe(
    modes: ResolvedModes, transform_params: Mapping[str, object], scalar_only: bool, kwargs: _ProbeParams
) -> list[str]:
    errors: list[str] = []
    for index, probe in enumerate(PROBE_GROUPS):
        try:
            result = compute_group_advantages(
                probe["rewards"], probe["logprobs"], probe["masks"],
                advantage_mode=modes.advantage_mode, transform_mode=modes.transform_mode,
                algorithm_mode=modes.algorithm_mode, uncertainty_kind=modes.uncertainty_kind,
                transform_params=transform_params, sepa_lambda=PROBE_LAMBDA,
                entropies=_probe_entropies(probe["logprobs"]), **kwargs,
            )
        except Exception as exc:  # the probe reports any failure of the configured pipeline
            errors.append(
                f"preflight: the advantage pipeline ({modes.label}) raised on probe group {index}: "
                f"{type(exc).__name__}: {exc}"
            )
            continue
        spread = max((max(r) - min(r) for r in result.token_advantages if r), default=0.0)
        if scalar_only and spread > PROBE_TOLERANCE:
            errors.append(_scalar_error(modes, f"probe group {index} varies by {spread:.3g} within a sequence"))
    return errors


def _scalar_error(modes: ResolvedModes, detail: str) -> str:
    return (
        f"preflight: the backend keeps one advantage per sequence, but {modes.label} gives token-varying "
        f"advantages ({detail}). Use a token-preserving backend (local, or a plugin backend whose "
        "retrain_backend_capabilities hook declares preserves_token_advantages), or transform_mode='none'."
    )


def preflight(
    capabilities_preserve_token_advantages: bool,
    advantage_mode: str,
    transform_mode: str,
    algorithm_mode: str = "",
    uncertainty_kind: str = "surprisal",
    transform_params: Mapping[str, object] | None = None,
    engine_provides_entropy: bool = True,
    *,
    advantage_params: Mapping[str, object] | None = None,
    algorithm_params: Mapping[str, object] | None = None,
    entropy_fix: str = "Use the PyTorch engine on a local backend, or uncertainty_kind='surprisal'.",
) -> list[str]:
    """Error messages (empty when the configuration is usable); `entropy_fix` ends the message when the
    engine returns no per-token entropies and the run asks for them."""
    try:
        modes = resolve_modes(advantage_mode, transform_mode, algorithm_mode, uncertainty_kind, transform_params)
    except ValueError as exc:
        return [f"preflight: {exc}"]
    errors: list[str] = []
    if modes.uncertainty_kind == "shannon_entropy" and not engine_provides_entropy:
        errors.append(
            "preflight: uncertainty_kind='shannon_entropy' needs per-token entropies, which the configured "
            f"sampling engine cannot return. {entropy_fix}"
        )
    scalar_only = not capabilities_preserve_token_advantages
    if scalar_only and modes.builtin and modes.token_varying:
        return [*errors, _scalar_error(modes, "the mode is token-varying by construction")]
    kwargs: _ProbeParams = {"advantage_params": advantage_params, "algorithm_params": algorithm_params}
    return errors + _run_probe(modes, transform_params or {}, scalar_only, kwargs)
