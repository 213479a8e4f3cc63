"""TrainBackend that hands each RL step to a running PRIME-RL trainer as a `TrainingBatch` message.

The PRIME-RL trainer owns the optimizer and runs asynchronously, so:

* `train_step` converts the step's datums into `TrainingSample`s (mask = completion tokens, inference
  logprobs, per-token temperatures, the sample's advantage over its completion), sends them as the
  batch of step `version`, and returns a placeholder loss of 0.0. The capability
  `reports_sync_loss = false` says so, and every metrics row carries `loss_is_placeholder = true`.
  retrain-ray's `lr`, `weight_decay` and clipping do not travel: the PRIME-RL trainer's own config sets them.
* strict advantages: a scalar algorithm gives every completion token of a sample the same advantage; a
  batch whose advantages vary inside one sample's completion is refused, naming the sample (PRIME-RL's
  scalar algorithms broadcast one value per rollout; token-varying credit would be flattened).
* `sft_step` sends the warm-start targets as the cross-entropy component (`ce_weights` 1 on the target
  tokens, `rl_weights` 0): PRIME-RL's loss is a sum of rl, ce and ref_kl components.
* `export_weights` returns only the version: the new weights are the trainer's broadcast
  `broadcasts/step_<version>/`, which the engine (`engine.py`) waits for and loads via `/update_weights`.
* checkpoints: `save_checkpoint` records the version and the run directory; the weights and optimizer
  state are in PRIME-RL's own checkpoints (its `checkpoints/step_<n>/`), and `load_checkpoint` restores
  the version so the next batch continues PRIME-RL's step numbering.

The sampler of the prime_rl backend: PRIME-RL's inference server is vLLM's OpenAI-compatible server,
so sampling is `OpenAIEngine`'s (`/v1/completions` with token ids in, token ids and per-token logprobs
out); only weight sync differs.

Weight sync, as PRIME-RL's orchestrator does it (PrimeIntellect-ai/prime-rl
`src/prime_rl/orchestrator/watcher.py` `apply_policy_update`, `src/prime_rl/utils/client.py`
`update_weights`): wait until the trainer has broadcast policy version n (`broadcasts/step_<n>/STABLE`
exists), then `POST /update_weights {"weight_dir": "<run dir>/broadcasts/step_<n>"}` on the inference
server. The wait polls every `sync_poll_s` and gives up after `sync_wait_s` with an error naming the
marker it waited for.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from retrain_ray.backends.prime_rl.options import CAPABILITIES, PrimeRLOptions, parse_prime_rl_options
from retrain_ray.backends.prime_rl.wire import (
    STABLE_MARKER,
    BatchSender,
    TrainingBatch,
    TrainingSample,
    broadcast_dir,
    make_sender,
)
from retrain_ray.backends.types import Policy, TrainBatch, TrainStepResult
from retrain_ray.engines.openai.engine import OpenAIEngine, OpenAIEngineOptions
from retrain_ray.engines.types import WeightUpdate

if TYPE_CHECKING:
    from retrain_ray.backends.prime_rl.standin import PrimeRLStandin
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.engines.types import HoldsSlots


PRIME_RL_CAPABILITIES = CAPABILITIES
STATE_FILE = "prime_rl_state.json"


def scalar_advantage(row: int, advantages: list[float], prompt_len: int) -> float:
    """The one advantage of a sample's completion; a completion whose advantages differ is refused."""
    completion = advantages[prompt_len:]
    if not completion:
        return 0.0
    first = completion[0]
    for value in completion:
        if abs(value - first) > 1e-6 * max(1.0, abs(first)):
            raise ValueError(
                f"prime_rl: sample {row} has token-varying advantages ({min(completion):.4g} .. {max(completion):.4g}); "
                "PRIME-RL takes one advantage per sample and strict_advantages refuses to average them: use a "
                "transform_mode without token-level credit (e.g. \"none\") with this backend")
    return first


def rl_samples(batch: TrainBatch, env_name: str) -> list[TrainingSample]:
    samples: list[TrainingSample] = []
    for row, (tokens, logprobs, advantages, prompt_len) in enumerate(
            zip(batch.tokens_D, batch.logprobs_D, batch.advantages_D, batch.prompt_lens_D, strict=True)):
        value = scalar_advantage(row, advantages, prompt_len)
        n = len(tokens)
        samples.append(TrainingSample(
            token_ids=list(tokens), mask=[i >= prompt_len for i in range(n)], logprobs=[float(x) for x in logprobs],
            temperatures=[float(batch.temperature)] * n, env_name=env_name,
            advantages=[0.0] * prompt_len + [value] * (n - prompt_len)))
    return samples


