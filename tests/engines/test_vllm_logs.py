"""vLLM's log lines: in the run's vllm.log, not on the console (errors on both); and which layers a
full-weight sync leaves without weights on purpose (engines/vllm/reload.py), on plain torch modules."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available
from retrain_ray.engines.vllm.logs import VLLM_LOG_FILE, log_vllm_to, take_over_vllm_logging
from retrain_ray.engines.vllm.reload import LAYERWISE_LOGGER, layers_without_own_weights, reload_gaps_checked

ROOT = Path(__file__).resolve().parents[2]


def test_vllm_records_go_to_the_run_log_not_the_console(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "0")
    assert take_over_vllm_logging()
    logger = logging.getLogger("vllm.some.module")
    logger.info("start-up line, before the run names its file")
    path = tmp_path / "run" / VLLM_LOG_FILE
    try:
        log_vllm_to(path)
        logger.warning("a routine per-step warning")
        logger.error("the engine died")
    finally:
        log_vllm_to(None)
    logger.info("after the run")
    text = path.read_text()
    assert "start-up line" in text and "per-step warning" in text and "engine died" in text
    assert "after the run" not in text
    console = capsys.readouterr()
    assert "start-up" not in console.out + console.err and "per-step" not in console.out + console.err
    assert "the engine died" in console.err


def test_vllm_configure_logging_1_keeps_vllms_own_console(monkeypatch):
    monkeypatch.setenv("VLLM_CONFIGURE_LOGGING", "1")
    assert not take_over_vllm_logging()


class _Rotary(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("cos_sin_cache", torch.ones(4, 2))


class _Head(torch.nn.Module):
    def __init__(self, weight: torch.nn.Parameter | None = None) -> None:
        super().__init__()
        self.weight = weight if weight is not None else torch.nn.Parameter(torch.ones(3, 2))


def _model(tied: bool) -> torch.nn.Module:
    model = torch.nn.Module()
    model.embed = torch.nn.Embedding(3, 2)
    model.rotary = _Rotary()
    model.norm = torch.nn.LayerNorm(2)
    model.head = _Head(model.embed.weight if tied else None)
    return model


def test_rotary_caches_and_a_tied_head_have_no_weights_of_their_own():
    assert layers_without_own_weights(_model(tied=True)) == {"_Rotary", "_Head"}
    assert layers_without_own_weights(_model(tied=False)) == {"_Rotary"}  # an untied head is loaded


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_reload_gaps_quiet_for_expected_layers_and_an_error_for_others():
    logger = logging.getLogger(LAYERWISE_LOGGER)
    seen = _Messages()
    logger.addHandler(seen)
    try:
        with reload_gaps_checked(_model(tied=True)):
            logger.warning("%s: Failed to load weights", "_Rotary")
            logger.warning("%s: Failed to load weights", "_Head")
            logger.warning("an unrelated warning")
        with pytest.raises(RuntimeError, match=r"\['_Head'\]"), reload_gaps_checked(_model(tied=False)):
            logger.warning("%s: Failed to load weights", "_Head")
    finally:
        logger.removeHandler(seen)
    assert seen.messages == ["an unrelated warning", "_Head: Failed to load weights"]


@pytest.mark.extended
@pytest.mark.timeout(900)  # a vLLM start and 3 steps in a subprocess; slow at a high load average
@pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")
def test_smoke_vllm_console_has_no_vllm_lines(tmp_path):
    """The CPU smoke run of configs/smoke-vllm.toml for 3 steps (2 full-weight syncs): vLLM's lines are in
    the run's vllm.log, none on the console (about 2 minutes on the shared 2-core machine)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    for key in ("VLLM_CONFIGURE_LOGGING", "VLLM_LOGGING_LEVEL"):
        env.pop(key, None)
    run_dir = tmp_path / "smoke"
    done = subprocess.run(
        [sys.executable, "-m", "retrain_ray", "train", str(ROOT / "configs/smoke-vllm.toml"), "--max-steps", "3",
         "--sft-warmup-steps", "1", "--log-dir", str(run_dir), "--quiet"],
        capture_output=True, text=True, timeout=900, env=env, cwd=tmp_path, check=False,
    )
    console = done.stdout + done.stderr
    assert done.returncode == 0, console
    assert "Failed to load weights" not in console
    assert not [line for line in console.splitlines() if re.search(r"\b(DEBUG|INFO|WARNING)\b", line)], console
    assert "site-packages/vllm" not in console and "Loading safetensors" not in console  # FutureWarnings, tqdm
    log = (run_dir / VLLM_LOG_FILE).read_text()
    assert "Reloading and processing weights" in log  # the syncs' INFO lines, kept in the run's file
    assert "Failed to load weights" not in log
