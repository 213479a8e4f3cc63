"""SamplingEngine client of an OpenAI-compatible `/v1/completions` server (our Serve endpoint, vLLM,
SGLang, MAX, MLX-LM, TensorRT-LLM), for `[inference] engine = "openai" | "vllm" | "sglang" | "max" |
"mlx" | "trtllm"` with `[inference] url`.

One request per prompt: `{"model": adapter, "prompt": [token ids], "n": num_samples, "max_tokens",
"temperature", "top_p", "logprobs": 1, "seed", "return_tokens_as_token_ids": true}`; completion
token ids come from `choice["token_ids"]` or, failing that, from vLLM's "token_id:<id>" strings in
`logprobs.tokens`; per-token logprobs from `logprobs.token_logprobs`. Prompts go out in parallel (up
to `max_parallel_requests`), and every request holds a throttle slot (`with throttle.hold():`) for
exactly its own duration, so the throttle's capacity bounds the requests in flight at the server.
Every request has a timeout; HTTP 502/503/504, timeouts and dropped connections are retried with
exponential backoff (bounded attempts) and counted (`openai_retries`).

Weights: `load_weights(update)` makes the server sample from the trainer's tensors, by each server's own
call (`adapter_upload`; the folder layouts are in engines/adapters.py, the routes in protocol.py):
* "tensors" (our endpoint): `POST /v1/load_lora_adapter` with safetensors bytes, name and version;
* "path" (vLLM, and MAX's `max serve --enable-lora`) and "sglang": a PEFT folder per version under
  `adapter_dir`, loaded under a versioned name `<adapter>-v<version>` (JSON `{"lora_name",
  "lora_path"}`); requests then name that version, and every older version of the run's adapter is
  unloaded (those a previous attempt of the run left on the server too, found in `/v1/models`);
* "trtllm" (`trtllm-serve`): a PEFT folder; every request carries `lora_request: {"lora_name",
  "lora_int_id": version, "lora_path"}` (TensorRT-LLM's `LoRARequest`; a new id per version, so the
  server does not reuse the old weights it cached under the old id);
* "mlx" (`mlx_lm.server`): an MLX-LM adapter folder; every request carries `adapters: <folder>` (the
  folder must be readable by the server; mlx_lm.server resolves relative paths from where it started).
Before the first request the engine reads `/v1/models`: a server that serves `model_name` is asked for
it; one that serves a single base model under another name (vLLM without `--served-model-name`) is
asked for that name; any other answer is an error naming the flag. The model a completion says it
came from is the step's `sampled_adapter` (`runtime_labels`).
A response whose `weights_version` differs from the loaded version is an error.
Seeds: request k of prompt i uses `seed + 7919 * k + i`, so a run's sampling is reproducible. Uses httpx.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Required, TypedDict, cast

import httpx

from retrain_ray.engines.adapters import AdapterSpec, encode_adapter, write_mlx_folder, write_peft_folder
from retrain_ray.engines.openai.protocol import (
    SGLANG_ROUTES,
    VLLM_ROUTES,
    EngineCallError,
    LoraRoutes,
    call_error,
    parse_answer,
    server_message,
)
from retrain_ray.engines.openai.served import VersionedAdapters, base_model_name
from retrain_ray.engines.types import HoldsSlots, SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.util.retry import RetryCounters, RetryPolicy, call_with_retry
from retrain_ray.util.secrets import scrub

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)
SEED_STRIDE = 7919
UPLOADS = ("tensors", "path", "sglang", "trtllm", "mlx")
ROUTES_OF_UPLOAD = {"path": VLLM_ROUTES, "sglang": SGLANG_ROUTES}


class _NoThrottle:
    @contextlib.contextmanager
    def hold(self) -> Generator[None, None, None]:
        yield None


def parse_choice(choice: dict[str, object]) -> SampleResult:
    """One OpenAI completion choice -> SampleResult (token ids and their logprobs are required)."""
    lp = cast("dict[str, object]", choice.get("logprobs") or {})  # JSON from the server
    ids = cast("list[int | str] | None", choice.get("token_ids"))
    if ids is None:
        tokens = cast("list[object]", lp.get("tokens") or [])
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise ValueError("the server returned text tokens, not token ids: ask vLLM for return_tokens_as_token_ids")
        ids = [int(str(t).split(":", 1)[1]) for t in tokens]
    logprobs = cast("list[float] | None", lp.get("token_logprobs"))
    if logprobs is None or len(logprobs) != len(ids):
        raise ValueError("the server returned no per-token logprobs for the completion (send logprobs=1)")
    finish = "stop" if choice.get("finish_reason") == "stop" else "length"
    return SampleResult(tuple(int(t) for t in ids), tuple(float(x) for x in logprobs), finish)


def _raise_for_status(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        raise httpx.HTTPStatusError(f"{what}: HTTP {response.status_code}: {server_message(response)}",
                                    request=response.request, response=response)


class OpenAIEngineOptions(TypedDict, total=False):
    """`OpenAIEngine`'s keyword arguments, for an engine that passes them through (`PrimeRLEngine`)."""

    model_name: Required[str]
    adapter_name: str | None
    adapter_spec: AdapterSpec | None
    throttle: HoldsSlots | None
    timeout_s: float
    max_attempts: int
    backoff_s: float
    seed: int
    max_parallel_requests: int
    adapter_upload: str
    adapter_dir: str | Path | None
    engine_name: str
    lora_routes: LoraRoutes | None


