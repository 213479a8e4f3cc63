"""LOCAL STAND-IN for a PRIME-RL trainer + inference server. For tests only; it is not PRIME-RL.

PRIME-RL needs CUDA (and packages outside PyPI), so the prime_rl backend is tested against this class,
which speaks the same protocol on the same paths, sockets and HTTP routes as PRIME-RL at commit
289562d2e^ (3ab5e04c) of PrimeIntellect-ai/prime-rl (see `wire.py` for the files followed; the shapes it must
accept are recorded in tests/fixtures/protocols/prime_rl.json and checked by tests/backends/test_standin_protocols.py):

* it receives `TrainingBatch` messages with the same schema: over the filesystem transport by polling
  `rollouts/step_<n>/train_rollouts.bin` (as `FileSystemTrainingBatchReceiver`), or over zmq with a
  PULL socket bound to `tcp://host:port` taking `[sender_id, payload]` (as `ZMQTrainingBatchReceiver`);
* it really trains a copy of the model (full fine-tuning, AdamW with the `lr` it is given) on each
  batch with PRIME-RL's loss components: rl = -sum(w_rl * A * exp(lp - lp_inference)) over the masked
  tokens, normalised by their count, plus ce = -sum(w_ce * lp) normalised by its own count, at each
  token's sampling temperature;
* after batch n it broadcasts policy version n + 1 as `broadcasts/step_<n+1>/model.safetensors` and
  then touches `STABLE` (as `FileSystemWeightBroadcast`);
* its inference side is an OpenAI-compatible HTTP server (the product's `CompletionServer`:
  `/v1/completions` with token ids and logprobs, `/v1/models`) plus PRIME-RL's `POST /update_weights
  {"weight_dir": ...}`, which loads a broadcast folder's weights as the served model.

What it does not model: PRIME-RL's packing and micro-batches, its multi-run manager (the run's
`control/orch.toml`), pausing engines around an update, LoRA broadcasts, NCCL/NIXL weight transfer.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import cast

import torch
from safetensors.torch import save_file  # pyright: ignore[reportUnknownVariableType]

from retrain_ray.backends.prime_rl.wire import (
    STABLE_MARKER,
    WEIGHTS_FILE,
    TrainingBatch,
    TrainingSample,
    broadcast_dir,
    decode_batch,
    rollout_file,
)
from retrain_ray.serve.core import CompletionServer

log = logging.getLogger(__name__)


class FileSystemReceiver:
    """Reads the batch of the next step once its file exists (the sender renames it into place)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir, self.step = Path(run_dir), 0

    def receive(self, timeout_s: float) -> TrainingBatch | None:
        path = rollout_file(self.run_dir, self.step)
        deadline = time.monotonic() + timeout_s
        while not path.exists():
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)
        self.step += 1
        return decode_batch(path.read_bytes())

    def close(self) -> None:
        return None


class ZmqReceiver:
    """PULL socket bound where the backend's PUSH socket connects; multipart [sender_id, payload]."""

    def __init__(self, host: str, port: int, hwm: int) -> None:
        # deferred: pyzmq is the prime_rl extra, needed only for this transport
        import zmq

        context = cast("zmq.Context[zmq.Socket[bytes]]", zmq.Context.instance())  # pyzmq: `instance` is untyped
        self._socket: zmq.Socket[bytes] = context.socket(zmq.PULL)
        self._socket.setsockopt(zmq.RCVHWM, hwm)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(f"tcp://{'127.0.0.1' if host == 'localhost' else host}:{port}")
        self.senders: set[bytes] = set()

    def receive(self, timeout_s: float) -> TrainingBatch | None:
        if not self._socket.poll(int(timeout_s * 1000)):
            return None
        sender, payload = self._socket.recv_multipart()
        self.senders.add(bytes(sender))
        return decode_batch(payload)

    def close(self) -> None:
        self._socket.close()


