"""`[inference] engine = "max" | "mlx" | "trtllm"`: accepted (no longer refused), built as OpenAI-engine clients
with each server's weight-sync call, LoRA required; the adapter folders they read round-trip exactly.
(The sync calls themselves are exercised against the stand-in endpoint in test_serve_endpoint.py.)"""

from __future__ import annotations

import json

import pytest
import torch
from helpers import GRPO, TINY_CPU, write_config

from retrain_ray.config import ConfigError, load_config
from retrain_ray.engines.adapters import (
    read_mlx_folder,
    read_peft_folder,
    write_mlx_folder,
    write_peft_folder,
)
from retrain_ray.models.lora import LoraSettings


@pytest.mark.parametrize(("engine", "upload", "port"), [("max", "path", 8000), ("mlx", "mlx", 8080),
                                                         ("trtllm", "trtllm", 8000)])
def test_each_engine_is_an_openai_client_with_its_own_sync_call(tmp_path, engine, upload, port):
    from retrain_ray.run.build import build_policy

    url = {"engine": engine, "url": f"http://127.0.0.1:{port}"} if engine == "max" else {"engine": engine}
    path = write_config(tmp_path / "e.toml", base=TINY_CPU, algorithm=GRPO, inference=url,
                        model={"finetune": "lora", "lora_rank": 4},
                        backend={"adapter_path": str(tmp_path / "adapters")})
    policy = build_policy(load_config(path), run_name="r1")
    assert policy.engine.adapter_upload == upload
    assert policy.engine.url == f"http://127.0.0.1:{port}"
    assert str(policy.engine.adapter_dir) == str(tmp_path / "adapters" / "_live_adapter")


@pytest.mark.parametrize("engine", ["max", "mlx", "trtllm"])
def test_full_fine_tuning_is_refused_naming_the_key(tmp_path, engine):
    path = write_config(tmp_path / "e.toml", base=TINY_CPU, inference={"engine": engine})
    with pytest.raises(ConfigError, match=rf"model.finetune.*{engine} engine loads .* LoRA adapter folder"):
        load_config(path)


def _tensors(rank: int = 2) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    out = {}
    for layer in (0, 1):
        for module in ("self_attn.q_proj", "mlp.up_proj"):
            stem = f"base_model.model.model.layers.{layer}.{module}"
            out[f"{stem}.lora_A.default.weight"] = torch.randn(rank, 8)
            out[f"{stem}.lora_B.default.weight"] = torch.randn(16, rank)
    return out


@pytest.mark.parametrize(("write", "read"), [(write_peft_folder, read_peft_folder), (write_mlx_folder, read_mlx_folder)])
def test_adapter_folders_round_trip(tmp_path, write, read):
    lora = LoraSettings(rank=2, alpha=8.0, target_modules=("q_proj", "up_proj"))
    tensors = _tensors()
    folder = write(tmp_path / "a", lora, tensors)
    back_lora, back = read(folder)
    assert (back_lora.rank, back_lora.effective_alpha, set(back_lora.target_modules)) == (2, 8.0, {"q_proj", "up_proj"})
    assert set(back) == set(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)


def test_mlx_folder_is_mlx_lms_layout(tmp_path):
    from safetensors.torch import load_file

    tensors = _tensors()
    folder = write_mlx_folder(tmp_path / "m", LoraSettings(rank=2, alpha=8.0), tensors)
    config = json.loads((folder / "adapter_config.json").read_text())
    assert config["fine_tune_type"] == "lora" and config["lora_parameters"]["scale"] == 4.0
    assert config["lora_parameters"]["keys"] == ["mlp.up_proj", "self_attn.q_proj"]
    saved = load_file(str(folder / "adapters.safetensors"))
    a = saved["model.layers.0.self_attn.q_proj.lora_a"]
    assert a.shape == (8, 2) and torch.equal(a, tensors["base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight"].t())
    assert saved["model.layers.1.mlp.up_proj.lora_b"].shape == (2, 16)
