"""The shared multi-LoRA trainer against packed runs, one process each (issue 36).

    python benchmarks/shared_trainer.py [--mode rl|train] [--runs 1,2,4,8,16] [--steps 5] [--prompts 4]
        [--group 4] [--completion 24] [--rank 8] [--model builtin:tiny] [--shared-threads 1]

For each N, N LoRA runs of one model make `steps` timed RL steps (after one warm-up step). In the default
`--mode rl` a step is what a run's loop does with the PyTorch engine: sample a group of `group` completions
of up to `completion` tokens for each of `prompts` fresh random 8-token prompts (temperature 0.8), then
train on them (the sampler's log-probs, advantages +-1 by an arbitrary reward: the fraction of even token
ids above or below the group's mean). `--mode train` times the update alone, on synthetic batches of the same
shape.

* (a) **packed**: each run its own process with its own copy of the base model, its own `PyTorchEngine`
  sampling and `LocalBackend.train_step` (today's `runs_per_gpu = N` on CPU), all N at the same time; each
  process uses one torch thread (N processes use up to N cores);
* (a') **seq**: the same N runs' engines and backends (N model copies) in one process (`--shared-threads`
  threads), stepped one after another: the per-core baseline;
* (b) **shared**: one process (`--shared-threads` torch threads), one base copy: `SharedTrainer.generate`
  over all N runs' prompts (one batched decode, each row under its own run's adapter) then
  `SharedTrainer.train_step` over all N runs' batches (one batched forward and backward).

It prints, per N and variant, the aggregate RL steps/s (all runs' steps over the wall time from the first
timed step to the last), the training tokens/s, the mean per-run step time (seconds between one of a run's
steps and its next), the CPU seconds one run-step costs (the variant's processes' CPU time over the timed
steps / its run-steps: what a loaded machine does not distort), the peak memory (RSS summed over the variant's processes, each one's own peak), for
(b) the share of its time spent sampling, and the ratios shared / packed and shared / seq.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import random
import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

PROMPT_TOKENS = 8
TEMPERATURE = 0.8


@dataclass(frozen=True)
class Shape:
    mode: str
    steps: int
    prompts: int
    group: int
    completion: int
    rank: int
    model: str
    cache: str
    device: str = "cpu"
    dtype: str = "auto"


def _synthetic_batch(seed: int, shape: Shape, vocab: int):
    """`--mode train`: random completions and sampler log-probs of the RL step's shape."""
    from retrain_ray.backends.types import TrainBatch

    rng = random.Random(seed)
    tokens, logprobs, advantages, lens = [], [], [], []
    for _ in range(shape.prompts):
        prompt = [rng.randrange(3, vocab) for _ in range(PROMPT_TOKENS)]
        for _ in range(shape.group):
            n = rng.randint(shape.completion // 2, shape.completion)
            adv = rng.uniform(-1.0, 1.0)
            tokens.append(prompt + [rng.randrange(3, vocab) for _ in range(n)])
            logprobs.append([0.0] * PROMPT_TOKENS + [-rng.uniform(0.5, 4.0) for _ in range(n)])
            advantages.append([0.0] * PROMPT_TOKENS + [adv] * n)
            lens.append(PROMPT_TOKENS)
    return TrainBatch(tokens, logprobs, advantages, lens, temperature=TEMPERATURE)


def _prompts(seed: int, shape: Shape, vocab: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(3, vocab) for _ in range(PROMPT_TOKENS)] for _ in range(shape.prompts)]


