"""The shared inference endpoint on Ray Serve: an OpenAI-compatible HTTP front for `CompletionServer`.

Routes (under the application's route prefix `/<name>`):
    POST /v1/completions          token ids (or text) in, token ids + per-token logprobs out (see core.py)
    POST /v1/chat/completions     messages in, the reply as `message.content` (an LLM judge's call)
    POST /v1/load_lora_adapter    safetensors bytes with metadata (see adapters.py), or vLLM's / MAX's
                                  JSON {"lora_name", "lora_path"} naming a PEFT folder on this machine
    POST /update_weights          PRIME-RL's {"weight_dir"}: the base model takes the folder's weights
    POST /v1/unload_lora_adapter  {"lora_name": ...}
    GET  /v1/models               base model and adapters with their weights versions
    GET  /v1/stats                requests in flight now, their peak, total; `?reset=true` resets peak
Generation runs in a worker thread, so requests overlap and the in-flight counter sees real
concurrency. `request_delay_s` adds a fixed wait inside the in-flight window: a simulated slow
endpoint for tests and benchmarks, 0 otherwise. `fault_rate` > 0 injects failures into that share of
completions (evenly: with 0.2, every fifth, after the first `fault_after` calls), for fault tests
(benchmarks/faults.py): in turn HTTP 502, HTTP 504, and a stall of `fault_stall_s` (past a client's
timeout) answered with 504; `/v1/stats` counts them as `injected`, `?reset=true` restarts the schedule.
The endpoint listens on loopback addresses only, unless the caller passes `allow_non_loopback=True`:
it has no authentication, so any host that can reach the port can generate, load and unload adapters
and read its stats (see docs/reliability.md).

No `from __future__ import annotations` here: Serve's ingress loses the module globals FastAPI needs
to resolve string annotations, and `Request` parameters then turn into query fields.
"""


import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
import torch
from fastapi import FastAPI, HTTPException, Request
from ray import serve

from retrain_ray.serve.core import CompletionServer

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD = frozenset({"0.0.0.0", "::"})  # every interface: the returned URL names loopback instead
READY_TIMEOUT_S = 120.0

api = FastAPI(title="retrain-ray inference endpoint")


def _bad_request(err: Exception) -> HTTPException:
    return HTTPException(status_code=404 if isinstance(err, KeyError) else 400, detail=str(err).strip("'\""))


