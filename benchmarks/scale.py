"""Benchmark: how a campaign's orchestration grows with its run count (issue 38).

Campaigns of `--runs` runs (default 10 and 100) as cheap as a run gets: `--steps` steps (default 2) of the
built-in tiny model (`--trainer tiny`, a checkpoint after every step) or a `trainer = "command"` run whose
shell command writes its rows and an adapter directory and exits (`--trainer command`). Each campaign runs in
a fresh driver process (`python benchmarks/scale.py --child ...`: a new local Ray, as a user runs it; with
`--nodes N` a `ray.cluster_utils.Cluster` of N simulated nodes with a fake GPU each), which times its own
manifest writes (`Manifest.save`) and Tune's experiment-state snapshots (`TuneController.checkpoint`).

Figures per campaign:

* wall: the driver's `Campaign.from_toml(...).run()`, from before the config is read to after Ray stops;
* overhead/run: (wall - the runs' own time / parallelism) / runs, where a run's own time is its steps'
  (from its first step's start, `first_step_at` - `step_time_s`, to its last row's `wall_time`) and the
  parallelism is `max_workers`: what the campaign spends per run beyond computing it;
* first step: from the driver's start to the first run's first step (with `--nodes`, from when every simulated
  node is up: the cluster's own start is `cluster_start_s`);
* driver CPU s (`time.process_time`) and peak RSS (`ru_maxrss`) of the driver process;
* manifest: its final size, how many times it was written whole and the total and largest write time, and
  the run events appended between (logs/manifest_events.py): how many and their total time;
* Tune state: the newest `experiment_state-*.json` size and the total time of Tune's snapshots;
* directory: the campaign directory's size, its runs' own directories' size and their ratio (<= 1.25: each
  checkpoint stored once).

With `--original` (and `--trainer command`), the original (PyPI `retrain` 0.3.0: one subprocess per run) runs
the same job at the same run counts (up to `--original-max-runs`, default 100) and parallelism in the same
invocation, timed the same way (benchmarks/scale_original.py), and the product's wall and overhead per run are
printed against it. Installed beside the project, not into it: `make bench-original`.

Then the ratio of each figure per tenfold of runs (from one run count to the next, normalised to x10 when
they are not tenfold apart). Figures depend on the load of the machine: the header states `uptime`'s.

Run: `.venv/bin/python benchmarks/scale.py [--runs 10 100] [--trainer tiny|command] [--workers 2]
[--nodes 16] [--original] [--json] [--keep DIR]`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_original import ORIGINAL_DIR, measure_original, original_version  # noqa: E402  (this folder's)
from scale_probe import CpuProbe, spent_between, wait_quiet  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
COMMAND = ('mkdir -p {adapter_path} && printf \'{{"step": 0, "loss": 1.0}}\\n{{"step": 1, "loss": 0.5}}\\n\' '
           '> {log_dir}/metrics.jsonl')


def campaign_toml(path: Path, *, runs: int, steps: int, workers: int, trainer: str) -> Path:
    """A campaign of `runs` seeds of one condition, each `steps` steps of the built-in tiny model (or a command),
    on CPU (the simulated nodes' GPUs are fake: torch cannot use them, so runs are placed by their CPUs)."""
    training = ("batch_size = 2\ngroup_size = 4\nmax_tokens = 4\nlr = 3e-3\nsave_every = 1\n"
                "keep_last_checkpoints = 2\nsft_warmup_steps = 0\n")
    if trainer == "command":
        training += f"trainer = \"command\"\ntrainer_command = {json.dumps(COMMAND)}\n"
    path.write_text(
        "[model]\nmodel = \"builtin:tiny\"\nfinetune = \"lora\"\nlora_rank = 4\n\n"
        "[backend]\ndevices = \"cpu\"\n\n"
        "[data]\nsource = \"builtin\"\ntask = \"first_digit\"\n\n"
        "[reward]\ntype = \"custom\"\ncustom_module = \"operator:lt\"\n\n"
        f"[training]\n{training}\n"
        f"[logging]\nlog_dir = \"{path.parent}/logs\"\n\n"
        f"[campaign]\nname = \"scale{runs}\"\nseeds = {list(range(1, runs + 1))}\nmax_steps = {steps}\n"
        f"parallel = true\nmax_workers = {workers}\nmax_failures = 0\ntrial_start_timeout_s = 600\n\n"
        "[[campaign.conditions]]\nadvantage_mode = \"grpo\"\ntransform_mode = \"none\"\n")
    return path


class Timed:
    """Wraps `owner.name` to count its calls and sum (and max) their wall time."""

    def __init__(self, owner: object, name: str) -> None:
        self.calls, self.total_s, self.max_s = 0, 0.0, 0.0
        original: Callable[..., object] = getattr(owner, name)

        def timed(*args: object, **kwargs: object) -> object:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                self.calls, self.total_s, self.max_s = self.calls + 1, self.total_s + spent, max(self.max_s, spent)

        setattr(owner, name, timed)

    def figures(self) -> dict[str, float]:
        return {"calls": self.calls, "total_s": self.total_s, "max_s": self.max_s}


def child(toml: Path, root: Path, nodes: int, *, probe: bool = False, settle: bool = False) -> None:
    """The driver process: runs the campaign and prints its own figures as one JSON line. With `nodes` the
    simulated cluster is started first and the clock starts once every node is up: on a real cluster the
    nodes are there before a campaign is submitted, and starting 16 raylets on this machine's 2 cores is the
    simulation's cost, not the campaign's (it is reported as `cluster_start_s`). `settle`: the clock starts once
    the nodes' processes have also finished starting (benchmarks/scale_probe.py); `probe`: the CPU of every
    process below the driver is sampled by kind, to say where the time to the first step goes."""
    cluster_start = time.perf_counter()
    cluster = None
    if nodes:
        from ray.cluster_utils import Cluster

        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
        for _ in range(nodes):
            cluster.add_node(num_cpus=1, num_gpus=1)
        cluster.wait_for_nodes()
        import ray

        ray.init(address=cluster.address, include_dashboard=False)
    settle_s = wait_quiet() if settle else 0.0
    cluster_start_s = time.perf_counter() - cluster_start
    sampler = CpuProbe() if probe else None
    started_at, start = time.time(), time.perf_counter()
    from ray.tune.execution.tune_controller import TuneController

    from retrain_ray.campaign import Campaign
    from retrain_ray.logs import manifest as manifest_module

    manifest, tune_state = Timed(manifest_module.Manifest, "save"), Timed(TuneController, "checkpoint")
    appends = Timed(manifest_module, "append_events")  # a run's change: one line (logs/manifest_events.py)
    Campaign.from_toml(toml, root=root).run(progress=False)
    wall = time.perf_counter() - start
    timeline = sampler.timeline if sampler is not None else []
    if sampler is not None:
        sampler.stop()
    if cluster is not None:
        import ray

        ray.shutdown()
        cluster.shutdown()
    print("SCALE " + json.dumps({
        "started_at": started_at, "wall_s": wall, "driver_cpu_s": time.process_time(), "cluster_start_s": cluster_start_s,
        "driver_peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "manifest_writes": manifest.figures(), "manifest_appends": appends.figures(),
        "tune_snapshots": tune_state.figures(), "settle_s": settle_s, "cpu_timeline": timeline}))


def size(path: Path) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files
               if not os.path.islink(os.path.join(d, f)))


