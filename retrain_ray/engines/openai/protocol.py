"""What the OpenAI-compatible servers answer, how each takes a LoRA adapter by path, and how a failed
call is reported.

Answers: vLLM's `/v1/load_lora_adapter` and `/v1/unload_lora_adapter` answer 200 with plain text
("Success: LoRA adapter 'x' added successfully.", no content type), their errors and every other
route JSON (`{"error": {"message", "type", "code"}}`, FastAPI's `{"detail": ...}` for an unknown
route); SGLang's routes answer JSON. `parse_answer` reads each as it comes: JSON when the body is JSON,
otherwise `{"message": <text>}`.

Adapter calls by path (`LoraRoutes`):
* vLLM (and MAX's `max serve --enable-lora`): `POST /v1/load_lora_adapter {"lora_name", "lora_path"}`,
  `POST /v1/unload_lora_adapter {"lora_name"}`; a completion names the adapter as its `model`
  (vllm/entrypoints/serve/lora/api_router.py in vLLM 0.32, tested here against the real server);
* SGLang: `POST /load_lora_adapter {"lora_name", "lora_path"}`, `POST /unload_lora_adapter
  {"lora_name"}` (no `/v1` prefix), and a completion names it as `"<base model>:<adapter>"`
  (sgl-project/sglang: python/sglang/srt/entrypoints/http_server.py, routes `load_lora_adapter` and
  `unload_lora_adapter`; python/sglang/srt/entrypoints/openai/serving_base.py,
  `_parse_model_parameter`; docs/advanced_features/lora.ipynb, "Dynamic LoRA loading"). SGLang does
  not install here: its bodies are tested against vLLM's server, which takes the same JSON.

Every failure becomes one `EngineCallError` naming the engine, the url, the call and a fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import cast

import httpx


class EngineCallError(RuntimeError):
    """An HTTP call of a sampling engine failed; the message names engine, url, call and the fix."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status  # the server's HTTP status (None: no answer)


@dataclass(frozen=True)
class LoraRoutes:
    """Where a server loads and unloads adapters by path, and how a completion names one."""

    load: str
    unload: str
    model_is_base_colon_adapter: bool = False  # SGLang's "base:adapter"; vLLM's bare adapter name

    def request_model(self, base: str, adapter: str) -> str:
        return f"{base}:{adapter}" if self.model_is_base_colon_adapter else adapter


VLLM_ROUTES = LoraRoutes("/v1/load_lora_adapter", "/v1/unload_lora_adapter")
SGLANG_ROUTES = LoraRoutes("/load_lora_adapter", "/unload_lora_adapter", model_is_base_colon_adapter=True)

START_HINTS = {
    "vllm": "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True python -m vllm.entrypoints.openai.api_server --model MODEL "
            "--enable-lora --max-lora-rank RANK",
    "sglang": "python -m sglang.launch_server --model-path MODEL --enable-lora --max-lora-rank RANK "
              "--lora-target-modules all",
    "max": "max serve --model MODEL --enable-lora",
    "mlx": "mlx_lm.server --model MODEL",
    "trtllm": "trtllm-serve MODEL",
    "openai": "retrain_ray.serve.start_inference_endpoint(MODEL), or any OpenAI-compatible server",
}
"""How to start each engine's server with what the run needs (runtime LoRA loading)."""


def parse_answer(response: httpx.Response) -> dict[str, object]:
    """A server's answer as sent: a JSON object, a JSON value under "result", or text under "message"."""
    text = response.text
    if not text.strip():
        return {}
    try:
        value: object = json.loads(text)
    except ValueError:
        return {"message": text}
    if isinstance(value, dict):
        return cast("dict[str, object]", value)  # JSON object keys are strings
    return {"result": value}


def server_message(response: httpx.Response) -> str:
    """The error text a server put in its answer (vLLM's error.message, FastAPI's detail, or the body)."""
    body = parse_answer(response)
    error = body.get("error")
    if isinstance(error, dict) and "message" in error:
        return str(error["message"])  # pyright: ignore[reportUnknownArgumentType]
    for key in ("detail", "error_message", "message", "error"):
        if body.get(key):
            return str(body[key])
    return response.text[:300]


def fix_for(engine: str, call: str, status: int | None, message: str) -> str:
    """What the user should change, from the call that failed and what the server said."""
    start = START_HINTS.get(engine, START_HINTS["openai"])
    lowered = message.lower()
    if status is None:
        return f"start the server (e.g. `{start}`) or set [inference] url to where it runs"
    if call.startswith("adapter") and (status == 405 or (status == 404 and lowered in ("not found", ""))):
        return (f"the server has no runtime adapter loading: start it with LoRA enabled (`{start}`); "
                "vLLM also needs VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment")
    if call == "adapter load" and ("no adapter found" in lowered or "does not exist" in lowered):
        return ("the server cannot read the adapter folder: it must see [backend] adapter_path (run it on "
                "this machine or give both a shared filesystem)")
    if call == "adapter load":
        return (f"the server refused the adapter: start it with LoRA enabled and a --max-lora-rank of at least "
                f"[model] lora_rank (`{start}`)")
    if call == "completion" and status == 404:
        return "the server does not serve that model or adapter: start it with --served-model-name [model] model"
    if call == "completion" and status == 200:
        return "point [inference] url at an OpenAI-compatible server (its /v1/completions answers with choices)"
    return "see the server's log for the cause"


def call_error(engine: str, url: str, call: str, route: str, status: int | None, message: str) -> EngineCallError:
    what = f"HTTP {status}: {message}" if status is not None else message
    return EngineCallError(f'[inference] engine = "{engine}": {call} ({route}) at {url} failed: {what}; fix: '
                           f"{fix_for(engine, call, status, message)}", status)
