"""A campaign driver killed with SIGKILL mid-campaign, then resumed with `retrain-ray resume DIR`.

The driver is a child process in its own session with its own local Ray (no RAY_ADDRESS, its own
RAY_TMPDIR), so it cannot join this test session's Ray; after the kill, exactly the processes of
that session (and of that Ray temp dir) are killed. The resumed driver must leave none behind.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_helpers import (
    kill_campaign_when,
    manifest_runs,
    read_manifest,
    resume_campaign,
    segment_steps,
    steps_once,
)
from fault_scenarios import TWIN, final_weights, same_weights
from helpers import GRPO, TINY_RUN, write_campaign

from retrain_ray.logs import read_stream
from retrain_ray.logs.stream import segment_paths

STEPS = 8
CAMPAIGN = {"name": "killed", "seeds": [1, 2], "max_steps": STEPS, "parallel": False, "max_failures": 0,
            "trial_start_timeout_s": 120}
FIRST, SECOND = "grpo+none_s1", "grpo+none_s2"


def _killable(cdir):
    """The first run finished and the second reported its checkpoint after step index 5: its checkpoint
    after step 1 is then >= 2 s old, so Tune's synced experiment state knows it."""
    runs = manifest_runs(cdir)
    return runs is not None and runs[FIRST]["status"] == "completed" and runs[SECOND]["result"].get("step", -1) >= 5


@pytest.mark.extended  # over 20 s: the default suite keeps under 15 minutes
@pytest.mark.slow
@pytest.mark.timeout(600)  # two campaign drivers back to back; 285 s seen at load average 40
def test_killed_driver_resumes_without_rerunning_finished_runs(tmp_path):
    toml = write_campaign(tmp_path / "killed.toml", base=TINY_RUN, campaign=CAMPAIGN)
    cdir = tmp_path / "killed"
    kill_campaign_when(lambda: _killable(cdir), toml, tmp_path, 0.5, prefix="rrk", timeout_s=240,
                       what="a half-done campaign")
    before = read_manifest(cdir)
    assert before["status"] == "running" and {r["run_name"]: r["status"] for r in before["runs"]}[SECOND] == "running"

    rc, left, log = resume_campaign(cdir, tmp_path, prefix="rrr", timeout_s=240)
    assert rc == 0, log[-3000:]
    assert f"results: {cdir}" in log
    # the resumed driver shut its own Ray down on exit: nothing of its session or temp dir is left
    assert left == []

    manifest = read_manifest(cdir)
    assert manifest["status"] == "done" and len(manifest["sessions"]) == 2
    runs = {r["run_name"]: r for r in manifest["runs"]}
    assert (runs[FIRST]["attempts"], runs[SECOND]["attempts"]) == (1, 2)  # the finished run was not rerun
    for run in (FIRST, SECOND):
        assert not steps_once(cdir / "runs" / run, STEPS)  # every step once
    first_raw = read_stream(cdir / "runs" / FIRST, key=None)["step"].to_pylist()
    assert sorted(first_raw) == list(range(STEPS))  # written in one session only
    segments = segment_paths(cdir / "runs" / SECOND, "metrics")
    assert len(segments) == 2
    killed_steps, resumed_steps = (segment_steps(p) for p in segments)
    # the second session continued after one of the run's checkpoints (steps 1, 3, 5), not from scratch
    assert resumed_steps == list(range(resumed_steps[0], STEPS))
    assert resumed_steps[0] in (2, 4, 6) and resumed_steps[0] <= max(killed_steps) + 1


@pytest.mark.extended
@pytest.mark.timeout(900)
@pytest.mark.parametrize("torn", [False, True], ids=["stale", "torn"])
def test_a_run_completed_just_before_the_driver_was_killed_is_not_run_again(tmp_path, torn):
    """The manifest records a run completed when Tune reports it complete; Tune's own experiment state
    reaches the campaign directory seconds later. This driver snapshots Tune's state only once
    (`TUNE_GLOBAL_CHECKPOINT_S` = 3600), so the state the resume restores predates the first run's end
    every time: without the manifest's record the resume ran that run again (attempt 2, steps 2.. logged
    again; issue 15, driver_kill). `torn`: the searcher's state file is also emptied, as a driver killed
    while Tune copied it left it (the resume crashed with `KeyError: 'run_name'`): Tune starts afresh."""
    steps = 4
    toml = write_campaign(tmp_path / "stale.toml", base=TINY_RUN,
                          campaign={**CAMPAIGN, "name": "stale", "max_steps": steps, "trial_start_timeout_s": 240})
    cdir = tmp_path / "stale"
    kill_campaign_when(lambda: (manifest_runs(cdir) or {}).get(FIRST, {}).get("status") == "completed", toml,
                       tmp_path, 0.3, prefix="rrs", timeout_s=400, what=f"{FIRST} completed", poll_s=0.02,
                       TUNE_GLOBAL_CHECKPOINT_S="3600")
    before = read_manifest(cdir)
    assert before["status"] == "running"
    first_segments = segment_paths(cdir / "runs" / FIRST, "metrics")
    if torn:
        (searcher,) = (cdir / "tune").glob("basic-variant-state-*.json")
        searcher.write_bytes(b"")

    rc, _, log = resume_campaign(cdir, tmp_path, prefix="rrs", timeout_s=400)
    assert rc == 0, log[-3000:]
    manifest = read_manifest(cdir)
    assert manifest["status"] == "done" and len(manifest["sessions"]) == 2
    runs = {r["run_name"]: r for r in manifest["runs"]}
    assert runs[FIRST]["attempts"] == 1  # the finished run was not started again
    assert runs[FIRST]["result"] == {r["run_name"]: r for r in before["runs"]}[FIRST]["result"]
    assert runs[SECOND]["status"] == "completed" and not steps_once(cdir / "runs" / SECOND, steps)
    # no step of the finished run was executed again: its rows are the first session's only
    assert segment_paths(cdir / "runs" / FIRST, "metrics") == first_segments
    assert read_stream(cdir / "runs" / FIRST, key=None)["step"].to_pylist() == list(range(steps))
    assert f"{FIRST}: already completed (manifest.json), not run again" in log
    assert ("Tune's experiment state is torn" in log) == torn


