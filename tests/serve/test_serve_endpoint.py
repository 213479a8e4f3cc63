"""The OpenAI-compatible endpoint on Ray Serve and the OpenAI client engine against it (127.0.0.1):
logprobs match the in-process engine, adapter uploads change outputs and version, and a throttle of
capacity 2 in front of the endpoint bounds the requests in flight measured at the server."""

from __future__ import annotations

import httpx
import pytest
import torch
from endpoint_load import hammer
from helpers import free_port

from retrain_ray.engines.adapters import AdapterSpec
from retrain_ray.engines.openai.engine import OpenAIEngine
from retrain_ray.engines.openai.protocol import EngineCallError
from retrain_ray.engines.pytorch.engine import PyTorchEngine
from retrain_ray.engines.types import SamplingParams, WeightUpdate
from retrain_ray.engines.weights import export_trainable

MODEL = "builtin:tiny"
PARAMS = SamplingParams(max_tokens=6, temperature=0.9, top_p=0.95)
DELAY_S = 0.3  # simulated slow endpoint, so overlapping requests really overlap


@pytest.fixture(scope="module")
def endpoint(ray_4cpu_4gpu, tmp_path_factory):
    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    url = start_inference_endpoint(MODEL, port=free_port(), name="test-endpoint", request_delay_s=DELAY_S)
    yield url
    stop_inference_endpoint()


def _local(model, tokenizer, seed: int) -> PyTorchEngine:
    return PyTorchEngine(model, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, seed=seed)


def _lora_model(seed: int):
    from retrain_ray.models import load_model_and_tokenizer
    from retrain_ray.models.lean_lora import LoraSettings, prepare_trainable

    model, tokenizer = load_model_and_tokenizer(MODEL)
    lora = LoraSettings(rank=4, alpha=32.0, target_modules=("q_proj", "v_proj"))
    torch.manual_seed(seed)
    model = prepare_trainable(model, "lora", lora)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # nonzero B: the adapter really changes the outputs
    return model.eval(), tokenizer, lora


def test_logprobs_match_the_in_process_engine_for_the_same_seed(endpoint):
    from retrain_ray.models import load_model_and_tokenizer

    client = OpenAIEngine(endpoint, model_name=MODEL, seed=1234)
    prompts = [[1, 20, 21, 22], [1, 30]]
    remote = client.generate(prompts, 3, PARAMS)
    model, tokenizer = load_model_and_tokenizer(MODEL)
    for i, prompt in enumerate(prompts):
        local = _local(model.eval(), tokenizer, seed=1234 + i).generate([prompt], 3, PARAMS)[0]
        assert [r.token_ids for r in remote[i]] == [r.token_ids for r in local]
        for r, lr in zip(remote[i], local, strict=True):
            assert r.logprobs == pytest.approx(lr.logprobs, abs=1e-5)
            assert r.finish_reason == lr.finish_reason


def test_adapter_upload_changes_outputs_and_version(endpoint):
    model, tokenizer, lora = _lora_model(seed=7)
    spec = AdapterSpec("run-adapter", 0, "lora", lora)
    client = OpenAIEngine(endpoint, model_name=MODEL, adapter_name="run-adapter", adapter_spec=spec, seed=99)
    prompt = [[1, 40, 41]]
    base = client.complete(prompt[0], 4, PARAMS, seed=5)
    client.load_weights(WeightUpdate(version=3, tensors=export_trainable(model)))
    assert client.weights_version == 3
    adapted = client.complete(prompt[0], 4, PARAMS, seed=5)
    assert [r.logprobs for r in adapted] != [r.logprobs for r in base]
    local = _local(model, tokenizer, seed=5).generate(prompt, 4, PARAMS)[0]
    assert [r.token_ids for r in adapted] == [r.token_ids for r in local]
    assert adapted[0].logprobs == pytest.approx(local[0].logprobs, abs=1e-5)
    models = {m["id"]: m["version"] for m in httpx.get(f"{endpoint}/v1/models").json()["data"]}
    assert models == {MODEL: 0, "run-adapter": 3}
    httpx.post(f"{endpoint}/v1/unload_lora_adapter", json={"lora_name": "run-adapter"}).raise_for_status()
    with pytest.raises(EngineCallError, match="completion .* HTTP 404"):  # not transient: raised at once, not retried
        client.complete(prompt[0], 1, PARAMS, seed=5)
    assert client.counters.retries == 0


def test_bad_uploads_and_prompts_are_clear_errors(endpoint):
    r = httpx.post(f"{endpoint}/v1/completions", json={"model": MODEL, "prompt": [1.5, "x"], "max_tokens": 2})
    assert r.status_code == 400 and "token ids" in r.text
    r = httpx.post(f"{endpoint}/v1/chat/completions", json={"model": MODEL, "messages": "hi", "max_tokens": 2})
    assert r.status_code == 400 and "messages" in r.text


def test_text_and_chat_requests_are_answered_with_text(endpoint):
    r = httpx.post(f"{endpoint}/v1/completions", json={"model": MODEL, "prompt": "12+3=", "max_tokens": 2}, timeout=60)
    assert r.status_code == 200 and isinstance(r.json()["choices"][0]["text"], str)
    messages = [{"role": "user", "content": "Is 4 right? Answer yes or no."}]
    r = httpx.post(f"{endpoint}/v1/chat/completions", json={"model": MODEL, "messages": messages, "max_tokens": 2},
                   timeout=60)
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion"
    [choice] = body["choices"]
    assert choice["message"]["role"] == "assistant" and isinstance(choice["message"]["content"], str)
    r = httpx.post(f"{endpoint}/v1/load_lora_adapter", content=b"nope")
    assert r.status_code == 400


