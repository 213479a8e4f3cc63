"""Campaign messages go through one observer (campaign/observer.py): the silent base prints nothing, the
console observer prints the CLI's `[campaign] ...` lines (progress messages only with `progress`), and a
caller's own observer receives the same events with their data (here from the post-campaign steps, on a
real manifest and a real summary script)."""

from __future__ import annotations

from pathlib import Path

from helpers import write_campaign

from retrain_ray.campaign.afterwards import run_afterwards
from retrain_ray.campaign.observer import CampaignObserver, ConsoleCampaignObserver
from retrain_ray.config import load_config
from retrain_ray.logs.manifest import Manifest


def _say_everything(observer: CampaignObserver, cdir: Path) -> None:
    observer.on_plugins("my_reward (1 file)")
    observer.on_start("c", 4, cdir, resuming=True)
    observer.on_run("grpo_s1", "started (attempt 1)")
    observer.on_adaptive("rung 4: stop maxrl")
    observer.on_afterwards("summary", {"returncode": 0})
    observer.on_results(cdir)
    observer.on_notice("connected to the Ray cluster at ray://head:10001")
    observer.on_warning("could not prune Tune's checkpoint copies in /x: disk full")
    observer.on_afterwards_failed("summary", "exit code 3 (see summary.log)")


def test_the_silent_observer_prints_nothing_and_the_console_prints_todays_lines(tmp_path, capsys):
    _say_everything(CampaignObserver(), tmp_path)
    assert capsys.readouterr() == ("", "")
    assert CampaignObserver().progress_line(tmp_path) is None

    _say_everything(ConsoleCampaignObserver(), tmp_path)
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "[campaign] plugins shipped to the trials: my_reward (1 file)",
        f"[campaign] resuming c: 4 runs -> {tmp_path}",
        "[campaign] grpo_s1: started (attempt 1)",
        "[campaign] adaptive: rung 4: stop maxrl",
        "[campaign] summary: {'returncode': 0}",
        f"[campaign] results: {tmp_path}",
        "[campaign] connected to the Ray cluster at ray://head:10001",
        "[campaign] warning: could not prune Tune's checkpoint copies in /x: disk full",
    ]
    assert captured.err == "[campaign] warning: summary failed: exit code 3 (see summary.log)\n"
    assert ConsoleCampaignObserver().progress_line(tmp_path) is not None


def test_without_progress_the_console_keeps_only_notices_and_warnings(tmp_path, capsys):
    quiet = ConsoleCampaignObserver(progress=False)
    _say_everything(quiet, tmp_path)
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "[campaign] connected to the Ray cluster at ray://head:10001",
        "[campaign] warning: could not prune Tune's checkpoint copies in /x: disk full",
    ]
    assert "summary failed" in captured.err
    assert quiet.progress_line(tmp_path) is None


class Recording(CampaignObserver):
    def __init__(self) -> None:
        self.events: list[tuple[str, str, object]] = []

    def on_afterwards(self, key: str, result, **info: object) -> None:
        self.events.append(("ran", key, result["returncode"]))

    def on_afterwards_failed(self, key: str, why: str, **info: object) -> None:
        self.events.append(("failed", key, why))


def test_a_callers_observer_receives_the_post_campaign_steps(tmp_path, capsys):
    cdir = tmp_path / "c"
    cdir.mkdir()
    Manifest.create(cdir, {"name": "c"}, [])
    script = tmp_path / "summary.py"
    script.write_text("import sys\nsys.exit(int(sys.argv[2]))\n")
    recording = Recording()
    for code in ("0", "3"):
        toml = write_campaign(tmp_path / "c.toml", campaign={"summary_script": str(script), "summary_args": [code]})
        run_afterwards(cdir, load_config(toml), observer=recording)
    assert recording.events[0] == ("ran", "summary", 0)
    assert recording.events[1][:2] == ("failed", "summary") and "exit code 3" in str(recording.events[1][2])
    assert capsys.readouterr() == ("", "")  # the caller's observer decides what is shown
