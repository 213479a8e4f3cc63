"""Benchmark: an adaptive campaign against the same campaign as a full grid, in one invocation.

The campaign is `configs/adaptive-campaign.toml` (grpo, maxrl and a condition that cannot learn, 2 seeds
each). It runs twice, in this process, each time on a local Ray of its own (`Campaign.run()`):

* **adaptive**: as the file says (`[campaign.adaptive]`): the hopeless condition should be stopped at the
  first rung;
* **grid**: the same config with `[campaign.adaptive]` removed: every run to the end.

Figures: steps spent (the step rows every run logged, de-duplicated), wall time of `Campaign.run()`, and
the winner of each: the adaptive campaign's leader at its last decision; for the grid, the leader of the
same comparison (results/significance.py `compare_to_leader`, on each run's mean of the metric over its
last `window` steps). Prints the ratio of steps and whether the bar of issue 25 holds (the hopeless condition
stopped at the first rung, the same winner, at most 70% of the grid's steps); exit 1 when it does not.

Run from the repository root: `.venv/bin/python benchmarks/adaptive.py [--config FILE] [--root DIR] [--json]`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
DEFAULT_CONFIG = REPO / "configs" / "adaptive-campaign.toml"
BAR = 0.70


def steps_logged(campaign_dir: Path) -> dict[str, int]:
    """Each run's step rows, de-duplicated (a resumed run's repeated steps count once)."""
    from retrain_ray.logs import read_stream

    steps = {}
    for run_dir in sorted((campaign_dir / "runs").glob("*")):
        try:
            steps[run_dir.name] = len(set(read_stream(run_dir)["step"].to_pylist()))
        except (OSError, ValueError):
            steps[run_dir.name] = 0
    return steps


def grid_winner(campaign_dir: Path, metric: str, window: int, mode: str, alpha: float) -> str | None:
    """The leader of `compare_to_leader` on each run's mean of `metric` over its last `window` steps."""
    from retrain_ray.logs import read_stream
    from retrain_ray.results.significance import compare_to_leader

    manifest = json.loads((campaign_dir / "manifest.json").read_text())
    values: dict[str, list[float]] = {}
    for run in manifest["runs"]:
        table = read_stream(Path(run["run_dir"])).to_pandas().drop_duplicates("step", keep="last").sort_values("step")
        column = table[metric].dropna().tail(window)
        if len(column):
            values.setdefault(run["condition"], []).append(float(column.mean()))
    leader, _ = compare_to_leader(values, mode=mode, alpha=alpha)  # type: ignore[arg-type]
    return leader


def run_campaign(config: Any, name: str, root: Path) -> dict[str, Any]:
    from retrain_ray.campaign import Campaign

    started = time.monotonic()
    Campaign(config, name=name, root=root).run(progress=True)
    wall = time.monotonic() - started
    cdir = root / name
    steps = steps_logged(cdir)
    manifest = json.loads((cdir / "manifest.json").read_text())
    return {"dir": str(cdir), "wall_s": round(wall, 1), "steps": sum(steps.values()), "steps_by_run": steps,
            "statuses": {r["run_name"]: r["status"] for r in manifest["runs"]},
            "decisions": (manifest.get("adaptive") or {}).get("decisions", [])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=str(DEFAULT_CONFIG))
    parser.add_argument("--root", default="", help="where both campaigns go (default: a new temp dir)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    from retrain_ray.config import load_config

    config = load_config(args.config)
    plan = config.campaign.adaptive
    if plan is None:
        print(f"{args.config} has no [campaign.adaptive] table", file=sys.stderr)
        return 2
    grid_config = config.model_copy(update={"campaign": config.campaign.model_copy(update={"adaptive": None})})
    root = Path(args.root or tempfile.mkdtemp(prefix="adaptive-bench-")).resolve()
    stamp = time.strftime("%Y%m%dT%H%M%S")
    load_before = os.getloadavg()
    adaptive = run_campaign(config, f"adaptive_{stamp}", root)
    grid = run_campaign(grid_config, f"grid_{stamp}", root)
    load_after = os.getloadavg()
    decisions = adaptive["decisions"]
    adaptive["winner"] = decisions[-1]["leader"] if decisions else None
    grid["winner"] = grid_winner(Path(grid["dir"]), plan.metric, plan.window, plan.mode, plan.alpha)
    first = decisions[0] if decisions else {}
    hopeless_stopped = bool(first.get("stopped")) and first.get("step") == plan.rungs[0]
    ratio = adaptive["steps"] / grid["steps"] if grid["steps"] else float("inf")
    ok = hopeless_stopped and adaptive["winner"] == grid["winner"] and ratio <= BAR
    report = {"config": args.config, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
              "load_average": {"before": load_before, "after": load_after}, "adaptive": adaptive, "grid": grid,
              "steps_ratio": round(ratio, 3), "stopped_at_first_rung": [s["condition"] for s in first.get("stopped", [])],
              "bar_holds": ok}
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print(report)
    return 0 if ok else 1


def _print(report: dict[str, Any]) -> None:
    load = report["load_average"]
    print(f"\n{report['config']}, {report['date']}, load average {load['before'][0]:.1f} -> {load['after'][0]:.1f}")
    print(f"{'campaign':<10} {'steps':>6} {'wall s':>8}  winner")
    for kind in ("adaptive", "grid"):
        r = report[kind]
        print(f"{kind:<10} {r['steps']:>6} {r['wall_s']:>8.1f}  {r['winner']}")
    print(f"steps adaptive / grid: {report['steps_ratio']:.3f} (bar: <= {BAR})")
    print(f"stopped at the first rung: {report['stopped_at_first_rung'] or 'nothing'}")
    for d in report["adaptive"]["decisions"]:
        for s in d["stopped"]:
            print(f"  {s['condition']}: {s['reason']}")
    print("bar holds" if report["bar_holds"] else "BAR DOES NOT HOLD")


if __name__ == "__main__":
    sys.exit(main())
