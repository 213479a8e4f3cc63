"""Benchmark: a shared-trainer campaign with the pooled back pressure steering its batched step, against the same
campaign without back pressure (every member in one batched step), in one invocation (issue 36 item 5).

The campaign is configs/smoke-campaign.toml made a LoRA campaign without the warm start (as
benchmarks/shared_trainer_campaign.py makes it), `shared_trainer = true`, reward `lt` (every step trains),
`--conditions` of its default conditions x its 2 seeds, all at once (`max_workers` = the runs). The steered variant
adds `[backpressure] enabled = true` with `min_batch_size = max_batch_size =` the runs' batch size, so that only
the trainer's capacity moves (the per-run batch-size sweep would change the work). Each variant runs as
`python -m retrain_ray campaign CONFIG` in a fresh process with its own local Ray.

Figures per variant: wall time of the process and peak RSS of its tree; the stepping span (the first logged
step's end to the last's, from the runs' metrics: a fresh process's start-up, which varies by minutes on a loaded
machine, is left out), the aggregate RL steps/s over it (runs x steps / span) and the median step time; for the
steered one, from `backpressure.arrows`: the capacities the pooled fit set (in order), the share of steps at
each and the aggregate tokens/s the members reported at each; the ratio steered / unsteered of steps/s. The load
average is printed with the figures (on a shared machine they are indicative only).

Run: `.venv/bin/python benchmarks/shared_trainer_steering.py [--max-steps 30] [--conditions 2]`.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

import tomllib

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sibling benchmark's campaign runner

from shared_trainer_campaign import run_campaign, variant_toml  # noqa: E402

VARIANTS = ("unsteered", "steered")
DEFAULT_CONDITIONS = (("grpo", "none"), ("maxrl", "none"), ("grpo", "gtpo"), ("maxrl", "gtpo"))


def steering_toml(path: Path, *, steered: bool, max_steps: int, conditions: int) -> tuple[Path, int]:
    """The variant's campaign file and its number of runs."""
    from retrain_ray.config.load import dumps

    variant_toml(path, shared=True, max_steps=max_steps, rank=8, reward="lt")
    data = tomllib.loads(path.read_text())
    chosen = [{"advantage_mode": a, "transform_mode": t} for a, t in DEFAULT_CONDITIONS[:conditions]]
    runs = len(chosen) * len(data["campaign"]["seeds"])
    data["campaign"].update(conditions=chosen, max_workers=runs)
    batch = int(data["training"]["batch_size"])
    data["backpressure"] = ({"enabled": True, "min_batch_size": batch, "max_batch_size": batch} if steered
                            else {"enabled": False})
    path.write_text(dumps(data))
    return path, runs


def steering_figures(campaign_dir: Path) -> dict[str, object]:
    """The capacities set in order, and per capacity the share of steps and the members' summed tokens/s."""
    from retrain_ray.backpressure.arrow_log import read_decision_log

    log = read_decision_log(campaign_dir / "backpressure.arrows").to_pandas()
    log = log[log["resource"].str.contains("/shared_trainer/")]
    order = [int(c) for c in log["capacity"].dropna()]
    visited = [c for i, c in enumerate(order) if i == 0 or c != order[i - 1]]
    runs = log["run"].nunique()
    rate = log["tokens"] / log["step_time_s"].where(log["step_time_s"] > 0)
    per_capacity = {int(c): float(rate[log["capacity"] == c].mean() * runs) for c in sorted(set(order))}
    return {"capacities": visited, "share": {c: n / len(order) for c, n in Counter(order).items()},
            "tokens_per_s": per_capacity}


def stepping_figures(campaign_dir: Path, steps: int) -> dict[str, float]:
    """The span from the first logged step to the last, RL steps/s over it, and the median step time."""
    import pandas as pd

    frames = [pd.read_parquet(f, columns=["wall_time", "step_time_s"])
              for f in sorted((campaign_dir / "runs").glob("*/metrics.parquet"))]
    rows = pd.concat(frames)
    span = (rows["wall_time"].max() - rows["wall_time"].min()).total_seconds()
    return {"span_s": span, "steps_per_s": len(frames) * (steps - 1) / span,
            "median_step_s": float(rows["step_time_s"].median())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-steps", type=int, default=30)
    parser.add_argument("--conditions", type=int, default=2, choices=range(1, len(DEFAULT_CONDITIONS) + 1))
    parser.add_argument("--timeout-s", type=float, default=1800.0)
    parser.add_argument("--keep", type=Path, default=None, help="keep the campaigns under this folder")
    args = parser.parse_args()
    workdir = args.keep or Path(tempfile.mkdtemp(prefix="shared-trainer-steering-"))
    print(f"load average before: {'/'.join(f'{x:.1f}' for x in os.getloadavg())}", flush=True)
    out: dict[str, dict[str, float]] = {}
    runs = 0
    for variant in VARIANTS:
        root = workdir / variant
        root.mkdir(parents=True)
        toml, runs = steering_toml(root / "campaign.toml", steered=variant == "steered", max_steps=args.max_steps,
                                   conditions=args.conditions)
        figures = {**run_campaign(toml, root, args.timeout_s), **stepping_figures(root / "smoke", args.max_steps)}
        out[variant] = figures
        load = "/".join(f"{x:.1f}" for x in os.getloadavg())
        print(f"  {variant:10s} {runs} runs x {args.max_steps} steps: stepping {figures['span_s']:6.1f} s, "
              f"{figures['steps_per_s']:.2f} RL steps/s, median step {figures['median_step_s']:.2f} s; wall "
              f"{figures['wall_s']:.1f} s, peak RSS {figures['peak_rss_mb']:.0f} MB; load after {load}", flush=True)
    steering = steering_figures(workdir / "steered" / "smoke")
    print(f"  steered: capacities set {steering['capacities']}, share of steps {steering['share']}, "
          f"members' tokens/s at each {steering['tokens_per_s']}")
    ratio = out["steered"]["steps_per_s"] / out["unsteered"]["steps_per_s"]
    print(f"  steered / unsteered RL steps/s: x{ratio:.2f}")


if __name__ == "__main__":
    main()
