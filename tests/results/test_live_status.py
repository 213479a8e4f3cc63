"""Live status: sparklines, ETAs, `status --watch` redrawn in place, the driver's campaign progress line."""

from __future__ import annotations

import io

import pandas as pd
import pytest
from recorded_campaign import SECONDS_PER_STEP, STEPS, T0, run_name, write_campaign
from rich.console import Console

from retrain_ray.campaign.progress_line import CampaignProgress
from retrain_ray.cli import main
from retrain_ray.results.live import format_duration, watch
from retrain_ray.results.status import SPARK, campaign_status, seconds_per_step, sparkline

MAX_STEPS = 20


def test_sparkline_scales_between_min_and_max():
    assert sparkline(list(range(8))) == SPARK
    assert sparkline([3.0, 3.0]) == SPARK[0] * 2
    assert sparkline([0.0, float("nan"), 1.0]) == SPARK[0] + SPARK[-1]
    assert sparkline([]) == ""


def test_seconds_per_step_uses_wall_clock_spacing_and_step_gaps():
    wall = pd.to_datetime([T0, T0 + 4, T0 + 8, T0 + 10], unit="s", utc=True)
    hist = pd.DataFrame({"step": [0, 2, 4, 5], "wall_time": wall})
    assert seconds_per_step(hist) == pytest.approx(2.0)  # median of 2, 2, 2
    assert seconds_per_step(hist.head(1)) is None
    assert (format_duration(None), format_duration(42), format_duration(185), format_duration(3725)) == \
        ("—", "42s", "3m05s", "1h02m")


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    directory = tmp_path_factory.mktemp("live") / "watched"
    directory.mkdir()
    recorder = write_campaign(directory, close=False, max_steps=MAX_STEPS, parquet_every_s=3600.0,
                              pending=run_name("slow", 3))
    yield directory
    recorder.close()


def test_status_eta_from_recent_step_times(running):
    st = campaign_status(running, stale_after_s=1e12)
    run = next(r for r in st["runs"] if r["run_name"] == run_name("fast", 1))
    assert run["eta_s"] == pytest.approx((MAX_STEPS - STEPS) * SECONDS_PER_STEP)
    assert len(run["reward_sparkline"]) == STEPS and run["reward_sparkline"][-1] == SPARK[-1]
    assert st["counts"]["pending"] == 1 and st["counts"]["running"] == 5
    # the longest running ETA plus the pending run's whole length over 2 concurrent slots
    assert st["eta_s"] == pytest.approx((MAX_STEPS - STEPS) * SECONDS_PER_STEP + MAX_STEPS * SECONDS_PER_STEP / 2)


def test_watch_redraws_in_place(running):
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=140, color_system=None)
    assert watch(running, interval_s=0.01, count=3, console=console, stale_after_s=1e12) == 0
    text = out.getvalue()
    assert text.count("Ctrl-C to stop") == 4  # three frames, and rich Live's final redraw on exit
    assert "\x1b[" in text  # cursor movement: frames overwrite each other
    last = text.rsplit("running 5", 1)[-1]
    assert "seed 1" in last and f"{STEPS}/{MAX_STEPS}" in last and "ETA 16s" in last and SPARK[-1] in last


def test_cli_status_watch_with_a_bounded_count(running, capsys):
    assert main(["status", str(running), "--watch", "--count", "1", "--stale-after", "1e12"]) == 0
    assert "watched [pending]: done 0/6, running 5" in capsys.readouterr().out


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_campaign_progress_line_in_logs_and_on_a_terminal(running):
    logs = io.StringIO()
    progress = CampaignProgress(running, stream=logs, log_every_s=3600.0)
    progress.on_step_end(0, [])
    progress.on_step_end(1, [])  # within log_every_s: no second line
    assert logs.getvalue().count("\n") == 1
    assert logs.getvalue().startswith("[campaign] watched [pending]: done 0/6, running 5")
    terminal = _Terminal()
    progress = CampaignProgress(running, stream=terminal, tty_every_s=0.0)
    progress.on_step_end(0, [])
    progress.on_step_end(1, [])
    progress.on_experiment_end([])
    assert terminal.getvalue().count("\r\x1b[2K") == 3 and terminal.getvalue().endswith("\n")
    assert terminal.getvalue().count("\n") == 1


