"""Benchmark: the readers on a large campaign directory (issue 38 item 2).

Writes a campaign directory of `--runs` runs x `--steps` steps (default 1,000 x 500) through the product's
own writers (`Manifest.create`, the campaign recorder's `RecorderCore`: Arrow streams, the jsonl mirror and
the Parquet export a run's close writes), 10 rows per append as a run's `RecorderClient` sends them, with a
metrics row of the width a tiny-model run logs (the run loop's timing, reward and surprisal columns), then
times each reader in a fresh process with its peak RSS:

* `retrain-ray status DIR`, `retrain-ray results DIR`, `retrain-ray plot DIR` (the CLI, as a user runs it);
* `CampaignResults.from_dir(DIR).summary()`;
* `retrain-ray bottleneck DIR` and `retrain-ray explain CAMPAIGN.toml --calibrate DIR` (no target: timed).

Targets (issue 38): status, results and summary <= 5 s, plot <= 30 s. Figures depend on the machine's load;
the header states `os.getloadavg()`.

Run: `.venv/bin/python benchmarks/scale_readers.py [--runs 1000] [--steps 500] [--dir DIR] [--only status ...]`
(`--dir` keeps the written directory and reuses it when it already holds the campaign).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale import campaign_toml  # noqa: E402  (this folder's campaign, for explain)

CONDITIONS = ("grpo+none", "maxrl+none", "maxrl+gtpo", "maxrl+gtpo_hicra", "maxrl+gtpo_sepa")
# the numeric columns a tiny-model run logs besides step/wall_time/condition/phase (the run loop's row)
EXTRA_KEYS = ("loss", "tokens_per_second", "step_time_s", "running_correct_rate", "sync_time_s", "sample_time_s",
              "score_time_s", "advantage_time_s", "train_time_s", "max_token_hit_rate",
              "reward_tie_group_rate", "reward_uniform_group_rate", "reward_tie_pair_rate",
              "exec_surprisal_mean", "exec_surprisal_var", "exec_entropy_mean", "exec_entropy_var",
              "policy/abs_kl", "process_max_rss_mb")
READERS = {
    "status": ["-m", "retrain_ray", "status", "{dir}"],
    "results": ["-m", "retrain_ray", "results", "{dir}"],
    "plot": ["-m", "retrain_ray", "plot", "{dir}", "--out", "{tmp}/plots"],
    "summary": ["-c", "from retrain_ray.campaign import CampaignResults; "
                      "print(CampaignResults.from_dir({dir!r}).summary().to_string())"],
    "bottleneck": ["-m", "retrain_ray", "bottleneck", "{dir}"],
    "explain": ["-m", "retrain_ray", "explain", "{tmp}/campaign.toml", "--calibrate", "{dir}"],
}
TARGET_S = {"status": 5.0, "results": 5.0, "summary": 5.0, "plot": 30.0}


def row(condition: str, seed: int, step: int) -> dict[str, object]:
    reward = min(1.0, 0.1 + 0.001 * step + 0.01 * seed + 0.02 * CONDITIONS.index(condition))
    extras = {k: 0.001 * ((step * 7 + i) % 97) for i, k in enumerate(EXTRA_KEYS)}
    return {"step": step, "wall_time": 1.79e9 + 2.0 * step, "condition": condition, "phase": "rl",
            "mean_reward": reward, "correct_rate": reward / 2, **extras}


def write_campaign(cdir: Path, runs: int, steps: int) -> float:
    """The campaign directory through the product's writers; returns the seconds it took."""
    from retrain_ray.campaign.recorder import RecorderCore
    from retrain_ray.logs.manifest import Manifest

    start = time.perf_counter()
    seeds = runs // len(CONDITIONS)
    entries = [{"run_name": f"{c}_s{s}", "condition": c, "seed": s, "max_steps": steps}
               for c in CONDITIONS for s in range(1, seeds + 1)]
    manifest = Manifest.create(cdir, {"name": cdir.name, "conditions": list(CONDITIONS),
                                      "seeds": list(range(1, seeds + 1)), "max_steps": steps,
                                      "max_concurrent": 4}, entries)
    recorder = RecorderCore(cdir, parquet_every_s=1e9)
    for entry in entries:
        name, condition, seed = str(entry["run_name"]), str(entry["condition"]), int(entry["seed"])  # pyright: ignore[reportArgumentType]
        for first in range(0, steps, 10):
            recorder.append(name, "metrics", [row(condition, seed, t) for t in range(first, min(first + 10, steps))])
        recorder.close_run(name)
        last = row(condition, seed, steps - 1)
        manifest.stage_run(name, status="completed", attempts=1,
                           result={k: v for k, v in last.items() if isinstance(v, (int, float))})
    manifest.update(status="done")
    recorder.close()
    return time.perf_counter() - start


