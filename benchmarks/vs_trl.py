"""Benchmark: TRL's `GRPOTrainer` and `retrain-ray train` on the same GRPO-LoRA job, in one invocation.

The job (both sides): SmolLM2-135M-Instruct from the same model folder, the built-in `addition` task's train
split ("What is 3 + 5?", level 1, drawn with the run's seed) as a user message under the model's chat template, the
`final_number` reward, LoRA rank 8 / alpha 16 on q,k,v,o,gate,up,down (dropout 0), `--prompts` x
`--generations` rows per step, `--max-tokens` new tokens, temperature 1.0, top_p 1.0, learning rate 2e-4
constant, AdamW (betas 0.9/0.95, eps 1e-8, no weight decay), gradient clipping at norm 1.0, `--steps` steps,
fp32 on CPU (`--dtype bf16`: the base weights in bfloat16 on both sides, the LoRA adapter and AdamW in
float32), no gradient checkpointing. Each side runs in its own process; this one polls their process
trees for peak RSS (retrain-ray's includes the local Ray it starts).

Where the two still differ (they cannot be made equal by settings):
* loss aggregation: both average over every completion token of the step (TRL `loss_type="dapo"`,
  retrain-ray's global token mean); TRL rescales by the number of processes (1 here), so it is the same sum.
* advantages: both group-centred without dividing by the group's std (TRL `scale_rewards="none"`,
  retrain-ray `advantage_mode="grpo"`).
* KL term: none on either side (TRL `beta=0.0`, its default; retrain-ray has no reference-model KL).
* ratio: one update per batch on both sides, so the PPO ratio is 1 and clipping never bites; TRL computes
  it against its own detached logprobs, retrain-ray against the sampler's.
* sampling: TRL calls transformers' `generate` (its logits processors, `top_k=0`); retrain-ray its own
  KV-cache sampler on the same weights. Same temperature and top_p, different random streams, so the
  completions and rewards differ step by step: compare the rewards' level, not their values.
* data order: TRL takes the split in order (`shuffle_dataset=False`), retrain-ray its own round-robin order.

Utilization: each step's FLOPs from the model's shapes (`rl_step_flops`: 2 N per sampled or prompt token, 4 N
per trained token under LoRA) over this machine's matmul rate in the job's dtype, measured here in the same
invocation. The decode is bound by memory, not FLOPs: each new-token position reads every weight once, so the
script also measures the memory rate and prints the decode's floor (weight bytes x new tokens / rate).

Run: `make bench-trl` (installs the `bench` extra), or `.venv/bin/python benchmarks/vs_trl.py [--steps 5]
[--prompts 2] [--generations 4] [--max-tokens 32] [--json]`; needs `make smollm2`.
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
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
TASK, LEVEL = "addition", 1
NUM_TRAIN, NUM_EVAL = 512, 32


@dataclass(frozen=True)
class Job:
    """Everything both sides are given; written as JSON for the TRL child and as TOML for retrain-ray."""

    model_dir: str
    steps: int
    prompts: int
    generations: int
    max_tokens: int
    lora_rank: int = 8
    lora_alpha: int = 16
    lr: float = 2e-4
    temperature: float = 1.0
    seed: int = 1
    dtype: str = "fp32"


@dataclass(frozen=True)
class SideResult:
    """Per-step figures one side logged."""

    step_s: list[float]
    rewards: list[float]
    prompt_tokens: list[int]
    completion_tokens: list[int]


# --- the TRL side (runs in a child process: `vs_trl.py --trl-side JOB.json OUT.json`) -------------------

def _trl_dataset(job: Job):
    from datasets import Dataset

    from retrain_ray.data import load_task

    # retrain-ray draws a built-in task's split with the run's seed: the same split here
    train = load_task(TASK, level=LEVEL, seed=job.seed, num_train=NUM_TRAIN, num_eval=NUM_EVAL).train
    return Dataset.from_list([{"prompt": [{"role": "user", "content": e.prompt}], "reference": e.reference}
                              for e in train])


def _final_number_reward(completions, reference, **_):
    from retrain_ray.rewards.final_number import FinalNumberReward

    texts = [c[-1]["content"] if isinstance(c, list) else str(c) for c in completions]
    return FinalNumberReward().score_batch(texts, list(reference))


def _trl_config(job: Job, output_dir: str):
    from trl import GRPOConfig

    rows = job.prompts * job.generations
    return GRPOConfig(
        output_dir=output_dir, use_cpu=True, bf16=job.dtype == "bf16", seed=job.seed, max_steps=job.steps,
        per_device_train_batch_size=rows, num_generations=job.generations, max_completion_length=job.max_tokens,
        temperature=job.temperature, top_p=1.0, learning_rate=job.lr, lr_scheduler_type="constant",
        optim="adamw_torch", adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8, weight_decay=0.0,
        max_grad_norm=1.0, beta=0.0, loss_type="dapo", scale_rewards="none", shuffle_dataset=False,
        gradient_checkpointing=False, disable_dropout=True, logging_steps=1, save_strategy="no", report_to=[],
        dataloader_num_workers=0,
    )


def run_trl_side(job: Job) -> SideResult:
    import torch
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOTrainer

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.seconds: list[float] = []
            self._start = 0.0

        def on_step_begin(self, args, state, control, **kwargs):
            self._start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self._start)

    dtype = torch.bfloat16 if job.dtype == "bf16" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(job.model_dir, dtype=dtype, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(job.model_dir, local_files_only=True, padding_side="left")
    lora = LoraConfig(r=job.lora_rank, lora_alpha=job.lora_alpha, lora_dropout=0.0,
                      target_modules=list(LORA_TARGETS), task_type="CAUSAL_LM")
    clock = StepClock()
    with tempfile.TemporaryDirectory() as out:
        trainer = GRPOTrainer(model=model, reward_funcs=_final_number_reward, args=_trl_config(job, out),
                              train_dataset=_trl_dataset(job), processing_class=tokenizer, peft_config=lora,
                              callbacks=[clock])
        trainer.train()
    logs = [row for row in trainer.state.log_history if "reward" in row]
    rows = job.prompts * job.generations
    completion = [round(row["completions/mean_length"] * rows) for row in logs]
    cumulative = [int(row["num_tokens"]) for row in logs]
    totals = [b - a for a, b in zip([0, *cumulative[:-1]], cumulative, strict=True)]
    return SideResult(step_s=clock.seconds, rewards=[float(row["reward"]) for row in logs],
                      prompt_tokens=[t - c for t, c in zip(totals, completion, strict=True)],
                      completion_tokens=completion)


# --- the retrain-ray side ---------------------------------------------------------------------------------

def retrain_toml(job: Job, log_dir: Path) -> str:
    """The `retrain-ray train` config of the job."""
    return f"""[model]
