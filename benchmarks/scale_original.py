"""The original (PyPI `retrain` 0.3.0) as the baseline of benchmarks/scale.py (`--original`, issue 38 item 1).

The original runs a campaign as one `python -m retrain.cli RUN.toml` subprocess per run, `max_workers` at a
time (its `retrain CAMPAIGN.toml` with `parallel = true`). Here it runs the same cheap job as the product's
`--trainer command` campaign: the same seeds, `max_steps`, `max_workers` and shell command (which writes two
rows and an adapter folder and exits), timed the same way: wall from the start of its driver process to its
exit, overhead per run = (wall - the runs' own time / max_workers) / runs. Neither side's command rows carry
times, so the runs' own time is 0 on both: the overhead is the orchestration's whole cost per run.

The original cannot run `--trainer tiny`: its local backend loads a Hugging Face model through transformers
(`AutoModelForCausalLM.from_pretrained`), and this machine has no weights to load and no Hub to fetch them.

It is not installed into the project's environment: an installed `retrain` would shadow the plugin-compat
names (retrain_ray/compat: `import retrain` for plugins written for the original only works where the
original is absent, and tests/plugin_loading checks that). `make bench-original` installs it beside the
project, `pip install --no-deps --target .original retrain==0.3.0` (its dependencies, transformers, peft,
datasets, safetensors and requests, are the project's own, at the locked versions), and this module puts
that folder on the baseline's PYTHONPATH only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ORIGINAL_DIR = REPO / ".original"  # where `make bench-original` installs it
VERSION = "0.3.0"


def _env(path: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(path), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def original_version(path: Path) -> tuple[str | None, str]:
    """(the importable original's version, "") or (None, why it cannot run)."""
    probe = "import importlib.metadata as m, retrain.cli, retrain.campaign; print(m.version('retrain'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_env(path),
                         timeout=300, check=False)
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return None, (f"the original (`retrain` {VERSION}) does not import from {path} ({last}); install it there "
                      f"with `make bench-original` (pip install --no-deps --target {path} retrain=={VERSION})")
    return out.stdout.strip(), ""


def original_toml(path: Path, *, runs: int, steps: int, workers: int, command: str) -> Path:
    """The original's campaign of the product's `--trainer command` job. The command is written as JSON, whose
    escapes TOML reads alike; it must hold no newline character: the original writes each run's TOML with
    backslashes and quotes escaped but newlines left raw, which its own TOML reader then refuses."""
    if "\n" in command:
        raise ValueError("the command holds a newline character, which the original's per-run TOML cannot hold")
    path.write_text(
        "[model]\nmodel = \"none: the command trains nothing\"\n\n"
        f"[training]\ntrainer = \"command\"\ntrainer_command = {json.dumps(command)}\n\n"
        f"[campaign]\nseeds = {list(range(1, runs + 1))}\nmax_steps = {steps}\nparallel = true\n"
        f"max_workers = {workers}\n\n"
        "[[campaign.conditions]]\nadvantage_mode = \"grpo\"\ntransform_mode = \"none\"\n")
    return path


def measure_original(runs: int, *, steps: int, workers: int, command: str, workdir: Path, path: Path,
                     timeout_s: float) -> dict[str, float]:
    """The original's campaign of `runs` runs in `workdir/original<runs>`: wall, runs completed, overhead per run."""
    home = workdir / f"original{runs}"
    home.mkdir(parents=True)
    toml = original_toml(home / "campaign.toml", runs=runs, steps=steps, workers=workers, command=command)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-m", "retrain.cli", str(toml)], capture_output=True, text=True,
                         env=_env(path), cwd=home, timeout=timeout_s, check=False)
    wall = time.perf_counter() - start
    manifests = sorted(home.glob("logs/campaign_*/manifest.json"))
    if out.returncode != 0 or not manifests:
        raise RuntimeError(f"the original's {runs}-run campaign failed (exit {out.returncode}):\n"
                           f"{out.stdout[-1500:]}\n{out.stderr[-1500:]}")
    entries = json.loads(manifests[-1].read_text())["runs"]
    completed = sum(1 for r in entries if r.get("returncode") == 0)
    own = 0.0  # the command's rows carry no times (as the product's command runs'): see the module docstring
    return {"runs": runs, "completed": completed, "wall_s": wall, "overhead_per_run_s": (wall - own / workers) / runs}
