"""Senders of `TrainingBatch` messages over PRIME-RL's two transports (the orchestrator's side).

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

from retrain_ray.backends.prime_rl.wire import TrainingBatch, encode_batch, rollout_file


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