class OpenAIEngine(WeightsVersion):
    """Samples from an adapter (or the base model) on a shared OpenAI-compatible server."""

    def __init__(
        self,
        url: str,
        *,
        model_name: str,
        adapter_name: str | None = None,
        adapter_spec: AdapterSpec | None = None,
        throttle: HoldsSlots | None = None,
        timeout_s: float = 120.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        seed: int = 0,
        max_parallel_requests: int = 4,
        adapter_upload: str = "tensors",
        adapter_dir: str | Path | None = None,
        engine_name: str = "openai",
        lora_routes: LoraRoutes | None = None,
    ) -> None:
        """`engine_name` is the `[inference] engine` its errors name; `lora_routes` overrides where a
        "path" or "sglang" server loads adapters (a server that puts the same calls under other paths)."""
        if adapter_upload not in UPLOADS:
            raise ValueError(f"adapter_upload={adapter_upload!r}; use one of {', '.join(UPLOADS)}")
        if adapter_upload != "tensors" and adapter_dir is None:
            raise ValueError(f"adapter_upload={adapter_upload!r} needs adapter_dir, a folder the server can read")
        self.url = url.rstrip("/")
        self.shown_url = scrub(self.url)  # for messages: no credentials
        self.engine_name = engine_name
        self.model_name, self.adapter_name = model_name, adapter_name or f"{model_name}-adapter"
        self.adapter_spec = adapter_spec or AdapterSpec(self.adapter_name, 0)
        self.throttle: HoldsSlots = throttle if throttle is not None else _NoThrottle()
        self.timeout_s, self.seed = timeout_s, seed
        self.policy, self.counters = RetryPolicy(max_attempts, backoff_s), RetryCounters()
        self.max_parallel_requests = max_parallel_requests
        self.adapter_upload, self.adapter_dir = adapter_upload, adapter_dir
        self._client = httpx.Client(timeout=timeout_s)
        self._version, self._calls = 0, 0
        self._base: str | None = None  # the base model's name on the server, read from /v1/models at first use
        self._served: str | None = None  # what requests name as their `model` (None: the base model)
        self._sampled = ""  # the model the latest completion said it came from
        self._adapter_fields: dict[str, object] = {}  # per-request adapter fields (trtllm, mlx)
        routes = lora_routes or ROUTES_OF_UPLOAD.get(adapter_upload)
        self._adapters = VersionedAdapters(self, routes, self.adapter_name) if routes is not None else None

    def runtime_metrics(self) -> dict[str, float]:
        return {"openai_retries": float(self.counters.retries)}

    def runtime_labels(self) -> dict[str, str]:
        """The model (adapter version) the server said the latest step's completions came from."""
        return {"sampled_adapter": self._sampled} if self._sampled else {}

    def request(self, method: str, route: str, call: str, *, json: object = None, content: bytes | None = None,
                headers: dict[str, str] | None = None) -> dict[str, object]:
        """One call, retried on transient failures; its answer as the server sent it (JSON or text).
        Raises `EngineCallError` naming the engine, url, call and fix."""
        def attempt() -> dict[str, object]:
            with self.throttle.hold():
                response = self._client.request(method, f"{self.url}{route}", json=json, content=content,
                                                headers=headers)
            _raise_for_status(response, call)
            return parse_answer(response)

        try:
            return call_with_retry(attempt, what=f"{call} at {self.shown_url}", policy=self.policy,
                                   counters=self.counters)
        except httpx.HTTPStatusError as err:
            raise call_error(self.engine_name, self.shown_url, call, f"{method} {route}", err.response.status_code,
                             server_message(err.response)) from None
        except (httpx.HTTPError, RuntimeError) as err:
            if isinstance(err, EngineCallError):
                raise
            cause = err.__cause__ if isinstance(err.__cause__, httpx.HTTPError) else err
            if isinstance(cause, httpx.HTTPStatusError):
                raise call_error(self.engine_name, self.shown_url, call, f"{method} {route}",
                                 cause.response.status_code, server_message(cause.response)) from None
            raise call_error(self.engine_name, self.shown_url, call, f"{method} {route}", None,
                             f"{type(cause).__name__}: {cause} (after {self.policy.max_attempts} attempts)") from None

    _request = request  # its former name, which PrimeRLEngine (backends/prime_rl/backend.py) calls

    def base_model(self) -> str:
        """The name the server serves the base model under (read once from its /v1/models)."""
        if self._base is None:
            self._base = base_model_name(self, self.model_name)
        return self._base

    def complete(self, prompt_ids: list[int], num_samples: int, params: SamplingParams, seed: int) -> list[SampleResult]:
        """One `/v1/completions` request: `num_samples` completions of one prompt."""
        model = self._served or self.base_model()
        body = {
            "model": model, "prompt": list(prompt_ids), "n": num_samples, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "logprobs": 1, "seed": seed,
            "return_tokens_as_token_ids": True, **self._adapter_fields,
        }
        out = self.request("POST", "/v1/completions", "completion", json=body)
        served = out.get("weights_version")
        if served is not None and int(cast("int | str", served)) != self._version:
            raise RuntimeError(
                f"{self.shown_url} answered for {model!r} with weights version {served}, expected "
                f"{self._version}: another client overwrote the adapter; give each run its own adapter name"
            )
        self._sampled = str(out.get("model") or model)
        if not isinstance(out.get("choices"), list):
            raise call_error(self.engine_name, self.shown_url, "completion", "POST /v1/completions", 200,
                             f"the answer has no 'choices' list: {str(out)[:300]}")
        choices = cast("list[dict[str, object]]", out["choices"])
        return [parse_choice(c) for c in sorted(choices, key=lambda c: cast("int", c.get("index", 0)))]

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        call, self._calls = self._calls, self._calls + 1
        seeds = [(self.seed + SEED_STRIDE * call + i) % 2**31 for i in range(len(prompt_ids_P))]
        workers = max(1, min(self.max_parallel_requests, len(prompt_ids_P)))
        if self._served is None:
            self.base_model()  # once, before the requests go out in parallel
        with ThreadPoolExecutor(max_workers=workers) as pool:
            futures = [pool.submit(self.complete, p, num_samples, params, s) for p, s in zip(prompt_ids_P, seeds, strict=True)]
            return [f.result(timeout=self.timeout_s * self.policy.max_attempts + 60) for f in futures]

    def load_weights(self, update: WeightUpdate) -> None:
        if not update.tensors:
            raise ValueError(
                f"WeightUpdate version {update.version} carries no tensors; a remote inference server needs "
                "them: export the trainer's weights with tensors"
            )
        spec = AdapterSpec(self.adapter_name, update.version, self.adapter_spec.finetune, self.adapter_spec.lora)
        if self._adapters is not None:
            name = self._adapters.load(update.version, lambda name: self._folder(name, update.tensors))
            self._served = self._adapters.routes.request_model(self.base_model(), name)
        elif self.adapter_upload == "tensors":
            self.request("POST", "/v1/load_lora_adapter", "adapter upload", content=encode_adapter(spec, update.tensors),
                         headers={"content-type": "application/octet-stream"})
            self._served = self.adapter_name
        elif self.adapter_upload == "trtllm":
            folder = self._folder(f"{spec.lora_name}-v{spec.version}", update.tensors)
            self._adapter_fields = {"lora_request": {"lora_name": spec.lora_name, "lora_int_id": spec.version,
                                                     "lora_path": str(folder)}}
        else:
            self._adapter_fields = {"adapters": str(self._folder(f"{spec.lora_name}-v{spec.version}", update.tensors))}
        self._version = update.version

    def _folder(self, name: str, tensors: dict[str, torch.Tensor]) -> Path:
        """A fresh folder per version (a server may cache by path), in the layout this server reads."""
        assert self.adapter_dir is not None  # the constructor requires it for every upload but 'tensors'
        write = write_mlx_folder if self.adapter_upload == "mlx" else write_peft_folder
        return write(Path(self.adapter_dir).absolute() / name, self.adapter_spec.lora, tensors)  # the server's cwd differs

    def close(self) -> None:
        self._client.close()


DEFAULT_URLS = {"openai": "http://127.0.0.1:8000", "vllm": "http://127.0.0.1:8000", "sglang": "http://127.0.0.1:30000",
                "max": "http://127.0.0.1:8000", "mlx": "http://127.0.0.1:8080", "trtllm": "http://127.0.0.1:8000"}
"""Each server's default port, as its docs give it (`max serve` and `trtllm-serve` 8000, `mlx_lm.server` 8080)."""
UPLOAD_OF_ENGINE = {"openai": "tensors", "sglang": "sglang", "vllm": "path", "max": "path", "trtllm": "trtllm",
                    "mlx": "mlx"}
"""The weight-sync call each `[inference] engine` speaks (`adapter_upload`)."""
