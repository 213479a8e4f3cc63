"""Benchmark: batched KV-cache sampling vs naive sampling, and training tokens/s, in the same run.

Smoke settings: the built-in tiny model, 4 prompts x 8 samples, max_tokens 8 and 32 (EOS disabled so
every row runs to max_tokens and both engines generate the same number of tokens). Baseline: the
naive engine, one sequence at a time with a full forward per token and no KV cache (what a simple
sampler does). Training: one optimizer step (LoRA rank 8, and full fine-tuning) over the sampled batch.
Each figure is the median of `--repeats` timed runs after one warm-up. Single thread, CPU unless CUDA.

Run: `.venv/bin/python benchmarks/step_throughput.py [--json] [--repeats 3]`.

`--smollm2`: first issue 35's measurement as a user sees it (benchmarks/smollm2_train.py: a 5-step `retrain-ray
train` in a fresh process, process and per-step CPU seconds) printed against the figures docs/benchmarks.md
records, with the ratio and a flag on a CPU figure over 1.25x (`--smollm2-train-only` stops there); then
SmolLM2-135M-Instruct's RL step and time to first step (issue 35's 5-step TOML shape: 2 prompts x
4 samples, 32 tokens, LoRA r8), each path in a fresh process: transformers' Llama + PEFT (the baseline,
`model_impl = "transformers"`) against the lean Llama + lean LoRA (the default), both against the
previous product's figures from issue 35; wall and CPU seconds, as this machine is often loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from retrain_ray.backends.local import LocalBackend, LoraSettings, PolicySettings, build_shared_policy
from retrain_ray.backends.types import Policy, TrainBatch
from retrain_ray.engines import NaiveEngine, SamplingParams
from retrain_ray.engines.pytorch.engine import PyTorchEngine
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
    return model.lm_head.register_forward_hook(hook)  # the lean Llama has no get_output_embeddings()


def batch_from(groups, prompts, temperature: float) -> TrainBatch:
    """A train batch of the sampled groups with advantages alternating +1/-1 (also used by gpu_check.py)."""
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
            batch = batch_from(groups, prompts, 1.0)
            step_s = _median_time(lambda b=batch, be=backend: be.train_step(b, lr=1e-5, weight_decay=0.0), repeats)
            rows.append({"what": f"train step {finetune}, {max_tokens} tok", "tokens": batch.num_tokens,
                         "train_tok_s": batch.num_tokens / step_s, "step_ms": 1000 * step_s})
    return rows

# ---- one full RL step of issue 13's configuration --------------------------------------------------
# A 0.3 M-parameter Llama (builtin:tiny), LoRA rank 8, 4 prompts x 8 samples, 4 tokens, one thread:
# RunLoop.rl_step (sync, sample, decode + score, credit, update) against the same step built from the
# classes below, which undo this package's step optimisations (issue 13): decoding under no_grad and a
# full module-tree walk for every train()/eval() switch, on transformers' Llama with PEFT's LoRA
# (activation checkpointing and the model, lean or transformers', are set per variant).
ISSUE_STEP_TOML = """
[model]
model = "builtin:tiny"
finetune = "{finetune}"
lora_rank = 8
[backend]
devices = "cpu"
[backend.options]
gradient_checkpointing = {checkpointing}
[data]
source = "builtin"
task = "first_digit"
[training]
seed = 1
max_steps = 100000
batch_size = 4
group_size = 8
max_tokens = 4
lr = 1e-3
[logging]
log_dir = "{log_dir}"
"""


class LegacyEngine(PyTorchEngine):
    """The sampler as it was before issue 13's step work (same sampled tokens and log-probs)."""

    def generate(self, prompt_ids_P, num_samples, params):
        rows_N = [list(p) for p in prompt_ids_P for _ in range(num_samples)]
        was_training = self.model.training
        self.model.eval()
        try:
            flat = self._legacy_decode(rows_N, params)
        finally:
            self.model.train(was_training)
        return [flat[i * num_samples:(i + 1) * num_samples] for i in range(len(prompt_ids_P))]

    _legacy_decode = torch.no_grad()(PyTorchEngine._decode.__wrapped__)


