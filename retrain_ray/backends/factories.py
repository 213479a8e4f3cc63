"""The factories the engine and backend specs name (config/components.py): each builds one run's policy
from a `PolicyRequest`, importing its backend only when called (backends/registry.py `build_policy_for`)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from retrain_ray.backends.local.policy import PolicySettings
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.throttle.types import Throttle


@dataclass(frozen=True)
class PolicyRequest:
    """What a factory may need to build one run's policy."""

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


def tinker_policy(request: PolicyRequest) -> Policy:
    """The remote training API's sampler and trainer."""
    # deferred: loads rich, which importing this module does not need
    from retrain_ray.backends.tinker import build_tinker_policy

    return build_tinker_policy(request.cfg, request.throttle)


def prime_rl_policy(request: PolicyRequest) -> Policy:
    """PRIME-RL's inference server and trainer (or their local stand-in)."""
    # deferred: loads transformers and msgspec, which importing this module does not need
    from retrain_ray.backends.prime_rl import build_prime_rl_policy

    return build_prime_rl_policy(request.cfg, request.throttle, cache_dir=request.cache_dir)


def openai_policy(request: PolicyRequest) -> Policy:
    """An HTTP sampler of an OpenAI-compatible server and the local trainer."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.backends.local.openai_policy import build_openai_policy

    return build_openai_policy(request.cfg, request.throttle, adapter_name=request.run_name, device=request.device,
                               cache_dir=request.cache_dir, settings=request.local_settings)


def vllm_policy(request: PolicyRequest) -> Policy:
    """vLLM in this process and the local trainer."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.backends.local.vllm_policy import build_vllm_policy

    return build_vllm_policy(request.cfg, device=request.device, cache_dir=request.cache_dir,
                             settings=request.local_settings)


def local_policy(request: PolicyRequest) -> Policy:
    """The PyTorch engine and the local trainer sharing one model in this process."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.backends.local import build_local_policy

    return build_local_policy(request.cfg, device=request.device, cache_dir=request.cache_dir,
                              settings=request.local_settings)