def time_reader(name: str, cdir: Path, tmp: Path) -> dict[str, float]:
    """One reader in a fresh process: wall seconds, CPU seconds (user + system: on a loaded machine the wall
time is mostly waiting for a core) and its peak RSS (MB)."""
    args = [a.format(dir=str(cdir), tmp=str(tmp)) for a in READERS[name]]
    probe = ("import resource, runpy, sys, time\n"
             "start = time.perf_counter()\n"
             "sys.argv = ['x', *sys.argv[1:]]\n"
             "code = 0\n"
             "try:\n"
             "    if sys.argv[1] == '-m': sys.argv = sys.argv[2:]; runpy.run_module(sys.argv[0], run_name='__main__')\n"
             "    else: exec(sys.argv[2])\n"
             "except SystemExit as e: code = e.code or 0\n"
             "use = resource.getrusage(resource.RUSAGE_SELF)\n"
             "print('READER', time.perf_counter() - start, use.ru_maxrss / 1024, code, use.ru_utime + use.ru_stime,"
             " file=sys.stderr)\n")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, env=env,
                         timeout=600, check=False)
    line = [ln for ln in out.stderr.splitlines() if ln.startswith("READER ")]
    if not line:
        raise RuntimeError(f"{name} failed:\n{out.stderr[-2000:]}")
    wall, rss, code, cpu = line[-1].split()[1:]
    return {"wall_s": float(wall), "cpu_s": float(cpu), "peak_rss_mb": float(rss), "exit": int(code)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--dir", type=Path, help="write (or reuse) the campaign here and keep it")
    parser.add_argument("--only", nargs="+", choices=sorted(READERS), default=list(READERS))
    args = parser.parse_args(argv)
    load = os.getloadavg()
    print(f"load at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="scale-readers-"))
    cdir = (args.dir or tmp) / f"readers{args.runs}x{args.steps}"
    try:
        if not (cdir / "manifest.json").is_file():
            cdir.mkdir(parents=True, exist_ok=True)
            print(f"wrote {args.runs} runs x {args.steps} steps in {write_campaign(cdir, args.runs, args.steps):.1f} s",
                  flush=True)
        size = sum(f.stat().st_size for f in cdir.rglob("*") if f.is_file())
        print(f"{cdir}: {size / 2**20:.0f} MB", flush=True)
        campaign_toml(tmp / "campaign.toml", runs=args.runs, steps=args.steps, workers=4, trainer="tiny")
        rows = {name: time_reader(name, cdir, tmp) for name in args.only}
        for name, figures in rows.items():
            target = TARGET_S.get(name)
            verdict = "no target" if target is None else "ok" if figures["wall_s"] <= target else \
                f"over the {target:.0f} s target"
            print(f"{name:10s} {figures['wall_s']:7.2f} s  CPU {figures['cpu_s']:6.2f} s  "
                  f"peak RSS {figures['peak_rss_mb']:7.0f} MB  "
                  f"exit {figures['exit']}  ({verdict})")
        print(json.dumps(rows))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
