"""Packing runs onto one inference engine: N LoRA runs of one model, sampled three ways.

    python benchmarks/packing.py [--runs 1,2,4,8] [--prompts 8] [--samples 2] [--max-tokens 32]
                                 [--rounds 3] [--own concurrent|sequential|auto] [--quick] [--gpu]

For each N, every run has its own LoRA adapter (rank 8, random B so the adapters differ) and samples
`rounds` times `prompts x samples` completions of up to `max-tokens` tokens (after one warm-up round):

* (a) **own**: each run its own vLLM engine, in its own process (as runs without `shared = true`).
  With `--own concurrent` the N processes sample at the same time, sharing the machine; with
  `sequential` one after another, each alone on the machine, and the aggregate is total tokens over the
  sum of their sampling times (what N engines would reach if they never slowed each other); `auto`
  (default) runs them concurrently when N engines fit in the memory available, sequentially otherwise.
* (b) **serial**: one shared engine (`[inference] shared = true`, `shared_batching = "serial"`) serving
  one run's request at a time; N threads stand in for the runs, as the engine actor's threads do.
* (c) **batch**: the same engine with `shared_batching = "batch"`: the runs' concurrent requests go
  into one `LLM.generate`, each prompt under its own run's adapter.

It prints, per N and variant, the aggregate sampling tokens/s (all runs' tokens over the wall time of
the timed rounds), the mean per-run sampling time (seconds a run spent in `generate`), the peak memory
(RSS summed over the variant's processes on CPU; GPU memory in use with --gpu), and the ratios
(c)/(b) and (c)/(a). Every engine process uses one OpenMP thread (`OMP_NUM_THREADS=1` unless set):
the shared engine one core, N own engines up to N cores. `--quick` is N = 1, 2 with small sizes (the GPU check's CPU smoke); `--gpu` is the
GPU variant (a 0.42B built-in Llama in bfloat16, 64 prompts x 4 samples x 128 tokens per run), which
prints that it was skipped and exits 0 without CUDA. Needs vLLM: `make setup-vllm`.

`--campaign` runs instead the same 4-run shared LoRA campaign twice (`shared_batching = "serial"`, then
`"batch"`), each in a fresh local Ray, and prints its wall time and, from the runs' `metrics.jsonl`, the
sampled tokens, summed sampling and engine-wait times and the mean `shared_batch_runs`.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

CPU_MODEL = "builtin:tiny-h256-l2"
GPU_MODEL = "builtin:tiny-h1024-l40"  # 4 heads of 256, MLP 2048, 40 layers: 0.42B parameters
RANK = 8


@dataclass
class Figures:
    """One variant at one N: what the table shows."""

    tokens: int
    wall_s: float
    run_sample_s: float  # mean over runs of the seconds spent in generate
    peak_mb: float
    note: str = ""

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.wall_s if self.wall_s > 0 else 0.0


# ---- inside a worker process ---------------------------------------------------------------------


def _engine_settings(args: argparse.Namespace, max_loras: int, gpu_share: float | None):
    from retrain_ray.backends.local import LoraSettings
    from retrain_ray.engines.vllm.core import VLLMSettings
    from retrain_ray.models.loading import resolve_model_path

    return VLLMSettings(str(resolve_model_path(args.model)), lora=LoraSettings(rank=RANK), dtype=args.dtype,
                        max_loras=max_loras, gpu_memory_utilization=gpu_share,
                        extra_args={"max_model_len": 64 + args.max_tokens})


def _adapters(args: argparse.Namespace, runs: list[int]) -> dict[int, dict]:
    """Random LoRA tensors per run index (the trainer's names and shapes)."""
    import torch

    from retrain_ray.backends.local import LoraSettings, PolicySettings, load_trainable_model
    from retrain_ray.engines.weights import export_trainable

    model, _ = load_trainable_model(args.model, PolicySettings(finetune="lora", lora=LoraSettings(rank=RANK)),
                                    device="cpu")
    base = export_trainable(model)
    out = {}
    for i in runs:
        gen = torch.Generator().manual_seed(100 + i)
        out[i] = {k: (v + torch.randn(v.shape, generator=gen).to(v.dtype) * 0.5) if "lora_B" in k else v.clone()
                  for k, v in base.items()}
    return out


def _prompts(args: argparse.Namespace, run: int) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(run)
    return [[1] + torch.randint(3, 60, (int(torch.randint(8, 24, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(args.prompts)]


def _sample_rounds(core, run: str, prompts, args: argparse.Namespace, rounds: int) -> tuple[int, float]:
    """(tokens, seconds in generate) of `rounds` calls."""
    from retrain_ray.engines import SamplingParams

    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0)
    tokens, busy = 0, 0.0
    for _ in range(rounds):
        started = time.perf_counter()
        out = core.generate(run, prompts, args.samples, params, core.version(run))
        busy += time.perf_counter() - started
        tokens += sum(len(s.token_ids) for group in out for s in group)
    return tokens, busy


def _peak_mb() -> float:
    import torch

    if torch.cuda.is_available():
        free, total = torch.cuda.mem_get_info()
        return (total - free) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def _worker_shared(args: argparse.Namespace) -> dict[str, object]:
    """One engine, N runs as threads: figures for serial, then batch."""
    from retrain_ray.engines import WeightUpdate
    from retrain_ray.engines.vllm.core import VLLMCore

    n = args.n
    core = VLLMCore(_engine_settings(args, n, 0.5 if args.gpu else None))
    for i, tensors in _adapters(args, list(range(n))).items():
        core.load_weights(f"run{i}", WeightUpdate(1, tensors))
    prompts = {i: _prompts(args, i) for i in range(n)}
    figures: dict[str, object] = {}
    for mode in ("serial", "batch"):
        core.batcher.mode = mode
        results: dict[int, tuple[int, float]] = {}

        def run(i: int, rounds: int, into: dict[int, tuple[int, float]]) -> None:
            into[i] = _sample_rounds(core, f"run{i}", prompts[i], args, rounds)

        for rounds in (1, args.rounds):  # a warm-up round, then the timed ones
            threads = [threading.Thread(target=run, args=(i, rounds, results)) for i in range(n)]
            started = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=1800)
            wall = time.perf_counter() - started
        figures[mode] = asdict(Figures(sum(t for t, _ in results.values()), wall,
                                       sum(b for _, b in results.values()) / n, _peak_mb()))
    core.close()
    return figures


def _worker_own(args: argparse.Namespace) -> dict[str, object]:
    """One run's own engine: ready, wait for the go file, sample, report."""
    from retrain_ray.engines import WeightUpdate
    from retrain_ray.engines.vllm.core import VLLMCore

    core = VLLMCore(_engine_settings(args, 1, 0.85 / args.n if args.gpu else None))
    core.load_weights("run", WeightUpdate(1, _adapters(args, [args.index])[args.index]))
    prompts = _prompts(args, args.index)
    _sample_rounds(core, "run", prompts, args, 1)  # warm-up
    Path(args.ready).touch()
    deadline = time.monotonic() + 1800
    while not Path(args.go).exists():
        if time.monotonic() > deadline:
            raise TimeoutError("the benchmark never said go")
        time.sleep(0.01)
    start = time.time()
    tokens, busy = _sample_rounds(core, "run", prompts, args, args.rounds)
    core.close()
    return {"tokens": tokens, "start": start, "end": time.time(), "busy": busy, "peak_mb": _peak_mb()}


def _worker_campaign(args: argparse.Namespace) -> dict[str, object]:
    """One 4-run shared LoRA campaign in a fresh local Ray; wall time and figures from its logs."""
    import ray

    from retrain_ray.campaign import Campaign

    root = Path(tempfile.mkdtemp(prefix=f"packing-campaign-{args.mode}-"))
    toml = root / "campaign.toml"
    toml.write_text(CAMPAIGN_TOML.format(mode=args.mode, steps=args.steps, logs=root / "logs"))
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False,
             object_store_memory=300 * 2**20)
    started = time.perf_counter()
    results = Campaign.from_toml(toml, root=root).run(progress=False)
    wall = time.perf_counter() - started
    ray.shutdown()
    rows = [json.loads(line) for f in sorted(root.rglob("metrics.jsonl"))
            for line in f.read_text().splitlines() if line.strip()]
    rl = [r for r in rows if r.get("phase") == "rl"]
    batch_runs = [r["shared_batch_runs"] for r in rl if r.get("shared_batch_runs") is not None]
    return {"mode": args.mode, "wall_s": wall, "runs_completed": sum(r.status == "completed" for r in results.runs),
            "rows": len(rl), "tokens": sum(r.get("rl/completion_tokens") or 0 for r in rl),
            "sample_s": sum(r.get("sample_time_s") or 0.0 for r in rl),
            "engine_wait_s": sum(r.get("engine_wait_s") or 0.0 for r in rl),
            "shared_batch_runs_mean": sum(batch_runs) / len(batch_runs) if batch_runs else None,
            "shared_batch_runs_max": max(batch_runs, default=None),
            "adapters": sorted({r.get("sampled_adapter") or "" for r in rl})[-4:]}


CAMPAIGN_TOML = """
[model]
model = "builtin:tiny-h256-l2"
finetune = "lora"
lora_rank = 8

[backend]
devices = "cpu"
acquire_timeout_s = 600

[data]
source = "builtin"
task = "first_digit"

[algorithm]
advantage_mode = "grpo"
transform_mode = "none"

[training]
batch_size = 8
group_size = 4
max_tokens = 16
lr = 3e-3
sft_warmup_steps = 1  # one supervised step, so every run samples from its own adapter (v1 on)

[inference]
engine = "vllm-embedded"
shared = true
shared_batching = "{mode}"
max_concurrent = 4

[inference.engine_args]
max_model_len = 128

[logging]
log_dir = "{logs}"

[campaign]
name = "packing-{mode}"
seeds = [1, 2, 3, 4]
max_steps = {steps}
parallel = true
max_workers = 4
cpus_per_run = 0.5
trial_start_timeout_s = 900

[[campaign.conditions]]
advantage_mode = "grpo"
transform_mode = "none"
"""


def campaign(args: argparse.Namespace) -> int:
    """The same 4-run shared LoRA campaign, serial then batch, each in its own process."""
    print(f"4 LoRA runs (seeds 1-4) of builtin:tiny-h256-l2, {args.steps} steps each (the first supervised), 8 prompts x 4 samples "
          "x up to 16 tokens per step, one shared vLLM engine (max_concurrent = 4)", flush=True)
    print("| shared_batching | wall s | tokens | tokens/s (wall) | sample_time_s summed | engine_wait_s summed "
          "| shared_batch_runs mean (max) |\n|---|---|---|---|---|---|---|", flush=True)
    found = {}
    for mode in ("serial", "batch"):
        cmd = [sys.executable, __file__, "--worker", "campaign", "--mode", mode, "--steps", str(args.steps)]
        f = found[mode] = _collect(_spawn(cmd), f"the {mode} campaign")
        mean = f["shared_batch_runs_mean"]
        print(f"| {mode} | {f['wall_s']:.0f} | {f['tokens']:,} | {f['tokens'] / f['wall_s']:.1f} | {f['sample_s']:.0f} "
              f"| {f['engine_wait_s']:.0f} | {mean if mean is None else f'{mean:.2f}'} ({f['shared_batch_runs_max']}) |",
              flush=True)
    print(json.dumps({"campaign": found}))
    return 0 if found["batch"]["runs_completed"] == 4 and found["serial"]["runs_completed"] == 4 else 1


# ---- the driver ----------------------------------------------------------------------------------


def _worker_cmd(args: argparse.Namespace, worker: str, *extra: str) -> list[str]:
    cmd = [sys.executable, __file__, "--worker", worker, "--model", args.model, "--dtype", args.dtype,
           "--prompts", str(args.prompts), "--samples", str(args.samples), "--max-tokens", str(args.max_tokens),
           "--rounds", str(args.rounds), *extra]
    return [*cmd, "--gpu"] if args.gpu else cmd


def _last_json(text: str) -> dict:
    return json.loads([line for line in text.splitlines() if line.startswith("{")][-1])


def _spawn(cmd: list[str], threads: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)} if threads else None
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _threads(args: argparse.Namespace, processes: int) -> int | None:
    """`--threads fair`: the machine's cores split among the engine processes running at once (the shared
    engine gets them all, N own engines a share each); `one`: the environment's setting (1 unless set)."""
    return max(1, (os.cpu_count() or 1) // processes) if args.threads == "fair" else None


def _collect(proc: subprocess.Popen[str], what: str) -> dict:
    out, err = proc.communicate(timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{err[-3000:]}")
    return _last_json(out)


def shared(args: argparse.Namespace, n: int) -> dict[str, Figures]:
    found = _collect(_spawn(_worker_cmd(args, "shared", "--n", str(n)), _threads(args, 1)),
                     f"the shared engine with {n} runs")
    return {mode: Figures(**found[mode]) for mode in ("serial", "batch")}


def own(args: argparse.Namespace, n: int, concurrent: bool) -> Figures:
    with tempfile.TemporaryDirectory() as tmp:
        go = Path(tmp) / "go"
        reports = []
        batches = [list(range(n))] if concurrent else [[i] for i in range(n)]
        for batch in batches:
            procs = [_spawn(_worker_cmd(args, "own", "--n", str(n), "--index", str(i), "--go", str(go),
                                        "--ready", str(Path(tmp) / f"ready{i}")), _threads(args, len(batch)))
                     for i in batch]
            deadline = time.monotonic() + 1800
            while not all((Path(tmp) / f"ready{i}").exists() for i in batch):
                if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                    break  # _collect reports the failure
                time.sleep(0.05)
            go.touch()
            reports += [_collect(p, f"own engine {i} of {n}") for i, p in zip(batch, procs, strict=True)]
            go.unlink(missing_ok=True)
    tokens = sum(r["tokens"] for r in reports)
    busy = [r["busy"] for r in reports]
    if concurrent:
        wall = max(r["end"] for r in reports) - min(r["start"] for r in reports)
        return Figures(tokens, wall, sum(busy) / n, sum(r["peak_mb"] for r in reports), "concurrent")
    return Figures(tokens, sum(busy), sum(busy) / n, max(r["peak_mb"] for r in reports), "sequential")


def _available_mb() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _own_concurrently(args: argparse.Namespace, n: int, one_engine_mb: float | None) -> bool:
    if args.own != "auto":
        return args.own == "concurrent"
    if args.gpu or n == 1 or one_engine_mb is None:
        return True
    return n * one_engine_mb < 0.7 * _available_mb()


def _row(n: int, name: str, f: Figures, ratios: str) -> str:
    return (f"| {n} | {name} | {f.tokens_per_s:,.0f} | {f.run_sample_s:.2f} | {f.peak_mb:,.0f} | {ratios} |"
            + (f" {f.note} |" if f.note else " |"))


def drive(args: argparse.Namespace) -> int:
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    print(f"model {args.model} on {device} ({os.cpu_count()} CPUs), LoRA rank {RANK}, per run and round "
          f"{args.prompts} prompts x {args.samples} samples x up to {args.max_tokens} tokens, {args.rounds} timed "
          f"rounds after one warm-up; memory: {'GPU memory in use' if device == 'cuda' else 'peak RSS, summed'}",
          flush=True)
    print("| runs | variant | tokens/s | per-run sampling s | peak MB | (c)/(b), (c)/(a) | own engines |\n"
          "|---|---|---|---|---|---|---|", flush=True)
    one_engine_mb: float | None = None
    results: dict[int, dict[str, Figures]] = {}
    for n in args.runs:
        a = own(args, n, _own_concurrently(args, n, one_engine_mb))
        if n == 1:
            one_engine_mb = a.peak_mb
        figures = {"own": a, **shared(args, n)}
        results[n] = figures
        c = figures["batch"]
        vs_b = c.tokens_per_s / max(figures["serial"].tokens_per_s, 1e-9)
        vs_a = c.tokens_per_s / max(a.tokens_per_s, 1e-9)
        print(_row(n, "(a) own engines", a, ""), flush=True)
        print(_row(n, "(b) shared, serial", figures["serial"], ""), flush=True)
        print(_row(n, "(c) shared, batch", c, f"{vs_b:.2f}x, {vs_a:.2f}x"), flush=True)
    print(json.dumps({"packing": {str(n): {k: {**asdict(f), "tokens_per_s": f.tokens_per_s} for k, f in fig.items()}
                                  for n, fig in results.items()}}))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1,2,4,8", help="comma-separated run counts")
    parser.add_argument("--model", default=CPU_MODEL)
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--own", default="auto", choices=("auto", "concurrent", "sequential"))
    parser.add_argument("--quick", action="store_true", help="N = 1, 2 and small sizes (a smoke run)")
    parser.add_argument("--gpu", action="store_true", help="the GPU variant: a 0.42B model in bfloat16")
    parser.add_argument("--campaign", action="store_true",
                        help="instead: the same 4-run shared LoRA campaign, serial vs batch, figures from its logs")
    parser.add_argument("--threads", choices=("one", "fair"), default="one",
                        help="one: one OpenMP thread per engine process (steady on a busy machine); fair: the "
                             "cores split among the engine processes running at once (a quiet machine)")
    parser.add_argument("--steps", type=int, default=6, help="RL steps per run of --campaign")
    parser.add_argument("--worker", choices=("shared", "own", "campaign"), help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="batch", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--go", default="", help=argparse.SUPPRESS)
    parser.add_argument("--ready", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # one OpenMP thread per engine process in every variant: on a busy 2-core machine two spinning OpenMP
    # threads made one engine's generate 25x slower (descheduled barrier partners), which would swamp
    # the comparison; each own-engine process still gets a core of its own when N >= 2
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if args.worker:
        import torch

        args.dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if torch.cuda.is_available() else "float32")
        workers = {"shared": _worker_shared, "own": _worker_own, "campaign": _worker_campaign}
        print(json.dumps(workers[args.worker](args)))
        return 0
    if args.gpu:
        import torch

        if not torch.cuda.is_available():
            print("skipped: --gpu needs a CUDA device")
            return 0
        args.model, args.prompts, args.samples, args.max_tokens = GPU_MODEL, 64, 4, 128
    if args.campaign:
        return campaign(args)
    if args.quick:
        args.runs, args.prompts, args.max_tokens, args.rounds = "1,2", 4, 16, 2
    from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

    if not vllm_available():
        print(f"vLLM is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    args.runs = [int(n) for n in str(args.runs).split(",") if n.strip()]
    return drive(args)


if __name__ == "__main__":
    sys.exit(main())
