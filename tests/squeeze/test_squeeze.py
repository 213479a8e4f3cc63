"""LoRA-Squeeze (spec 5.4): exact values on constructed low-rank adapters, properties on random ones,
and the `retrain-ray squeeze` verb on a PEFT-format adapter directory."""

from __future__ import annotations

import json
import math

import pytest
import torch
from helpers import write_campaign
from hypothesis import given, settings
from hypothesis import strategies as st
from lora_factors import factors_with_singular_values, write_peft_adapter
from safetensors.torch import load_file

from retrain_ray.cli import main
from retrain_ray.squeeze import (
    SqueezeError,
    SqueezeSettings,
    compress_layer,
    default_target_ranks,
    layer_spectrum,
    recommend_rank,
    retained_energy,
    squeeze_adapter,
)


def test_spectrum_and_retained_energy_exact_values():
    a, b = factors_with_singular_values([3.0, 2.0, 1.0], m=12, n=10, rank=8)
    spec = layer_spectrum(a, b)
    assert spec.rank == 8
    assert spec.s[:3].tolist() == pytest.approx([3.0, 2.0, 1.0], abs=1e-12)
    assert spec.s[3:].abs().max() < 1e-12
    assert retained_energy(spec.s, 1) == pytest.approx(9 / 14)
    assert retained_energy(spec.s, 2) == pytest.approx(13 / 14)
    assert retained_energy(spec.s, 3) == pytest.approx(1.0)
    assert retained_energy(torch.zeros(4), 1) == 1.0  # an untrained (zero) update loses nothing


def test_compression_is_the_best_rank_k_approximation():
    a, b = factors_with_singular_values([3.0, 2.0, 1.0], m=12, n=10, rank=8)
    spec = layer_spectrum(a, b)
    a1, b1 = compress_layer(spec, 1)
    assert a1.shape == (12, 1) and b1.shape == (1, 10)
    assert torch.linalg.matrix_norm(a @ b - a1 @ b1) ** 2 == pytest.approx(2.0**2 + 1.0**2)
    a3, b3 = compress_layer(spec, 3)
    assert torch.allclose(a3 @ b3, a @ b, atol=1e-12)
    with pytest.raises(ValueError, match="between 1 and the source rank 8"):
        compress_layer(spec, 9)


def test_default_target_ranks_and_recommendation():
    assert default_target_ranks(8) == [1, 2, 4, 8]
    assert default_target_ranks(6) == [1, 2, 4, 6]
    assert default_target_ranks(1) == [1]
    means = {1: 9 / 14, 2: 13 / 14, 4: 1.0, 8: 1.0}
    assert recommend_rank(means, 0.9, 8) == 2
    assert recommend_rank(means, 0.6, 8) == 1
    assert recommend_rank({1: 0.5, 2: 0.7}, 0.95, 8) == 8  # no target rank reaches it: the source rank


@settings(max_examples=40, deadline=None)
@given(m=st.integers(1, 9), n=st.integers(1, 9), r=st.integers(1, 6), seed=st.integers(0, 10_000))
def test_properties_on_random_factors(m, n, r, seed):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn(m, r, generator=gen, dtype=torch.float64)
    b = torch.randn(r, n, generator=gen, dtype=torch.float64)
    spec = layer_spectrum(a, b)
    full = torch.linalg.svdvals(a @ b)
    k_nonzero = min(m, n, r)
    assert torch.allclose(spec.s[:k_nonzero], full[:k_nonzero], rtol=1e-9, atol=1e-9)
    energies = [retained_energy(spec.s, k) for k in range(0, r + 1)]
    assert energies[0] == 0.0 and energies[-1] == pytest.approx(1.0)
    assert all(x <= y + 1e-12 for x, y in zip(energies, energies[1:], strict=False))
    total = float((a @ b).square().sum())
    for k in range(1, r + 1):
        ak, bk = compress_layer(spec, k)
        assert ak.shape == (m, k) and bk.shape == (k, n)
        error = float((a @ b - ak @ bk).square().sum())
        assert error == pytest.approx(total * (1 - energies[k]), abs=1e-8 * max(1.0, total))


def delta(directory, module, rank_key="r"):
    """The scaled update out x in = (alpha / r) * lora_B @ lora_A that PEFT adds to the base weight."""
    cfg = json.loads((directory / "adapter_config.json").read_text())
    t = load_file(str(directory / "adapter_model.safetensors"))
    r = cfg[rank_key]
    scale = cfg["lora_alpha"] / (math.sqrt(r) if cfg.get("use_rslora") else r)
    a, b = t[f"base_model.model.{module}.lora_A.weight"], t[f"base_model.model.{module}.lora_B.weight"]
    return scale * (b.double() @ a.double())


