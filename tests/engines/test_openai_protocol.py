"""The HTTP engines' protocol pieces that need no server (the real-server tests are test_vllm_server.py,
extended): answers read as the servers send them (vLLM 0.32's answers, recorded from the real server),
errors that name engine, url, call and fix, and what is refused at config time."""

from __future__ import annotations

import httpx
import pytest
from helpers import GRPO, TINY_CPU, free_port, write_config

from retrain_ray.config import ConfigError, load_config
from retrain_ray.engines.openai.protocol import EngineCallError, parse_answer, server_message

# What vLLM 0.32's OpenAI server answered here (tests/engines/test_vllm_server.py drives the same routes).
VLLM_LOADED = (200, b"Success: LoRA adapter 'r-v1' added successfully.", {})
VLLM_NO_FOLDER = (404, b'{"error":{"message":"Loading lora r-v2 failed: No adapter found for <path>",'
                       b'"type":"NotFoundError","param":null,"code":404}}', {"content-type": "application/json"})
VLLM_NO_ROUTE = (404, b'{"detail":"Not Found"}', {"content-type": "application/json"})


def _response(status: int, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.Response(status, content=body, headers=headers,
                          request=httpx.Request("POST", "http://127.0.0.1:1/v1/load_lora_adapter"))


def test_answers_are_read_as_sent():
    assert parse_answer(_response(*VLLM_LOADED)) == {"message": "Success: LoRA adapter 'r-v1' added successfully."}
    assert server_message(_response(*VLLM_NO_FOLDER)).startswith("Loading lora r-v2 failed: No adapter found")
    assert server_message(_response(*VLLM_NO_ROUTE)) == "Not Found"
    assert parse_answer(_response(200, b"", {})) == {}
    assert parse_answer(_response(200, b"[1, 2]", {})) == {"result": [1, 2]}


def test_an_unreachable_server_is_one_error_naming_engine_url_call_and_fix(tmp_path):
    from retrain_ray.engines.openai.engine import OpenAIEngine
    from retrain_ray.engines.types import SamplingParams

    url = f"http://127.0.0.1:{free_port()}"
    engine = OpenAIEngine(url, model_name="m", engine_name="vllm", adapter_upload="path", adapter_dir=tmp_path,
                          max_attempts=1)
    with pytest.raises(EngineCallError, match=rf'engine = "vllm": model list \(GET /v1/models\) at {url} failed: '
                                              r"ConnectError.*fix: start the server \(e.g. `VLLM_ALLOW_RUNTIME_LORA"
                                              r".*--enable-lora") as caught:
        engine.generate([[1, 2]], 1, SamplingParams(max_tokens=2))
    assert caught.value.__suppress_context__  # one error, not a chain of retry tracebacks


def test_max_without_url_is_refused_naming_the_key(tmp_path):
    path = write_config(tmp_path / "m.toml", base=TINY_CPU, model={"finetune": "lora"}, inference={"engine": "max"})
    with pytest.raises(ConfigError, match=r"inference.url.*runs MAX in-process.*Fix: set \[inference\] url"):
        load_config(path)


@pytest.mark.parametrize(("engine", "why"), [("vllm", "weight-update routes .* NCCL or CUDA IPC"),
                                             ("sglang", "update_weights_from_disk")])
def test_full_fine_tuning_with_a_server_engine_is_refused_with_the_reason(tmp_path, engine, why):
    path = write_config(tmp_path / "f.toml", base=TINY_CPU, inference={"engine": engine, "url": "http://127.0.0.1:9"})
    with pytest.raises(ConfigError, match=rf"model.finetune.*{why}"):
        load_config(path)


def test_sglang_speaks_sglangs_calls(tmp_path):
    from retrain_ray.engines.openai.protocol import SGLANG_ROUTES
    from retrain_ray.run.build import build_policy

    path = write_config(tmp_path / "s.toml", base=TINY_CPU, algorithm=GRPO, inference={"engine": "sglang"},
                        model={"finetune": "lora", "lora_rank": 4}, backend={"adapter_path": str(tmp_path / "a")})
    engine = build_policy(load_config(path), run_name="r1").engine
    assert (engine.adapter_upload, engine.url, engine.engine_name) == ("sglang", "http://127.0.0.1:30000", "sglang")
    assert engine._adapters.routes == SGLANG_ROUTES
    assert SGLANG_ROUTES.load == "/load_lora_adapter" and SGLANG_ROUTES.request_model("base", "r1-v2") == "base:r1-v2"