def _sampled_batch(prompts: list[list[int]], groups):
    """The RL step's batch: each completion with its sampler log-probs, advantage +1/-1 by whether its share
    of even token ids is above its group's mean (an arbitrary reward: the trainer's work does not read it)."""
    from retrain_ray.backends.types import TrainBatch

    tokens, logprobs, advantages, lens = [], [], [], []
    for prompt, group in zip(prompts, groups, strict=True):
        rewards = [sum(t % 2 == 0 for t in s.token_ids) / max(len(s.token_ids), 1) for s in group]
        mean = sum(rewards) / len(rewards)
        for sample, reward in zip(group, rewards, strict=True):
            tokens.append(prompt + list(sample.token_ids))
            logprobs.append([0.0] * len(prompt) + list(sample.logprobs))
            advantages.append([0.0] * len(prompt) + [1.0 if reward > mean else -1.0] * len(sample.token_ids))
            lens.append(len(prompt))
    return TrainBatch(tokens, logprobs, advantages, lens, temperature=TEMPERATURE)


def _params(shape: Shape):
    from retrain_ray.engines.types import SamplingParams

    return SamplingParams(max_tokens=shape.completion, temperature=TEMPERATURE)


def _settings(index: int, shape: Shape):
    from retrain_ray.backends.local import LoraSettings, PolicySettings

    return PolicySettings(lora=LoraSettings(rank=shape.rank), seed=index, dtype=shape.dtype)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


class SoloRun:
    """One run as it is today: its own model copy, sampled by its PyTorchEngine, trained by its LocalBackend."""

    def __init__(self, index: int, shape: Shape) -> None:
        from retrain_ray.backends.local import build_shared_policy

        self.index, self.shape = index, shape
        self.engine, self.backend, _ = build_shared_policy(shape.model, _settings(index, shape), device=shape.device,
                                                           cache_dir=Path(shape.cache))
        self.vocab = self.backend.model.config.vocab_size

    def step(self, k: int) -> int:
        """One RL step (or one update, `--mode train`); the training tokens it used."""
        seed = 1000 * self.index + k
        if self.shape.mode == "train":
            batch = _synthetic_batch(seed, self.shape, self.vocab)
        else:
            prompts = _prompts(seed, self.shape, self.vocab)
            batch = _sampled_batch(prompts, self.engine.generate(prompts, self.shape.group, _params(self.shape)))
        self.backend.train_step(batch, lr=1e-4, weight_decay=0.0)
        return batch.num_tokens


class SharedRuns:
    """N runs as members of one SharedTrainer: one batched decode, then one batched update, per step."""

    def __init__(self, runs: int, shape: Shape) -> None:
        from retrain_ray.models.lora import LoraSettings
        from retrain_ray.shared_trainer import SharedTrainer

        self.runs, self.shape = runs, shape
        self.trainer = SharedTrainer.load(shape.model, LoraSettings(rank=shape.rank), cache_dir=Path(shape.cache),
                                          device=shape.device, dtype=shape.dtype)
        self.vocab = self.trainer.model.config.vocab_size
        for i in range(runs):
            self.trainer.add_run(f"run{i}", _settings(i, shape))
        self.sample_s = 0.0

    def _batches(self, k: int) -> dict:
        from retrain_ray.shared_trainer import SampleRequest

        if self.shape.mode == "train":
            return {f"run{i}": _synthetic_batch(1000 * i + k, self.shape, self.vocab) for i in range(self.runs)}
        prompts = {f"run{i}": _prompts(1000 * i + k, self.shape, self.vocab) for i in range(self.runs)}
        started = time.perf_counter()
        samples = self.trainer.generate({r: SampleRequest(p, self.shape.group, _params(self.shape), seed=i)
                                         for i, (r, p) in enumerate(prompts.items())})
        self.sample_s += time.perf_counter() - started
        return {r: _sampled_batch(prompts[r], samples[r]) for r in prompts}

    def step(self, k: int) -> int:
        from retrain_ray.shared_trainer import StepRequest

        batches = self._batches(k)
        self.trainer.train_step({r: StepRequest(b, lr=1e-4) for r, b in batches.items()})
        return sum(b.num_tokens for b in batches.values())