@pytest.mark.parametrize("rslora", [False, True])
def test_squeeze_verb_recommends_the_true_rank_and_keeps_the_update(tmp_path, capsys, rslora):
    layers = {
        "layers.0.q_proj": factors_with_singular_values([4.0, 2.0], m=16, n=12, rank=8, seed=1),
        "layers.1.q_proj": factors_with_singular_values([5.0, 1.0], m=16, n=12, rank=8, seed=7),
    }
    adapter = tmp_path / "adapter"
    write_peft_adapter(adapter, layers, rank=8, rslora=rslora)
    out = tmp_path / "out"
    assert main(["squeeze", str(adapter), "--output", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["source_rank"] == 8 and report["target_ranks"] == [1, 2, 4, 8]
    # V(1): layer 0 keeps 16/20, layer 1 keeps 25/26; their mean is below 0.95, so rank 2 is recommended
    assert report["mean_retention"]["1"] == pytest.approx((16 / 20 + 25 / 26) / 2)
    assert report["mean_retention"]["2"] == pytest.approx(1.0)
    assert report["recommended_rank"] == 2 == report["compressed_rank"]
    compressed = out / "adapter_r2"
    assert json.loads((compressed / "adapter_config.json").read_text())["r"] == 2
    for module in layers:
        assert torch.allclose(delta(compressed, module), delta(adapter, module), atol=1e-5)
    assert json.loads((out / "squeeze.json").read_text())["recommended_rank"] == 2

    assert main(["squeeze", str(adapter), "--output", str(out), "--compress-to", "1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["recommended_rank"] == 2
    err = float(torch.linalg.matrix_norm(delta(out / "adapter_r1", "layers.1.q_proj") - delta(adapter, "layers.1.q_proj")))
    scale = 16.0 / (math.sqrt(8) if rslora else 8)
    assert err == pytest.approx(scale * 1.0, rel=1e-4)  # the dropped singular value, scaled


def test_squeeze_refuses_bad_input_with_the_fix(tmp_path, capsys):
    assert main(["squeeze", str(tmp_path)]) == 2
    assert "finetune = \"lora\"" in capsys.readouterr().err
    adapter = tmp_path / "adapter"
    write_peft_adapter(adapter, {"m": factors_with_singular_values([1.0], 4, 4, 4)}, rank=4)
    assert main(["squeeze", str(adapter), "--target-ranks", "2,5"]) == 2
    assert "1..4" in capsys.readouterr().err
    with pytest.raises(SqueezeError, match="source_rank = 8"):
        squeeze_adapter(adapter, SqueezeSettings(source_rank=8))


def test_after_campaign_steps_record_failures_without_raising(tmp_path, capsys):
    from retrain_ray.campaign.afterwards import run_afterwards
    from retrain_ray.campaign.observer import ConsoleCampaignObserver
    from retrain_ray.config import load_config
    from retrain_ray.logs.manifest import Manifest

    cdir = tmp_path / "c"
    cdir.mkdir()
    adapter = tmp_path / "ckpt" / "adapter"
    write_peft_adapter(adapter, {"m": factors_with_singular_values([2.0, 1.0], 6, 6, 4)}, rank=4)
    runs = [{"run_name": "a_s1", "run_dir": str(tmp_path / "none")},
            {"run_name": "b_s1", "run_dir": str(tmp_path / "none")}]
    manifest = Manifest.create(cdir, {"name": "c"}, runs)
    manifest.update_run("b_s1", status="completed", checkpoint=str(adapter.parent))
    script = tmp_path / "fails.py"
    script.write_text("import sys\nprint('args', sys.argv[1:])\nsys.exit(3)\n")
    toml = write_campaign(tmp_path / "c.toml", base={}, model={"finetune": "lora", "lora_rank": 4},
                          squeeze={"min_variance_retention": 0.9},
                          campaign={"summary_script": str(script), "summary_args": ["k"]}, conditions=[])
    run_afterwards(cdir, load_config(toml), observer=ConsoleCampaignObserver(progress=False))
    record = Manifest.load(cdir).record
    squeeze, summary = record.squeeze or {}, record.summary or {}
    assert squeeze["run"] == "b_s1" and squeeze["recommended_rank"] == 2  # 4/5 < 0.9 <= 1
    assert summary["returncode"] == 3 and summary["args"] == ["k"]
    assert f"args ['{cdir}', 'k']" in (cdir / "summary.log").read_text()
    assert "summary failed: exit code 3" in capsys.readouterr().err
    script.unlink()
    run_afterwards(cdir, load_config(toml), observer=ConsoleCampaignObserver(progress=False))
    assert "not found" in str((Manifest.load(cdir).record.summary or {})["error"])


def test_squeeze_section_that_cannot_act_is_refused_at_load(tmp_path, capsys):
    from retrain_ray.config import ConfigError, load_config

    full = tmp_path / "full.toml"
    full.write_text('[model]\nfinetune = "full"\n[squeeze]\nmin_variance_retention = 0.9\n')
    with pytest.raises(ConfigError, match="squeeze"):
        load_config(full)
    too_big = tmp_path / "big.toml"
    too_big.write_text('[model]\nfinetune = "lora"\nlora_rank = 8\n[squeeze]\ncompress_to = 16\n')
    with pytest.raises(ConfigError, match="squeeze.compress_to"):
        load_config(too_big)
    ok = tmp_path / "ok.toml"
    ok.write_text('[model]\nmodel = "builtin:tiny"\nfinetune = "lora"\nlora_rank = 8\n[training]\nmax_tokens = 8\n'
               '[squeeze]\ncompress_to = 4\n')  # max_tokens: the default 10,240 overflows the model's context
    assert main(["explain", str(ok), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["squeeze"]["compress_to"] == 4
    named = tmp_path / "named.toml"
    named.write_text('[model]\nfinetune = "full"\n[squeeze]\nadapter_path = "x/adapter"\n')
    assert load_config(named).squeeze.adapter_path == "x/adapter"  # squeezes that adapter, not this run's
