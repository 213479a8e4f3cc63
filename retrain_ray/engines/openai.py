"""SamplingEngine client of an OpenAI-compatible `/v1/completions` server (our Serve endpoint, vLLM,
SGLang), for `[inference] engine = "openai" | "vllm" | "sglang"` with `[inference] url`.

One request per prompt: `{"model": adapter, "prompt": [token ids], "n": num_samples, "max_tokens",
"temperature", "top_p", "logprobs": 1, "seed", "return_tokens_as_token_ids": true}`; completion
token ids come from `choice["token_ids"]` or, failing that, from vLLM's "token_id:<id>" strings in
`logprobs.tokens`; per-token logprobs from `logprobs.token_logprobs`. Prompts go out in parallel (up
to `max_parallel_requests`), and every request holds a throttle slot (`with throttle.hold():`) for
exactly its own duration, so the throttle's capacity bounds the requests in flight at the server.
Every request has a timeout; HTTP 502/503/504, timeouts and dropped connections are retried with
exponential backoff (bounded attempts) and counted (`openai_retries`).

Weights: `load_weights(update)` uploads the trainer's tensors under the adapter name with the update's
version (`POST /v1/load_lora_adapter`, safetensors bytes, `adapter_upload="tensors"`), or, for vLLM
(`adapter_upload="path"`), writes a PEFT adapter folder under `adapter_dir` and posts its path after
unloading the old one. A response whose `weights_version` differs from the loaded version is an error.
Seeds: request k of prompt i uses `seed + 7919 * k + i`, so a run's sampling is reproducible. Uses httpx.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from retrain_ray.engines.adapters import AdapterSpec, encode_adapter
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.retry import RetryCounters, RetryPolicy, call_with_retry
from retrain_ray.secrets import scrub

log = logging.getLogger(__name__)
SEED_STRIDE = 7919


class _NoThrottle:
    @contextlib.contextmanager
    def hold(self) -> Generator[None, None, None]:
        yield None


def parse_choice(choice: dict[str, Any]) -> SampleResult:
    """One OpenAI completion choice -> SampleResult (token ids and their logprobs are required)."""
    lp: dict[str, Any] = choice.get("logprobs") or {}
    ids: list[Any] | None = choice.get("token_ids")
    if ids is None:
        tokens: list[Any] = lp.get("tokens") or []
        if not all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
            raise ValueError("the server returned text tokens, not token ids: ask vLLM for return_tokens_as_token_ids")
        ids = [int(t.split(":", 1)[1]) for t in tokens]
    logprobs: list[Any] | None = lp.get("token_logprobs")
    if logprobs is None or len(logprobs) != len(ids):
        raise ValueError("the server returned no per-token logprobs for the completion (send logprobs=1)")
    finish = "stop" if choice.get("finish_reason") == "stop" else "length"
    return SampleResult(tuple(int(t) for t in ids), tuple(float(x) for x in logprobs), finish)


def _raise_for_status(response: httpx.Response, what: str) -> None:
    if response.status_code >= 400:
        detail = response.text[:300]
        raise httpx.HTTPStatusError(f"{what}: HTTP {response.status_code}: {detail}", request=response.request,
                                    response=response)


class OpenAIEngine(WeightsVersion):
    """Samples from an adapter (or the base model) on a shared OpenAI-compatible server."""

    def __init__(
        self,
        url: str,
        *,
        model_name: str,
        adapter_name: str | None = None,
        adapter_spec: AdapterSpec | None = None,
        throttle: Any = None,
        timeout_s: float = 120.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        seed: int = 0,
        max_parallel_requests: int = 4,
        adapter_upload: str = "tensors",
        adapter_dir: str | Path | None = None,
    ) -> None:
        if adapter_upload not in ("tensors", "path"):
            raise ValueError(f"adapter_upload={adapter_upload!r}; use 'tensors' (our endpoint) or 'path' (vLLM)")
        if adapter_upload == "path" and adapter_dir is None:
            raise ValueError("adapter_upload='path' needs adapter_dir, a folder the server can read")
        self.url = url.rstrip("/")
        self.shown_url = scrub(self.url)  # for messages: no credentials
        self.model_name, self.adapter_name = model_name, adapter_name or f"{model_name}-adapter"
        self.adapter_spec = adapter_spec or AdapterSpec(self.adapter_name, 0)
        self.throttle = throttle if throttle is not None else _NoThrottle()
        self.timeout_s, self.seed = timeout_s, seed
        self.policy, self.counters = RetryPolicy(max_attempts, backoff_s), RetryCounters()
        self.max_parallel_requests = max_parallel_requests
        self.adapter_upload, self.adapter_dir = adapter_upload, adapter_dir
        self._client = httpx.Client(timeout=timeout_s)
        self._version, self._calls, self._served = 0, 0, model_name

    def runtime_metrics(self) -> dict[str, float]:
        return {"openai_retries": float(self.counters.retries)}

    def _request(self, method: str, route: str, what: str, **kwargs: Any) -> dict[str, Any]:
        def attempt() -> dict[str, Any]:
            with self.throttle.hold():
                response = self._client.request(method, f"{self.url}{route}", **kwargs)
            _raise_for_status(response, what)
            return response.json()

        return call_with_retry(attempt, what=what, policy=self.policy, counters=self.counters)

    def complete(self, prompt_ids: list[int], num_samples: int, params: SamplingParams, seed: int) -> list[SampleResult]:
        """One `/v1/completions` request: `num_samples` completions of one prompt."""
        body = {
            "model": self._served, "prompt": list(prompt_ids), "n": num_samples, "max_tokens": params.max_tokens,
            "temperature": params.temperature, "top_p": params.top_p, "logprobs": 1, "seed": seed,
            "return_tokens_as_token_ids": True,
        }
        out = self._request("POST", "/v1/completions", f"completion from {self.shown_url}", json=body)
        served = out.get("weights_version")
        if served is not None and int(served) != self._version:
            raise RuntimeError(
                f"{self.shown_url} answered for {self._served!r} with weights version {served}, expected "
                f"{self._version}: another client overwrote the adapter; give each run its own adapter name"
            )
        return [parse_choice(c) for c in sorted(out["choices"], key=lambda c: c.get("index", 0))]

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        call, self._calls = self._calls, self._calls + 1
        seeds = [(self.seed + SEED_STRIDE * call + i) % 2**31 for i in range(len(prompt_ids_P))]
        workers = max(1, min(self.max_parallel_requests, len(prompt_ids_P)))
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
        if self.adapter_upload == "tensors":
            self._request("POST", "/v1/load_lora_adapter", f"adapter upload to {self.shown_url}",
                          content=encode_adapter(spec, update.tensors),
                          headers={"content-type": "application/octet-stream"})
        else:
            self._load_by_path(spec, update.tensors)
        self._version, self._served = update.version, self.adapter_name

    def _load_by_path(self, spec: AdapterSpec, tensors: dict[str, Any]) -> None:
        """vLLM form: a PEFT adapter folder (names without `.default`), then unload + load by path."""
        from safetensors.torch import save_file  # pyright: ignore[reportUnknownVariableType]

        assert self.adapter_dir is not None  # the constructor requires it for adapter_upload='path'
        folder = Path(self.adapter_dir) / f"{spec.lora_name}-v{spec.version}"
        folder.mkdir(parents=True, exist_ok=True)
        save_file({k.replace(".default", ""): v.contiguous() for k, v in tensors.items()},
                  str(folder / "adapter_model.safetensors"))
        lora = spec.lora
        (folder / "adapter_config.json").write_text(json.dumps({
            "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank, "lora_alpha": lora.effective_alpha,
            "lora_dropout": lora.dropout, "target_modules": list(lora.target_modules), "bias": "none",
        }))
        with contextlib.suppress(httpx.HTTPStatusError):  # the first upload has nothing to unload
            self._request("POST", "/v1/unload_lora_adapter", "adapter unload", json={"lora_name": spec.lora_name})
        self._request("POST", "/v1/load_lora_adapter", f"adapter load to {self.shown_url}",
                      json={"lora_name": spec.lora_name, "lora_path": str(folder)})

    def close(self) -> None:
        self._client.close()


DEFAULT_URLS = {"openai": "http://127.0.0.1:8000", "vllm": "http://127.0.0.1:8000", "sglang": "http://127.0.0.1:30000"}
