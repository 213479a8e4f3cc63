"""The GPU check: every GPU-marked test and the GPU variants of the benchmarks, as one JSON of figures.

    python benchmarks/gpu_check.py [--out gpu-check.json] [--budget 450]     (or: make gpu-check)

Without a CUDA device it prints one line, `skipped: no CUDA device`, writes nothing and exits 0, so CI
and laptops can call it. On a GPU it runs, each part in its own process with its own share of the time
budget (the whole check fits in 8 minutes):

- `tests`: `pytest -m gpu`, the tests that only run on a CUDA device;
- `lora_step`: the PyTorch engine and a LoRA train step of a 0.42B-parameter Llama built offline with
  random weights (`builtin:tiny-h1024-l40`, bfloat16): sampling tokens/s, train tokens/s, step time and
  peak GPU memory;
- `sampling`: `benchmarks/sampling.py --gpu` (PyTorch vs embedded vLLM), when vLLM is installed;
- `packing`: `benchmarks/packing.py --gpu`, once that benchmark exists;
- `shared_trainer`: `benchmarks/shared_trainer.py --device-check cuda`: 8 LoRA runs of the 0.42B model
  (bfloat16), one RL step each (sample 4x4 rows of 64 tokens, train on them) taking turns on one model copy,
  against one shared-trainer RL step for all 8: steps/s, the ratio and peak GPU memory.

A part that cannot run there (vLLM or Ray not installed, the benchmark not built) is recorded with the
reason instead of failing the check; a part that fails records its exit code and the end of its output,
and the check exits 1. `--cpu-smoke` runs the same parts on the CPU with a tiny model and tiny sizes,
so the check itself is tested where there is no GPU.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_MODEL = "builtin:tiny-h1024-l40"  # 4 heads of 256, MLP 2048, 40 layers: 0.42B parameters
SMOKE_MODEL = "builtin:tiny"
PARTS = ("tests", "lora_step", "sampling", "packing", "shared_trainer")


@dataclass
class Part:
    name: str
    status: str = "not run"  # passed | failed | skipped
    seconds: float = 0.0
    why: str = ""
    figures: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Sizes:
    model: str
    dtype: str
    prompts: int
    samples: int
    max_tokens: int


GPU_SIZES = Sizes(GPU_MODEL, "bfloat16", prompts=32, samples=8, max_tokens=128)
SMOKE_SIZES = Sizes(SMOKE_MODEL, "float32", prompts=2, samples=2, max_tokens=4)


def _cuda_device() -> str:
    """The CUDA device's name, or "" where there is none (or no torch)."""
    try:
        import torch
    except ImportError:
        return ""
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else ""


