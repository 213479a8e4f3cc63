"""`retrain-ray status [DIR=logs] [--json] [--all|--active] [--watch]` and `top`: runs and campaigns.

DIR is a run directory (`retrain-ray train`'s log_dir), a campaign directory, or a directory holding
runs and campaigns (the original's `retrain status logs`). Campaigns show their condition x seed matrix
(results/status.py); standalone runs one line each with the original's fields (results/run_status.py).
`--watch` redraws both in place (results/live.py). Exit 2 when DIR holds neither.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def _parser() -> argparse.ArgumentParser:
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
    args = _parser().parse_args(argv)
    view = args.view or "default"
    if args.watch:
        # deferred: loads rich and pandas, which importing this module does not need
        from retrain_ray.results.live import watch

        return watch(Path(args.root), interval_s=args.interval, count=args.count, stale_after_s=args.stale_after,
                     view=view)
    # deferred: loads pandas, which importing this module does not need
    from retrain_ray.results.run_status import find_runs, run_summary
    from retrain_ray.results.status import campaign_status, find_campaigns, visible

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


def _banner(campaigns: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    """The original's banner: `Campaigns: N running, ... | Runs: a running, s stale, c done`."""
    states = [st["status"] or "unknown" for st in campaigns]
    camp = ", ".join(f"{states.count(s)} {s}" for s in dict.fromkeys(states)) or "none"
    count = {s: sum(r["status"] == s for r in runs) for s in ("running", "stale", "completed")}
    return (f"Campaigns: {camp}  |  Runs: {count['running']} running, {count['stale']} stale, "
            f"{count['completed']} done")


def _print_campaign(st: dict[str, Any]) -> None:
    import pandas as pd  # deferred: loads pandas, which importing this module does not need

    from retrain_ray.cli_campaign import _print_table  # deferred: loads rich
    from retrain_ray.results.live import summary_line  # deferred: loads rich and pandas

    print(f"{summary_line(st)}  ({st['dir']})")
    rows = [{"condition": cond, **{f"s{s}": cells.get(str(s), "") for s in st["seeds"]}}
            for cond, cells in st["matrix"].items()]
    _print_table(pd.DataFrame(rows), st["campaign"])


def _print_runs(runs: list[dict[str, Any]]) -> None:
    # deferred: loads rich, which importing this module does not need
    from retrain_ray.results.live import run_line

    for summary in runs:
        print(run_line(summary))


if __name__ == "__main__":
    sys.exit(status_main(sys.argv[1:]))
