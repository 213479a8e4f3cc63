"""Benchmark: a 5-step `retrain-ray train` of SmolLM2-135M-Instruct (LoRA r8, 2 prompts x 4 samples, 32 new
tokens, seed 1) in a fresh process, timed from outside as a user sees it (issue 35 item 5).

It measures what the issue's side-by-side measured: the process's wall and CPU seconds (user + system, from
`wait4`), the time from spawn to the end of the first step (the step-0 row's `wall_time`), and per step the
wall, sampling and training seconds from the run's metrics, with the completion tokens each step sampled,
so steps of different sampled lengths compare per token. The reward is a parity of the completion's code
points (a `custom` reward module written next to the TOML), so nearly every group carries signal and every
step trains, whatever the model says. One torch thread (`OMP_NUM_THREADS=1`) unless `--threads`.

`--tree DIR` runs another checkout of this package (an old commit in a `git worktree`, for bisecting): the
child gets `PYTHONPATH=DIR`; the TOML uses only keys every commit since 2026-11-22 accepts.

Run: `.venv/bin/python benchmarks/smollm2_train.py [--tree DIR] [--repeats 2] [--json]` (needs
`make smollm2`; the first use converts the GGUF into the model cache, once, and is not a timing).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from itertools import pairwise
from pathlib import Path

import pyarrow.parquet as pq

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs" / "benchmarks.md"
PREVIOUS_MARK = re.compile(r"<!-- smollm2-train previous: (\{.*?\}) -->")
COMPARED = {  # figure -> what it is; CPU figures first: under load they move far less than wall seconds
    "cpu_s": "process CPU s (user + system)",
    "cpu_to_first_scoring_s": "CPU s to the first step's scoring",
    "median_step_cpu_s": "step CPU s (median after the first)",
    "cpu_s_per_token": "process CPU s per completion token",
    "to_first_step_s": "wall s to the end of the first step",
    "median_step_s": "step wall s (median after the first)",
    "wall_s": "process wall s",
}
SLOWER = 1.25  # a CPU figure this much above the previous one is flagged
STEPS = 5
TOML = """
[model]
model = "smollm2:135m"
finetune = "lora"
lora_rank = 8

[backend]
backend = "local"
devices = "cpu"
{backend_options}
[data]
source = "builtin"
task = "first_digit"

[reward]
type = "custom"
custom_module = "parity_reward"
custom_function = "score"

[training]
seed = 1
max_steps = {steps}
batch_size = 2
group_size = 4
max_tokens = 32
temperature = 1.0
lr = 1e-4

[logging]
log_dir = "{log_dir}"
"""
PARITY_REWARD = '''
import os, time

_CLOCK = open(os.environ["SMOLLM2_BENCH_CLOCK"], "a", buffering=1)


def score(completion, reference):
    """1 when the completion's code points sum to an odd number: signal in nearly every group. Each call
    also appends the process's CPU and wall clocks, so the benchmark can split CPU seconds by step."""
    _CLOCK.write(f"{time.process_time()} {time.time()}\\n")
    return float(sum(map(ord, completion)) % 2)
