"""How much a campaign's RL phase raised the reward: per run, the sampled episode reward at the start and at the
end of RL (after any SFT warm start), and per condition the change's mean with its 95% interval across seeds.

`retrain-ray results DIR` shows each run's first and last value and the last value's interval; this adds the
interval of the change itself, which is what "the reward rises" means (docs/benchmarks.md, "Learning" ->
"Multi-turn"). The windows are means over `--window` logged RL steps, so one lucky step does not decide.

    python benchmarks/learning_change.py logs/digit-chain/<campaign dir> [--window 5] [--metric mean_reward]
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

from retrain_ray.results import CampaignResults
from retrain_ray.results.significance import ci95_halfwidth


def start_end(results: CampaignResults, run_name: str, metric: str, window: int) -> tuple[float, float]:
    """The mean of `metric` over the first and the last `window` RL steps of one run."""
    history = results.history(run_name)
    rl = history[history["phase"] == "rl"] if "phase" in history else history
    values = rl[metric].dropna().astype(float).tolist()
    if not values:
        return math.nan, math.nan
    return sum(values[:window]) / len(values[:window]), sum(values[-window:]) / len(values[-window:])


def report(campaign_dir: Path, metric: str, window: int) -> str:
    results = CampaignResults.from_dir(campaign_dir)
    lines = [f"{metric}: mean of the first and last {window} RL steps of each run",
             f"{'run':32} {'seed':>4} {'start':>7} {'end':>7} {'change':>7}"]
    changes: dict[str, list[float]] = defaultdict(list)
    for record in results.runs:
        start, end = start_end(results, record.run_name, metric, window)
        changes[record.condition].append(end - start)
        lines.append(f"{record.run_name:32} {record.seed:>4} {start:7.3f} {end:7.3f} {end - start:+7.3f}")
    lines.append(f"{'condition':32} {'runs':>4} {'change mean':>12} {'95% interval across seeds':>28}")
    for condition, values in changes.items():
        mean, half = sum(values) / len(values), ci95_halfwidth(values)
        lines.append(f"{condition:32} {len(values):>4} {mean:+12.3f}   [{mean - half:+.3f}, {mean + half:+.3f}]")
    return "\n".join(lines)


def series(campaign_dir: Path, metric: str, every: int) -> str:
    """The curve as text: per condition, `metric`'s mean over seeds and over each `every` logged steps."""
    results = CampaignResults.from_dir(campaign_dir)
    by_condition: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for record in results.runs:
        history = results.history(record.run_name)
        for step, value in zip(history["step"], history[metric], strict=True):
            if value == value:  # NaN: a warm-start step logs no reward
                by_condition[record.condition][int(step) // every].append(float(value))
    lines = [f"{metric}, mean over seeds and {every} steps (warm-start steps log none)"]
    for condition, buckets in by_condition.items():
        cells = [f"{b * every}-{b * every + every - 1}: {sum(v) / len(v):.3f}" for b, v in sorted(buckets.items())]
        lines.append(f"{condition}: " + ", ".join(cells))
    return "\n".join(lines)


def held_out(campaign_dir: Path) -> str:
    """Greedy evaluation on the held-out split (`eval_every`): per condition and step, the mean over seeds."""
    long = CampaignResults.from_dir(campaign_dir).history()
    rows = long[long["metric"].isin(["eval_mean_reward", "eval_correct_rate"])]
    if rows.empty:
        return "no held-out evaluation logged"
    table = rows.pivot_table(index=["condition", "step"], columns="metric", values="value", aggfunc="mean")
    return "held-out, greedy (mean over seeds)\n" + table.round(3).to_string()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python benchmarks/learning_change.py",
                                     description="The change of a campaign's reward over RL, with its interval.")
    parser.add_argument("campaign_dir", type=Path)
    parser.add_argument("--metric", default="mean_reward")
    parser.add_argument("--window", type=int, default=5, help="RL steps averaged at the start and at the end")
    parser.add_argument("--every", type=int, default=5, help="steps per point of the printed curve (0: none)")
    args = parser.parse_args(argv)
    print(report(args.campaign_dir, args.metric, args.window))
    if args.every > 0:
        print(series(args.campaign_dir, args.metric, args.every))
    print(held_out(args.campaign_dir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