class LegacyBackend(LocalBackend):
    """The trainer as it was before issue 13's step work (same update): torch's AdamW (whose first call
    imports torch._dynamo) where the current trainer has PlainAdamW on CPU."""

    def __init__(self, model: torch.nn.Module, **kwargs) -> None:
        super().__init__(model, **kwargs)
        self.optimizer = torch.optim.AdamW(self._params, lr=0.0, betas=(self.optim.beta1, self.optim.beta2),
                                           eps=self.optim.eps, weight_decay=0.0)

    def _begin_update(self) -> None:
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)


class ParityReward:
    """Reward 1 for completions whose characters sum to an odd code point, else 0: nearly every group
    of 8 carries signal, so every step trains (the first-digit reward of an untrained model is 0 for
    all, and a step without signal trains nothing). Costs microseconds."""

    name = "parity"

    def score(self, completion: str, reference: str) -> float:
        return float(sum(map(ord, completion)) % 2)

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        return [self.score(c, r) for c, r in zip(completions, references, strict=True)]


def issue_step_loop(workdir: Path, *, legacy: bool, checkpointing: bool | str = "auto", finetune: str = "lora",
                    transformers_model: bool = False):
    """(RunLoop, TrainerState) of issue 13's configuration; `legacy` builds it from the classes above;
    `transformers_model` trains transformers' LlamaForCausalLM (with PEFT for LoRA) where the built-in model
    gets the lean torch-only Llama (with the lean LoRA); the LoRA init is seeded as `load_trainable_model`
    seeds it, so both start from the same adapter."""
    from retrain_ray.backends.local.policy import (
        checkpointing_on,
        enable_activation_checkpointing,
        load_trainable_model,
        settings_from_config,
    )
    from retrain_ray.config import load_config
    from retrain_ray.engines.pytorch.engine import eos_ids
    from retrain_ray.logs import MultiObserver
    from retrain_ray.models.lean_lora import prepare_trainable
    from retrain_ray.models.loading import load_model_and_tokenizer
    from retrain_ray.run.build import build_components
    from retrain_ray.run.loop import RunLoop
    from retrain_ray.run.state import TrainerState, seed_everything

    path = workdir / "step.toml"
    path.write_text(ISSUE_STEP_TOML.format(checkpointing=json.dumps(checkpointing), log_dir=workdir / "logs",
                                           finetune=finetune))
    cfg = load_config(path)
    seed_everything(cfg.training.seed)
    settings = settings_from_config(cfg)
    if transformers_model:
        model, tok = load_model_and_tokenizer(cfg.model.model, cache_dir=workdir / "models")
        if checkpointing_on(settings.gradient_checkpointing, "cpu"):
            enable_activation_checkpointing(model, use_reentrant=settings.use_reentrant)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(settings.seed)
            model = prepare_trainable(model, settings.finetune, settings.lora)
    else:
        model, tok = load_trainable_model(cfg.model.model, settings, device="cpu", cache_dir=workdir / "models")
    engine_cls, backend_cls = (LegacyEngine, LegacyBackend) if legacy else (PyTorchEngine, LocalBackend)
    backend = backend_cls(model, shares_model_with_engine=True, **settings.backend_kwargs())
    engine = engine_cls(model, eos_token_id=eos_ids(model, tok), pad_token_id=tok.pad_token_id,
                        seed=settings.seed, shares_model_with_trainer=True)
    parts = build_components(cfg, MultiObserver(), policy=Policy(engine, backend, tok))
    parts.reward = ParityReward()
    loop = RunLoop(cfg, parts, run_name="step", run_dir=workdir / "run", condition="bench")
    return loop, TrainerState(current_batch_size=cfg.training.batch_size, current_group_size=cfg.training.group_size)


