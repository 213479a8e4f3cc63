"""Verbs that read runs and campaigns back: `status`/`top`, `results`, `diff`, `plot`, `bottleneck`.

`retrain-ray status [DIR=logs] [--json] [--all|--active] [--watch]` and `top`: runs and campaigns.
DIR is a run directory (`retrain-ray train`'s log_dir), a campaign directory, or a directory holding
runs and campaigns (the original's `retrain status logs`). Campaigns show their condition x seed matrix
(results/status.py); standalone runs one line each with the original's fields (results/status.py).
`--watch` redraws both in place (results/live.py). Exit 2 when DIR holds neither.

`retrain-ray results DIR [--json|--csv] [--metric M] [--wide|--columns A,B]`: one row per run (by default
run, condition, seed, status, steps, the metric's first/last/best and the verdict, to fit 120 columns;
`--wide` every column), the per-condition summary, each condition against the best (Welch + Holm), and
the mean and IQM with bootstrap intervals and P(best better) (results/robust_stats.py).

`retrain-ray diff RUN_A RUN_B [--json]` or `diff CAMPAIGN_DIR COND_A COND_B [--json]`: two runs, or two conditions.

`retrain-ray plot DIR`: metric curves of a campaign (one line per condition, 95% band across seeds).

    retrain-ray plot logs/c                         # mean reward -> logs/c/plots/mean_reward.{png,svg}
    retrain-ray plot logs/c --metric loss --metric kl --smooth 5 --out /tmp/plots
    retrain-ray plot logs/c --html                  # also logs/c/report.html (curves, table, matrix)
    retrain-ray plot logs/c --profile               # also plots/profile_mean_reward.{png,svg}

`retrain-ray bottleneck DIR`: the share of each step's wall time per part, per run and per condition,
with a verdict naming the bottleneck and the knob to turn (`retrain_ray/campaign/bottleneck.py`).

    retrain-ray bottleneck logs/c                 # a campaign, or a run directory, or a folder of them
    retrain-ray bottleneck logs/c --json
    retrain-ray bottleneck logs/c --plot shares.png   # stacked bars per condition (needs matplotlib)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from retrain_ray.results.bottleneck import PARTS, Breakdown

if TYPE_CHECKING:
    import pandas as pd

    from retrain_ray.results.status import CampaignStatus, RunSummary


def _status_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrain-ray status")
    parser.add_argument("root", nargs="?", default="logs", help="a run, a campaign, or a directory of them")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--stale-after", type=float, default=300.0, help="seconds without a row = stale")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--all", dest="view", action="store_const", const="all",
                      help="also campaigns idle for more than 24 h")
    view.add_argument("--active", dest="view", action="store_const", const="active",
                      help="only running runs and campaigns with a running run")
    parser.add_argument("--watch", action="store_true", help="refresh in place until Ctrl-C")
    parser.add_argument("--interval", type=float, default=2.0, help="seconds between --watch refreshes")
    parser.add_argument("--count", type=int, default=None, help="stop --watch after N refreshes")
    return parser


def status_main(argv: list[str]) -> int:
    """Prints the status of the runs and campaigns in DIR; returns the exit code."""
    args = _status_parser().parse_args(argv)
    view = args.view or "default"
    if args.watch:
        # deferred: loads rich and pandas, which importing this module does not need
        from retrain_ray.results.live import watch

        return watch(Path(args.root), interval_s=args.interval, count=args.count, stale_after_s=args.stale_after,
                     view=view)
    # deferred: loads pandas, which importing this module does not need
    from retrain_ray.results.status import campaign_status, find_campaigns, find_runs, run_summary, visible

    root = Path(args.root)
    found = find_campaigns(root)
    run_dirs = find_runs(root, found)
    if not found and not run_dirs:
        print(f"no run (a directory with metrics.arrows) or campaign (a directory with manifest.json) in {root}; "
              "give a run's log_dir, a campaign directory, or the directory holding them", file=sys.stderr)
        return 2
    statuses = [campaign_status(d, stale_after_s=args.stale_after) for d in found]
    shown = [st for st in statuses if visible(st, view)]
    runs = [r for r in (run_summary(d, stale_after_s=args.stale_after) for d in run_dirs)
            if view != "active" or r["status"] == "running"]
    if args.json:
        print(json.dumps({"root": str(root), "runs": runs, "campaigns": shown}, indent=2, default=str))
        return 0
    print(_banner(shown, runs))
    if len(shown) < len(statuses):
        print(f"({len(statuses) - len(shown)} campaign(s) hidden: {'not running' if args.view else 'idle > 24 h'}; "
              "--all shows them)")
    for st in shown:
        _print_campaign(st)
    _print_runs(runs)
    return 0


def top_main(argv: list[str]) -> int:
    """`retrain-ray top [DIR] [--interval S] [--count N]`: `status --watch --active`, as the original."""
    return status_main([*argv, "--watch", "--active"])


def _banner(campaigns: list[CampaignStatus], runs: list[RunSummary]) -> str:
    """The original's banner: `Campaigns: N running, ... | Runs: a running, s stale, c done`."""
    states = [st["status"] or "unknown" for st in campaigns]
    camp = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states)) or "none"
    count = {s: sum(r["status"] == s for r in runs) for s in ("running", "stale", "completed")}
    return (f"Campaigns: {camp}  |  Runs: {count['running']} running, {count['stale']} stale, "
            f"{count['completed']} done")