@serve.deployment(max_ongoing_requests=64)
@serve.ingress(api)
class InferenceServer:
    """A Serve replica holding one `CompletionServer` over a model on CPU or GPU."""

    def __init__(self, model: str, model_name: str, device: str, request_delay_s: float, cache_dir: str | None,
                 fault_rate: float = 0.0, fault_stall_s: float = 0.0, fault_after: int = 0) -> None:
        # deferred: loads transformers, which importing this module does not need
        from retrain_ray.models import load_model_and_tokenizer

        torch.set_num_threads(1)
        net, tokenizer = load_model_and_tokenizer(model, cache_dir=cache_dir, device=device)
        self.core = CompletionServer(net, tokenizer, model_name=model_name)
        self.delay_s = float(request_delay_s)
        self.fault_rate, self.fault_stall_s = float(fault_rate), float(fault_stall_s)
        self.fault_after, self.calls, self.injected = int(fault_after), 0, 0

    async def _maybe_fail(self) -> None:
        self.calls += 1
        n = self.calls - self.fault_after
        if n <= 0 or int(n * self.fault_rate) == int((n - 1) * self.fault_rate):
            return
        kind = self.injected % 3
        self.injected += 1
        if kind == 2:
            await asyncio.sleep(self.fault_stall_s)
        raise HTTPException(status_code=502 if kind == 0 else 504, detail="injected fault")

    @api.post("/v1/completions")
    async def completions(self, request: Request) -> dict[str, Any]:
        self.core.in_flight.enter()
        try:
            body = await request.json()
            await self._maybe_fail()
            if self.delay_s > 0:
                await asyncio.sleep(self.delay_s)
            return await asyncio.to_thread(self.core.complete, body)
        except (KeyError, ValueError, TypeError, FileNotFoundError) as err:
            raise _bad_request(err) from err
        finally:
            self.core.in_flight.leave()

    @api.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> dict[str, Any]:
        self.core.in_flight.enter()
        try:
            body = await request.json()
            await self._maybe_fail()
            return await asyncio.to_thread(self.core.chat, body)
        except (KeyError, ValueError, TypeError) as err:
            raise _bad_request(err) from err
        finally:
            self.core.in_flight.leave()

    @api.post("/v1/load_lora_adapter")
    async def load_lora_adapter(self, request: Request) -> dict[str, Any]:
        payload = await request.body()
        try:
            if request.headers.get("content-type", "").startswith("application/json"):
                return await asyncio.to_thread(self.core.load_adapter_json, json.loads(payload))
            return await asyncio.to_thread(self.core.load_adapter, payload)
        except (KeyError, ValueError, FileNotFoundError) as err:
            raise _bad_request(err) from err

    @api.post("/update_weights")
    async def update_weights(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        try:
            folder = Path(str(body.get("weight_dir") or ""))
            version = await asyncio.to_thread(self.core.update_weights, folder / "model.safetensors")
            return {"status": "ok", "version": version}
        except (KeyError, ValueError, FileNotFoundError) as err:
            raise _bad_request(err) from err

    @api.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(self, request: Request) -> dict[str, Any]:
        body = await request.json()
        try:
            return self.core.unload_adapter(str(body.get("lora_name", "")))
        except KeyError as err:
            raise _bad_request(err) from err

    @api.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        return self.core.models()

    @api.get("/v1/stats")
    async def stats(self, reset: bool = False) -> dict[str, int]:
        if reset:
            self.calls = 0  # the fault schedule starts again (fault_after clean calls first)
        return {**self.core.in_flight.snapshot(reset_peak=reset), "injected": self.injected}


def _wait_ready(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/v1/models", timeout=5.0).status_code == 200:
                return
        except httpx.HTTPError as err:
            last = err
        time.sleep(0.25)
    raise TimeoutError(f"inference endpoint {url} did not answer /v1/models within {timeout_s:.0f} s (last: {last!r})")


def check_host(host: str, allow_non_loopback: bool) -> None:
    """Refuses a host the endpoint would expose beyond this machine, unless the caller opted in."""
    if host in LOOPBACK or allow_non_loopback:
        return
    raise ValueError(
        f"host {host!r}: the inference endpoint listens on loopback only ({', '.join(sorted(LOOPBACK))}) by "
        "default: it has no authentication, and anyone who can reach the port can generate and load or unload "
        "adapters. Pass allow_non_loopback=True to listen on it anyway (behind a firewall or a private "
        "network), or keep a loopback host and put an authenticating reverse proxy in front")


def start_inference_endpoint(
    model: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    name: str = "retrain-inference",
    model_name: str | None = None,
    num_cpus: float = 0.0,
    num_gpus: float = 0.0,
    request_delay_s: float = 0.0,
    cache_dir: str | None = None,
    fault_rate: float = 0.0,
    fault_stall_s: float = 0.0,
    fault_after: int = 0,
    allow_non_loopback: bool = False,
) -> str:
    """Deploys the endpoint on the running Ray (Serve on `host:port`) and returns its base URL.

    Requests name the base model as `model_name` (default: `model`). With `num_gpus > 0` the replica
    gets a GPU and runs the model there (bf16 autocast); otherwise on CPU.
    `host` must be a loopback address unless `allow_non_loopback=True`: the endpoint has no
    authentication, so anyone who reaches the port can use it and replace its adapters.
    """
    check_host(host, allow_non_loopback)
    serve.start(http_options={"host": host, "port": port})
    device = "cuda" if num_gpus > 0 else "cpu"
    app = InferenceServer.options(ray_actor_options={"num_cpus": num_cpus, "num_gpus": num_gpus}).bind(
        model, model_name or model, device, request_delay_s, cache_dir, fault_rate, fault_stall_s, fault_after
    )
    serve.run(app, name=name, route_prefix=f"/{name}")
    url = f"http://{'127.0.0.1' if host in WILDCARD else host}:{port}/{name}"
    _wait_ready(url, READY_TIMEOUT_S)
    return url


def stop_inference_endpoint(name: str | None = None) -> None:
    """Deletes one endpoint (by name), or shuts Serve down entirely when no name is given."""
    if name is None:
        serve.shutdown()
    else:
        serve.delete(name)
