"""`[inference] engine = "vllm"` and "sglang" against a real vLLM OpenAI server (the CPU build), started
by the module's fixture (tests/engines/vllm_server.py). Extended: the server's start alone takes about
30 s on the shared 2-core machine; the protocol pieces that need no server are in test_openai_protocol.py.

What each test proves, from the server's side:
* the client reads the server's answers as sent (plain text from the adapter routes, JSON elsewhere),
  finds the base model's name without `--served-model-name`, and syncs by versioned adapter names: the
  server lists only the newest version and says each completion came from it;
* SGLang's adapter calls (JSON `{lora_name, lora_path}` bodies, the same load/unload sequence) work
  against vLLM's routes, which take the same bodies (SGLang itself does not install here);
* a LoRA run trains 5 steps and every step samples from the adapter version trained just before it (a
  step whose groups carry no signal trains nothing, so the next one samples the same version).
"""

from __future__ import annotations

import re

import httpx
import pytest
import torch
from helpers import TINY_RUN, write_config
from vllm_server import MAX_LORA_RANK, vllm_server

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

pytestmark = [pytest.mark.extended,
              pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")]

PARAMS_KW = {"max_tokens": 6, "temperature": 1.0}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with vllm_server(tmp_path_factory.mktemp("vllm-server")) as running:
        yield running


def _lora_tensors(seed: int):
    from retrain_ray.backends.local import LoraSettings, PolicySettings, load_trainable_model
    from retrain_ray.engines.weights import export_trainable

    lora = LoraSettings(rank=MAX_LORA_RANK)
    model, _ = load_trainable_model("builtin:tiny", PolicySettings(finetune="lora", lora=lora, seed=seed), device="cpu")
    torch.manual_seed(seed)
    with torch.no_grad():  # B starts at zero: move it so the adapter changes what the model samples
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.add_(torch.randn_like(p) * 0.5)
    return lora, export_trainable(model)


def _engine(server, tmp_path, name: str, **options):
    from retrain_ray.engines.adapters import AdapterSpec
    from retrain_ray.engines.openai.engine import OpenAIEngine
    from retrain_ray.models.lora import LoraSettings

    lora = LoraSettings(rank=MAX_LORA_RANK)
    options = {"engine_name": "vllm", "adapter_upload": "path", **options}
    return OpenAIEngine(server.url, model_name="builtin:tiny", adapter_name=name,
                        adapter_spec=AdapterSpec(name, 0, "lora", lora), adapter_dir=tmp_path, seed=3, **options)


def test_versioned_sync_against_the_real_server(server, tmp_path):
    from retrain_ray.engines.types import SamplingParams, WeightUpdate

    engine = _engine(server, tmp_path, "proto")
    params = SamplingParams(**PARAMS_KW)
    base = engine.complete([1, 5, 6], 2, params, seed=11)
    assert engine.runtime_labels() == {"sampled_adapter": server.model_dir}  # found without --served-model-name
    for version, seed in ((1, 1), (2, 2)):
        engine.load_weights(WeightUpdate(version=version, tensors=_lora_tensors(seed)[1]))
        adapters = [m for m in server.models() if m.startswith("proto-")]
        assert adapters == [f"proto-v{version}"]  # the new version loaded, the old one unloaded
        sampled = engine.complete([1, 5, 6], 2, params, seed=11)
        assert engine.runtime_labels() == {"sampled_adapter": f"proto-v{version}"}
        assert [s.logprobs for s in sampled] != [s.logprobs for s in base]
    assert not (tmp_path / "proto-v1").exists() and (tmp_path / "proto-v2").is_dir()  # unloaded folders go
    engine.close()


def test_a_resumed_run_replaces_what_its_earlier_attempt_left_loaded(server, tmp_path):
    from retrain_ray.engines.types import WeightUpdate

    first = _engine(server, tmp_path / "a", "again")
    first.load_weights(WeightUpdate(version=3, tensors=_lora_tensors(1)[1]))
    second = _engine(server, tmp_path / "b", "again")  # a new process of the same run, at the same version
    second.load_weights(WeightUpdate(version=3, tensors=_lora_tensors(2)[1]))
    second.load_weights(WeightUpdate(version=4, tensors=_lora_tensors(2)[1]))
    assert [m for m in server.models() if m.startswith("again-")] == ["again-v4"]


def test_sglang_calls_against_vllms_routes(server, tmp_path):
    """SGLang's bodies and sequence through vLLM's `/v1/...` routes (the paths are SGLang's only difference
    there; its `base:adapter` model naming cannot be tested against vLLM, which 404s on it)."""
    from dataclasses import replace

    from retrain_ray.engines.openai.protocol import SGLANG_ROUTES, VLLM_ROUTES
    from retrain_ray.engines.types import WeightUpdate

    routes = replace(SGLANG_ROUTES, load=VLLM_ROUTES.load, unload=VLLM_ROUTES.unload)
    engine = _engine(server, tmp_path, "sgl", engine_name="sglang", adapter_upload="sglang", lora_routes=routes)
    for version in (1, 2):
        engine.load_weights(WeightUpdate(version=version, tensors=_lora_tensors(version)[1]))
        assert [m for m in server.models() if m.startswith("sgl-")] == [f"sgl-v{version}"]
    assert engine._served == f"{server.model_dir}:sgl-v2"  # SGLang's "base:adapter" request name


def test_failures_name_engine_url_call_and_fix(server, tmp_path):
    from retrain_ray.engines.openai.protocol import EngineCallError

    engine = _engine(server, tmp_path, "bad")
    with pytest.raises(EngineCallError, match=r'engine = "vllm": adapter load \(POST /v1/load_lora_adapter\) at '
                                              rf"{re.escape(server.url)} failed: HTTP 404.*fix: the server cannot read"):
        engine.request("POST", "/v1/load_lora_adapter", "adapter load",
                       json={"lora_name": "bad-v1", "lora_path": str(tmp_path / "missing")})
    answer = httpx.post(f"{server.url}/v1/unload_lora_adapter", json={"lora_name": "nothing"}, timeout=30)
    assert answer.status_code == 404  # what the client's unload of a gone version reads as "already gone"


def test_lora_run_samples_every_step_from_the_version_just_trained(server, tmp_path):
    from retrain_ray.config import load_config
    from retrain_ray.logs import read_stream
    from retrain_ray.run.train import train_run

    path = write_config(
        tmp_path / "run.toml", base=TINY_RUN,
        model={"finetune": "lora", "lora_rank": MAX_LORA_RANK},
        training={"max_steps": 5, "batch_size": 2, "group_size": 4, "save_every": 0, "sft_warmup_steps": 0},
        inference={"engine": "vllm", "url": server.url, "max_concurrent": 2},
        backend={"adapter_path": str(tmp_path / "adapters")},
        logging={"log_dir": str(tmp_path / "logs")})
    outcome = train_run(load_config(path), run_name="vrun", run_dir=tmp_path / "run")
    assert outcome.status == "completed", outcome
    rows = read_stream(tmp_path / "run").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4]
    trained_before = [sum(r["trained"] for r in rows[:k]) for k in range(len(rows))]
    assert [r["weights_version"] for r in rows] == trained_before  # each step samples the newest version
    names = [server.model_dir if v == 0 else f"vrun-v{v}" for v in trained_before]
    assert [r["sampled_adapter"] for r in rows] == names  # and the server says it answered from that version
    newest = trained_before[-1]  # the last step's version (the run syncs at the start of a step)
    assert newest >= 2, rows
    assert [m for m in server.models() if m.startswith("vrun-")] == [f"vrun-v{newest}"]  # old versions unloaded
    log = server.log.read_text()
    assert all(f"name 'vrun-v{k}'" in log for k in range(1, newest + 1)), log[-2000:]