STEP_VARIANTS = {  # name -> (legacy classes, gradient checkpointing, finetune, transformers' model)
    "full fine-tune, lean Llama (its default)": (False, False, "full", False),
    "full fine-tune, transformers' Llama": (False, False, "full", True),
    "LoRA, lean Llama + lean LoRA (its default)": (False, False, "lora", False),
    "LoRA, transformers' Llama + PEFT": (False, False, "lora", True),
    "LoRA, transformers + PEFT, checkpointing on": (False, True, "lora", True),
    "previous step (PEFT, checkpointing on)": (True, True, "lora", True),
}


def step_once(loop, state, step: int) -> dict:
    """One RL step of `loop`, applied to `state` as `RunLoop.run` does; its row (`trained`: an update)."""
    started = time.perf_counter()
    result = loop.rl_step(step, state)
    loop.apply(state, step, result, elapsed_s=time.perf_counter() - started)
    return result.row


def rl_step_rows(steps: int, blocks: int) -> list[dict]:
    """Median wall and CPU seconds of one RL step per variant, in alternating blocks of `steps` steps
    (block 0 warms up), so load changes hit every variant alike; ratios are against the previous step."""
    with tempfile.TemporaryDirectory() as tmp:
        loops = {}
        for n, (name, (legacy, checkpointing, finetune, hf)) in enumerate(STEP_VARIANTS.items()):
            (Path(tmp) / str(n)).mkdir()
            loops[name] = issue_step_loop(Path(tmp) / str(n), legacy=legacy, checkpointing=checkpointing,
                                          finetune=finetune, transformers_model=hf)
        wall: dict[str, list[float]] = {name: [] for name in loops}
        cpu: dict[str, list[float]] = {name: [] for name in loops}
        for block in range(blocks + 1):
            for name, (loop, state) in loops.items():
                for i in range(steps):
                    w, c = time.perf_counter(), time.process_time()
                    step_once(loop, state, block * steps + i)
                    if block:
                        wall[name].append(time.perf_counter() - w)
                        cpu[name].append(time.process_time() - c)
    base = list(STEP_VARIANTS)[-1]
    base_wall, base_cpu = statistics.median(wall[base]), statistics.median(cpu[base])
    return [{"what": name, "steps": len(wall[name]), "wall_s": statistics.median(wall[name]),
             "cpu_s": statistics.median(cpu[name]), "speedup_wall": base_wall / statistics.median(wall[name]),
             "speedup_cpu": base_cpu / statistics.median(cpu[name])} for name in loops]

# ---- SmolLM2: the real-model step and time to first step, transformers path against lean path ------
# Issue 35: the same 5-step SmolLM2 TOML (2 prompts x 4 samples, 32 new tokens, LoRA rank 8) took
# 35.5-40.8 s in the product's process against 18.3-20.6 s a week before (time to first step 11-13 s vs
# 7.2 s, median step 6.0-7.2 s). Each path runs in a fresh process (imports and loading count) that builds
# the run as `retrain-ray train` does, with the parity reward so every step trains.
SMOLLM2_TOML = """
[model]
model = "smollm2:135m"
finetune = "lora"
lora_rank = 8
[backend]
devices = "cpu"
[backend.options]
model_impl = "{impl}"
[data]
source = "builtin"
task = "first_digit"
[training]
seed = 1
max_steps = 100000
batch_size = 2
group_size = 4
max_tokens = 32
temperature = 1.0
lr = 1e-4
[logging]
log_dir = "{log_dir}"
"""
PREVIOUS_SMOLLM2 = {"time_to_first_step_s": 7.2, "median_step_s": (6.0 + 7.2) / 2}
"""issue 35's figures: a week-old product on the same TOML (the median step is the middle of the range
reported for today's; the week-old median step was not reported)."""


