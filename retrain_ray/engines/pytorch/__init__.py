"""`[inference] engine = "pytorch"` (the default): the batched PyTorch engine (engine.py) sampling from the
very model the local trainer updates, in the run's process. This module is its spec and policy factory;
importing it loads no torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrain_ray.engines.types import EngineSpec

if TYPE_CHECKING:
    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.types import Policy


def build_policy(request: PolicyRequest) -> Policy:
    """The PyTorch engine and the local trainer sharing one model in this process."""
    # deferred: loads torch, which importing the engine registry does not need
    from retrain_ray.engines.pytorch.engine import sampler_of

    model, tokenizer = request.trainable_model()
    trainer = request.local_trainer(model, shares_model_with_engine=True)
    engine = sampler_of(model, tokenizer, seed=request.local_settings.seed, shares_model_with_trainer=True)
    return request.policy(engine, trainer, tokenizer)


SPEC = EngineSpec("pytorch", is_http=False, factory=build_policy, gives_entropies=True,
                  describe=lambda inference, backend: "pytorch: PyTorch engine in the run's process")