model = "{job.model_dir}"
finetune = "lora"
lora_rank = {job.lora_rank}

[lora]
alpha = {job.lora_alpha}
dropout = 0.0

[backend]
backend = "local"
devices = "cpu"
adapter_path = "{log_dir / 'adapter'}"
options = {{ lora_target_modules = "{','.join(LORA_TARGETS)}", gradient_checkpointing = false }}

[data]
source = "builtin"
task = "{TASK}"
level = {LEVEL}
num_examples = {NUM_TRAIN}
num_eval_examples = {NUM_EVAL}

[reward]
type = "final_number"

[algorithm]
advantage_mode = "grpo"
transform_mode = "none"

[training]
seed = {job.seed}
max_steps = {job.steps}
batch_size = {job.prompts}
group_size = {job.generations}
max_tokens = {job.max_tokens}
temperature = {job.temperature}
top_p = 1.0
lr = {job.lr}
weight_decay = 0.0
save_every = 0

[optimizer]
beta1 = 0.9
beta2 = 0.95
eps = 1e-8
grad_clip_norm = 1.0

[logging]
log_dir = "{log_dir}"
{_dtype_section(job)}"""


def _dtype_section(job: Job) -> str:
    return '\n[inference]\ndtype = "bf16"\n' if job.dtype == "bf16" else ""


def prompt_tokens_per_step(job: Job) -> int:
    """Prompt tokens of one step's rows under the chat template (the split's prompts differ by a digit or
    two, so the mean over the split times the rows); retrain-ray's log counts completion tokens only."""
    from transformers import AutoTokenizer

    from retrain_ray.data import load_task
    from retrain_ray.models import encode_prompt

    tokenizer = AutoTokenizer.from_pretrained(job.model_dir, local_files_only=True)
    train = load_task(TASK, level=LEVEL, seed=job.seed, num_train=NUM_TRAIN, num_eval=NUM_EVAL).train
    lengths = [len(encode_prompt(tokenizer, e.prompt)) for e in train[:64]]
    return round(statistics.mean(lengths) * job.prompts * job.generations)