def smollm2_child(impl: str, steps: int, workdir: Path, started: float) -> dict:
    """In a fresh process: seconds from its start (`started`, the parent's clock as it spawned it) to the end of
    the first step, then each step."""
    from retrain_ray.backends.local.policy import build_shared_policy, settings_from_config
    from retrain_ray.config import load_config
    from retrain_ray.logs import MultiObserver
    from retrain_ray.run.build import build_components
    from retrain_ray.run.loop import RunLoop
    from retrain_ray.run.state import TrainerState, seed_everything

    path = workdir / "smollm2.toml"
    path.write_text(SMOLLM2_TOML.format(impl=impl, log_dir=workdir / "logs"))
    cfg = load_config(path)
    seed_everything(cfg.training.seed)
    engine, backend, tok = build_shared_policy(cfg.model.model, settings_from_config(cfg), device="cpu")
    parts = build_components(cfg, MultiObserver(), policy=Policy(engine, backend, tok))
    parts.reward = ParityReward()
    loop = RunLoop(cfg, parts, run_name="smollm2", run_dir=workdir / "run", condition="bench")
    state = TrainerState(current_batch_size=cfg.training.batch_size, current_group_size=cfg.training.group_size)
    wall, cpu, trained = [], [], 0
    for step in range(steps):
        w, c = time.perf_counter(), time.process_time()
        row = step_once(loop, state, step)
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
        trained += bool(row.get("trained", True))
        if step == 0:
            first = {"time_to_first_step_s": time.time() - started, "cpu_to_first_step_s": time.process_time()}
    prompt = encode_prompt(tok, "2 + 3")
    return {"impl": impl, "model_class": type(engine.model).__name__, "tokenizer_class": type(tok).__name__,
            "chat_template_prompt": tok.decode(prompt), **first, "step_wall_s": wall[1:], "step_cpu_s": cpu[1:],
            "steps_trained": trained, "transformers_imported": "transformers" in sys.modules,
            "peft_imported": "peft" in sys.modules}


def smollm2_rows(steps: int) -> list[dict]:
    """Both paths, each in its own process (transformers first, the baseline), median over steps 2+."""
    rows = []
    for impl in ("transformers", "auto"):
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, __file__, "--smollm2-child", impl, "--smollm2-steps", str(steps),
                       "--workdir", tmp, "--started", repr(time.time())]
            out = subprocess.run(command, capture_output=True, text=True, check=True, timeout=3600).stdout
        row = json.loads(out.strip().splitlines()[-1])
        row["median_step_wall_s"] = statistics.median(row["step_wall_s"])
        row["median_step_cpu_s"] = statistics.median(row["step_cpu_s"])
        rows.append(row)
    return rows


def print_smollm2(rows: list[dict]) -> None:
    base = rows[0]
    print(f"SmolLM2-135M-Instruct, LoRA r8, 2 prompts x 4 samples x 32 tokens, one thread; previous product "
          f"(issue 35): time to first step {PREVIOUS_SMOLLM2['time_to_first_step_s']} s, step 6.0-7.2 s")
    print(f"{'path':<34}{'first step s':>13}{'cpu s':>8}{'step s':>9}{'cpu s':>8}{'x step':>8}{'x first':>8}")
    for r in rows:
        name = f"{r['impl']}: {r['model_class']}"
        print(f"{name:<34}{r['time_to_first_step_s']:>13.2f}{r['cpu_to_first_step_s']:>8.2f}"
              f"{r['median_step_wall_s']:>9.2f}{r['median_step_cpu_s']:>8.2f}"
              f"{base['median_step_wall_s'] / r['median_step_wall_s']:>7.2f}x"
              f"{base['time_to_first_step_s'] / r['time_to_first_step_s']:>7.2f}x")
    for r in rows:
        print(f"  {r['impl']}: tokenizer {r['tokenizer_class']}, transformers imported {r['transformers_imported']}, "
              f"peft imported {r['peft_imported']}, steps trained {r['steps_trained']}")


