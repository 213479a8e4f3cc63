"""CLI verbs for campaigns: `retrain-ray FILE` (campaign), `resume DIR` (`results`, `status`: results.py).

Each is a function `*_main(argv) -> exit code`, wired into `retrain_ray.cli` by the CLI owner.
Exit codes: 0 all runs completed, 1 some run failed, 2 bad input (config, directory; a campaign
directory another driver holds), 130 stopped by Ctrl-C (143 by SIGTERM).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from retrain_ray.cli.interrupts import Stops, sigterm_as_ctrl_c
from retrain_ray.cli.results import _print_table, results_main
from retrain_ray.results.untrained import campaign_untrained_lines

_EPILOG = "Set RAY_ADDRESS (or --address) to use a running cluster; without it a local Ray is started."


def _learning_table(results):
    """Per condition: mean reward at the first and the last logged RL step (mean over seeds, 95% CI)."""
    # deferred: loads pandas, which importing this module does not need
    import pandas as pd

    # deferred: loads ray, which importing this module does not need
    from retrain_ray.results.significance import ci95_halfwidth

    df = results.get_dataframe()
    rows = []
    for condition, group in df.groupby("condition", sort=False):
        first = [float(v) for v in group.get("first_mean_reward", pd.Series(dtype=float)).dropna()]
        last = [float(v) for v in group.get("last_mean_reward", pd.Series(dtype=float)).dropna()]
        rows.append({
            "condition": condition,
            "runs": len(group),
            "failed": int((group["status"] == "failed").sum()),
            "reward first": sum(first) / len(first) if first else float("nan"),
            "reward last": sum(last) / len(last) if last else float("nan"),
            "last ci95": ci95_halfwidth(last),
        })
    return pd.DataFrame(rows)


def _finish(results) -> int:
    _print_table(_learning_table(results), f"campaign {results.manifest.name} ({results.campaign_dir})")
    _, comparisons = results.compare("mean_reward")
    for comparison in comparisons:   # the verdicts `retrain-ray results` tabulates, one line each
        print(comparison.describe())
    for line in campaign_untrained_lines((r.run_name, r.metrics_dataframe) for r in results):
        print(f"warning: {line}", file=sys.stderr)
    for run, err in results.error_by_run.items():
        print(f"FAILED {run}: {err.splitlines()[-1] if err else ''}", file=sys.stderr)
    print(f"results: {results.campaign_dir}")
    return 1 if results.errors else 0


DASHBOARD_HELP = ("start the Ray dashboard (http://127.0.0.1:8265) with the local Ray this command starts; "
                  "off by default: a local campaign starts faster without it")


def _run(make_campaign, address: str | None, dashboard: bool = False) -> int:
    # deferred: loads ray, which importing this module does not need
    from retrain_ray.campaign.plan import CampaignError

    try:
        campaign = make_campaign()
    except (CampaignError, FileNotFoundError) as exc:
        print(exc, file=sys.stderr)
        return 2
    except Exception as exc:  # ConfigError and friends: report without a traceback
        if type(exc).__name__ != "ConfigError":
            raise
        print(exc, file=sys.stderr)
        return 2
    with sigterm_as_ctrl_c() as stops:
        try:
            return _finish(campaign.run(address=address, dashboard=dashboard))
        except CampaignError as exc:
            print(exc, file=sys.stderr)
            return 2
        except KeyboardInterrupt:  # Tune's graceful stop (CampaignInterrupted), or a second Ctrl-C
            return _interrupted(campaign.campaign_dir, address, stops)


def _interrupted(campaign_dir: Path, address: str | None, stops: Stops) -> int:
    """Where each run stopped and the command that continues the campaign; exit 130 (143 on SIGTERM)."""
    # deferred: loads ray, which importing this module does not need
    from retrain_ray.campaign.resume.interrupted import run_lines

    lines = run_lines(campaign_dir)
    print(f"\ninterrupted by {stops.name()}: campaign {campaign_dir} stopped", file=sys.stderr)
    if not lines:
        print("  no run had started; run the same command again", file=sys.stderr)
        return stops.exit_code()
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    command = ["retrain-ray", "resume", str(campaign_dir), *(["--address", address] if address else [])]
    print(f"  continue with: {shlex.join(command)}", file=sys.stderr)
    return stops.exit_code()


def campaign_main(argv: list[str]) -> int:
    """`retrain-ray CAMPAIGN.toml [--name N] [--root DIR] [--address A] [overrides...]`."""
    parser = argparse.ArgumentParser(prog="retrain-ray", description="Run a campaign on Ray.", epilog=_EPILOG)
    parser.add_argument("config")
    parser.add_argument("--name", default=None, help="campaign name (a named campaign resumes when re-run)")
    parser.add_argument("--root", default=None, help="parent directory of the campaign directory")
    parser.add_argument("--address", default=None)
    parser.add_argument("--dashboard", action="store_true", help=DASHBOARD_HELP)
    args, rest = parser.parse_known_args(argv)

    def make():
        # deferred: loads ray, which importing this module does not need
        from retrain_ray.campaign import Campaign
        from retrain_ray.config import parse_overrides

        overrides = parse_overrides(rest) if rest else None
        return Campaign.from_toml(args.config, overrides, name=args.name, root=args.root)

    return _run(make, args.address, args.dashboard)


def resume_main(argv: list[str]) -> int:
    """`retrain-ray resume CAMPAIGN_DIR`: finishes an interrupted campaign."""
    parser = argparse.ArgumentParser(prog="retrain-ray resume", epilog=_EPILOG)
    parser.add_argument("campaign_dir")
    parser.add_argument("--address", default=None)
    parser.add_argument("--dashboard", action="store_true", help=DASHBOARD_HELP)
    args = parser.parse_args(argv)

    def make():
        # deferred: loads ray, which importing this module does not need
        from retrain_ray.campaign import Campaign

        return Campaign.from_dir(args.campaign_dir)

    return _run(make, args.address, args.dashboard)


if __name__ == "__main__":
    verbs = {"resume": resume_main, "results": results_main}
    argv = sys.argv[1:]
    if argv and argv[0] in verbs:
        sys.exit(verbs[argv[0]](argv[1:]))
    sys.exit(campaign_main(argv))
