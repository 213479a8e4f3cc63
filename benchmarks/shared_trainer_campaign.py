"""Benchmark: the 10-run smoke campaign with and without `[campaign] shared_trainer = true` (issue 36's
campaign-level figure).

The campaign is configs/smoke-campaign.toml (5 conditions x 2 seeds, the built-in 1.3 M-parameter Llama, batch
16 x group 8, 10 tokens, `max_workers = 2`), made a LoRA campaign without the SFT warm start in both variants
(the shared trainer trains LoRA runs and makes RL steps only; `--lora-rank`, default 8); only the key differs.
Each variant runs as `python -m retrain_ray campaign CONFIG` in a fresh process with its own local Ray, as a
user runs it.

Figures per variant: wall time (process start to exit), peak RSS summed over the campaign's process tree
(the driver, Ray's own processes, every trial worker and the trainer actor; sampled every 0.5 s with psutil),
and its peak PSS (each shared page divided among the processes mapping it: RSS counts torch's libraries once
per process, PSS once in all),
and the mean reward of the last `--last` steps of each run: the mean over the runs and their spread (sample
standard deviation over the runs, the seeds' spread), with the ratios shared / unshared. The machine's load
average is printed with the figures.

Also per variant: when the first run logged its first step, and the run-steps per second from then to the last
logged step (the stepping rate, without the start-up). `--model`, `--batch-size`, `--group-size` and `--max-tokens`
set the runs' shape over the smoke's (the shared trainer is for runs whose batches are small for their model).

Run: `.venv/bin/python benchmarks/shared_trainer_campaign.py [--max-steps 160] [--last 20] [--reward match|lt]
[--max-workers N] [--model builtin:tiny-h512-l4] [--batch-size 4] [--group-size 4] [--max-tokens 10] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import tomllib

REPO = Path(__file__).resolve().parent.parent
SMOKE = REPO / "configs" / "smoke-campaign.toml"
VARIANTS = ("unshared", "shared")


REWARDS = {"match": {"type": "match"}, "lt": {"type": "custom", "custom_module": "operator:lt"}}
"""`--reward`: the smoke campaign's own (`match`: without the warm start the tiny model scores 0 on it in a short
campaign, so no step trains), or `lt` (`operator.lt(completion, answer)`: a string comparison that splits the
groups from the first step, so every step trains and the reward has a learning curve to compare)."""


def variant_toml(path: Path, *, shared: bool, max_steps: int, rank: int, reward: str = "match",
                 max_workers: int = 0, shape: dict[str, object] | None = None) -> Path:
    """The smoke campaign as a LoRA campaign without the warm start, with or without the shared trainer;
    `shape`: `[model] model` and `[training]` keys set over the smoke's (`--model`, `--batch-size`, ...)."""
    from retrain_ray.config.load import dumps

    data = tomllib.loads(SMOKE.read_text())
    shape = dict(shape or {})
    data["model"].update(finetune="lora", lora_rank=rank, model=shape.pop("model", data["model"]["model"]))
    data["training"].update(sft_warmup_steps=0, **shape)
    data["campaign"].update(max_steps=max_steps, shared_trainer=shared)
    if max_workers:
        data["campaign"]["max_workers"] = max_workers
    data["reward"] = dict(REWARDS[reward])
    data["logging"]["log_dir"] = str(path.parent / "logs")
    data["backend"]["adapter_path"] = str(path.parent / "adapter")
    path.write_text(dumps(data))
    return path


class TreeMemory:
    """Peak of the RSS summed over a process and all its descendants, sampled every `period_s`."""

    def __init__(self, pid: int, period_s: float = 0.5) -> None:
        self.root, self.period_s, self.peak_mb, self.peak_processes = psutil.Process(pid), period_s, 0.0, 0
        self.peak_pss_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        try:
            tree = [self.root, *self.root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return
        total = pss = 0
        for proc in tree:
            try:
                info = proc.memory_full_info()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            total += info.rss
            pss += getattr(info, "pss", info.rss)
        if total / 2**20 > self.peak_mb:
            self.peak_mb, self.peak_processes = total / 2**20, len(tree)
        self.peak_pss_mb = max(self.peak_pss_mb, pss / 2**20)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.period_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def run_campaign(toml: Path, root: Path, timeout_s: float) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    log = root / "campaign.log"
    start = time.time()
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "retrain_ray", "campaign", str(toml), "--root", str(root),
                                 "--name", "smoke"], stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env)
        memory = TreeMemory(proc.pid)
        try:
            code = proc.wait(timeout=timeout_s)
        finally:
            memory.stop()
    wall = time.time() - start
    if code != 0:
        raise RuntimeError(f"campaign {toml} failed ({code}); see {log}:\n{log.read_text()[-3000:]}")
    return {"wall_s": wall, "peak_rss_mb": memory.peak_mb, "peak_pss_mb": memory.peak_pss_mb,
            "processes_at_peak": memory.peak_processes, "started": start}


