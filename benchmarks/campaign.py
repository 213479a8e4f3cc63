"""Benchmark: a campaign of short runs on retrain-ray against one `retrain-ray train` subprocess per run.

The campaign is `configs/bench-campaign.toml` (5 conditions x 2 seeds, 20-step runs of the built-in
0.3 M-parameter Llama, LoRA rank 8, batch 4 x group 8, 4 tokens, `max_workers = 2`). It runs two
ways, alternating within each repetition (the first mode alternates too, so a load spike does not
always hit the same one):

* **retrain-ray**: `python -m retrain_ray campaign CONFIG --root DIR` in a fresh process (imports,
  a new local Ray, Tune, the recorder, every run), as a user runs it.
* **baseline** (the original's runner): the same runs, each written to its own TOML and run as
  `python -m retrain_ray train RUN.toml` subprocesses, `max_workers` at a time, with
  `OMP_NUM_THREADS=1` (with the default threads the concurrent processes oversubscribe the cores).

Figures: wall time from the first process spawned to the last one ended; time to the first step of
the first run (from the same start); per-run start-up (a run's launch to its first step: the
subprocess's spawn for the baseline, its Tune trial start for retrain-ray), the median over the
runs of one repetition. Each is shown as min / median / max over `--reps` repetitions, with the
ratio retrain-ray / baseline of the minima (the issue's bar: wall time <= 0.5x).

Run: `.venv/bin/python benchmarks/campaign.py [--reps 3] [--json] [--config FILE]`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "bench-campaign.toml"
FIRST_STEP = re.compile(r"time to first step: ([0-9.]+) s")
FIGURES = ("wall_s", "first_step_s", "run_startup_s")
LABELS = {"wall_s": "campaign wall time (s)", "first_step_s": "first step of the first run (s)",
          "run_startup_s": "per-run start-up, median over runs (s)"}


def run_configs(config_path: Path, log_root: Path) -> list[tuple[str, Path]]:
    """The campaign's runs, each as a standalone TOML (the run's whole config, no [campaign])."""
    from retrain_ray.config import expand_runs, load_config
    from retrain_ray.config.load import save_toml

    runs = []
    for spec in expand_runs(load_config(config_path)):
        cfg = spec.config.model_copy(update={"campaign": None})
        cfg = cfg.model_copy(update={"logging": cfg.logging.model_copy(update={"log_dir": str(log_root / spec.run_name)})})
        runs.append((spec.run_name, save_toml(cfg, log_root / "configs" / f"{spec.run_name}.toml")))
    return runs


def _max_workers(config_path: Path) -> int:
    from retrain_ray.config import load_config

    section = load_config(config_path).campaign
    return max(1, int(section.max_workers)) if section.parallel else 1


def baseline(config_path: Path, workdir: Path, timeout_s: float) -> dict[str, float]:
    """The original's runner: one `train` subprocess per run, `max_workers` at a time, one thread each."""
    runs = run_configs(config_path, workdir)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

    def one(item: tuple[str, Path]) -> tuple[float, float]:
        name, toml = item
        spawned = time.time()
        proc = subprocess.run([sys.executable, "-m", "retrain_ray", "train", str(toml), "--quiet"], env=env,
                              capture_output=True, text=True, timeout=timeout_s, cwd=REPO)
        if proc.returncode != 0:
            raise RuntimeError(f"baseline run {name} failed ({proc.returncode}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
        found = FIRST_STEP.search(proc.stdout)
        if found is None:
            raise RuntimeError(f"baseline run {name}: no 'time to first step' in its output:\n{proc.stdout[-2000:]}")
        return spawned, float(found.group(1))

    start = time.time()
    with ThreadPoolExecutor(_max_workers(config_path)) as pool:
        results = list(pool.map(one, runs))
    wall = time.time() - start
    return {"wall_s": wall, "first_step_s": min(spawned + ttfs for spawned, ttfs in results) - start,
            "run_startup_s": statistics.median(ttfs for _, ttfs in results)}


def retrain_ray(config_path: Path, workdir: Path, timeout_s: float) -> dict[str, float]:
    """`retrain-ray campaign CONFIG` in a fresh process; run timings from its manifest."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # its own local Ray, as the baseline
    start = time.time()
    log = workdir / "campaign.log"
    with log.open("w") as out:
        proc = subprocess.run([sys.executable, "-m", "retrain_ray", "campaign", str(config_path), "--root",
                               str(workdir), "--name", "bench"], stdout=out, stderr=subprocess.STDOUT,
                              timeout=timeout_s, cwd=REPO, env=env)
    wall = time.time() - start
    if proc.returncode != 0:
        raise RuntimeError(f"campaign failed ({proc.returncode}); see {log}:\n{log.read_text()[-3000:]}")
    runs = json.loads((workdir / "bench" / "manifest.json").read_text())["runs"]
    firsts = [(r["started_at"], r["result"]["first_step_at"]) for r in runs]
    return {"wall_s": wall, "first_step_s": min(first for _, first in firsts) - start,
            "run_startup_s": statistics.median(first - started for started, first in firsts),
            "fresh_processes": sum(1 for r in runs if r["result"].get("process_runs", 1) == 1)}


MODES: dict[str, Callable[[Path, Path, float], dict[str, float]]] = {"retrain-ray": retrain_ray, "baseline": baseline}


def _load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def _attempt(mode: str, config_path: Path, timeout_s: float, keep: Path | None, label: str) -> dict | None:
    """One campaign of `mode`, tried up to twice: on an overloaded machine a local Ray can time out while
    it starts ("The current node timed out during startup"); each failure is printed, never hidden."""
    for attempt in (1, 2):
        workdir = Path(tempfile.mkdtemp(prefix=f"{label}-", dir=keep))
        try:
            return MODES[mode](config_path, workdir, timeout_s)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            last = str(exc).strip().splitlines()[-1][:300]
            print(f"{label} attempt {attempt} FAILED: {last}", flush=True)
        finally:
            if keep is None:
                shutil.rmtree(workdir, ignore_errors=True)
    return None


def measure(config_path: Path, reps: int, timeout_s: float, modes: list[str], keep: Path | None) -> list[dict]:
    rows = []
    for rep in range(reps):
        order = modes if rep % 2 == 0 else modes[::-1]
        for mode in order:
            load_before = _load()
            figures = _attempt(mode, config_path, timeout_s, keep, f"rep{rep + 1}-{mode}")
            if figures is None:
                continue
            row = {"rep": rep + 1, "mode": mode, **figures, "load_before": load_before, "load_after": _load()}
            fresh = f"  fresh trial processes {figures['fresh_processes']}" if "fresh_processes" in figures else ""
            print(f"rep {rep + 1} {mode:12s} wall {figures['wall_s']:6.1f} s  first step {figures['first_step_s']:5.1f} s"
                  f"  per-run start-up {figures['run_startup_s']:5.2f} s  load {load_before} -> {row['load_after']}{fresh}",
                  flush=True)
            rows.append(row)
    return rows


def _mmm(values: list[float]) -> str:
    return f"{min(values):.2f} / {statistics.median(values):.2f} / {max(values):.2f}"


def table(rows: list[dict]) -> str:
    """Markdown: each figure min / median / max over repetitions, and the ratio of the minima."""
    if not rows:
        return "no campaign completed (see the FAILED lines above)"
    by = {mode: [r for r in rows if r["mode"] == mode] for mode in MODES}
    lines = ["| figure | retrain-ray (min / median / max) | baseline (min / median / max) | ratio of minima |",
             "|---|---|---|---:|"]
    for key in FIGURES:
        ours, base = [r[key] for r in by["retrain-ray"]], [r[key] for r in by["baseline"]]
        if not ours or not base:
            continue
        lines.append(f"| {LABELS[key]} | {_mmm(ours)} | {_mmm(base)} | {min(ours) / min(base):.2f} |")
    loads = sorted([r["load_before"] for r in rows] + [r["load_after"] for r in rows],
                   key=lambda text: float(text.split("/")[0]))
    lines.append("")
    lines.append(f"{len(by['retrain-ray'])} retrain-ray and {len(by['baseline'])} baseline campaigns; load average "
                 f"(1/5/15 min) seen: {loads[0]} .. {loads[-1]}; {os.cpu_count()} CPUs")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    p.add_argument("--reps", type=int, default=3, help="repetitions of each mode (default 3)")
    p.add_argument("--only", choices=sorted(MODES), default=None, help="run one mode only")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds one campaign or one run may take")
    p.add_argument("--keep", type=Path, default=None, help="keep every campaign's files under this directory")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    modes = [args.only] if args.only else list(MODES)
    rows = measure(args.config.resolve(), args.reps, args.timeout, modes, args.keep)
    print(json.dumps(rows, indent=1) if args.json else "\n" + table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
