"""PRIME-RL's orchestrator -> trainer message schema and directory layout, written to match its source.

Followed in PrimeIntellect-ai/prime-rl at commit 289562d2e^ (the last one whose orchestrator sends
`TrainingBatch`; commit 289562d2e, "remove multi-tenant", replaced it with per-rank micro batches):

* `src/prime_rl/transport/types.py`: `TrainingSample` and `TrainingBatch` are msgspec structs with
  `array_like=True, omit_defaults=True`, so on the wire each is a msgpack array of its fields in
  declaration order, trailing fields at their default left out. The structs below declare the same
  fields in the same order (multimodal fields stay None).
* `src/prime_rl/utils/pathing.py`: `rollouts/` and `broadcasts/` under the run's output dir, one
  `step_<n>` folder per step.
* `src/prime_rl/transport/filesystem.py`: the batch of step n is `rollouts/step_<n>/train_rollouts.bin`,
  written as `train_rollouts.bin.tmp` and renamed.
* `src/prime_rl/trainer/rl/broadcast/filesystem.py` and `src/prime_rl/orchestrator/watcher.py`: the
  trainer saves policy version n to `broadcasts/step_<n>/` and marks it complete with a `STABLE` file;
  the orchestrator waits for that marker, then POSTs `{"weight_dir": ...}` to the inference server's
  `/update_weights` (`src/prime_rl/inference/vllm/server.py`, `src/prime_rl/utils/client.py`).
"""

from __future__ import annotations

from pathlib import Path

import msgspec

BATCH_FILE = "train_rollouts.bin"
STABLE_MARKER = "STABLE"
WEIGHTS_FILE = "model.safetensors"


class EncodedTensor(msgspec.Struct, array_like=True, gc=False):
    dtype: str
    shape: list[int]
    data: bytes


class RoutedExperts(msgspec.Struct, array_like=True, gc=False, omit_defaults=True):
    data: bytes
    shape: list[int]
    dtype: str


class TrainingSample(msgspec.Struct, array_like=True, gc=False, omit_defaults=True):
    """One sequence: `token_ids` with a trainable `mask` and per-token arrays of the same length."""

    token_ids: list[int]
    mask: list[bool]
    logprobs: list[float]
    temperatures: list[float]
    env_name: str
    ref_logprobs: list[float] | None = None
    mm_kwargs: dict[str, EncodedTensor] | None = None
    routed_experts: RoutedExperts | None = None
    mm_token_type_ids: list[int] | None = None
    rl_weights: list[float] | None = None
    ce_weights: list[float] | None = None
    ref_kl_weights: list[float] | None = None
    advantages: list[float] | None = None


class TrainingBatch(msgspec.Struct, array_like=True, gc=False, omit_defaults=True):
    examples: list[TrainingSample]
    step: int
    run_idx: int | None = None


_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(type=TrainingBatch)


def encode_batch(batch: TrainingBatch) -> bytes:
    return _ENCODER.encode(batch)


def decode_batch(payload: bytes | memoryview) -> TrainingBatch:
    return _DECODER.decode(payload)


def step_dir(parent: Path, step: int) -> Path:
    return parent / f"step_{step}"


def rollout_file(run_dir: Path, step: int) -> Path:
    """Where the filesystem transport puts the batch of `step`."""
    return step_dir(run_dir / "rollouts", step) / BATCH_FILE


def broadcast_dir(run_dir: Path, version: int) -> Path:
    """Where the trainer broadcasts policy `version` (complete once it holds `STABLE`)."""
    return step_dir(run_dir / "broadcasts", version)