def _print_campaign(st: CampaignStatus) -> None:
    import pandas as pd  # deferred: loads pandas, which importing this module does not need

    from retrain_ray.results.live import summary_line  # deferred: loads rich and pandas

    print(f"{summary_line(st)}  ({st['dir']})")
    rows = [{"condition": cond, **{f"s{s}": cells.get(str(s), "") for s in st["seeds"]}}
            for cond, cells in st["matrix"].items()]
    _print_table(pd.DataFrame(rows), st["campaign"])


def _print_runs(runs: list[RunSummary]) -> None:
    # deferred: loads rich, which importing this module does not need
    from retrain_ray.results.live import run_line

    for summary in runs:
        print(run_line(summary))


# A table longer than this prints as plain aligned text: rich lays out every cell of a table (about 4 s of CPU
# for the runs table of a 1,000-run campaign), where plain text takes milliseconds and wraps nothing.
RICH_ROWS = 200


def _cell(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _print_table(df, title: str) -> None:
    if len(df) > RICH_ROWS:
        _print_plain(df, title)
        return
    # deferred: loads rich, which importing this module does not need
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for col in df.columns:
        # fold, never "…": a table wider than the terminal wraps a value rather than hiding part of it
        table.add_column(str(col), overflow="fold")
    for row in df.itertuples(index=False):
        table.add_row(*[_cell(v) for v in row])
    Console(width=_console_width()).print(table)


def _print_plain(df, title: str) -> None:
    """`df` as left-aligned columns under a header, one line per row."""
    cells = [[str(c) for c in df.columns], *([_cell(v) for v in row] for row in df.itertuples(index=False))]
    widths = [max(len(line[i]) for line in cells) for i in range(len(df.columns))]
    print(title)
    for line in cells:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


def _console_width() -> int | None:
    """The terminal's width; off a terminal (ray job logs, CI, a pipe) $COLUMNS if set, else 200 (rich
    would squeeze the table into 80 columns)."""
    return None if sys.stdout.isatty() or os.environ.get("COLUMNS", "").isdigit() else 200


def _run_value(metric: str, window: int) -> str:
    """What one run's value of `metric` is, as `CampaignResults.run_values` takes it."""
    from retrain_ray.results.campaign_results import EVAL_METRICS  # deferred: loads pandas and ray

    return "each run's last evaluation" if metric in EVAL_METRICS else f"mean of each run's last {window} values"


def _print_verdicts(verdicts, metric: str, window: int, alpha: float) -> None:
    title = (f"each condition against the best on {metric} ({_run_value(metric, window)}): "
             f"Welch's t, p Holm-adjusted over all pairs, verdict at alpha={alpha:g}")
    if verdicts.empty:
        print(f"{title}: nothing to compare (fewer than two conditions logged {metric})")
        return
    _print_table(verdicts.drop(columns=["metric"]), title)


def _print_robust(conditions, versus_best, metric: str, window: int) -> None:
    # deferred: loads pandas, which importing this module does not need
    from retrain_ray.results.robust_stats import robust_table

    title = (f"{metric} as RL papers report it ({_run_value(metric, window)}): mean and IQM with stratified "
             "bootstrap 95% CIs, P(best better) = the chance a run of the best beats a run of the condition")
    if conditions.empty:
        print(f"{title}: no run logged {metric}")
        return
    _print_table(robust_table(conditions, versus_best), title)


def _results_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrain-ray results")
    parser.add_argument("campaign_dir")
    parser.add_argument("--metric", default="mean_reward",
                        help="logged column the conditions are compared on (default mean_reward)")
    parser.add_argument("--window", type=int, default=10,
                        help="a run's value is the mean of its last WINDOW logged values (default 10)")
    parser.add_argument("--alpha", type=float, default=0.05, help="family-wise error rate (default 0.05)")
    parser.add_argument("--reps", type=int, default=None,
                        help="bootstrap resamples for the IQM and P(best better) intervals (default 10000)")
    view = parser.add_mutually_exclusive_group()
    view.add_argument("--wide", action="store_true", help="every column of the runs and condition tables")
    view.add_argument("--columns", default=None, metavar="A,B,C", help="these columns of the runs table")
    fmt = parser.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true")
    fmt.add_argument("--csv", action="store_true")
    return parser


def results_main(argv: list[str]) -> int:
    """`retrain-ray results DIR [--json|--csv] [--metric M] [--wide|--columns A,B]`: one row per run, the
    per-condition summary, each condition against the best (difference, 95% CI, Holm-adjusted Welch p,
    verdict, seeds), and the mean and IQM with bootstrap intervals and P(best better)."""
    args = _results_parser().parse_args(argv)
    # deferred: loads ray, which importing this module does not need
    from retrain_ray.campaign import CampaignResults
    from retrain_ray.results.compute import describe
    from retrain_ray.results.robust_stats import ROBUST_REPS
    from retrain_ray.results.run_table import condition_view, run_view

    try:
        res = CampaignResults.from_dir(args.campaign_dir)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 2
    df = res.get_dataframe()
    try:
        verdicts = res.significance(args.metric, window=args.window, alpha=args.alpha)
        robust, versus_best = res.robust(args.metric, window=args.window, reps=args.reps or ROBUST_REPS)
    except ValueError as exc:
        print(f"retrain-ray results: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"runs": json.loads(df.to_json(orient="records") or "[]"),
                          "summary": json.loads(res.summary(significance=args.metric).to_json(orient="records") or "[]"),
                          "significance": json.loads(verdicts.to_json(orient="records") or "[]"),
                          "robust": {"metric": args.metric, "window": args.window,
                                     "reps": args.reps or ROBUST_REPS, "seed": 0, "confidence": 0.95,
                                     "conditions": json.loads(robust.to_json(orient="records") or "[]"),
                                     "versus_best": json.loads(versus_best.to_json(orient="records") or "[]")},
                          "eval_change": json.loads(res.eval_change().to_json(orient="records") or "[]"),
                          "compute": res.compute().to_json(),
                          "errors": res.error_by_run}, indent=2))
        return 0
    if args.csv:
        print(df.to_csv(index=False), end="")
        return 0
    columns = args.columns.split(",") if args.columns else None
    try:
        runs = run_view(df, verdicts, args.metric, wide=args.wide, columns=columns)
    except KeyError as exc:
        print(f"retrain-ray results: {exc.args[0]}", file=sys.stderr)
        return 2
    shown = "" if args.wide or columns else f" (first, last, best: {args.metric}; --wide: every column)"
    _print_table(runs, f"runs of {res.manifest.name}{shown}")
    _print_table(condition_view(res.summary(significance=None), args.metric, wide=args.wide),
                 "by condition (mean, std, 95% CI of last values across seeds)")
    _print_verdicts(verdicts, args.metric, args.window, args.alpha)
    _print_robust(robust, versus_best, args.metric, args.window)
    _print_eval_change(res.eval_change())
    print("\n".join(describe(res.compute())))
    missing = [] if df.empty else list(df.loc[df["status"] == "missing", "run_name"])
    if missing:
        print(f"missing: {', '.join(missing)}: the manifest lists them as finished, but their directories "
              f"under {res.campaign_dir / 'runs'} are gone (no logs to read)", file=sys.stderr)
    return 0


