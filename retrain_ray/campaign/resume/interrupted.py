"""A campaign stopped by Ctrl-C or SIGTERM: recorded in its manifest, reported with the command that continues it.

On the first Ctrl-C (or a SIGTERM, retrain_ray/cli/interrupts.py) Ray Tune stops the experiment gracefully:
it saves its experiment state, stops the trials and `Tuner.fit()` returns as if the experiment had ended
(its ResultGrid even counts the stopped trials as terminated). A fit that really ended leaves every run
completed or failed in the manifest (campaign/tracking.py), so a run still pending or running there
means the fit was stopped. The driver then records the interruption (the campaign `interrupted`, its
unfinished runs `pending` again: nothing runs them now) and raises `CampaignInterrupted`, a
`KeyboardInterrupt`, instead of finishing (no compaction, no results table of runs that did not end).
`retrain-ray resume DIR` continues every unfinished run from its last checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from retrain_ray.logs.manifest import Manifest, read_manifest
from retrain_ray.results.status import campaign_status


class CampaignInterrupted(KeyboardInterrupt):
    """`Campaign.run()` was stopped by Ctrl-C or SIGTERM; `retrain-ray resume <campaign_dir>` continues it."""

    def __init__(self, campaign_dir: Path) -> None:
        self.campaign_dir = campaign_dir
        super().__init__(f"campaign interrupted; continue it with: retrain-ray resume {campaign_dir}")


def was_interrupted(campaign_dir: Path) -> bool:
    """Whether `Tuner.fit()` returned before every run ended (Tune's graceful stop on a signal)."""
    return any(r.status in ("pending", "running") for r in read_manifest(campaign_dir).runs)


def record_interruption(campaign_dir: Path) -> None:
    """The manifest says the campaign was interrupted and its unfinished runs wait to be run again."""
    manifest = Manifest.load(campaign_dir)
    runs = tuple(r.model_copy(update={"status": "pending"}) if r.status == "running" else r for r in manifest.record.runs)
    manifest.update(runs=runs, status="interrupted")


def run_lines(campaign_dir: Path) -> list[str]:
    """One line per run: where it stopped (from the manifest and its logs). Empty before the manifest exists."""
    try:
        read_manifest(campaign_dir)
    except (OSError, ValueError):
        return []
    lines: list[str] = []
    for run in campaign_status(campaign_dir)["runs"]:
        step, total, status = run["step"], run.get("max_steps"), run["status"]
        if status == "completed":
            where = "completed"
        elif status == "failed":
            where = "failed (retried from its last checkpoint on resume)"
        elif step is None:
            where = "not started" if not run.get("attempts") else "started, no step logged yet"
        else:
            where = f"stopped after step {step} ({total} steps in all); continues from its last checkpoint"
        lines.append(f"{run['run_name']}: {where}")
    return lines