def _one_done_one_checkpointed(cdir):
    """Names (finished, unfinished) once one run completed and the other reported its checkpoint after
    step index 3 (so its work directory holds checkpoint_step_3); else None."""
    runs = manifest_runs(cdir) or {}
    done = [n for n, r in runs.items() if r["status"] == "completed"]
    going = [n for n, r in runs.items() if r["status"] == "running" and r["result"].get("step", -1) >= 3]
    return (done[0], going[0]) if done and going else None


@pytest.mark.extended
@pytest.mark.timeout(900)
@pytest.mark.parametrize("elsewhere", [False, True], ids=["same_node", "other_node"])
def test_a_torn_tune_state_resumes_an_unfinished_run_from_its_own_checkpoint(tmp_path, elsewhere):
    """A torn Tune state makes the resume start Tune afresh, which has no checkpoint of the unfinished
    run; the run continues after its own newest verified checkpoint in its work directory (before: from
    step 0, every step trained again). Two runs differing only in name (`save_every` set to its default):
    the finished one is the uninterrupted twin, so the resumed run's final weights must equal its own.
    `elsewhere`: the run's work directory is moved away, as on a node other than the one that wrote it
    (no shared file system): the run continues after Tune's set-aside copy of its checkpoint instead, which
    needs Tune to keep whole copies (`tune_copies = "copy"`; its default pointers name the work directory)."""
    steps = 8
    toml = write_campaign(tmp_path / "own.toml", base=TINY_RUN, conditions=[GRPO, TWIN],
                          campaign={**CAMPAIGN, "name": "own", "seeds": [1], "max_steps": steps,
                                    "trial_start_timeout_s": 240, **({"tune_copies": "copy"} if elsewhere else {})})
    cdir = tmp_path / "own"
    kill_campaign_when(lambda: _one_done_one_checkpointed(cdir), toml, tmp_path, 0.3, prefix="rro", timeout_s=400,
                       what="one run completed, the other checkpointed")
    twin, killed = _one_done_one_checkpointed(cdir)
    (searcher,) = (cdir / "tune").glob("basic-variant-state-*.json")
    searcher.write_bytes(b"")  # as a driver killed while Tune copied it left it
    killed_segments = segment_paths(cdir / "runs" / killed, "metrics")
    if elsewhere:
        (cdir / "runs" / killed / "work").rename(tmp_path / "other-node-work")

    rc, _, log = resume_campaign(cdir, tmp_path, prefix="rro", timeout_s=400)
    assert rc == 0, log[-3000:]
    assert "Tune's experiment state is torn" in log
    runs = {r["run_name"]: r for r in read_manifest(cdir)["runs"]}
    assert runs[twin]["attempts"] == 1 and runs[killed]["attempts"] == 2
    assert runs[killed]["status"] == "completed"
    result = runs[killed]["result"]
    restored = result["resumed_own_step"]  # the step of the checkpoint it continued after
    assert restored >= 3
    if elsewhere:
        copy = Path(result["resumed_path"])
        (aside,) = (cdir / "tune").glob(".torn-*")
        assert result["resumed_from"] == "tune_copy" and copy.parent == aside / killed
        assert json.loads((copy / ".metadata.json").read_text())["run_name"] == killed  # no run_meta.json to read
        assert (f"{killed}: completed at step {steps - 1} (continued after Tune's set-aside copy {copy} of step "
                f"{restored}") in log
    else:
        assert result["resumed_from"] == "own"
        assert f"{killed}: completed at step {steps - 1} (continued after its own checkpoint of step {restored}" in log
    # steps up to the checkpoint were not trained again: the resumed session's segment starts after it
    new_segments = [p for p in segment_paths(cdir / "runs" / killed, "metrics") if p not in killed_segments]
    resumed_steps = [s for p in new_segments for s in segment_steps(p)]
    assert resumed_steps == list(range(restored + 1, steps))
    assert not steps_once(cdir / "runs" / killed, steps)  # every step once
    assert same_weights(final_weights(cdir / "runs" / killed / "work"), final_weights(cdir / "runs" / twin / "work"))
