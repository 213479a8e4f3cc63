"""What a policy factory gets: `PolicyRequest`, the one entry of every engine's and backend's factory
(their specs hold the factory itself, engines/registry.py and backends/registry.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from retrain_ray.backends.types import Policy, TrainBackend
from retrain_ray.engines.types import SamplingEngine
from retrain_ray.models import Tokenizer

if TYPE_CHECKING:
    import torch

    from retrain_ray.backends.local.backend import LocalBackend
    from retrain_ray.backends.local.policy import PolicySettings
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.throttle.types import Throttle


@dataclass(frozen=True)
class PolicyRequest:
    """What a factory (an engine's or a backend's spec) gets to build one run's policy: the run's config
    and place, and the local trainer's parts, built on demand, for an engine that samples beside it."""

    cfg: RetrainConfig
    device: str
    throttle: Throttle | None = None
    run_name: str = "run"
    cache_dir: Path | None = None

    @cached_property
    def local_settings(self) -> PolicySettings:
        """The local trainer's settings of `cfg`, built once for every part of the policy that needs them."""
        # deferred: loads torch and transformers, which importing this module does not need
        from retrain_ray.backends.local.policy import settings_from_config

        return settings_from_config(self.cfg)

    def trainable_model(self) -> tuple[torch.nn.Module, Tokenizer]:
        """The run's model, trainable (LoRA or full) and on the run's device, and its tokenizer."""
        # deferred: loads torch and transformers, which importing this module does not need
        from retrain_ray.backends.local.policy import load_trainable_model

        return load_trainable_model(self.cfg.model.model, self.local_settings, device=self.device,
                                    cache_dir=self.cache_dir)

    def local_trainer(self, model: torch.nn.Module, *, shares_model_with_engine: bool) -> LocalBackend:
        """The local trainer of `model` (`shares_model_with_engine`: the engine samples from this very model,
        so `export_weights()` carries no tensors)."""
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.backends.local.backend import LocalBackend

        return LocalBackend(model, shares_model_with_engine=shares_model_with_engine,
                            **self.local_settings.backend_kwargs())

    @staticmethod
    def policy(engine: SamplingEngine, backend: TrainBackend, tokenizer: Tokenizer) -> Policy:
        """The policy of these parts (for a factory in engines/, which does not import this package)."""
        return Policy(engine, backend, tokenizer)


PolicyFactory: TypeAlias = Callable[[PolicyRequest], Policy]
"""Builds one run's policy; a spec holds the function itself, which imports its heavy libraries when called."""
