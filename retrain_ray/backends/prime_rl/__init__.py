"""The prime_rl backend: retrain-ray's loop (sampling, rewards, advantages, logs) on a running PRIME-RL
trainer + inference server (seed 002), speaking PRIME-RL's own protocol (`wire.py` names the source
files followed), plus a local stand-in for tests (`standin.py`; it is not PRIME-RL).

Its spec and factory are here, its options in options.py (what the registry reads; importing them loads no transport).
`build_prime_rl_policy(cfg, throttle)` (backend.py) returns (engine, backend, tokenizer):
* run directory: `[backend] adapter_path` (PRIME-RL's output dir), or `adapter_path/<run_id>` with
  `[backend.options] run_id`; rollouts and broadcasts live under it;
* engine: `PrimeRLEngine` on `[inference] url` (default http://localhost:8000, PRIME-RL's inference
  port): OpenAI-compatible sampling, weight sync from the broadcasts via `/update_weights`;
* backend: `PrimeRLBackend` sending `TrainingBatch` messages over `[backend.options] transport`;
* tokenizer: the model's own, loaded here (prompts are encoded and rewards scored in this process).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from retrain_ray.backends.prime_rl.options import CAPABILITIES, OPTIONS
from retrain_ray.backends.types import BackendSpec

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.backends.prime_rl.backend import (
        PRIME_RL_CAPABILITIES,
        PrimeRLBackend,
        PrimeRLEngine,
        build_prime_rl_policy,
        prime_rl_run_dir,
        wait_for_broadcast,
    )
    from retrain_ray.backends.prime_rl.options import PrimeRLOptions
    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.types import Policy
    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import BackendSection


def build_policy(request: PolicyRequest) -> Policy:
    """PRIME-RL's inference server and trainer (or their local stand-in)."""
    # deferred: loads transformers and msgspec, which importing the registry does not need
    from retrain_ray.backends.prime_rl.backend import build_prime_rl_policy

    return build_prime_rl_policy(request.cfg, request.throttle, cache_dir=request.cache_dir)


def _sampler(inference: InferenceSection, backend: BackendSection) -> str:
    standin = backend.options.get("standin")
    where = "the local stand-in" if standin else (inference.url or "http://localhost:8000")
    return f"PRIME-RL's inference server at {where} (OpenAI-compatible; weights from its broadcasts)"


SPEC = BackendSpec(
    "prime_rl", factory=build_policy, remote=True, samples_with_entropies=False, capabilities=CAPABILITIES,
    sft_importance_sampling=False,
    options=OPTIONS,
    describe=_sampler,
    dependencies=(("msgspec", 'pip install "retrain-ray[prime_rl]"'), ("zmq", 'pip install "retrain-ray[prime_rl]"')),
    description="a running PRIME-RL trainer + inference server: TrainingBatch messages over its filesystem "
                "or zmq transport, weights from its broadcasts via /update_weights (options.standin: a local "
                "stand-in)")

_EXPORTS = {
    "PRIME_RL_CAPABILITIES": "retrain_ray.backends.prime_rl.backend",
    "PrimeRLBackend": "retrain_ray.backends.prime_rl.backend",
    "build_prime_rl_policy": "retrain_ray.backends.prime_rl.backend",
    "prime_rl_run_dir": "retrain_ray.backends.prime_rl.backend",
    "PrimeRLEngine": "retrain_ray.backends.prime_rl.backend",
    "wait_for_broadcast": "retrain_ray.backends.prime_rl.backend",
    "PrimeRLOptions": "retrain_ray.backends.prime_rl.options",
}

__all__ = ['PRIME_RL_CAPABILITIES', 'PrimeRLBackend', 'PrimeRLEngine', 'PrimeRLOptions', 'build_prime_rl_policy', 'prime_rl_run_dir', 'wait_for_broadcast']


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