def stepping(campaign_dir: Path, started: float) -> dict[str, float]:
    """When the first run logged its first step (seconds after the command started: Ray, the trials' processes,
    the trainer actor and a step), and the run-steps per second from then to the last logged step."""
    import pyarrow.ipc as ipc

    first, last, steps = [], [], 0
    for stream in sorted((campaign_dir / "runs").glob("*/metrics.arrows")):
        times = ipc.open_stream(stream).read_all().column("wall_time").to_pylist()
        first.append(times[0].timestamp())
        last.append(times[-1].timestamp())
        steps += len(times) - 1
    span = max(last) - min(first)
    return {"first_step_s": min(first) - started, "run_steps_per_s": steps / span if span > 0 else 0.0}


def shape_of(args: argparse.Namespace) -> dict[str, object]:
    """The `[model]`/`[training]` keys set over the smoke's by the command line."""
    keys = {"model": args.model, "batch_size": args.batch_size, "group_size": args.group_size,
            "max_tokens": args.max_tokens}
    return {k: v for k, v in keys.items() if v}


def last_rewards(campaign_dir: Path, last: int) -> list[float]:
    """Each run's mean reward over its last `last` steps."""
    from retrain_ray.results import CampaignResults

    results = CampaignResults.from_dir(campaign_dir)
    means = []
    for run in results.get_dataframe()["run_name"]:
        rows = results.history(run)
        means.append(float(rows.sort_values("step")["mean_reward"].tail(last).mean()))
    return means


def measure(variant: str, workdir: Path, args: argparse.Namespace) -> dict[str, object]:
    root = workdir / variant
    root.mkdir(parents=True)
    toml = variant_toml(root / "campaign.toml", shared=variant == "shared", max_steps=args.max_steps,
                        rank=args.lora_rank, reward=args.reward, max_workers=args.max_workers, shape=shape_of(args))
    figures: dict[str, object] = dict(run_campaign(toml, root, args.timeout_s))
    rewards = last_rewards(root / "smoke", args.last)
    figures.update(stepping(root / "smoke", float(figures.pop("started"))))  # type: ignore[arg-type]
    figures.update(runs=len(rewards), reward_mean=statistics.mean(rewards),
                   reward_spread=statistics.stdev(rewards) if len(rewards) > 1 else 0.0, rewards=rewards,
                   load=os.getloadavg())
    return figures


def report(out: dict[str, dict[str, object]], args: argparse.Namespace) -> None:
    print(f"10-run smoke campaign, LoRA rank {args.lora_rank}, {args.max_steps} steps, max_workers "
          f"{args.max_workers or 'as the smoke'}, {shape_of(args) or 'the smoke shape'}, no warm start, reward "
          f"{args.reward}; mean reward "
          f"of each run's last {args.last} steps")
    for variant, f in out.items():
        load = "/".join(f"{x:.1f}" for x in f["load"])  # type: ignore[union-attr]
        print(f"  {variant:9s} wall {f['wall_s']:7.1f} s  peak RSS {f['peak_rss_mb']:7.0f} MB "
              f"({f['processes_at_peak']} processes; PSS {f['peak_pss_mb']:.0f} MB)  reward {f['reward_mean']:.3f} +- {f['reward_spread']:.3f} "
              f"(over {f['runs']} runs)  load after {load}")
        print(f"  {'':9s} first step after {f['first_step_s']:.1f} s, then {f['run_steps_per_s']:.2f} run-steps/s")
    s, u = out["shared"], out["unshared"]
    gap = abs(float(s["reward_mean"]) - float(u["reward_mean"]))  # type: ignore[arg-type]
    spread = max(float(s["reward_spread"]), float(u["reward_spread"]))  # type: ignore[arg-type]
    print(f"  shared / unshared: wall x{float(s['wall_s']) / float(u['wall_s']):.2f}, "  # type: ignore[arg-type]
          f"run-steps/s x{float(s['run_steps_per_s']) / float(u['run_steps_per_s']):.2f}, "  # type: ignore[arg-type]
          f"peak RSS x{float(s['peak_rss_mb']) / float(u['peak_rss_mb']):.2f}, "  # type: ignore[arg-type]
          f"PSS x{float(s['peak_pss_mb']) / float(u['peak_pss_mb']):.2f}; reward gap {gap:.3f} "  # type: ignore[arg-type]
          f"{'within' if gap <= spread else 'outside'} the seeds' spread ({spread:.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=160)
    parser.add_argument("--last", type=int, default=20)
    parser.add_argument("--lora-rank", type=int, default=8)
    parser.add_argument("--max-workers", type=int, default=0,
                        help="[campaign] max_workers of both variants (0: the smoke's 2). Members of a shared "
                             "trainer reserve 0.1 CPU and hold no model, so more of them run at once")
    parser.add_argument("--model", default="", help="[model] model of both variants (default: the smoke's)")
    parser.add_argument("--batch-size", type=int, default=0, help="[training] batch_size (default: the smoke's 16)")
    parser.add_argument("--group-size", type=int, default=0, help="[training] group_size (default: the smoke's 8)")
    parser.add_argument("--max-tokens", type=int, default=0, help="[training] max_tokens (default: the smoke's 10)")
    parser.add_argument("--reward", choices=sorted(REWARDS), default="match")
    parser.add_argument("--timeout-s", type=float, default=3600.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the campaigns under this folder")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="shared-trainer-campaign-"))
    print(f"load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    out = {variant: measure(variant, workdir, args) for variant in VARIANTS}
    report(out, args)
    if args.json:
        print(json.dumps(out, default=list))


if __name__ == "__main__":
    main()
