"""Remote training API backend (Tinker) on the official `tinker` SDK, plus a local stand-in for tests.

Its spec and factory are here, its options in options.py (what the registry reads; importing them loads no SDK).
`build_tinker_policy(cfg, throttle)` (backend.py) returns (engine, backend, tokenizer) for a run whose
`[backend] backend = "tinker"`: one `TinkerSession` (training client, sampling client, throttle,
retries) shared by `TinkerEngine` (sampling) and `TinkerBackend` (training, checkpoints).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from retrain_ray.backends.tinker.options import CAPABILITIES, OPTIONS
from retrain_ray.backends.types import BackendSpec

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.tinker.backend import (
        LOSS_STEPS,
        TINKER_CAPABILITIES,
        TinkerBackend,
        build_tinker_policy,
        loss_variant,
    )
    from retrain_ray.backends.tinker.loss import ClipSettings, dual_clip_loss_and_grads
    from retrain_ray.backends.tinker.options import (
        TINKER_OPTION_DEFAULTS,
        TinkerOptions,
        parse_tinker_options,
    )
    from retrain_ray.backends.tinker.session import (
        NullThrottle,
        SamplingClient,
        SDKFuture,
        ServiceClient,
        TinkerEngine,
        TinkerSession,
        TrainingClient,
        make_service_client,
    )
    from retrain_ray.backends.types import Policy
    from retrain_ray.engines.types import HoldsSlots


def build_policy(request: PolicyRequest) -> Policy:
    """The remote training API's sampler and trainer."""
    # deferred: loads the tinker SDK and rich, which importing the registry does not need
    from retrain_ray.backends.tinker.backend import build_tinker_policy

    return build_tinker_policy(request.cfg, request.throttle)


SPEC = BackendSpec(
    "tinker", factory=build_policy, remote=True, honours_clip_eps=True, capabilities=CAPABILITIES,
    samples_with_entropies=False, throttled_endpoint="tinker",
    options=OPTIONS,
    describe=lambda inference, backend: "tinker sampling client (remote)",
    dependencies=(("tinker", 'pip install "retrain-ray[tinker]"'),),
    description="remote training API (Tinker); sampling and updates run on the service")

_EXPORTS = {
    "LOSS_STEPS": "retrain_ray.backends.tinker.backend",
    "TINKER_CAPABILITIES": "retrain_ray.backends.tinker.backend",
    "TinkerBackend": "retrain_ray.backends.tinker.backend",
    "build_tinker_policy": "retrain_ray.backends.tinker.backend",
    "loss_variant": "retrain_ray.backends.tinker.backend",
    "SDKFuture": "retrain_ray.backends.tinker.session",
    "SamplingClient": "retrain_ray.backends.tinker.session",
    "ServiceClient": "retrain_ray.backends.tinker.session",
    "TrainingClient": "retrain_ray.backends.tinker.session",
    "TinkerEngine": "retrain_ray.backends.tinker.session",
    "ClipSettings": "retrain_ray.backends.tinker.loss",
    "dual_clip_loss_and_grads": "retrain_ray.backends.tinker.loss",
    "NullThrottle": "retrain_ray.backends.tinker.session",
    "TinkerSession": "retrain_ray.backends.tinker.session",
    "make_service_client": "retrain_ray.backends.tinker.session",
    "TINKER_OPTION_DEFAULTS": "retrain_ray.backends.tinker.options",
    "TinkerOptions": "retrain_ray.backends.tinker.options",
    "parse_tinker_options": "retrain_ray.backends.tinker.options",
    "HoldsSlots": "retrain_ray.engines.types",
}

__all__ = ['ClipSettings', 'HoldsSlots', 'LOSS_STEPS', 'NullThrottle', 'SDKFuture', 'SamplingClient', 'ServiceClient', 'TINKER_CAPABILITIES', 'TINKER_OPTION_DEFAULTS', 'TinkerBackend', 'TinkerEngine', 'TinkerOptions', 'TinkerSession', 'TrainingClient', 'build_tinker_policy', 'dual_clip_loss_and_grads', 'loss_variant', 'make_service_client', 'parse_tinker_options']


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