def retrain_result(log_dir: Path, prompt_tokens: int) -> SideResult:
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("phase", "rl") == "rl"]
    return SideResult(step_s=[float(r["step_time_s"]) for r in rows], rewards=[float(r["mean_reward"]) for r in rows],
                      prompt_tokens=[prompt_tokens] * len(rows),
                      completion_tokens=[int(r["rl/completion_tokens"]) for r in rows])


# --- the parent: runs both, measures the machine, prints ----------------------------------------------------

def _tree_rss(proc: psutil.Process) -> int:
    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except psutil.Error:
            continue
    return total


def run_child(argv: list[str], env: dict[str, str], timeout_s: float, log: Path) -> tuple[float, int]:
    """Run `argv` with its output in `log`, return (wall seconds, peak RSS of its process tree in bytes);
    raise if it fails or outlives `timeout_s`."""
    started = time.perf_counter()
    with log.open("w") as out:
        child = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        watched, peak = psutil.Process(child.pid), 0
        while child.poll() is None:
            if time.perf_counter() - started > timeout_s:
                child.kill()
                child.wait(timeout=30)
                raise SystemExit(f"{argv[:3]} ran past {timeout_s:.0f} s (--timeout-s)")
            peak = max(peak, _tree_rss(watched))
            time.sleep(0.2)
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(argv[:4])} exited {child.returncode}:\n{log.read_text()[-4000:]}")
    return time.perf_counter() - started, peak


def matmul_gflops(dtype: str, size: int = 1024, repeats: int = 8) -> float:
    """This machine's dense matmul rate (GFLOP/s) in the job's dtype with torch's default threads: the
    utilization's roof (bf16 runs on AMX tiles where the CPU has them, several times the fp32 rate)."""
    import torch

    kind = torch.bfloat16 if dtype == "bf16" else torch.float32
    a, b = torch.randn(size, size, dtype=kind), torch.randn(size, size, dtype=kind)
    a @ b
    started = time.perf_counter()
    for _ in range(repeats):
        a @ b
    return 2 * size**3 * repeats / (time.perf_counter() - started) / 1e9


def memory_gbps(megabytes: int = 512, repeats: int = 4) -> float:
    """This machine's memory rate (GB/s read plus written, a large tensor copied): the roof of the decode,
    which reads every weight once per sampled token position."""
    import torch

    src = torch.empty(megabytes * 2**20, dtype=torch.uint8).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    started = time.perf_counter()
    for _ in range(repeats):
        dst.copy_(src)
    return 2 * src.numel() * repeats / (time.perf_counter() - started) / 1e9


def decode_floor_s(job: Job, parameters: int, gbps: float) -> float:
    """Seconds a step's decode takes at least: every weight read once per new-token position (the rows of a
    step decode together), at the measured memory rate."""
    weight_bytes = parameters * (2 if job.dtype == "bf16" else 4)
    return weight_bytes * job.max_tokens / (gbps * 1e9)


def summarize(side: SideResult, wall_s: float, peak_rss: int, parameters: int, roof_gflops: float) -> dict[str, float]:
    from retrain_ray.models.flops import rl_step_flops

    later = slice(1, None) if len(side.step_s) > 1 else slice(None)
    median_s = statistics.median(side.step_s[later])
    completion = statistics.mean(side.completion_tokens[later])
    prompt = statistics.mean(side.prompt_tokens[later])
    flops = rl_step_flops(parameters, prompt_tokens=round(prompt), completion_tokens=round(completion), lora=True)
    return {"median_step_s": round(median_s, 3), "completion_tokens_per_s": round(completion / median_s, 1),
            "peak_rss_gib": round(peak_rss / 2**30, 2), "wall_s": round(wall_s, 1),
            "first_reward": round(side.rewards[0], 3), "last_reward": round(side.rewards[-1], 3),
            "mean_reward": round(statistics.mean(side.rewards), 3),
            "step_gflop": round(flops.total / 1e9, 1),
            "flops_utilization": round(flops.total / median_s / (roof_gflops * 1e9), 4)}


