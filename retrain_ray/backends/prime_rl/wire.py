"""PRIME-RL's orchestrator -> trainer message schema and directory layout, written to match its source.

Followed in PrimeIntellect-ai/prime-rl at commit 289562d2e^ = 3ab5e04c4cb4 (the last one whose orchestrator sends
`TrainingBatch`; commit 289562d2e, "remove multi-tenant", replaced it with per-rank micro batches):

* `src/prime_rl/transport/types.py`: `TrainingSample` and `TrainingBatch` are msgspec structs with
  `array_like=True, omit_defaults=True`, so on the wire each is a msgpack array of its fields in
  declaration order (msgspec 0.22 writes every field of an array-like struct, unset ones as nil, and
  reads an array missing trailing fields as their defaults). The structs below declare the same fields
  in the same order (multimodal fields stay None); tests/fixtures/protocols/prime_rl.json records them
  from that commit and tests/backends/test_standin_protocols.py compares.
* `src/prime_rl/utils/pathing.py`: `rollouts/` and `broadcasts/` under the run's output dir, one
  `step_<n>` folder per step.
* `src/prime_rl/transport/filesystem.py`: the batch of step n is `rollouts/step_<n>/train_rollouts.bin`,
  written as `train_rollouts.bin.tmp` and renamed.
* `src/prime_rl/trainer/rl/broadcast/filesystem.py` and `src/prime_rl/orchestrator/watcher.py`: the
  trainer saves policy version n to `broadcasts/step_<n>/` and marks it complete with a `STABLE` file;
  the orchestrator waits for that marker, then POSTs `{"weight_dir": ...}` to the inference server's
  `/update_weights` (`src/prime_rl/inference/vllm/server.py`, `src/prime_rl/utils/client.py`).

Senders of `TrainingBatch` messages over PRIME-RL's two transports (the orchestrator's side).

* filesystem (PrimeIntellect-ai/prime-rl `src/prime_rl/transport/filesystem.py`,
  `FileSystemTrainingBatchSender`): the encoded batch goes to `rollouts/step_<n>/train_rollouts.bin`
  through a `.tmp` file and a rename, so the trainer never reads half a file.
* zmq (`src/prime_rl/transport/zmq.py`, `ZMQTrainingBatchSender`): one PUSH socket connected to
  `tcp://host:port`, where the trainer's PULL socket binds; each message is multipart
  `[sender_id, payload]` with `sender_id` the run directory's name, which is how the trainer tells runs
  apart. A send that the high-water mark holds back longer than `send_timeout_s` is an error (the
  trainer is not receiving), not a hang.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, cast

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


class BatchSender(Protocol):
    def send(self, batch: TrainingBatch) -> None: ...

    def close(self) -> None: ...


class FileSystemSender:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)

    def send(self, batch: TrainingBatch) -> None:
        final = rollout_file(self.run_dir, batch.step)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(final.name + ".tmp")
        tmp.write_bytes(encode_batch(batch))
        tmp.rename(final)

    def close(self) -> None:
        return None


class ZmqSender:
    def __init__(self, run_dir: Path, host: str, port: int, hwm: int, *, send_timeout_s: float = 60.0) -> None:
        # deferred: pyzmq is the prime_rl extra, needed only for this transport
        import zmq

        self.endpoint = f"tcp://{host}:{port}"
        self.sender_id = Path(run_dir).name.encode("utf-8")
        # the process-wide context: a context of our own, collected while a socket is open, blocks in term()
        context = cast("zmq.Context[zmq.Socket[bytes]]", zmq.Context.instance())  # pyzmq: `instance` is untyped
        self._socket: zmq.Socket[bytes] = context.socket(zmq.PUSH)
        self._socket.setsockopt(zmq.SNDHWM, hwm)
        self._socket.setsockopt(zmq.SNDTIMEO, int(send_timeout_s * 1000))
        self._socket.setsockopt(zmq.LINGER, 5000)  # close() still delivers what is queued, for 5 s at most
        self._socket.connect(self.endpoint)
        self._again: type[Exception] = zmq.Again

    def send(self, batch: TrainingBatch) -> None:
        try:
            self._socket.send_multipart([self.sender_id, encode_batch(batch)])
        except self._again as exc:
            raise TimeoutError(f"PRIME-RL zmq transport: the batch of step {batch.step} could not be queued to "
                               f"{self.endpoint} (the trainer's PULL socket is not receiving); check that the "
                               "PRIME-RL trainer runs with transport = zmq on that host and port") from exc

    def close(self) -> None:
        self._socket.close()


def make_sender(transport: str, run_dir: Path, *, host: str, port: int, hwm: int) -> BatchSender:
    if transport == "zmq":
        return ZmqSender(run_dir, host, port, hwm)
    return FileSystemSender(run_dir)
