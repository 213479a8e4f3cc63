"""CampaignObserver: every message a campaign's driver gives goes through one observer.

`CampaignObserver` is the base: every hook is a no-op and takes keyword extras (`**info`), as
`RunObserver` (logs/types.py) does for a run, so an observer overrides only the hooks it needs and a hook
or an extra added later breaks none. The base is the silent observer. `ConsoleCampaignObserver` prints
the `[campaign] ...` lines of the CLI: the progress messages (start, each run's transitions, adaptive
decisions, what ran afterwards, the results directory, the live progress line) only with `progress`,
notices and warnings always (a config change the campaign acts on, a torn Tune state, a failed summary
script: a user must see them even from a quiet `Campaign.run(progress=False)`).

Tune pickles its callbacks with the experiment state, and the campaign's callbacks hold the observer:
an observer is picklable (a restored campaign keeps the observer of the session that started it).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ray.tune import Callback


class CampaignObserver:
    """Receives a campaign's messages; every hook is a no-op (the silent observer)."""

    def on_plugins(self, description: str, **info: object) -> None:
        """The plugin code packed for the trials (campaign/plugin_bundle.py)."""

    def on_start(self, name: str, runs: int, campaign_dir: Path, *, resuming: bool, **info: object) -> None:
        """A driver session starts (or resumes) the campaign's runs."""

    def on_run(self, run_name: str, text: str, **info: object) -> None:
        """A run's transition: started, completed, stopped, retried, failed (campaign/tracking.py)."""

    def on_adaptive(self, text: str, **info: object) -> None:
        """An adaptive campaign's decision at a rung (campaign/adaptive/scheduler.py)."""

    def on_afterwards(self, key: str, result: Mapping[str, object], **info: object) -> None:
        """A post-campaign step (squeeze, summary script) ran (campaign/afterwards.py)."""

    def on_afterwards_failed(self, key: str, why: str, **info: object) -> None:
        """A post-campaign step failed; the manifest records it and the campaign's results stand."""

    def on_results(self, campaign_dir: Path, **info: object) -> None:
        """The campaign ended; its results are in `campaign_dir`."""

    def on_notice(self, text: str, **info: object) -> None:
        """Something the driver does that the user did not ask for in so many words (an extension, a
        placement fallback, the cluster joined)."""

    def on_warning(self, text: str, **info: object) -> None:
        """Something went wrong that the campaign survives (a torn Tune state, a copy it could not prune)."""

    def progress_line(self, campaign_dir: Path) -> Callback | None:
        """A Tune callback that shows the campaign's live progress line; None: no line."""
        return None


class ConsoleCampaignObserver(CampaignObserver):
    """The CLI's `[campaign] ...` lines on stdout (a failed post-campaign step on stderr); progress messages
    only with `progress`."""

    def __init__(self, *, progress: bool = True) -> None:
        self.progress = progress

    def _say(self, text: str) -> None:
        if self.progress:
            print(f"[campaign] {text}", flush=True)

    def on_plugins(self, description: str, **info: object) -> None:
        self._say(f"plugins shipped to the trials: {description}")

    def on_start(self, name: str, runs: int, campaign_dir: Path, *, resuming: bool, **info: object) -> None:
        self._say(f"{'resuming' if resuming else 'starting'} {name}: {runs} runs -> {campaign_dir}")

    def on_run(self, run_name: str, text: str, **info: object) -> None:
        self._say(f"{run_name}: {text}")

    def on_adaptive(self, text: str, **info: object) -> None:
        self._say(f"adaptive: {text}")

    def on_afterwards(self, key: str, result: Mapping[str, object], **info: object) -> None:
        self._say(f"{key}: {result}")

    def on_afterwards_failed(self, key: str, why: str, **info: object) -> None:
        print(f"[campaign] warning: {key} failed: {why}", file=sys.stderr, flush=True)

    def on_results(self, campaign_dir: Path, **info: object) -> None:
        self._say(f"results: {campaign_dir}")

    def on_notice(self, text: str, **info: object) -> None:
        print(f"[campaign] {text}", flush=True)

    def on_warning(self, text: str, **info: object) -> None:
        print(f"[campaign] warning: {text}", flush=True)

    def progress_line(self, campaign_dir: Path) -> Callback | None:
        if not self.progress:
            return None
        from retrain_ray.campaign.progress_line import CampaignProgress  # deferred: loads Tune

        return CampaignProgress(campaign_dir)