def _child_env() -> dict[str, str]:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.setdefault("RAY_AUTH_MODE", "disabled")
    return env


def compare(job: Job, timeout_s: float) -> dict[str, object]:
    from retrain_ray.models.flops import parameter_count

    env, parameters = _child_env(), parameter_count(job.model_dir)
    roof, bandwidth = matmul_gflops(job.dtype), memory_gbps()
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as tmp:
        job_file, trl_out = Path(tmp) / "job.json", Path(tmp) / "trl.json"
        job_file.write_text(json.dumps(asdict(job)))
        trl_wall, trl_rss = run_child([sys.executable, __file__, "--trl-side", str(job_file), str(trl_out)], env,
                                      timeout_s, Path(tmp) / "trl.log")
        trl = SideResult(**json.loads(trl_out.read_text()))
        print(f"TRL side: {trl_wall:.0f} s, per step {trl}", file=sys.stderr, flush=True)
        toml, log_dir = Path(tmp) / "job.toml", Path(tmp) / "retrain"
        toml.write_text(retrain_toml(job, log_dir))
        cli = str(Path(sys.executable).with_name("retrain-ray"))
        ours_wall, ours_rss = run_child([cli, "train", str(toml)], env, timeout_s, Path(tmp) / "retrain.log")
        ours = retrain_result(log_dir, prompt_tokens_per_step(job))
    results = {"trl": summarize(trl, trl_wall, trl_rss, parameters, roof),
               "retrain_ray": summarize(ours, ours_wall, ours_rss, parameters, roof)}
    ratio = results["retrain_ray"]["median_step_s"] / results["trl"]["median_step_s"]
    return {"job": asdict(job), "parameters": parameters, "matmul_gflops": round(roof, 1),
            "memory_gbps": round(bandwidth, 1), "decode_floor_s": round(decode_floor_s(job, parameters, bandwidth), 3),
            "load_average": [round(x, 2) for x in os.getloadavg()], **results,
            "step_time_ratio_retrain_over_trl": round(ratio, 3)}


def print_table(report: dict[str, object]) -> None:
    job = report["job"]
    print(f"job: {job['prompts']} prompts x {job['generations']} generations x {job['max_tokens']} tokens, {job['dtype']}, "
          f"{job['steps']} steps, {report['parameters'] / 1e6:.1f}M parameters; matmul roof "
          f"{report['matmul_gflops']} GFLOP/s; memory {report['memory_gbps']} GB/s, so a step's decode takes at least "
          f"{report['decode_floor_s']} s; load average {report['load_average']}")
    keys = ["median_step_s", "completion_tokens_per_s", "peak_rss_gib", "wall_s", "first_reward", "last_reward",
            "mean_reward", "step_gflop", "flops_utilization"]
    print(f"{'':26}{'TRL GRPOTrainer':>18}{'retrain-ray':>14}")
    for key in keys:
        print(f"{key:26}{report['trl'][key]:>18}{report['retrain_ray'][key]:>14}")
    print(f"seconds per step, retrain-ray / TRL: x{report['step_time_ratio_retrain_over_trl']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--model", default="smollm2:135m", help="a model name or folder both sides load")
    parser.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32",
                        help="both sides: bf16 = base weights in bfloat16, LoRA and optimizer in float32 "
                             "(TRL: the model loaded in bf16 and bf16=True; retrain-ray: [inference] dtype)")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="limit for each side")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--trl-side", nargs=2, metavar=("JOB", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.trl_side:
        job = Job(**json.loads(Path(args.trl_side[0]).read_text()))
        Path(args.trl_side[1]).write_text(json.dumps(asdict(run_trl_side(job))))
        return
    from retrain_ray.models.loading import resolve_model_path

    if min(args.steps, args.prompts, args.max_tokens) < 1 or args.generations < 2:
        raise SystemExit("--steps, --prompts and --max-tokens must be >= 1 and --generations >= 2")
    job = Job(model_dir=str(resolve_model_path(args.model)), steps=args.steps, prompts=args.prompts,
              generations=args.generations, max_tokens=args.max_tokens, dtype=args.dtype)
    report = compare(job, args.timeout_s)
    print(json.dumps(report)) if args.json else print_table(report)


if __name__ == "__main__":
    main()