def _print_eval_change(changes: pd.DataFrame) -> None:
    """Held-out accuracy before and after training per condition; nothing when no run evaluated twice."""
    if changes.empty:
        return
    shown = changes.assign(**{
        "steps": [f"{a} -> {b}" for a, b in zip(changes["first_step"], changes["last_step"], strict=True)],
        "ci95": [f"[{lo:+.3f}, {hi:+.3f}]" if lo == lo else "-" for lo, hi in
                 zip(changes["ci95_low"], changes["ci95_high"], strict=True)],
    })[["condition", "seeds", "steps", "before", "after", "change", "ci95", "verdict"]]
    _print_table(shown, "held-out eval_correct_rate, first eval -> last (change: mean and 95% CI across seeds)")


def diff_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="retrain-ray diff", description="Compare two runs, or two conditions.",
                                     usage="retrain-ray diff RUN_A RUN_B | CAMPAIGN_DIR COND_A COND_B [--json]")
    parser.add_argument("paths", nargs="+")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # deferred: loads ray, which importing this module does not need
    from retrain_ray.results.compare import diff_conditions, diff_runs

    try:
        if len(args.paths) == 2:
            result = diff_runs(Path(args.paths[0]), Path(args.paths[1]))
        elif len(args.paths) == 3:
            result = diff_conditions(Path(args.paths[0]), args.paths[1], args.paths[2])
        else:
            parser.error("give RUN_A RUN_B, or CAMPAIGN_DIR COND_A COND_B")
    except (FileNotFoundError, KeyError) as exc:
        print(f"error: {exc.args[0] if exc.args else exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print_diff(result)
    return 0


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)