def _packed_worker(index: int, shape: Shape, threads: int, barrier, out) -> None:
    import torch

    torch.set_num_threads(threads)
    run = SoloRun(index, shape)
    run.step(0)
    barrier.wait()
    started, cpu = time.time(), time.process_time()
    tokens = sum(run.step(k) for k in range(1, shape.steps + 1))
    out.put((started, time.time(), tokens, _peak_rss_mb(), 0.0, (time.process_time() - cpu) / shape.steps))


def _sequential_worker(runs: int, shape: Shape, threads: int, out) -> None:
    import torch

    torch.set_num_threads(threads)
    solos = [SoloRun(i, shape) for i in range(runs)]
    for run in solos:
        run.step(0)
    started, cpu = time.time(), time.process_time()
    tokens = sum(run.step(k) for k in range(1, shape.steps + 1) for run in solos)
    out.put((started, time.time(), tokens, _peak_rss_mb(), 0.0, (time.process_time() - cpu) / shape.steps / runs))


def _shared_worker(runs: int, shape: Shape, threads: int, out) -> None:
    import torch

    torch.set_num_threads(threads)
    shared = SharedRuns(runs, shape)
    shared.step(0)
    shared.sample_s = 0.0
    started, cpu = time.time(), time.process_time()
    tokens = sum(shared.step(k) for k in range(1, shape.steps + 1))
    ended = time.time()
    out.put((started, ended, tokens, _peak_rss_mb(), shared.sample_s / (ended - started),
             (time.process_time() - cpu) / shape.steps / runs))


@dataclass(frozen=True)
class Figures:
    steps_per_s: float
    tokens_per_s: float
    step_time_s: float
    peak_rss_mb: float
    sample_share: float
    cpu_per_step_s: float


def _figures(results: list[tuple[float, float, int, float, float, float]], runs: int, shape: Shape) -> Figures:
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    per_run = sum(r[1] - r[0] for r in results) / len(results) / shape.steps
    return Figures(runs * shape.steps / wall, sum(r[2] for r in results) / wall, per_run,
                   sum(r[3] for r in results), results[0][4], sum(r[5] for r in results) / len(results))


