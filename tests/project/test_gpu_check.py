"""The GPU check (`make gpu-check`): it skips cleanly without CUDA, and its parts really run (on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import _cuda_available

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "benchmarks" / "gpu_check.py"


@pytest.mark.skipif(_cuda_available(), reason="this machine has CUDA: the check runs instead of skipping")
def test_without_cuda_it_prints_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(CHECK), "--out", str(out)], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "skipped: no CUDA device"
    assert not out.exists()


@pytest.mark.extended
def test_cpu_smoke_runs_the_lora_step_part_and_records_its_figures(tmp_path):
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-smoke", "--parts", "lora_step,packing",
                           "--out", str(out)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    parts = {p["name"]: p for p in json.loads(out.read_text())["parts"]}
    assert set(parts) == {"lora_step", "packing"}
    step = parts["lora_step"]
    assert step["status"] == "passed", step["why"]
    assert step["figures"]["sample_tokens_per_s"] > 0 and step["figures"]["train_step_s"] > 0
    assert step["figures"]["batch"] == "2 prompts x 2 samples x 4 tokens"
    installed = all(importlib.util.find_spec(m) is not None for m in ("vllm", "ray"))
    packing = parts["packing"]
    assert packing["status"] == ("passed" if installed else "skipped"), packing["why"]
    if not installed:
        assert packing["why"].startswith("not installed here: ")


def test_the_gpu_tests_part_collects_only_files_holding_gpu_tests():
    sys.path.insert(0, str(CHECK.parent))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(CHECK.parent))
    files = gpu_check.gpu_test_files()
    assert "tests/backends/test_local_backend.py" in files
    assert all("@pytest.mark.gpu" in (ROOT / f).read_text() for f in files)
    assert "tests/project/test_gpu_check.py" not in files


def test_an_unknown_part_is_refused_with_the_names(tmp_path):
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-smoke", "--parts", "lora", "--out",
                           str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0
    assert "unknown ['lora']" in done.stderr and "lora_step" in done.stderr
