"""The prime_rl backend: retrain-ray's loop (sampling, rewards, advantages, logs) on a running PRIME-RL
trainer + inference server (seed 002), speaking PRIME-RL's own protocol (`wire.py` names the source
files followed), plus a local stand-in for tests (`standin.py`; it is not PRIME-RL).

`build_prime_rl_policy(cfg, throttle)` returns (engine, backend, tokenizer):
* run directory: `[backend] adapter_path` (PRIME-RL's output dir), or `adapter_path/<run_id>` with
  `[backend.options] run_id`; rollouts and broadcasts live under it;
* engine: `PrimeRLEngine` on `[inference] url` (default http://localhost:8000, PRIME-RL's inference
  port): OpenAI-compatible sampling, weight sync from the broadcasts via `/update_weights`;
* backend: `PrimeRLBackend` sending `TrainingBatch` messages over `[backend.options] transport`;
* tokenizer: the model's own, loaded here (prompts are encoded and rewards scored in this process).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.backends.prime_rl.backend import PRIME_RL_CAPABILITIES, PrimeRLBackend
from retrain_ray.backends.prime_rl.engine import PrimeRLEngine, wait_for_broadcast
from retrain_ray.backends.prime_rl.transport import make_sender
from retrain_ray.backends.types import Policy
from retrain_ray.config.prime_rl_options import PrimeRLOptions, parse_prime_rl_options

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.engines.types import HoldsSlots

__all__ = ["PRIME_RL_CAPABILITIES", "PrimeRLBackend", "PrimeRLEngine", "PrimeRLOptions", "build_prime_rl_policy",
           "prime_rl_run_dir", "wait_for_broadcast"]
DEFAULT_URL = "http://localhost:8000"


def prime_rl_run_dir(cfg: RetrainConfig, options: PrimeRLOptions) -> Path:
    base = Path(cfg.backend.adapter_path)
    return base / options.run_id if options.run_id else base


def build_prime_rl_policy(cfg: RetrainConfig, throttle: HoldsSlots | None = None, *, cache_dir: Path | None = None) -> Policy:
    """The PRIME-RL sampler and trainer of `cfg` (with `options.standin`, the local stand-in's)."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.models.loading import load_tokenizer
    from retrain_ray.models.types import hf_tokenizer

    options = parse_prime_rl_options(cfg.backend.options)
    run_dir = prime_rl_run_dir(cfg, options)
    url = cfg.inference.url or DEFAULT_URL
    standin = None
    if options.standin:
        # deferred: the stand-in loads a model; only tests and demos ask for it
        from retrain_ray.backends.prime_rl.standin import PrimeRLStandin

        standin = PrimeRLStandin(run_dir, cfg.model.model, transport=options.transport, zmq_host=options.zmq_host,
                                 zmq_port=options.zmq_port, zmq_hwm=options.zmq_hwm, lr=cfg.training.lr,
                                 seed=max(cfg.training.seed, 0), cache_dir=str(cache_dir) if cache_dir else None)
        url = standin.url
    sender = make_sender(options.transport, run_dir, host=options.zmq_host, port=options.zmq_port,
                         hwm=options.zmq_hwm)
    backend = PrimeRLBackend(sender, run_dir, env_name=options.env_name)
    engine = PrimeRLEngine(url, run_dir=run_dir, sync_wait_s=options.sync_wait_s, sync_poll_s=options.sync_poll_s,
                           model_name=cfg.model.model, throttle=throttle, seed=cfg.training.seed,
                           max_parallel_requests=cfg.inference.max_concurrent, standin=standin)
    return Policy(engine, backend, hf_tokenizer(load_tokenizer(cfg.model.model, cache_dir)))