def smollm2_train_module():
    """benchmarks/smollm2_train.py, loaded by path (this file is also loaded by path, by the tests)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("smollm2_train", Path(__file__).with_name("smollm2_train.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def smollm2_train_report() -> dict:
    """Issue 35's measurement as a user sees it: a 5-step `retrain-ray train` of SmolLM2 in a fresh process;
    printed against the figures docs/benchmarks.md records, with the ratio (the check that would have caught
    a slower product)."""
    bench = smollm2_train_module()
    result = bench.run_once(bench.REPO)
    load = os.getloadavg()
    print(f"5-step `retrain-ray train`, SmolLM2 LoRA r8, 2 x 4 x 32 tokens, seed 1, one thread "
          f"(benchmarks/smollm2_train.py), load average {load[0]:.1f}; previous: docs/benchmarks.md")
    print("\n".join(bench.comparison_lines(result, bench.previous_figures())))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--step-only", action="store_true", help="only the RL step of issue 13's configuration")
    parser.add_argument("--step-blocks", type=int, default=6, help="timed blocks per engine (after one warm-up)")
    parser.add_argument("--steps-per-block", type=int, default=10)
    parser.add_argument("--smollm2", action="store_true", help="only SmolLM2's step and time to first step, "
                        "transformers path against the lean path (needs `make smollm2`)")
    parser.add_argument("--smollm2-steps", type=int, default=4, help="steps per path (the first is timed apart)")
    parser.add_argument("--smollm2-train-only", action="store_true", help="with --smollm2: only the 5-step "
                        "`retrain-ray train` against docs/benchmarks.md, not the two paths in-process")
    parser.add_argument("--smollm2-child", choices=["transformers", "auto"], help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    parser.add_argument("--started", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.smollm2_child:
        print(json.dumps(smollm2_child(args.smollm2_child, args.smollm2_steps, Path(args.workdir), args.started)))
        return
    if args.smollm2:
        train = smollm2_train_report()
        if args.smollm2_train_only:
            return
        rows = smollm2_rows(args.smollm2_steps)
        load = os.getloadavg()
        if args.json:
            print(json.dumps({"load_average": load, "smollm2_train": train, "smollm2": rows,
                              "previous": PREVIOUS_SMOLLM2}, indent=2))
            return
        print(f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}")
        print_smollm2(rows)
        return
    device = "cuda" if torch.cuda.is_available() else "cpu"
    sample, train = [], []
    if not args.step_only:
        with tempfile.TemporaryDirectory() as cache:
            sample, train = sampling_rows(cache, device, args.repeats), training_rows(cache, device, args.repeats)
    step = rl_step_rows(args.steps_per_block, args.step_blocks)
    load = os.getloadavg()
    if args.json:
        print(json.dumps({"device": device, "load_average": load, "sampling": sample, "training": train,
                          "rl_step": step}, indent=2))
        return
    print(f"device: {device}, threads: 1, median of {args.repeats}, load average {load[0]:.1f} {load[1]:.1f}")
    if sample:
        print(f"{'setting':<32}{'tokens':>8}{'batched tok/s':>16}{'naive tok/s':>14}{'batched/naive':>15}")
    for r in sample:
        print(f"{r['what']:<32}{r['tokens']:>8}{r['batched_tok_s']:>16.0f}{r['naive_tok_s']:>14.0f}{r['ratio']:>14.1f}x")
    if train:
        print(f"{'setting':<32}{'tokens':>8}{'train tok/s':>16}{'step ms':>14}")
    for r in train:
        print(f"{r['what']:<32}{r['tokens']:>8}{r['train_tok_s']:>16.0f}{r['step_ms']:>14.1f}")
    print("one RL step, builtin:tiny LoRA r8 (and full fine-tuning), 4 prompts x 8 samples, 4 tokens: median s "
          "per step, speedup vs the previous step")
    print(f"{'variant':<48}{'steps':>6}{'wall s':>9}{'cpu s':>9}{'wall x':>8}{'cpu x':>8}")
    for r in step:
        print(f"{r['what']:<48}{r['steps']:>6}{r['wall_s']:>9.4f}{r['cpu_s']:>9.4f}{r['speedup_wall']:>7.2f}x"
              f"{r['speedup_cpu']:>7.2f}x")

if __name__ == "__main__":
    main()
