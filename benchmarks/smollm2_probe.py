"""Probe: the base model's greedy held-out accuracy on the smollm2 recipe's task, before any training.

The "before" figure of configs/smollm2-campaign.toml (docs/benchmarks.md, "Learning"): the same eval split
(`addition` level 1, 32 held-out prompts of the seed's split), the same chat template, greedy sampling of up
to `--max-tokens` and the `final_number` reward, through the product's own engine. Also prints how often the
answer hit the token limit and the sampling time (state the load average with it).

Run: `.venv/bin/python benchmarks/smollm2_probe.py [--seed 1] [--max-tokens 32] [--show 4]`; needs `make smollm2`.
"""

from __future__ import annotations

import argparse
import os
import time

from retrain_ray.backends.local import LoraSettings, PolicySettings, build_shared_policy
from retrain_ray.data import load_task
from retrain_ray.engines import SamplingParams
from retrain_ray.models import encode_prompt
from retrain_ray.rewards.final_number import FinalNumberReward


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2:135m")
    parser.add_argument("--seed", type=int, default=1, help="the run seed whose eval split is probed")
    parser.add_argument("--level", type=int, default=1)
    parser.add_argument("--eval-examples", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--show", type=int, default=4, help="print this many answers")
    args = parser.parse_args()
    examples = load_task("addition", level=args.level, seed=args.seed, num_train=512,
                         num_eval=args.eval_examples).eval
    settings = PolicySettings(finetune="lora", lora=LoraSettings(rank=8), dtype="auto")
    engine, _, tokenizer = build_shared_policy(args.model, settings, device="cpu")
    started = time.perf_counter()
    groups = engine.generate([encode_prompt(tokenizer, e.prompt) for e in examples], 1,
                             SamplingParams(max_tokens=args.max_tokens, temperature=0.0, top_p=1.0))
    seconds = time.perf_counter() - started
    texts = [tokenizer.decode(list(g[0].token_ids), skip_special_tokens=True) for g in groups]
    scores = FinalNumberReward().score_batch(texts, [e.reference for e in examples])
    hit_limit = sum(g[0].finish_reason == "length" for g in groups) / len(groups)
    for example, text in list(zip(examples, texts, strict=True))[: args.show]:
        print(f"{example.prompt!r} -> {text!r} (reference {example.reference})")
    print(f"held-out greedy accuracy {sum(scores) / len(scores):.3f} ({int(sum(scores))}/{len(scores)}); "
          f"hit the {args.max_tokens}-token limit {hit_limit:.2f}; sampling {seconds:.1f} s; "
          f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
