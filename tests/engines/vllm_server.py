"""A real vLLM OpenAI server (the CPU build) on loopback, for the HTTP engines' tests.

Started with the module entry point (the CPU build's `vllm serve` CLI fails with PackageNotFoundError),
LoRA on and runtime adapter loading allowed, serving the built-in tiny model saved as a Hugging Face
folder (`resolve_model_path`), without `--served-model-name` (so the server names the model by its
path, as a user's server started by hand may). Every wait is bounded; the server's process group is
stopped by its pid.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
from helpers import free_port

MODEL = "builtin:tiny"
MAX_LORA_RANK = 8
START_TIMEOUT_S = 240.0
STOP_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class VLLMServer:
    url: str
    model_dir: str
    log: Path

    def models(self) -> list[str]:
        return [m["id"] for m in httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"]]


def _command(model_dir: str, port: int) -> list[str]:
    return [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--host", "127.0.0.1", "--port", str(port), "--enable-lora", "--max-lora-rank", str(MAX_LORA_RANK),
            "--max-loras", "2", "--max-model-len", "256", "--dtype", "float32", "--enforce-eager",
            "--logprobs-mode", "processed_logprobs"]


def _environment() -> dict[str, str]:
    return {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "1",
            "VLLM_CPU_OMP_THREADS_BIND": "nobind", "VLLM_CONFIGURE_LOGGING": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def _wait_ready(process: subprocess.Popen[bytes], url: str, log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the vLLM server exited ({process.returncode}): {log.read_text()[-3000:]}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        time.sleep(1.0)
    raise TimeoutError(f"the vLLM server did not answer /health within {START_TIMEOUT_S} s: {log.read_text()[-3000:]}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's own process group (it and its engine core), SIGKILL after the timeout."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=STOP_TIMEOUT_S)


@contextlib.contextmanager
def vllm_server(log_dir: Path) -> Iterator[VLLMServer]:
    from retrain_ray.models.loading import resolve_model_path

    model_dir = str(resolve_model_path(MODEL))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = log_dir / "vllm-server.log"
    with log.open("wb") as out:
        process = subprocess.Popen(_command(model_dir, port), stdout=out, stderr=subprocess.STDOUT,
                                   env=_environment(), start_new_session=True)
    try:
        _wait_ready(process, url, log)
        yield VLLMServer(url, model_dir, log)
    finally:
        _stop(process)