def _print_diff(result: dict[str, Any]) -> None:
    # deferred: loads rich, which importing this module does not need
    from rich.console import Console
    from rich.table import Table

    a, b, delta = result["a"], result["b"], result["delta"]
    table = Table(title="diff (delta = b - a)")
    for col in ("", f"a: {a['label']}", f"b: {b['label']}", "delta"):
        table.add_column(col, overflow="fold")
    table.add_row("runs", str(a["runs"]), str(b["runs"]), "")
    for key in ("steps", "wall_time_s"):
        table.add_row(key, _fmt(a[key]), _fmt(b[key]), _fmt(delta.get(key, "")))
    for group in ("final", "performance", "correct_rate_curve"):
        for key in a[group]:
            table.add_row(f"{group}.{key}", _fmt(a[group][key]), _fmt(b[group][key]), _fmt(delta[group].get(key, "")))
    Console(width=None if sys.stdout.isatty() else 200).print(table)


DEFAULT_HTML_METRICS = ("mean_reward", "correct_rate", "loss", "kl", "eval_accuracy", "tokens_per_second",
                        "step_time")


def _plot_parser() -> argparse.ArgumentParser:
    # deferred: loads pandas and pyarrow, which the other verbs of this module do not need
    from retrain_ray.results.plots import PLOT_METRICS

    p = argparse.ArgumentParser(prog="retrain-ray plot", description="Plot a campaign's metric curves.")
    p.add_argument("campaign_dir")
    p.add_argument("--metric", action="append", default=None,
                   help=f"metric to plot, repeatable (default mean_reward): {', '.join(PLOT_METRICS)}, "
                        "or any logged column")
    p.add_argument("--smooth", type=int, default=1, help="rolling mean over N logged steps (default 1: none)")
    p.add_argument("--out", default=None, help="directory for the PNG and SVG files (default DIR/plots)")
    p.add_argument("--html", action="store_true", help="also write DIR/report.html (self-contained)")
    p.add_argument("--profile", action="store_true",
                   help="also each metric's performance profile (fraction of runs better than each threshold, "
                        "95%% bootstrap band) -> profile_METRIC.{png,svg}")
    return p


def plot_main(argv: list[str]) -> int:
    args = _plot_parser().parse_args(argv)
    # deferred: loads ray, pandas and pyarrow, which the other verbs of this module do not need
    from retrain_ray.campaign import CampaignResults
    from retrain_ray.results.plots import PLOT_METRICS, plot_metrics
    from retrain_ray.results.report import write_report

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
    if args.profile:
        written += _write_profiles(results, metrics, out_dir)
    for path in written:
        print(path)
    if args.html:
        html_metrics = list(dict.fromkeys([*metrics, *DEFAULT_HTML_METRICS]))
        print(write_report(results, Path(args.campaign_dir) / "report.html", metrics=html_metrics,
                           smooth=args.smooth))
    return 0


def _write_profiles(results, metrics: list[str], out_dir: Path) -> list[Path]:
    # deferred: loads pandas and matplotlib, which the other verbs of this module do not need
    from retrain_ray.results.plots import close, plot_profile

    written: list[Path] = []
    for metric in metrics:
        try:
            figure = plot_profile(results, metric, out=out_dir / f"profile_{metric}")
        except ValueError:
            continue
        close(figure)
        written += [out_dir / f"profile_{metric}.png", out_dir / f"profile_{metric}.svg"]
    return written


def _bottleneck_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="retrain-ray bottleneck",
                                description="Where each step's wall time goes, and the knob to turn.")
    p.add_argument("dir", help="a run directory, a campaign directory, or a directory holding them")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--plot", metavar="FILE.png", default=None, help="stacked bars per condition")
    return p


def runs_with_metrics(directory: Path) -> list[Path]:
    """Directories holding a metrics log: DIR itself, or those below it."""
    if any(directory.glob("metrics*.arrows")):
        return [directory]
    return sorted({path.parent for path in directory.rglob("metrics*.arrows")})


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
    args = _bottleneck_parser().parse_args(argv)
    directory = Path(args.dir)
    if not directory.is_dir():
        print(f"{directory}: not a directory; pass a run or campaign directory (e.g. logs/<name>)", file=sys.stderr)
        return 2
    # deferred: pandas and pyarrow, only once a directory is given
    from retrain_ray.results.bottleneck_frames import read_breakdowns

    runs, conditions = read_breakdowns(directory, runs_with_metrics(directory))
    if not runs:
        print(f"{directory}: no logged steps (metrics*.arrows) in it or below it; has a run logged a step yet?",
              file=sys.stderr)
        return 2
    per_run = {name: b for name, (_c, b) in runs.items()}
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