'''
SAMPLES_PER_STEP = 8  # 2 prompts x 4: the reward is called once per completion
# The child runs the console script's function where the commit has it (`entry`, which also freezes the GC
# before exit), else `main`, as `retrain-ray FILE` would.
CHILD = ("import sys, retrain_ray.cli as c; f = getattr(c, 'entry', None) or c.main; "
         "sys.argv = ['retrain-ray', sys.argv[1]]; r = f() if f is not c.main else f([sys.argv[1]]); sys.exit(r)")


def _child_env(tree: Path, workdir: Path, threads: int, first_paths: list[Path]) -> dict[str, str]:
    env = dict(os.environ)
    env.update(PYTHONPATH=os.pathsep.join(map(str, [*first_paths, tree, workdir])), OMP_NUM_THREADS=str(threads),
               MKL_NUM_THREADS=str(threads), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               RAY_AUTH_MODE="disabled", PYTHONDONTWRITEBYTECODE="1",
               SMOLLM2_BENCH_CLOCK=str(workdir / "reward_clock.txt"))
    return env


def _spawn_timed(command: list[str], env: dict[str, str], cwd: Path, timeout_s: float) -> dict:
    """Run `command`; its wall seconds and its CPU seconds (it and the children it waited for)."""
    started = time.time()
    with open(cwd / "stdout.log", "wb") as out:
        proc = subprocess.Popen(command, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                proc.kill()
                _, status, usage = os.wait4(proc.pid, 0)
                raise TimeoutError(f"{command} ran past {timeout_s} s; its output: {cwd / 'stdout.log'}")
            time.sleep(0.05)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return {"started": started, "wall_s": time.time() - started, "returncode": proc.returncode,
            "user_s": usage.ru_utime, "sys_s": usage.ru_stime, "max_rss_mib": usage.ru_maxrss / 1024}


def _metrics_rows(log_dir: Path) -> list[dict]:
    files = sorted(log_dir.rglob("metrics.parquet"))
    if not files:
        raise FileNotFoundError(f"no metrics.parquet under {log_dir}")
    rows = [r for r in pq.read_table(files[0]).to_pylist() if r.get("phase", "rl") == "rl"]
    return sorted(rows, key=lambda r: r["step"])


def _completion_tokens(row: dict) -> float:
    for key in ("rl/completion_tokens", "completion_tokens"):
        if row.get(key) is not None:
            return float(row[key])
    return float("nan")


def run_once(tree: Path, *, steps: int = STEPS, threads: int = 1, timeout_s: float = 1800, model_impl: str = "",
             first_paths: list[Path] | None = None) -> dict:
    """One fresh `retrain-ray train` process of the benchmark TOML on the package in `tree`."""
    with tempfile.TemporaryDirectory(prefix="smollm2-train-") as tmp:
        workdir = Path(tmp)
        (workdir / "parity_reward.py").write_text(PARITY_REWARD)
        toml = workdir / "smollm2.toml"
        options = f'[backend.options]\nmodel_impl = "{model_impl}"\n' if model_impl else ""
        toml.write_text(TOML.format(steps=steps, log_dir=workdir / "logs", backend_options=options))
        env = _child_env(tree, workdir, threads, first_paths or [])
        proc = _spawn_timed([sys.executable, "-c", CHILD, str(toml)], env, workdir, timeout_s)
        if proc["returncode"] != 0:
            tail = (workdir / "stdout.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"retrain-ray train exited {proc['returncode']} on {tree}:\n{tail}")
        rows = _metrics_rows(workdir / "logs")
        clock = [tuple(map(float, line.split())) for line in (workdir / "reward_clock.txt").read_text().splitlines()]
    return {**summarize(proc, rows), **split_cpu(clock)}


def split_cpu(clock: list[tuple[float, ...]]) -> dict:
    """CPU seconds per step from the reward's clock: between the first scoring of step k and of step k+1 lie
    step k's update and step k+1's sampling, one step's work; before the first, imports, load and sampling."""
    firsts = [clock[i][0] for i in range(0, len(clock), SAMPLES_PER_STEP)]
    steps = [b - a for a, b in pairwise(firsts)]
    return {"cpu_to_first_scoring_s": firsts[0], "step_cpu_s": steps,
            "median_step_cpu_s": statistics.median(steps) if steps else None}


def _epoch_s(value: object) -> float:
    """A row's `wall_time` in epoch seconds (a float in some commits, a timestamp in others)."""
    return value.timestamp() if isinstance(value, datetime) else float(value)  # type: ignore[arg-type]


def summarize(proc: dict, rows: list[dict]) -> dict:
    """The process figures and the per-step figures (median over the steps after the first)."""
    later = rows[1:] or rows
    tokens = [_completion_tokens(r) for r in rows]
    step_s = [float(r["step_time_s"]) for r in rows]
    cpu_s = proc["user_s"] + proc["sys_s"]
    return {
        "wall_s": proc["wall_s"], "cpu_s": cpu_s, "user_s": proc["user_s"], "max_rss_mib": proc["max_rss_mib"],
        "to_first_step_s": _epoch_s(rows[0]["wall_time"]) - proc["started"] if "wall_time" in rows[0] else None,
        "first_step_s": step_s[0], "median_step_s": statistics.median(step_s[1:] or step_s),
        "median_sample_s": statistics.median(float(r["sample_time_s"]) for r in later),
        "median_train_s": statistics.median(float(r["train_time_s"]) for r in later),
        "steps": len(rows), "steps_trained": sum(bool(r.get("trained", True)) for r in rows),
        "step_s": step_s, "sample_s": [float(r["sample_time_s"]) for r in rows],
        "train_s": [float(r["train_time_s"]) for r in rows],
        "train_tokens": [float(r.get("tokens_per_step") or 0.0) for r in rows], "completion_tokens": tokens, "cpu_s_per_token": cpu_s / max(sum(tokens), 1.0),
        "step_s_per_token": statistics.median(s / max(t, 1.0) for s, t in zip(step_s[1:], tokens[1:], strict=True))
        if len(rows) > 1 else None,
    }


def previous_figures(docs: Path = DOCS) -> dict[str, float]:
    """The figures docs/benchmarks.md records for this benchmark (the JSON in its `smollm2-train previous`
    comment); empty when the docs hold none."""
    found = PREVIOUS_MARK.search(docs.read_text()) if docs.is_file() else None
    return json.loads(found.group(1)) if found else {}


def comparison_lines(result: dict, previous: dict[str, float]) -> list[str]:
    """One line per compared figure: now, previous, ratio, and a flag where a CPU figure grew past SLOWER."""
    lines = [f"{'figure':<40}{'now':>9}{'previous':>10}{'ratio':>8}"]
    for key, label in COMPARED.items():
        now, before = result.get(key), previous.get(key)
        if now is None:
            continue
        ratio = now / before if before else None
        flag = "  SLOWER" if ratio and key.startswith("cpu") and ratio > SLOWER else ""
        lines.append(f"{label:<40}{now:>9.3f}{before if before is not None else float('nan'):>10.3f}"
                     f"{ratio if ratio else float('nan'):>7.2f}x{flag}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO, help="checkout whose retrain_ray runs (default: this one)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--model-impl", default="", help="[backend.options] model_impl (commits that have it)")
    parser.add_argument("--first-path", type=Path, action="append", default=[],
                        help="put DIR first on the child's PYTHONPATH (another transformers, say)")
    args = parser.parse_args()
    for _ in range(args.repeats):
        result = {"tree": str(args.tree), "load_average": os.getloadavg(), "model_impl": args.model_impl,
                  "first_paths": [str(p) for p in args.first_path],
                  **run_once(args.tree, threads=args.threads, model_impl=args.model_impl, first_paths=args.first_path)}
        result["load_average_after"] = os.getloadavg()
        if args.json:
            print(json.dumps(result), flush=True)
            continue
        load = result["load_average"]
        print(f"{args.tree}: load average {load[0]:.1f} before, {result['load_average_after'][0]:.1f} after; "
              f"{sum(result['completion_tokens']):.0f} completion tokens in {result['steps']} steps")
        print("\n".join(comparison_lines(result, previous_figures())), flush=True)


if __name__ == "__main__":
    main()
