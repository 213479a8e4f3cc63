"""Benchmark: batched KV-cache sampling vs naive sampling, and training tokens/s, in the same run.

Smoke settings: the built-in tiny model, 4 prompts x 8 samples, max_tokens 8 and 32 (EOS disabled so
every row runs to max_tokens and both engines generate the same number of tokens). Baseline: the
naive engine, one sequence at a time with a full forward per token and no KV cache (what a simple
sampler does). Training: one optimizer step (LoRA rank 8, and full fine-tuning) over the sampled batch.
Each figure is the median of `--repeats` timed runs after one warm-up. Single thread, CPU unless CUDA.

Run: `.venv/bin/python benchmarks/step_throughput.py [--json] [--repeats 3]`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable

import torch

from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy
from retrain_ray.backends.types import TrainBatch
from retrain_ray.engines import NaiveEngine, SamplingParams
from retrain_ray.models import encode_prompt

PROMPTS = ["123", "4567", "89", "The answer is"]
SAMPLES = 8
MAX_TOKENS = (8, 32)


def _median_time(fn: Callable[[], object], repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _no_eos(model: torch.nn.Module, eos_id: int):
    """Forward hook that makes EOS impossible, so every row generates exactly max_tokens."""
    def hook(_module, _inputs, output):
        output[..., eos_id] = -1e4
        return output
    return model.get_output_embeddings().register_forward_hook(hook)


def _batch_from(groups, prompts, temperature: float) -> TrainBatch:
    tokens, logprobs, advs, lens = [], [], [], []
    for i, (prompt, group) in enumerate(zip(prompts, groups, strict=True)):
        for j, r in enumerate(group):
            a = 1.0 if (i + j) % 2 else -1.0
            tokens.append(prompt + list(r.token_ids))
            logprobs.append([0.0] * len(prompt) + list(r.logprobs))
            advs.append([0.0] * len(prompt) + [a] * len(r.token_ids))
            lens.append(len(prompt))
    return TrainBatch(tokens, logprobs, advs, lens, temperature=temperature)


def sampling_rows(cache: str, device: str, repeats: int) -> list[dict]:
    engine, _, tok = build_shared_policy("builtin:tiny", PolicySettings(finetune="full"), device=device, cache_dir=cache)
    naive = NaiveEngine(engine.model, eos_token_id=tok.eos_token_id)
    prompts = [encode_prompt(tok, p) for p in PROMPTS]
    rows = []
    handle = _no_eos(engine.model, tok.eos_token_id)
    try:
        for max_tokens in MAX_TOKENS:
            params = SamplingParams(max_tokens=max_tokens, temperature=1.0)
            n_tokens = len(prompts) * SAMPLES * max_tokens
            batched_s = _median_time(lambda p=params: engine.generate(prompts, SAMPLES, p), repeats)
            naive_s = _median_time(lambda p=params: naive.generate(prompts, SAMPLES, p), repeats)
            rows.append({"what": f"sample {len(prompts)}x{SAMPLES}, {max_tokens} tok", "tokens": n_tokens,
                         "batched_tok_s": n_tokens / batched_s, "naive_tok_s": n_tokens / naive_s,
                         "ratio": naive_s / batched_s})
    finally:
        handle.remove()
    return rows


def training_rows(cache: str, device: str, repeats: int) -> list[dict]:
    rows = []
    for finetune in ("lora", "full"):
        settings = PolicySettings(finetune=finetune, lora=LoraSettings(rank=8, alpha=64), top_p=1.0)
        engine, backend, tok = build_shared_policy("builtin:tiny", settings, device=device, cache_dir=cache)
        prompts = [encode_prompt(tok, p) for p in PROMPTS]
        for max_tokens in MAX_TOKENS:
            groups = engine.generate(prompts, SAMPLES, SamplingParams(max_tokens=max_tokens, temperature=1.0))
            batch = _batch_from(groups, prompts, 1.0)
            step_s = _median_time(lambda b=batch, be=backend: be.train_step(b, lr=1e-5, weight_decay=0.0), repeats)
            rows.append({"what": f"train step {finetune}, {max_tokens} tok", "tokens": batch.num_tokens,
                         "train_tok_s": batch.num_tokens / step_s, "step_ms": 1000 * step_s})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with tempfile.TemporaryDirectory() as cache:
        sample, train = sampling_rows(cache, device, args.repeats), training_rows(cache, device, args.repeats)
    if args.json:
        print(json.dumps({"device": device, "sampling": sample, "training": train}, indent=2))
        return
    print(f"device: {device}, threads: 1, median of {args.repeats}")
    print(f"{'setting':<32}{'tokens':>8}{'batched tok/s':>16}{'naive tok/s':>14}{'batched/naive':>15}")
    for r in sample:
        print(f"{r['what']:<32}{r['tokens']:>8}{r['batched_tok_s']:>16.0f}{r['naive_tok_s']:>14.0f}{r['ratio']:>14.1f}x")
    print(f"{'setting':<32}{'tokens':>8}{'train tok/s':>16}{'step ms':>14}")
    for r in train:
        print(f"{r['what']:<32}{r['tokens']:>8}{r['train_tok_s']:>16.0f}{r['step_ms']:>14.1f}")


if __name__ == "__main__":
    main()