def _token_logprobs(model: torch.nn.Module, sample: TrainingSample) -> torch.Tensor:
    """log p(token_t | tokens_<t) at token t's temperature, for t = 1 .. n-1."""
    ids = torch.tensor([sample.token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float()
    temps = torch.tensor(sample.temperatures[1:]).clamp_min(1e-6).unsqueeze(-1)
    logp = torch.log_softmax(logits / temps, dim=-1)
    return logp.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)


def batch_loss(model: torch.nn.Module, batch: TrainingBatch) -> torch.Tensor:
    """PRIME-RL's rl + ce components over the batch, each normalised by its own token count."""
    rl_sum = ce_sum = torch.zeros(())
    rl_n = ce_n = 0
    for s in batch.examples:
        lp = _token_logprobs(model, s)
        mask = torch.tensor(s.mask[1:], dtype=torch.float32)
        rl_w = torch.tensor(s.rl_weights[1:]) if s.rl_weights is not None else torch.ones_like(mask)
        ce_w = torch.tensor(s.ce_weights[1:]) if s.ce_weights is not None else torch.zeros_like(mask)
        rl_w, ce_w = rl_w * mask, ce_w * mask
        if s.advantages is not None and bool((rl_w > 0).any()):
            adv = torch.tensor(s.advantages[1:])
            ratio = torch.exp(lp - torch.tensor(s.logprobs[1:]))
            rl_sum = rl_sum - (rl_w * adv * ratio).sum()
            rl_n += int((rl_w > 0).sum())
        elif bool((rl_w > 0).any()):
            raise ValueError("a sample has live rl tokens but no advantages (PRIME-RL's trainer raises here too)")
        ce_sum = ce_sum - (ce_w * lp).sum()
        ce_n += int((ce_w > 0).sum())
    return rl_sum / max(rl_n, 1) + ce_sum / max(ce_n, 1)


def _handler(server: CompletionServer, on_update: Callable[[str], dict[str, object]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: Mapping[str, object]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") == "/v1/models":
                self._reply(200, server.models())
            else:
                self._reply(404, {"detail": f"no route {self.path}"})

        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            length = int(self.headers.get("content-length", "0"))
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
                if self.path == "/v1/completions":
                    self._reply(200, server.complete(body))
                elif self.path == "/update_weights":
                    self._reply(200, on_update(str(body.get("weight_dir") or "")))
                else:
                    self._reply(404, {"detail": f"no route {self.path}"})
            except (KeyError, ValueError, TypeError, FileNotFoundError) as err:
                self._reply(400, {"detail": str(err)})

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (http.server's signature)
            log.debug("prime_rl stand-in: " + format, *args)

    return Handler


class PrimeRLStandin:
    """A PRIME-RL trainer + inference server stand-in on one tiny model, in background threads."""

    def __init__(self, run_dir: Path, model: str, *, transport: str = "filesystem", zmq_host: str = "localhost",
                 zmq_port: int = 5555, zmq_hwm: int = 10, lr: float = 1e-3, seed: int = 0,
                 cache_dir: str | None = None) -> None:
        # deferred: loads transformers, which importing this module does not need
        from retrain_ray.models import load_model_and_tokenizer

        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(seed)  # pyright: ignore[reportUnknownMemberType]
        base, tokenizer = load_model_and_tokenizer(model, cache_dir=cache_dir)
        self.trainer_model = copy.deepcopy(base).train()
        self.optimizer = torch.optim.AdamW(self.trainer_model.parameters(), lr=lr, weight_decay=0.0)
        self.inference = CompletionServer(base, tokenizer, model_name=model)
        self.receiver: FileSystemReceiver | ZmqReceiver = (
            ZmqReceiver(zmq_host, zmq_port, zmq_hwm) if transport == "zmq" else FileSystemReceiver(self.run_dir))
        self.trained_steps: list[int] = []
        self.losses: list[float] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.inference, self.update_weights))
        self.url = f"http://127.0.0.1:{self._http.server_address[1]}"
        self._threads = [threading.Thread(target=self._http.serve_forever, name="prime-rl-standin-http", daemon=True),
                         threading.Thread(target=self._train_loop, name="prime-rl-standin-trainer", daemon=True)]
        for thread in self._threads:
            thread.start()

    def update_weights(self, weight_dir: str) -> dict[str, object]:
        """PRIME-RL's `/update_weights`: the served model takes the weights in `weight_dir`."""
        version = self.inference.update_weights(Path(weight_dir) / WEIGHTS_FILE)
        return {"status": "ok", "version": version}

    def _train_loop(self) -> None:
        while not self._stop.is_set():
            try:
                batch = self.receiver.receive(timeout_s=0.2)
                if batch is not None:
                    self._train(batch)
            except Exception as exc:  # the backend then times out waiting for the broadcast; say why here
                log.exception("prime_rl stand-in: training on a batch failed")
                self.error = exc
                return

    def _train(self, batch: TrainingBatch) -> None:
        loss = batch_loss(self.trainer_model, batch)
        self.optimizer.zero_grad()
        loss.backward()  # pyright: ignore[reportUnknownMemberType]
        self.optimizer.step()  # pyright: ignore[reportUnknownMemberType]
        self.losses.append(float(loss.detach()))
        self.trained_steps.append(batch.step)
        folder = broadcast_dir(self.run_dir, batch.step + 1)
        folder.mkdir(parents=True, exist_ok=True)
        tensors = {name: p.detach().to("cpu").contiguous() for name, p in self.trainer_model.named_parameters()}
        save_file(tensors, str(folder / WEIGHTS_FILE))
        (folder / STABLE_MARKER).touch()

    def close(self) -> None:
        self._stop.set()
        self._http.shutdown()
        self._http.server_close()
        for thread in self._threads:
            thread.join(timeout=10)
        self.receiver.close()