def sft_samples(batch: TrainBatch, env_name: str) -> list[TrainingSample]:
    """Warm-start rows: the tokens with a nonzero advantage are the targets (TrainBackend.sft_step)."""
    samples: list[TrainingSample] = []
    for tokens, logprobs, advantages in zip(batch.tokens_D, batch.logprobs_D, batch.advantages_D, strict=True):
        targets = [a != 0 for a in advantages]
        n = len(tokens)
        samples.append(TrainingSample(
            token_ids=list(tokens), mask=targets, logprobs=[float(x) for x in logprobs],
            temperatures=[float(batch.temperature)] * n, env_name=env_name,
            rl_weights=[0.0] * n, ce_weights=[1.0 if t else 0.0 for t in targets]))
    return samples


class PrimeRLBackend:
    """Sends each update to the PRIME-RL trainer; the version counts the batches sent."""

    capabilities = PRIME_RL_CAPABILITIES

    def __init__(self, sender: BatchSender, run_dir: Path, *, env_name: str = "retrain") -> None:
        self.sender, self.run_dir, self.env_name = sender, Path(run_dir), env_name
        self._version = 0

    @property
    def version(self) -> int:
        return self._version

    def _send(self, samples: list[TrainingSample]) -> TrainStepResult:
        self.sender.send(TrainingBatch(examples=samples, step=self._version))
        self._version += 1
        tokens = sum(sum(s.mask) for s in samples)
        return TrainStepResult(loss=0.0, metrics={"prime_rl_batch_step": float(self._version - 1),
                                                  "prime_rl_trained_tokens": float(tokens)})

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        return self._send(rl_samples(batch, self.env_name))

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        return self._send(sft_samples(batch, self.env_name))

    def export_weights(self) -> WeightUpdate:
        return WeightUpdate(version=self._version)

    def save_checkpoint(self, directory: Path) -> None:
        record = {"version": self._version, "run_dir": str(self.run_dir)}
        (Path(directory) / STATE_FILE).write_text(json.dumps(record, indent=1))

    def load_checkpoint(self, directory: Path) -> None:
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: this checkpoint was not written by the prime_rl backend; "
                                    "resume from a checkpoint of a prime_rl run")
        self._version = int(json.loads(path.read_text())["version"])

    def close(self) -> None:
        self.sender.close()


DEFAULT_URL = "http://localhost:8000"


def prime_rl_run_dir(adapter_path: str, options: PrimeRLOptions) -> Path:
    """PRIME-RL's output directory: `[backend] adapter_path`, or its `run_id` folder."""
    base = Path(adapter_path)
    return base / options.run_id if options.run_id else base


def build_prime_rl_policy(cfg: RetrainConfig, throttle: HoldsSlots | None = None, *, cache_dir: Path | None = None) -> Policy:
    """The PRIME-RL sampler and trainer of `cfg` (with `options.standin`, the local stand-in's)."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.models import hf_tokenizer
    from retrain_ray.models.loading import load_tokenizer

    options = parse_prime_rl_options(cfg.backend.options)
    run_dir = prime_rl_run_dir(cfg.backend.adapter_path, options)
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


def wait_for_broadcast(run_dir: Path, version: int, *, wait_s: float, poll_s: float) -> Path:
    """The broadcast folder of `version` once its STABLE marker exists (TimeoutError after `wait_s`)."""
    folder = broadcast_dir(run_dir, version)
    deadline = time.monotonic() + wait_s
    while not (folder / STABLE_MARKER).exists():
        if time.monotonic() >= deadline:
            raise TimeoutError(
                f"prime_rl: the PRIME-RL trainer did not broadcast policy version {version} within {wait_s:g} s "
                f"({folder / STABLE_MARKER} does not exist); check that its trainer reads this run's batches "
                "(transport, output dir, run_id) and is not stalled, or raise [backend.options] sync_wait_s")
        time.sleep(poll_s)
    return folder


class PrimeRLEngine(OpenAIEngine):
    """Samples from PRIME-RL's inference server; loads the trainer's broadcasts with `/update_weights`."""

    def __init__(self, url: str, *, run_dir: Path, sync_wait_s: float, sync_poll_s: float, standin: PrimeRLStandin | None = None,
                 **kwargs: Unpack[OpenAIEngineOptions]) -> None:
        super().__init__(url, **kwargs)
        self.run_dir, self.sync_wait_s, self.sync_poll_s = Path(run_dir), sync_wait_s, sync_poll_s
        self.standin = standin  # the local stand-in this engine talks to (tests), kept alive with the engine

    def load_weights(self, update: WeightUpdate) -> None:
        folder = wait_for_broadcast(self.run_dir, update.version, wait_s=self.sync_wait_s, poll_s=self.sync_poll_s)
        self._request("POST", "/update_weights", f"/update_weights on {self.shown_url}",
                      json={"weight_dir": folder.as_posix()})
        self._version = update.version

    def close(self) -> None:
        super().close()
        if self.standin is not None:
            self.standin.close()