def test_status_shows_a_deleted_run_directory_as_missing_not_completed(tmp_path, capsys):
    import shutil

    directory = tmp_path / "deleted"
    directory.mkdir()
    write_campaign(directory)
    gone = run_name("fast", 2)
    shutil.rmtree(directory / "runs" / gone)
    st = campaign_status(directory, stale_after_s=1e12)
    states = {r["run_name"]: r for r in st["runs"]}
    assert (states[gone]["status"], states[gone]["step"]) == ("missing", None)
    assert st["counts"]["missing"] == 1 and st["counts"]["completed"] == 5
    assert st["matrix"]["fast"]["2"] == "missing" and st["matrix"]["fast"]["1"] == f"{STEPS} ✓"
    capsys.readouterr()
    assert main(["status", str(directory)]) == 0
    out = capsys.readouterr().out
    assert "done 5/6" in out and "missing 1" in out and "missing" in out.split("\n", 1)[1]


def test_a_started_run_without_a_directory_yet_is_running_not_missing(tmp_path):
    directory = tmp_path / "starting"
    directory.mkdir()
    write_campaign(directory, close=False).close()
    import shutil

    from retrain_ray.logs.manifest import read_manifest

    shutil.rmtree(directory / "runs" / run_name("slow", 1))  # started, no row written yet
    assert read_manifest(directory).runs[0].status == "running"
    st = campaign_status(directory, stale_after_s=1e12)
    assert st["counts"]["missing"] == 0 and st["counts"]["running"] == 6
    assert st["matrix"]["slow"]["1"] == "—"


def test_a_run_paused_at_a_rung_is_counted_paused_not_stale(tmp_path):
    """An adaptive campaign's run waiting at a rung logs nothing while it waits: it is paused, not stale."""
    from retrain_ray.logs.manifest import Manifest
    from retrain_ray.results.live import summary_line

    directory = tmp_path / "adaptive"
    directory.mkdir()
    write_campaign(directory, close=False, max_steps=MAX_STEPS, parquet_every_s=3600.0).close()
    Manifest.load(directory).update_run(run_name("fast", 1), paused_at_rung=10, paused_why="waiting for the decision")
    st = campaign_status(directory, stale_after_s=0.0)  # every quiet running run would be stale
    paused = next(r for r in st["runs"] if r["run_name"] == run_name("fast", 1))
    assert paused["status"] == "paused" and st["matrix"]["fast"]["1"] == f"{STEPS} paused"
    assert st["counts"]["paused"] == 1 and st["counts"]["stale"] == 5
    assert "running 0, paused 1 (waiting for a rung's decision), stale 5" in summary_line(st)


def test_the_progress_lines_status_reads_only_running_runs_logs_and_counts_the_same(tmp_path):
    """`running_only` (the driver's progress line at each redraw): a finished run is read from the manifest
    alone, so its log is never opened; counts and the running runs' states are those of the full status."""
    from retrain_ray.logs.manifest import Manifest

    directory = tmp_path / "progress"
    directory.mkdir()
    write_campaign(directory, close=False, max_steps=MAX_STEPS, parquet_every_s=3600.0).close()
    done = run_name("slow", 2)
    Manifest.load(directory).update_run(done, status="completed", result={"step": STEPS - 1, "mean_reward": 0.25})
    for log in (directory / "runs" / done).glob("metrics*.arrows"):
        log.write_bytes(b"not an arrow stream")  # reading it would fail: the progress view must not
    light = campaign_status(directory, stale_after_s=1e12, running_only=True)
    states = {r["run_name"]: r for r in light["runs"]}
    assert (states[done]["status"], states[done]["step"], states[done]["mean_reward"]) == ("completed", STEPS - 1, 0.25)
    assert light["counts"]["completed"] == 1 and light["counts"]["running"] == 5
    running = run_name("fast", 1)
    (directory / "runs" / done).rename(tmp_path / "aside")  # the full status may read the others now
    reference = {r["run_name"]: r for r in campaign_status(directory, stale_after_s=1e12)["runs"]}
    assert states[running] == reference[running]
