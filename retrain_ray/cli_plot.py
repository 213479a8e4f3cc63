"""`retrain-ray plot DIR`: metric curves of a campaign (one line per condition, 95% band across seeds).

    retrain-ray plot logs/c                         # mean reward -> logs/c/plots/mean_reward.{png,svg}
    retrain-ray plot logs/c --metric loss --metric kl --smooth 5 --out /tmp/plots
    retrain-ray plot logs/c --html                  # also logs/c/report.html (curves, table, matrix)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from retrain_ray.campaign import CampaignResults
from retrain_ray.results.plots import PLOT_METRICS, plot_metrics
from retrain_ray.results.report import write_report

DEFAULT_HTML_METRICS = ("mean_reward", "correct_rate", "loss", "kl", "eval_accuracy", "tokens_per_second",
                        "step_time")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray plot", description="Plot a campaign's metric curves.")
    p.add_argument("campaign_dir")
    p.add_argument("--metric", action="append", default=None,
                   help=f"metric to plot, repeatable (default mean_reward): {', '.join(PLOT_METRICS)}, "
                        "or any logged column")
    p.add_argument("--smooth", type=int, default=1, help="rolling mean over N logged steps (default 1: none)")
    p.add_argument("--out", default=None, help="directory for the PNG and SVG files (default DIR/plots)")
    p.add_argument("--html", action="store_true", help="also write DIR/report.html (self-contained)")
    return p


def plot_main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.smooth < 1:
        print(f"--smooth {args.smooth}: must be >= 1", file=sys.stderr)
        return 2
    try:
        results = CampaignResults.from_dir(args.campaign_dir)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    metrics = args.metric or ["mean_reward"]
    out_dir = Path(args.out) if args.out else Path(args.campaign_dir) / "plots"
    try:
        written = plot_metrics(results, metrics, out_dir, smooth=args.smooth)
    except ImportError as exc:
        print(exc, file=sys.stderr)
        return 2
    if not written:
        print(f"none of the metrics {metrics} was logged by a run of {args.campaign_dir}; "
              f"choose from: {', '.join(PLOT_METRICS)}", file=sys.stderr)
        return 2
    for path in written:
        print(path)
    if args.html:
        html_metrics = list(dict.fromkeys([*metrics, *DEFAULT_HTML_METRICS]))
        print(write_report(results, Path(args.campaign_dir) / "report.html", metrics=html_metrics,
                           smooth=args.smooth))
    return 0
