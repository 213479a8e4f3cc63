"""`retrain-ray bottleneck DIR`: the share of each step's wall time per part, per run and per condition,
with a verdict naming the bottleneck and the knob to turn (`retrain_ray/results/bottleneck.py`).

    retrain-ray bottleneck logs/c                 # a campaign, or a run directory, or a folder of them
    retrain-ray bottleneck logs/c --json
    retrain-ray bottleneck logs/c --plot shares.png   # stacked bars per condition (needs matplotlib)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from retrain_ray.results.bottleneck import PARTS, Breakdown, breakdown, by_condition


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray bottleneck",
                                description="Where each step's wall time goes, and the knob to turn.")
    p.add_argument("dir", help="a run directory, a campaign directory, or a directory holding them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="stacked bars per condition")
    return p


def find_runs(directory: Path) -> list[Path]:
    """Directories holding a metrics log: DIR itself, or those below it."""
    if any(directory.glob("metrics*.arrows")):
        return [directory]
    return sorted({path.parent for path in directory.rglob("metrics*.arrows")})


def _read_rows(run_dir: Path) -> list[dict[str, Any]]:
    # deferred: pyarrow, only once a run was found
    from retrain_ray.logs import read_stream

    return read_stream(run_dir, name="metrics").to_pylist()


def _line(name: str, b: Breakdown) -> str:
    shares = "  ".join(f"{part} {b.shares[part]:5.1%}" for part in PARTS)
    return f"  {name}: {b.steps} steps, {b.step_time_s:.1f} s  {shares}\n    -> {b.bottleneck}: {b.knob}"


def _plot(conditions: dict[str, Breakdown], path: Path) -> None:
    # deferred: matplotlib is an optional extra (the same message as `retrain-ray plot`)
    from retrain_ray.results.plots import use_agg

    use_agg()
    # deferred: matplotlib is an optional extra, imported only when used
    import matplotlib.pyplot as plt

    names = list(conditions)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.2 * len(names) + 2), 4))
    bottom = [0.0] * len(names)
    for part in PARTS:
        values = [conditions[name].shares[part] for name in names]
        ax.bar(names, values, bottom=bottom, label=part)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax.set_ylabel("share of step wall time")
    ax.set_ylim(0, 1)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def bottleneck_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    directory = Path(args.dir)
    if not directory.is_dir():
        print(f"{directory}: not a directory; pass a run or campaign directory (e.g. logs/<name>)", file=sys.stderr)
        return 2
    runs: dict[str, tuple[str, list[dict[str, Any]]]] = {}
    for run_dir in find_runs(directory):
        rows = _read_rows(run_dir)
        if rows:
            condition = str(rows[-1].get("condition") or run_dir.name)
            runs[str(run_dir.relative_to(directory)) if run_dir != directory else run_dir.name] = (condition, rows)
    if not runs:
        print(f"{directory}: no logged steps (metrics*.arrows) in it or below it; has a run logged a step yet?",
              file=sys.stderr)
        return 2
    per_run = {name: breakdown(rows) for name, (_c, rows) in runs.items()}
    conditions = by_condition(runs)
    if args.plot:
        try:
            _plot(conditions, Path(args.plot))
        except ImportError as exc:
            print(exc, file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps({"runs": {n: {"condition": runs[n][0], **b.to_dict()} for n, b in per_run.items()},
                          "conditions": {n: b.to_dict() for n, b in conditions.items()}}, indent=2))
        return 0
    print("per run:")
    for name, b in per_run.items():
        print(_line(name, b))
    print("per condition:")
    for name, b in conditions.items():
        print(_line(name, b))
    if args.plot:
        print(args.plot)
    return 0


def main(argv: list[str]) -> int:
    return bottleneck_main(argv)