def _run(part: Part, argv: list[str], timeout_s: float) -> str:
    """Runs `argv` from the repository root; fills the part's status (the why: stderr's end); returns stdout."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
           "HF_HUB_OFFLINE": "1", "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1"}
    started = time.monotonic()
    # its own session, ended whole on a timeout: a part's engines (vLLM workers) outlive a killed parent
    child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=30)
        part.status, part.why = "failed", f"timed out after {timeout_s:.0f} s"
        part.seconds = time.monotonic() - started
        return out or ""
    part.seconds = time.monotonic() - started
    if child.returncode == 0:
        part.status = "passed"
    else:
        part.status, part.why = "failed", f"exit {child.returncode}: " + (out + err)[-2000:]
    return out


def _missing(*modules: str) -> str:
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    return f"not installed here: {', '.join(absent)}" if absent else ""


def gpu_test_files() -> list[str]:
    """The test files that hold a GPU-marked test: only they are collected, so a GPU machine without Ray or
    vLLM (they are too large to carry to a lent one) still runs the GPU tests that need neither."""
    marked = re.compile(r"^(@pytest\.mark\.gpu\b|pytestmark = .*pytest\.mark\.gpu\b)", re.MULTILINE)
    return sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                  if marked.search(p.read_text(encoding="utf-8")))


def gpu_tests(timeout_s: float) -> Part:
    part = Part("tests")
    if why := _missing("pytest"):
        part.status, part.why = "skipped", why
        return part
    files = gpu_test_files()
    part.figures["files"] = files
    output = _run(part, [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-rs",
                         *files], timeout_s)
    summary = [line for line in output.splitlines() if " passed" in line or " failed" in line or "skipped" in line]
    part.figures["summary"] = summary[-1].strip("= ") if summary else ""
    return part


def lora_step(sizes: Sizes, timeout_s: float, device: str) -> Part:
    part = Part("lora_step")
    output = _run(part, [sys.executable, str(Path(__file__)), "--lora-step-worker", device, json.dumps(asdict(sizes))],
                  timeout_s)
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if part.status == "passed" and lines:
        part.figures = json.loads(lines[-1])
    return part


def benchmark_script(name: str, script: str, args: list[str], timeout_s: float, needs: tuple[str, ...]) -> Part:
    part = Part(name)
    path = ROOT / "benchmarks" / script
    if not path.exists():
        part.status, part.why = "skipped", f"benchmarks/{script} is not built yet"
        return part
    if why := _missing(*needs):
        part.status, part.why = "skipped", why
        return part
    output = _run(part, [sys.executable, str(path), *args], timeout_s)
    part.figures["stdout"] = output[-4000:]
    return part


def shared_trainer(sizes: Sizes, timeout_s: float, device: str) -> Part:
    """8 runs on one copy (benchmarks/shared_trainer.py `device_figures`): one JSON line of figures."""
    on_gpu = device == "cuda"
    args = ["--device-check", device, "--model", sizes.model, "--dtype", sizes.dtype, "--runs", "8",
            "--steps", "1", "--prompts", "4" if on_gpu else "1", "--group", "4" if on_gpu else "2",
            "--completion", "64" if on_gpu else str(sizes.max_tokens)]
    part = benchmark_script("shared_trainer", "shared_trainer.py", args, timeout_s, ())
    lines = [line for line in str(part.figures.get("stdout", "")).splitlines() if line.startswith("{")]
    if part.status == "passed" and lines:
        part.figures = json.loads(lines[-1])
    return part


def _lora_step_worker(device: str, sizes: Sizes) -> dict[str, object]:
    """Runs in its own process: one model, sampled from and trained on; prints one JSON line."""
    import tempfile

    import torch
    from step_throughput import batch_from  # this script's folder: the step benchmark's batch

    from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy
    from retrain_ray.engines import SamplingParams

    if device == "cpu":
        torch.set_num_threads(1)
    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=16), dtype=sizes.dtype,
                              gradient_checkpointing="auto")
    with tempfile.TemporaryDirectory() as cache:
        engine, backend, _ = build_shared_policy(sizes.model, settings, device=device, cache_dir=Path(cache))
        gen = torch.Generator().manual_seed(0)
        prompts = [[1, *torch.randint(3, 60, (16,), generator=gen).tolist()] for _ in range(sizes.prompts)]
        params = SamplingParams(max_tokens=sizes.max_tokens, temperature=1.0)
        engine.generate(prompts, sizes.samples, params)  # warm-up: kernels, allocator
        if device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        groups = engine.generate(prompts, sizes.samples, params)
        sample_s = time.perf_counter() - started
        batch = batch_from(groups, prompts, temperature=1.0)
        backend.train_step(batch, lr=1e-5, weight_decay=0.0)  # warm-up
        started = time.perf_counter()
        result = backend.train_step(batch, lr=1e-5, weight_decay=0.0)
        if device == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - started
        peak = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else 0.0
        n_params = sum(p.numel() for p in backend.model.parameters())
    sampled = sum(len(s.token_ids) for group in groups for s in group)
    matmul_flops = measured_matmul_flops(device, sizes.dtype)
    sample_flops = 2 * n_params * sampled / sample_s  # one forward per new token (attention left out)
    # LoRA: forward, backward through the activations (no base-weight gradients), and the forward again under
    # gradient checkpointing (on for CUDA): 6 N T; 4 N T without it
    train_flops = (6 if device == "cuda" else 4) * n_params * batch.num_tokens / step_s
    return {"model": sizes.model, "dtype": sizes.dtype, "device": device, "parameters": n_params,
            "batch": f"{sizes.prompts} prompts x {sizes.samples} samples x {sizes.max_tokens} tokens",
            "sample_tokens_per_s": round(sampled / sample_s, 1), "train_step_s": round(step_s, 4),
            "train_tokens_per_s": round(batch.num_tokens / step_s, 1), "loss": float(result.loss),
            "peak_gpu_memory_gib": round(peak, 2), "matmul_tflops": round(matmul_flops / 1e12, 3),
            "sample_flops_utilization": round(sample_flops / matmul_flops, 4),
            "train_flops_utilization": round(train_flops / matmul_flops, 4)}


def measured_matmul_flops(device: str, dtype: str, size: int = 4096, repeats: int = 10) -> float:
    """This device's dense matmul rate in the step's dtype (FLOP/s): the ceiling the utilization is against."""
    import torch

    kind = getattr(torch, dtype)
    size = size if device == "cuda" else 512
    a = torch.randn(size, size, device=device, dtype=kind)
    b = torch.randn(size, size, device=device, dtype=kind)
    a @ b  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * size**3 * repeats / (time.perf_counter() - started)


def run_check(device: str, sizes: Sizes, budget_s: float, chosen: set[str]) -> list[Part]:
    """Every part, or the `chosen` ones, each with its share of the budget."""
    if unknown := chosen - set(PARTS):
        raise SystemExit(f"--parts: unknown {sorted(unknown)}; the parts are {', '.join(PARTS)}")
    wanted = chosen or set(PARTS)
    share = budget_s / len(wanted)
    on_gpu = device == "cuda"
    bench_flags = ["--gpu"] if on_gpu else ["--model", sizes.model, "--prompts", str(sizes.prompts),
                                            "--samples", str(sizes.samples), "--max-tokens", str(sizes.max_tokens)]
    runners = {
        "tests": lambda: gpu_tests(share) if on_gpu else Part("tests", "skipped", why="the GPU tests need CUDA"),
        "lora_step": lambda: lora_step(sizes, share, device),
        "sampling": lambda: benchmark_script("sampling", "sampling.py", [*bench_flags, "--repeats", "2"], share,
                                             ("vllm",)),
        "packing": lambda: benchmark_script("packing", "packing.py", ["--gpu"] if on_gpu else ["--quick"], share,
                                            ("vllm", "ray")),
    }
    runners["shared_trainer"] = lambda: shared_trainer(sizes, share, device)
    return [runners[name]() for name in PARTS if name in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("gpu-check.json"))
    parser.add_argument("--budget", type=float, default=450.0, help="seconds for all parts together")
    parser.add_argument("--cpu-smoke", action="store_true", help="run every part on the CPU, tiny sizes")
    parser.add_argument("--parts", default="", help="comma-separated names of the parts to run (default: all)")
    parser.add_argument("--lora-step-worker", nargs=2, metavar=("DEVICE", "SIZES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.lora_step_worker:
        device, sizes = args.lora_step_worker
        print(json.dumps(_lora_step_worker(device, Sizes(**json.loads(sizes)))))
        return 0
    name = _cuda_device()
    if not name and not args.cpu_smoke:
        print("skipped: no CUDA device")
        return 0
    device, sizes = ("cuda", GPU_SIZES) if name and not args.cpu_smoke else ("cpu", SMOKE_SIZES)
    print(f"GPU check on {name or 'the CPU (smoke)'}: budget {args.budget:.0f} s", flush=True)
    chosen = {p for p in args.parts.split(",") if p}
    parts = run_check(device, sizes, args.budget, chosen)
    for part in parts:
        print(f"  {part.name:<10} {part.status:<8} {part.seconds:6.1f} s  {part.why.splitlines()[0] if part.why else ''}")
    report = {"device": name or "cpu", "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "parts": [asdict(p) for p in parts]}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"figures: {args.out}")
    return 1 if any(p.status == "failed" for p in parts) else 0


if __name__ == "__main__":
    sys.exit(main())
