"""The shared multi-LoRA trainer against packed runs, one process each (issue 36).

    python benchmarks/shared_trainer.py [--runs 1,2,4,8] [--steps 5] [--prompts 4] [--group 4]
                                        [--completion 24] [--rank 8] [--model builtin:tiny]

For each N, N LoRA runs of one model train `steps` timed RL updates (after one warm-up update) on their
own synthetic batches (`prompts x group` rows of a short prompt and `completion` sampled tokens, random
advantages and sampler log-probs; the trainer's work does not depend on where they came from):

* (a) **packed**: each run its own process with its own copy of the base model and its own
  `LocalBackend.train_step` (today's `runs_per_gpu = N` on CPU), all N at the same time; each process
  uses one torch thread (N processes use up to N cores);
* (a') **seq**: the same N runs' `LocalBackend`s (N model copies) in one process (`--shared-threads`
  threads), stepped one after another: the per-core baseline;
* (b) **shared**: one process (`--shared-threads` torch threads, default 1: one core), one base copy, `SharedTrainer.train_step` over all N runs' requests: one
  batched forward and backward, each row under its own run's adapter.

It prints, per N and variant, the aggregate RL steps/s (all runs' updates over the wall time from the
first timed update to the last), the training tokens/s, the mean per-run step time (seconds between one
of a run's updates and its next), the peak memory (RSS summed over the variant's processes, each one's
own peak), and the ratios shared / packed and shared / seq. Only training is timed: no sampling.
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


@dataclass(frozen=True)
class Shape:
    steps: int
    prompts: int
    group: int
    completion: int
    rank: int
    model: str
    cache: str


def _batch(seed: int, shape: Shape, vocab: int):
    from retrain_ray.backends.types import TrainBatch

    rng = random.Random(seed)
    tokens, logprobs, advantages, lens = [], [], [], []
    for _ in range(shape.prompts):
        prompt = [rng.randrange(3, vocab) for _ in range(8)]
        for _ in range(shape.group):
            n = rng.randint(shape.completion // 2, shape.completion)
            adv = rng.uniform(-1.0, 1.0)
            tokens.append(prompt + [rng.randrange(3, vocab) for _ in range(n)])
            logprobs.append([0.0] * 8 + [-rng.uniform(0.5, 4.0) for _ in range(n)])
            advantages.append([0.0] * 8 + [adv] * n)
            lens.append(8)
    return TrainBatch(tokens, logprobs, advantages, lens, temperature=0.8)


def _settings(index: int, shape: Shape):
    from retrain_ray.backends.local import LoraSettings, PolicySettings

    return PolicySettings(lora=LoraSettings(rank=shape.rank), seed=index)


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _packed_worker(index: int, shape: Shape, threads: int, barrier, out) -> None:
    import torch

    torch.set_num_threads(threads)
    from retrain_ray.backends.local import build_shared_policy

    backend = build_shared_policy(shape.model, _settings(index, shape), device="cpu", cache_dir=Path(shape.cache))[1]
    vocab = backend.model.config.vocab_size
    batches = [_batch(1000 * index + k, shape, vocab) for k in range(shape.steps + 1)]
    backend.train_step(batches[0], lr=1e-4, weight_decay=0.0)
    barrier.wait()
    started = time.time()
    for batch in batches[1:]:
        backend.train_step(batch, lr=1e-4, weight_decay=0.0)
    out.put((started, time.time(), sum(b.num_tokens for b in batches[1:]), _peak_rss_mb()))


def _sequential_worker(runs: int, shape: Shape, threads: int, out) -> None:
    import torch

    torch.set_num_threads(threads)
    from retrain_ray.backends.local import build_shared_policy

    backends = [build_shared_policy(shape.model, _settings(i, shape), device="cpu", cache_dir=Path(shape.cache))[1]
                for i in range(runs)]
    vocab = backends[0].model.config.vocab_size
    batches = [[_batch(1000 * i + k, shape, vocab) for i in range(runs)] for k in range(shape.steps + 1)]
    for backend, batch in zip(backends, batches[0], strict=True):
        backend.train_step(batch, lr=1e-4, weight_decay=0.0)
    started = time.time()
    for step in batches[1:]:
        for backend, batch in zip(backends, step, strict=True):
            backend.train_step(batch, lr=1e-4, weight_decay=0.0)
    out.put((started, time.time(), sum(b.num_tokens for step in batches[1:] for b in step), _peak_rss_mb()))


def _shared_worker(runs: int, shape: Shape, threads: int, out) -> None:
    import torch

    torch.set_num_threads(threads)
    from retrain_ray.models.lora import LoraSettings
    from retrain_ray.shared_trainer import SharedTrainer, StepRequest

    trainer = SharedTrainer.load(shape.model, LoraSettings(rank=shape.rank), cache_dir=Path(shape.cache))
    vocab = trainer.model.config.vocab_size
    for i in range(runs):
        trainer.add_run(f"run{i}", _settings(i, shape))
    steps = [{f"run{i}": StepRequest(_batch(1000 * i + k, shape, vocab), lr=1e-4) for i in range(runs)}
             for k in range(shape.steps + 1)]
    trainer.train_step(steps[0])
    started = time.time()
    for requests in steps[1:]:
        trainer.train_step(requests)
    tokens = sum(r.batch.num_tokens for requests in steps[1:] for r in requests.values())
    out.put((started, time.time(), tokens, _peak_rss_mb()))


@dataclass(frozen=True)
class Figures:
    steps_per_s: float
    tokens_per_s: float
    step_time_s: float
    peak_rss_mb: float


def _figures(results: list[tuple[float, float, int, float]], runs: int, shape: Shape) -> Figures:
    wall = max(r[1] for r in results) - min(r[0] for r in results)
    per_run = sum(r[1] - r[0] for r in results) / len(results) / shape.steps
    return Figures(runs * shape.steps / wall, sum(r[2] for r in results) / wall, per_run,
                   sum(r[3] for r in results))


def packed(runs: int, shape: Shape) -> Figures:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(runs), ctx.Queue()
    threads = 1
    procs = [ctx.Process(target=_packed_worker, args=(i, shape, threads, barrier, out)) for i in range(runs)]
    for p in procs:
        p.start()
    results = [out.get(timeout=900) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    return _figures(results, runs, shape)


def one_process(worker, runs: int, shape: Shape, threads: int) -> Figures:
    """The figures of `worker` (the sequential or the shared variant) run in a process of its own."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=worker, args=(runs, shape, threads, out))
    proc.start()
    result = out.get(timeout=900)
    proc.join(timeout=60)
    return _figures([result], runs, shape)  # every run's update takes the whole round of N updates


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="1,2,4,8")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--completion", type=int, default=24)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--model", default="builtin:tiny")
    parser.add_argument("--shared-threads", type=int, default=1,
                        help="torch threads of the shared process (default 1: on a loaded machine a second "
                             "OpenMP thread that is descheduled stalls every op; each packed process has one)")
    args = parser.parse_args(argv)
    from retrain_ray.models import resolve_model_path

    cache = tempfile.mkdtemp(prefix="shared-trainer-bench-")
    resolve_model_path(args.model, cache)
    shape = Shape(args.steps, args.prompts, args.group, args.completion, args.rank, args.model, cache)
    print(f"model {args.model}, rank {args.rank}, {args.prompts}x{args.group} rows of <= {8 + args.completion} "
          f"tokens per run-step, {args.steps} timed steps, {os.cpu_count()} cores; shared process "
          f"{args.shared_threads} thread(s), packed processes one thread each")
    print(f"{'N':>3} {'variant':>7} {'steps/s':>8} {'tokens/s':>9} {'run step s':>10} {'peak RSS MB':>11}")
    for runs in (int(n) for n in args.runs.split(",")):
        a = packed(runs, shape)
        a1 = one_process(_sequential_worker, runs, shape, args.shared_threads)
        b = one_process(_shared_worker, runs, shape, args.shared_threads)
        for name, f in (("packed", a), ("seq", a1), ("shared", b)):
            print(f"{runs:>3} {name:>7} {f.steps_per_s:8.2f} {f.tokens_per_s:9.0f} {f.step_time_s:10.3f} {f.peak_rss_mb:11.0f}")
        print(f"{runs:>3}   shared/packed: steps/s x{b.steps_per_s / a.steps_per_s:.2f}, tokens/s "
              f"x{b.tokens_per_s / a.tokens_per_s:.2f}, peak RSS x{b.peak_rss_mb / a.peak_rss_mb:.2f}; shared/seq: "
              f"steps/s x{b.steps_per_s / a1.steps_per_s:.2f}, peak RSS x{b.peak_rss_mb / a1.peak_rss_mb:.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
