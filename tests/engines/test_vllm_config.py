"""Config of the embedded vLLM engine (no vLLM needed): spelling, explain, and engine arguments."""

from __future__ import annotations

from retrain_ray.backends.local.policy import vllm_settings_from_config
from retrain_ray.cli.explain import describe_run
from retrain_ray.config import load_config


def _config(tmp_path, inference: str):
    path = tmp_path / "c.toml"
    path.write_text(f'[model]\nmodel = "builtin:tiny-h256-l2"\nlora_rank = 16\n[inference]\n{inference}\n')
    return load_config(path)


def test_explain_tells_server_client_from_embedded(tmp_path):
    server = describe_run(_config(tmp_path, 'engine = "vllm"\nurl = "http://gpu-box:8000"'))
    assert server["inference_engine"].startswith("vllm: HTTP client of a server at http://gpu-box:8000")
    embedded = describe_run(_config(tmp_path, 'engine = "vllm-embedded"'))
    assert embedded["inference_engine"].startswith("vllm-embedded: vLLM inside the run")
    assert describe_run(_config(tmp_path, ""))["inference_engine"].startswith("pytorch: PyTorch engine")


def test_inference_keys_and_table_reach_engine_args(tmp_path):
    cfg = _config(tmp_path, 'engine = "vllm-embedded"\nattention_kernel = "flash_attn"\nkv_cache_dtype = "fp8"\n'
                            'prefix_caching = false\ndtype = "bfloat16"\n'
                            '[inference.engine_args]\nmax_model_len = 512\nswap_space = 0')
    args = vllm_settings_from_config(cfg, device="cpu").engine_args()
    assert args["attention_backend"] == "FLASH_ATTN"
    assert (args["kv_cache_dtype"], args["enable_prefix_caching"], args["dtype"]) == ("fp8", False, "bfloat16")
    assert (args["max_model_len"], args["swap_space"]) == (512, 0)
    assert args["logprobs_mode"] == "processed_logprobs"
    assert args["enable_lora"] and args["max_lora_rank"] == 16
    assert "gpu_memory_utilization" not in args and not args["enable_sleep_mode"]  # CPU: nothing to share


def test_one_gpu_placement_shares_the_card(tmp_path):
    cfg = _config(tmp_path, 'engine = "vllm-embedded"')
    settings = vllm_settings_from_config(cfg, device="cuda")
    assert settings.sleep_mode and settings.gpu_memory_utilization == 0.3 and settings.dtype == "bfloat16"
    assert vllm_settings_from_config(cfg, device="cpu").dtype == "float32"  # the trainer's precision


def test_shared_engine_refuses_full_finetuning_and_other_engines(tmp_path):
    import pytest

    from retrain_ray.config import ConfigError

    path = tmp_path / "c.toml"
    path.write_text('[model]\nmodel = "builtin:tiny"\nfinetune = "full"\n[inference]\nengine = "vllm-embedded"\n'
                    'shared = true\n')
    with pytest.raises(ConfigError, match="full fine-tuning cannot share"):
        load_config(path)
    path.write_text('[model]\nmodel = "builtin:tiny"\n[inference]\nengine = "pytorch"\nshared = true\n')
    with pytest.raises(ConfigError, match="engine = \\\\?\"vllm-embedded\\\\?\""):
        load_config(path)
    path.write_text('[model]\nmodel = "builtin:tiny"\n[inference]\nengine = "vllm-embedded"\nshared = true\n')
    assert load_config(path).inference.shared
