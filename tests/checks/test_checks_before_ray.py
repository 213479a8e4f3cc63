"""Issue 34 item 6: what is knowable from the config, the data and the model's shapes is refused by the one
check pass (retrain_ray/checks) before any Ray process starts: through `explain` and `Campaign(...).run()`
alike, each problem naming its key and its fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import GRPO, write_campaign, write_config

from retrain_ray.campaign import Campaign, CampaignError
from retrain_ray.checks.preflight import context_problems, data_download_problems
from retrain_ray.config import load_config
from retrain_ray.models.context import BUILTIN_CONTEXT


def _campaign(tmp_path, **sections):
    sections = {"model": {"finetune": None}, **sections}
    return write_campaign(tmp_path / "campaign.toml", algorithm=GRPO, logging={"log_dir": str(tmp_path / "logs")},
                          campaign={"seeds": [1]}, conditions=[GRPO], **sections)


def _explain(path, *flags, env=None):
    return subprocess.run([sys.executable, "-m", "retrain_ray.cli.explain", str(path), *flags], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def _refused_before_ray(path) -> str:
    import ray

    was_connected = ray.is_initialized()
    campaign = Campaign(load_config(path))
    with pytest.raises(CampaignError) as info:
        campaign.run(progress=False)
    assert ray.is_initialized() == was_connected  # no Ray was started for it
    assert not campaign.campaign_dir.exists()  # nothing was written either
    return str(info.value)


def test_max_tokens_that_fill_the_context_are_refused_before_ray(tmp_path):
    path = _campaign(tmp_path, training={"batch_size": 2, "group_size": 2, "max_steps": 1,
                                         "max_tokens": BUILTIN_CONTEXT})
    text = _refused_before_ray(path)
    assert "training.max_tokens" in text and f"lower [training] max_tokens below {BUILTIN_CONTEXT:,}" in text
    out = _explain(path)
    assert out.returncode == 2
    assert "training.max_tokens" in out.stderr and "lower [training] max_tokens below" in out.stderr


def test_context_check_reads_a_model_folder_and_passes_what_fits(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"max_position_embeddings": 512}')
    cfg = load_config(_campaign(tmp_path, model={"model": str(folder), "finetune": None},
                                training={"max_tokens": 600}))
    assert "512 positions" in context_problems(cfg.training, cfg.model)[0]
    fits = load_config(_campaign(tmp_path, training={"max_tokens": 64}))
    assert context_problems(fits.training, fits.model) == []


def test_math_data_while_offline_is_refused_before_ray(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = _campaign(tmp_path, data={"source": "math"},
                     training={"batch_size": 2, "group_size": 2, "max_steps": 1, "max_tokens": 8})
    text = _refused_before_ray(path)
    assert "data.source" in text and "HF_HUB_OFFLINE" in text and 'source = "file"' in text
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert data_download_problems(load_config(path).data, load_config(path).environment) == []


def test_explain_of_a_single_run_reports_the_context_too(tmp_path):
    out = _explain(write_config(tmp_path / "run.toml", training={"max_tokens": 4096}))
    assert out.returncode == 2 and "lower [training] max_tokens below 2,048" in out.stderr


def test_a_sampling_server_that_does_not_answer_is_refused_before_ray(tmp_path):
    path = _campaign(tmp_path, inference={"engine": "openai", "url": "http://127.0.0.1:9"},
                     training={"batch_size": 2, "group_size": 2, "max_steps": 1, "max_tokens": 8})
    text = _refused_before_ray(path)
    assert "inference.url" in text and "http://127.0.0.1:9" in text and "start it" in text
    out = _explain(path, "--strict")
    assert out.returncode == 2 and "inference.url" in out.stderr