def own_time(result: dict[str, object]) -> float:
    """A run's steps' own time: from its first step's start to its last row (0 when it logged none)."""
    first, last, step = (result.get(k) for k in ("first_step_at", "wall_time", "step_time_s"))
    if not all(isinstance(v, (int, float)) for v in (first, last, step)):
        return 0.0
    return max(0.0, float(last) - float(first) + float(step))  # pyright: ignore[reportArgumentType]


def measure(runs: int, args: argparse.Namespace, workdir: Path) -> dict[str, float]:
    toml = campaign_toml(workdir / f"scale{runs}.toml", runs=runs, steps=args.steps, workers=args.workers,
                         trainer=args.trainer)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    flags = [*(["--probe"] if args.probe else []), *(["--settle"] if args.settle else [])]
    out = subprocess.run([sys.executable, __file__, "--child", str(toml), str(workdir / "campaigns"),
                          "--nodes", str(args.nodes), *flags], capture_output=True, text=True, env=env,
                         timeout=args.timeout_s, cwd=workdir, check=False)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("SCALE ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"the {runs}-run campaign failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    driver = json.loads(lines[-1].removeprefix("SCALE "))
    cdir = workdir / "campaigns" / f"scale{runs}"
    manifest = json.loads((cdir / "manifest.json").read_text())
    done = [r for r in manifest["runs"] if r["status"] == "completed"]
    own = sum(own_time(r["result"]) for r in done)
    firsts = [float(r["result"]["first_step_at"]) for r in done if "first_step_at" in r["result"]]
    states = sorted((cdir / "tune").glob("experiment_state-*.json"))
    to_first = spent_between(driver["cpu_timeline"], driver["started_at"], min(firsts)) if firsts else {}
    runs_size = size(cdir / "runs")
    return {
        "runs": runs, "completed": len(done), "wall_s": driver["wall_s"], "cluster_start_s": driver["cluster_start_s"],
        "overhead_per_run_s": (driver["wall_s"] - own / args.workers) / runs,
        "runs_own_s": own, "first_step_s": (min(firsts) - driver["started_at"]) if firsts else math.nan,
        "driver_cpu_s": driver["driver_cpu_s"], "driver_peak_rss_mb": driver["driver_peak_rss_mb"],
        "manifest_kb": (cdir / "manifest.json").stat().st_size / 1024,
        "manifest_writes": driver["manifest_writes"]["calls"], "manifest_write_s": driver["manifest_writes"]["total_s"],
        "manifest_write_max_ms": driver["manifest_writes"]["max_s"] * 1e3,
        "manifest_appends": driver["manifest_appends"]["calls"], "manifest_append_s": driver["manifest_appends"]["total_s"],
        "tune_state_kb": states[-1].stat().st_size / 1024 if states else 0.0,
        "tune_snapshot_s": driver["tune_snapshots"]["total_s"], "tune_snapshots": driver["tune_snapshots"]["calls"],
        "dir_mb": size(cdir) / 2**20, "runs_mb": runs_size / 2**20,
        "dir_over_runs": size(cdir) / runs_size if runs_size else math.nan,
        "settle_s": driver["settle_s"], "cpu_to_first_step_by_kind": to_first,
    }


COLUMNS = ("runs", "completed", "wall_s", "overhead_per_run_s", "first_step_s", "driver_cpu_s", "driver_peak_rss_mb",
           "manifest_kb", "manifest_writes", "manifest_write_s", "manifest_write_max_ms", "manifest_appends",
           "manifest_append_s", "tune_state_kb",
           "tune_snapshot_s", "dir_mb", "runs_mb", "dir_over_runs")
# figures whose growth per tenfold of runs is shown (x10 runs: 10x is linear, per-run figures ~1x)
GROWTH = ("wall_s", "overhead_per_run_s", "driver_cpu_s", "driver_peak_rss_mb", "manifest_kb", "manifest_write_s",
          "tune_state_kb", "tune_snapshot_s", "dir_mb")


def table(rows: list[dict[str, float]]) -> str:
    lines = [" | ".join(COLUMNS), " | ".join("---" for _ in COLUMNS)]
    lines += [" | ".join(f"{row[c]:.3g}" if isinstance(row[c], float) else str(row[c]) for c in COLUMNS) for row in rows]
    for before, after in zip(rows, rows[1:], strict=False):
        tenfolds = math.log10(after["runs"] / before["runs"])
        growth = {c: (after[c] / before[c]) ** (1 / tenfolds) if before[c] else math.nan for c in GROWTH}
        lines.append(f"\nper tenfold of runs, {before['runs']} -> {after['runs']}: "
                     + ", ".join(f"{c} x{g:.2f}" for c, g in growth.items()))
    return "\n".join(lines)


def versus_original(rows: list[dict[str, float]], originals: list[dict[str, float]]) -> str:
    """The original's figures and the product's against them, run count by run count."""
    lines = ["original (one subprocess per run): runs | completed | wall_s | overhead_per_run_s", "--- | --- | --- | ---"]
    lines += [f"{o['runs']} | {o['completed']} | {o['wall_s']:.3g} | {o['overhead_per_run_s']:.3g}" for o in originals]
    product = {r["runs"]: r for r in rows}
    for o in originals:
        mine = product[o["runs"]]
        lines.append(f"{o['runs']} runs, product / original: wall x{mine['wall_s'] / o['wall_s']:.2f}, overhead per run "
                     f"{mine['overhead_per_run_s']:.3g} s / {o['overhead_per_run_s']:.3g} s = "
                     f"x{mine['overhead_per_run_s'] / o['overhead_per_run_s']:.2f}")
    return "\n".join(lines)


def original_baseline(args: argparse.Namespace, workdir: Path) -> list[dict[str, float]]:
    """The original's campaigns at the asked run counts (up to --original-max-runs); [] (saying why) when it
    cannot run."""
    if not args.original:
        return []
    version, why = original_version(args.original_path)
    if version is None:
        print(f"original baseline: not run: {why}", flush=True)
        return []
    rows: list[dict[str, float]] = []
    for runs in [r for r in args.runs if r <= args.original_max_runs]:
        rows.append(measure_original(runs, steps=args.steps, workers=args.workers, command=COMMAND, workdir=workdir,
                                     path=args.original_path, timeout_s=args.timeout_s))
        print(f"original {version}, {runs} runs: {json.dumps(rows[-1])}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2, help="[campaign] max_workers (the parallelism)")
    parser.add_argument("--trainer", choices=("tiny", "command"), default="tiny")
    parser.add_argument("--nodes", type=int, default=0, help="simulated nodes (ray.cluster_utils.Cluster), 0: local Ray")
    parser.add_argument("--timeout-s", type=float, default=3600)
    parser.add_argument("--probe", action="store_true",
                        help="sample the CPU of the driver's processes by kind: where the time to the first step goes")
    parser.add_argument("--settle", action="store_true",
                        help="start the clock once the simulated nodes' processes have settled, not only registered")
    parser.add_argument("--original", action="store_true",
                        help="also run the original (retrain 0.3.0, one subprocess per run) on the same job "
                             "(needs --trainer command; install it with `make bench-original`)")
    parser.add_argument("--original-path", type=Path, default=ORIGINAL_DIR,
                        help=f"the folder holding the original's `retrain` package (default {ORIGINAL_DIR})")
    parser.add_argument("--original-max-runs", type=int, default=100)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", type=Path, help="keep the campaign directories here")
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], args.child[1], args.nodes, probe=args.probe, settle=args.settle)
        return 0
    if args.original and args.trainer != "command":
        parser.error("--original needs --trainer command: the original cannot train the built-in tiny model (its "
                     "local backend loads a Hugging Face model, and there are no weights to load offline)")
    print(f"load at start: {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} {os.getloadavg()[2]:.2f} "
          f"on {os.cpu_count()} cores; trainer={args.trainer} steps={args.steps} max_workers={args.workers} "
          f"nodes={args.nodes or 'local'}", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    rows = []
    try:
        for runs in args.runs:
            rows.append(measure(runs, args, workdir))
            print(f"{runs} runs: {json.dumps(rows[-1])}", flush=True)
        originals = original_baseline(args, workdir)
        figures = {"product": rows, "original": originals} if args.original else rows
        print(json.dumps(figures, indent=1) if args.json else table(rows))
        if originals and not args.json:
            print(versus_original(rows, originals))
    finally:
        if args.keep:
            shutil.copytree(workdir / "campaigns", args.keep, dirs_exist_ok=True)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