def packed(runs: int, shape: Shape) -> Figures:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(runs), ctx.Queue()
    procs = [ctx.Process(target=_packed_worker, args=(i, shape, 1, barrier, out)) for i in range(runs)]
    for p in procs:
        p.start()
    results = [out.get(timeout=1800) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return _figures(results, runs, shape)


def one_process(worker, runs: int, shape: Shape, threads: int) -> Figures:
    """The figures of `worker` (the sequential or the shared variant) run in a process of its own."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=worker, args=(runs, shape, threads, out))
    proc.start()
    result = out.get(timeout=1800)
    proc.join(timeout=60)
    return _figures([result], runs, shape)  # every run's step takes the whole round of N steps


def device_figures(shape: Shape, runs: int) -> dict[str, object]:
    """`make gpu-check`'s shared-trainer part (gpu_check.py): on `shape.device`, `runs` runs taking turns on
    one model copy each (one run's own engine and backend stepped `runs` times: what packed processes do on
    one GPU, without their N CUDA contexts) against the shared trainer's RL step for all of them; steps/s,
    step times and peak device memory (CUDA) or RSS (CPU)."""
    import torch

    def synced() -> float:
        if shape.device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter()

    def peak_mb() -> float:
        return torch.cuda.max_memory_allocated() / 2**20 if shape.device == "cuda" else _peak_rss_mb()

    solo = SoloRun(0, shape)
    solo.step(0)
    started = synced()
    for k in range(1, shape.steps * runs + 1):
        solo.step(k)
    turns_s = (synced() - started) / shape.steps
    solo_peak = peak_mb()
    del solo
    if shape.device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    shared = SharedRuns(runs, shape)
    shared.step(0)
    shared.sample_s = 0.0
    started = synced()
    for k in range(1, shape.steps + 1):
        shared.step(k)
    shared_s = (synced() - started) / shape.steps
    return {"model": shape.model, "device": shape.device, "runs": runs, "rows_per_run": shape.prompts * shape.group,
            "max_tokens": shape.completion, "turns_steps_per_s": round(runs / turns_s, 3),
            "shared_steps_per_s": round(runs / shared_s, 3), "shared_vs_turns": round(turns_s / shared_s, 2),
            "shared_sampling_share": round(shared.sample_s / shape.steps / shared_s, 3),
            "one_run_peak_mb": round(solo_peak), "shared_peak_mb": round(peak_mb())}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("rl", "train"), default="rl",
                        help="rl: sample then train (default); train: the update alone on synthetic batches")
    parser.add_argument("--runs", default="1,2,4,8,16")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--completion", type=int, default=24)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--model", default="builtin:tiny")
    parser.add_argument("--no-seq", action="store_true", help="leave out the sequential variant (a')")
    parser.add_argument("--shared-threads", type=int, default=1,
                        help="torch threads of the shared and seq processes (default 1: on a loaded machine a "
                             "second OpenMP thread that is descheduled stalls every op; each packed process has one)")
    parser.add_argument("--device-check", metavar="DEVICE", default="",
                        help="gpu_check.py's part: print one JSON line of device_figures on DEVICE (cuda or cpu)")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args(argv)
    from retrain_ray.models import resolve_model_path

    cache = tempfile.mkdtemp(prefix="shared-trainer-bench-")
    resolve_model_path(args.model, cache)
    shape = Shape(args.mode, args.steps, args.prompts, args.group, args.completion, args.rank, args.model, cache,
                  args.device_check or "cpu", args.dtype)
    if args.device_check:
        import json

        print(json.dumps(device_figures(shape, int(args.runs.split(",")[-1]))))
        return 0
    what = "sample + train" if args.mode == "rl" else "train only"
    print(f"mode {args.mode} ({what}), model {args.model}, rank {args.rank}, {args.prompts}x{args.group} rows of <= "
          f"{PROMPT_TOKENS + args.completion} tokens per run-step, {args.steps} timed steps, {os.cpu_count()} cores; "
          f"shared process {args.shared_threads} thread(s), packed processes one thread each; load {_load()}")
    print(f"{'N':>3} {'variant':>7} {'steps/s':>8} {'tokens/s':>9} {'run step s':>10} {'CPU s/step':>10} "
          f"{'peak RSS MB':>11} {'sampling':>8} {'load':>14}")
    for runs in (int(n) for n in args.runs.split(",")):
        a = packed(runs, shape)
        variants = [("packed", a, _load())]
        if not args.no_seq:
            variants.append(("seq", one_process(_sequential_worker, runs, shape, args.shared_threads), _load()))
        b = one_process(_shared_worker, runs, shape, args.shared_threads)
        variants.append(("shared", b, _load()))
        for name, f, load in variants:
            share = f"{f.sample_share:7.0%}" if name == "shared" and args.mode == "rl" else "       -"
            print(f"{runs:>3} {name:>7} {f.steps_per_s:8.2f} {f.tokens_per_s:9.0f} {f.step_time_s:10.3f} "
                  f"{f.cpu_per_step_s:10.3f} {f.peak_rss_mb:11.0f} {share:>8} {load:>14}")
        seq = dict((n, f) for n, f, _ in variants).get("seq")
        versus_seq = (f"; shared/seq: steps/s x{b.steps_per_s / seq.steps_per_s:.2f}, peak RSS "
                      f"x{b.peak_rss_mb / seq.peak_rss_mb:.2f}") if seq else ""
        print(f"{runs:>3}   shared/packed: steps/s x{b.steps_per_s / a.steps_per_s:.2f}, tokens/s "
              f"x{b.tokens_per_s / a.tokens_per_s:.2f}, peak RSS x{b.peak_rss_mb / a.peak_rss_mb:.2f}, CPU per "
              f"run-step x{b.cpu_per_step_s / a.cpu_per_step_s:.2f}{versus_seq}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