def test_six_clients_with_a_throttle_of_two_never_exceed_two_in_flight(endpoint):
    from retrain_ray.actors.throttle import start_throttle
    from retrain_ray.throttle import ThrottleClient

    actor = start_throttle("serve-test", "inference", 2, namespace="retrain-ray-tests", lease_ttl_s=30.0)
    throttle = ThrottleClient(actor, "shared", timeout_s=120.0)
    stats = hammer(endpoint, MODEL, throttle, rounds=2)
    print(f"with throttle(2): {stats}")
    assert stats["requests_total"] == 6 * 2 * 2
    assert stats["peak_in_flight"] == 2  # bounded by the throttle, and the bound is reached
    control = hammer(endpoint, MODEL, rounds=2)  # same load, no throttle: the counter does see more
    print(f"without throttle: {control}")
    assert control["peak_in_flight"] > 2


def test_endpoint_refuses_non_loopback_hosts():
    from retrain_ray.serve import start_inference_endpoint

    with pytest.raises(ValueError, match="loopback"):
        start_inference_endpoint(MODEL, host="0.0.0.0", port=1)


def test_endpoint_port_listens_on_loopback_only(endpoint):
    """Measured, not assumed: every listening socket on the endpoint's port is bound to 127.0.0.1."""
    import psutil

    port = httpx.URL(endpoint).port
    bound = {c.laddr.ip for c in psutil.net_connections(kind="inet")
             if c.status == psutil.CONN_LISTEN and c.laddr.port == port}
    assert bound == {"127.0.0.1"}, bound


@pytest.mark.parametrize("engine", ["max", "mlx", "trtllm"])
def test_each_servers_weight_sync_call_makes_it_sample_from_the_trainers_adapter(endpoint, tmp_path, engine):
    """MAX (load_lora_adapter by path), MLX-LM (`adapters` per request) and TensorRT-LLM (`lora_request`
    per request): after each sync the stand-in samples exactly what the trainer's model samples."""
    from retrain_ray.engines.openai.engine import UPLOAD_OF_ENGINE

    name = f"{engine}-adapter"
    first, tokenizer, lora = _lora_model(seed=7)
    second, _, _ = _lora_model(seed=8)
    client = OpenAIEngine(endpoint, model_name=MODEL, adapter_name=name, adapter_spec=AdapterSpec(name, 0, "lora", lora),
                          adapter_upload=UPLOAD_OF_ENGINE[engine], adapter_dir=tmp_path, seed=99)
    prompt = [1, 40, 41]
    base = client.complete(prompt, 4, PARAMS, seed=5)
    for version, model in ((1, first), (2, second)):
        client.load_weights(WeightUpdate(version=version, tensors=export_trainable(model)))
        assert client.weights_version == version
        remote = client.complete(prompt, 4, PARAMS, seed=5)
        local = _local(model, tokenizer, seed=5).generate([prompt], 4, PARAMS)[0]
        assert [r.token_ids for r in remote] == [r.token_ids for r in local]
        assert remote[0].logprobs == pytest.approx(local[0].logprobs, abs=1e-5)
        assert [r.logprobs for r in remote] != [r.logprobs for r in base]


def test_update_weights_loads_a_prime_rl_broadcast_into_the_served_model(endpoint, tmp_path):
    """PRIME-RL's call: `/update_weights {"weight_dir": .../step_<n>}` replaces the base model's weights;
    a later test in this module would see them, so the original weights are put back after."""
    from safetensors.torch import save_file

    from retrain_ray.models import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(MODEL)
    original = {n: p.detach().clone().contiguous() for n, p in model.named_parameters()}
    torch.manual_seed(3)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    folder = tmp_path / "broadcasts" / "step_4"
    folder.mkdir(parents=True)
    save_file({n: p.detach().contiguous() for n, p in model.named_parameters()}, str(folder / "model.safetensors"))
    try:
        r = httpx.post(f"{endpoint}/update_weights", json={"weight_dir": str(folder)}, timeout=60)
        assert r.status_code == 200 and r.json()["version"] == 4
        out = httpx.post(f"{endpoint}/v1/completions", json={"model": MODEL, "prompt": [1, 40, 41], "n": 2,
                                                            "max_tokens": 6, "temperature": 0.9, "top_p": 0.95,
                                                            "seed": 5}, timeout=60).json()
        assert out["weights_version"] == 4
        local = _local(model.eval(), tokenizer, seed=5).generate([[1, 40, 41]], 2, PARAMS)[0]
        assert [c["token_ids"] for c in out["choices"]] == [list(r.token_ids) for r in local]
        missing = httpx.post(f"{endpoint}/update_weights", json={"weight_dir": str(tmp_path / "nope")}, timeout=60)
        assert missing.status_code == 400 and "does not exist" in missing.text
    finally:
        back = tmp_path / "broadcasts" / "step_0"
        back.mkdir()
        save_file(original, str(back / "model.safetensors"))
        httpx.post(f"{endpoint}/update_weights", json={"weight_dir": str(back)}, timeout=60).raise_for_status()
