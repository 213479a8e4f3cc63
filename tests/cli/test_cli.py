"""The `retrain-ray` console script as a user runs it: exit codes, error text, no tracebacks."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "retrain_ray.cli"]


def run_cli(*args: str, cwd: Path = ROOT, timeout: float = 240,
            hf_home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1"}
    if hf_home is not None:
        env["HF_HOME"] = str(hf_home)
    return subprocess.run([*CLI, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def test_help_lists_every_command():
    out = run_cli("--help")
    assert out.returncode == 0
    for verb in ("train", "campaign", "resume", "explain", "results", "status", "plot"):
        assert f"retrain-ray {verb}" in out.stdout


def test_three_mistakes_reported_at_once_with_exit_2_and_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        '[training]\nbatch_size = 0\nlearning_rate = 1e-5\n\n[algorthm]\nadvantage_mode = "grpo"\n'
    )
    out = run_cli("train", str(bad))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    for key in ("training.batch_size", "training.learning_rate", "algorthm"):
        assert key in out.stderr, out.stderr
    assert "did you mean" in out.stderr.lower()
    assert str(bad) in out.stderr


def test_unknown_override_flag_gets_a_suggestion():
    out = run_cli("train", "configs/smoke.toml", "--max-step", "3")
    assert out.returncode == 2
    assert "--max-steps" in out.stderr
    assert "Traceback" not in out.stderr


def test_explain_original_campaign_prints_matrix_and_capacity(tmp_path):
    from hf_cache import stub_original_model

    out = run_cli("explain", "configs/ablation.toml", "--json", hf_home=stub_original_model(tmp_path))
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    text = json.dumps(data)
    for label in ("grpo+none", "maxrl+none", "maxrl+gtpo", "maxrl+gtpo_hicra", "maxrl+gtpo_sepa"):
        assert label in text
    assert "wall" in text.lower()


def test_preflight_rejects_entropy_without_an_engine_that_gives_it(tmp_path):
    cfg = tmp_path / "entropy.toml"
    smoke = (ROOT / "configs" / "smoke.toml").read_text()
    cfg.write_text(smoke.replace('transform_mode = "none"', 'transform_mode = "gtpo"\nuncertainty_kind = "shannon_entropy"')
                   + '\n[inference]\nengine = "openai"\nurl = "http://127.0.0.1:9"\n')
    out = run_cli("train", str(cfg), "--log-dir", str(tmp_path / "run"))
    assert out.returncode == 2, out.stderr
    assert "shannon_entropy" in out.stderr
    assert not (tmp_path / "run").exists(), "nothing may be written when preflight fails"


@pytest.mark.slow
def test_train_smoke_run_then_refuses_to_overwrite_without_a_flag(tmp_path):
    run_dir = tmp_path / "run"
    args = ("train", "configs/smoke.toml", "--log-dir", str(run_dir), "--max-steps", "4",
            "--sft-warmup-steps", "2", "--save-every", "2", "--quiet")
    first = run_cli(*args)
    assert first.returncode == 0, first.stderr
    assert "completed after step 3" in first.stdout
    first_step_s = float(re.search(r"time to first step: ([0-9.]+) s", first.stdout).group(1))
    assert 0 < first_step_s < float(re.search(r"in ([0-9.]+) s", first.stdout).group(1)) + 5
    assert (run_dir / "metrics.parquet").is_file()
    again = run_cli(*args)
    assert again.returncode == 2
    assert "--resume" in again.stderr and "--overwrite" in again.stderr
    resumed = run_cli("train", "configs/smoke.toml", "--log-dir", str(run_dir), "--max-steps", "6",
                      "--sft-warmup-steps", "2", "--save-every", "2", "--quiet", "--resume", str(run_dir))
    assert resumed.returncode == 0, resumed.stderr
    assert "completed after step 5" in resumed.stdout


def test_train_help_lists_the_override_flags_it_accepts(capsys):
    from retrain_ray.cli import main
    from retrain_ray.config import parse_overrides

    with pytest.raises(SystemExit) as exit_:
        main(["train", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    flags = {tok.rstrip(",") for tok in text.split() if tok.startswith("--") and tok[2:3].isalpha()}
    for flag in ("--max-steps", "--bp-enabled", "--optim-beta1", "--transform-param", "--resume-from"):
        assert flag in flags
    listed = [f for f in flags if f not in ("--help", "--resume", "--overwrite", "--quiet", "--flag",
                                            "--section.key=value", "--flag=VALUE")]
    for flag in listed:  # every flag the help lists is one the parser accepts
        parse_overrides([flag, "k=1" if flag.endswith(("-opt", "-param")) else "1"])
