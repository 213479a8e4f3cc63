"""Remote training API backend (Tinker) on the official `tinker` SDK, plus a local stand-in for tests.

`build_tinker_policy(cfg, throttle)` returns (engine, backend, tokenizer) for a run whose
`[backend] backend = "tinker"`: one `TinkerSession` (training client, sampling client, throttle,
retries) shared by `TinkerEngine` (sampling) and `TinkerBackend` (training, checkpoints).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Generic, TypeVar, Unpack

from retrain_ray.backends.tinker.backend import LOSS_STEPS, TINKER_CAPABILITIES, TinkerBackend, loss_variant
from retrain_ray.backends.tinker.client_types import SamplingClient, SDKFuture, ServiceClient, TrainingClient
from retrain_ray.backends.tinker.engine import TinkerEngine
from retrain_ray.backends.tinker.loss import ClipSettings, dual_clip_loss_and_grads
from retrain_ray.backends.tinker.session import NullThrottle, TinkerSession, make_service_client
from retrain_ray.backends.tinker.standin import StandinOptions
from retrain_ray.backends.types import Policy
from retrain_ray.config.tinker_options import TINKER_OPTION_DEFAULTS, TinkerOptions, parse_tinker_options
from retrain_ray.engines.types import HoldsSlots

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

__all__ = [
    "LOSS_STEPS",
    "TINKER_CAPABILITIES",
    "TINKER_OPTION_DEFAULTS",
    "ClipSettings",
    "HoldsSlots",
    "NullThrottle",
    "SDKFuture",
    "SamplingClient",
    "ServiceClient",
    "TrainingClient",
    "TinkerBackend",
    "TinkerEngine",
    "TinkerOptions",
    "TinkerSession",
    "build_tinker_policy",
    "dual_clip_loss_and_grads",
    "loss_variant",
    "make_service_client",
    "parse_tinker_options",
]


_T = TypeVar("_T")


def build_tinker_policy(
    cfg: RetrainConfig, throttle: HoldsSlots | None = None, *, service_client: ServiceClient | None = None,
    **standin_kwargs: Unpack[StandinOptions],
) -> Policy:
    """The Tinker sampler and trainer from a RetrainConfig; `service_client` overrides the SDK's (tests)."""
    options = parse_tinker_options(cfg.backend.options)
    service = service_client or make_service_client(options, cfg.model.base_url, **standin_kwargs)
    session = TinkerSession(
        service, base_model=cfg.model.model, rank=cfg.model.lora_rank, throttle=throttle, options=options
    )
    t, o = cfg.training, cfg.optimizer
    backend = TinkerBackend(
        session,
        clip=ClipSettings(t.clip_eps, t.clip_eps_high, t.clip_ratio_c),
        beta1=o.beta1, beta2=o.beta2, eps=o.eps, grad_clip_norm=o.grad_clip_norm,
    )
    tokenizer = session.call("get_tokenizer", lambda: _Ready(session.training_client.get_tokenizer()))
    return Policy(TinkerEngine(session), backend, tokenizer)


class _Ready(Generic[_T]):
    """Wraps a value that a synchronous SDK method returned, so `session.call` can treat it as a future."""

    def __init__(self, value: _T) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> _T:
        return self.value
