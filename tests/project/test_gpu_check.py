"""The GPU check (`make gpu-check`): it skips cleanly without CUDA, and its parts really run (on the CPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
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


def _run_in_own_group(argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[str]:
    """Runs `argv` in a process group of its own, and on a timeout ends the whole group (the check's parts
    and their engine processes too, which a plain `subprocess.run` timeout would leave running)."""
    process = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True)
    try:
        stdout, stderr = process.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=30)
        raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


@pytest.mark.extended
@pytest.mark.timeout(900)
def test_cpu_smoke_runs_the_lora_step_part_and_records_its_figures(tmp_path):
    out = tmp_path / "figures.json"
    # a budget of 720 s (360 s a part): vLLM's CPU engines take minutes on a small shared machine
    done = _run_in_own_group([sys.executable, str(CHECK), "--cpu-smoke", "--parts", "lora_step,packing",
                              "--budget", "720", "--out", str(out)], timeout_s=840)
    assert done.returncode == 0, done.stdout + done.stderr
    parts = {p["name"]: p for p in json.loads(out.read_text())["parts"]}
    assert set(parts) == {"lora_step", "packing"}
    step = parts["lora_step"]
    assert step["status"] == "passed", step["why"]
    assert step["figures"]["sample_tokens_per_s"] > 0 and step["figures"]["train_step_s"] > 0
    assert step["figures"]["batch"] == "2 prompts x 2 samples x 4 tokens"
    missing = [m for m in ("vllm", "ray") if importlib.util.find_spec(m) is None]
    packing = parts["packing"]
    if missing:
        assert (packing["status"], packing["why"]) == ("skipped", f"not installed here: {', '.join(missing)}")
        return
    assert packing["status"] == "passed", packing["why"]
    # the benchmark's own figures came back: N = 1 and 2 (--quick), each variant sampled tokens
    (line,) = [x for x in str(packing["figures"]["stdout"]).splitlines() if x.startswith('{"packing"')]
    figures = json.loads(line)["packing"]
    assert set(figures) == {"1", "2"}
    assert all(set(variants) == {"own", "serial", "batch"} for variants in figures.values())
    assert all(v["tokens_per_s"] > 0 for variants in figures.values() for v in variants.values())


def _gpu_check():
    sys.path.insert(0, str(CHECK.parent))
    try:
        import gpu_check
    finally:
        sys.path.remove(str(CHECK.parent))
    return gpu_check


def test_a_benchmark_part_records_what_its_script_did(tmp_path, monkeypatch):
    """Each status a benchmark part can take, from a script that really ran (or could not)."""
    gpu_check = _gpu_check()
    monkeypatch.setattr(gpu_check, "ROOT", tmp_path)
    (tmp_path / "benchmarks").mkdir()
    absent = gpu_check.benchmark_script("packing", "packing.py", [], 30, ())
    assert (absent.status, absent.why) == ("skipped", "benchmarks/packing.py is not built yet")
    (tmp_path / "benchmarks" / "ok.py").write_text("import sys\nprint('figures', sys.argv[1:])\n")
    (tmp_path / "benchmarks" / "bad.py").write_text("import sys\nprint('half way')\nsys.exit(3)\n")
    lacking = gpu_check.benchmark_script("ok", "ok.py", [], 30, ("json", "no_such_module_here"))
    assert (lacking.status, lacking.why) == ("skipped", "not installed here: no_such_module_here")
    passed = gpu_check.benchmark_script("ok", "ok.py", ["--quick"], 30, ("json",))
    assert passed.status == "passed" and passed.figures["stdout"] == "figures ['--quick']\n"
    failed = gpu_check.benchmark_script("bad", "bad.py", [], 30, ())
    assert failed.status == "failed" and failed.why.startswith("exit 3: half way")


def test_the_gpu_tests_part_collects_only_files_holding_gpu_tests():
    gpu_check = _gpu_check()
    files = gpu_check.gpu_test_files()
    assert "tests/backends/test_local_backend.py" in files
    assert all("@pytest.mark.gpu" in (ROOT / f).read_text() for f in files)
    assert "tests/project/test_gpu_check.py" not in files


def test_an_unknown_part_is_refused_with_the_names(tmp_path):
    done = subprocess.run([sys.executable, str(CHECK), "--cpu-smoke", "--parts", "lora", "--out",
                           str(tmp_path / "x.json")], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode != 0
    assert "unknown ['lora']" in done.stderr and "lora_step" in done.stderr
