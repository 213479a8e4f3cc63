"""The manifest's run event log (logs/manifest_events.py): a run's change is one appended line, folded into
`manifest.json` every so many events; every reader sees every recorded change, a torn last line is skipped,
and a compaction between a reader's two reads leaves it a consistent campaign."""

from __future__ import annotations

import json

from retrain_ray.logs.manifest import MANIFEST, Manifest, manifest_text, read_manifest
from retrain_ray.logs.manifest_events import EVENTS, changes_after, read_event_text


def _campaign(tmp_path, runs: int, compact_every: int | None = None) -> Manifest:
    entries = [{"run_name": f"r{i}", "condition": "c", "seed": i, "max_steps": 2} for i in range(runs)]
    made = Manifest.create(tmp_path, {"name": "t", "conditions": ["c"], "seeds": list(range(runs))}, entries)
    return Manifest(made.path, made.record, compact_every=compact_every)


def test_a_run_change_is_appended_and_every_reader_sees_it(tmp_path):
    manifest = _campaign(tmp_path, 3, compact_every=10)
    whole = (tmp_path / MANIFEST).read_text()
    manifest.update_run("r1", status="running", attempts=1, started_at=5.0)
    manifest.stage_run("r1", result={"step": 0, "loss": 0.5})  # staged: on disk only with the next append
    assert read_manifest(tmp_path).run("r1").result == {}
    manifest.update_run("r2", status="failed", error="boom")
    assert (tmp_path / MANIFEST).read_text() == whole  # not rewritten
    lines = (tmp_path / EVENTS).read_text().splitlines()
    assert [json.loads(ln)["seq"] for ln in lines] == [1, 2, 3]
    seen = read_manifest(tmp_path)
    assert (seen.run("r1").status, seen.run("r1").attempts, seen.run("r1").result) == ("running", 1, {"step": 0, "loss": 0.5})
    assert (seen.run("r2").status, seen.run("r2").error, seen.run("r0").status) == ("failed", "boom", "pending")
    assert seen == manifest.record.model_copy(update={"updated": seen.updated})


def test_events_fold_into_the_whole_file_every_so_often(tmp_path):
    manifest = _campaign(tmp_path, 4, compact_every=4)
    inodes = {(tmp_path / MANIFEST).stat().st_ino}
    for i in range(4):
        manifest.update_run(f"r{i}", status="running", attempts=1)
        inodes.add((tmp_path / MANIFEST).stat().st_ino)
    assert len(inodes) == 2 and not (tmp_path / EVENTS).exists()  # one whole write after four events
    on_disk = json.loads((tmp_path / MANIFEST).read_text())
    assert on_disk["event_seq"] == 4 and [r["status"] for r in on_disk["runs"]] == ["running"] * 4
    manifest.update(status="done")  # a campaign-level change writes the whole file at once
    assert json.loads((tmp_path / MANIFEST).read_text())["status"] == "done"


def test_whole_writes_per_run_stay_constant_at_a_thousand_runs(tmp_path):
    manifest = Manifest.load(_campaign(tmp_path, 1000).path.parent)
    inodes = {(tmp_path / MANIFEST).stat().st_ino}
    for i in range(1000):
        manifest.update_run(f"r{i}", status="running", attempts=1)
        manifest.update_run(f"r{i}", status="completed", result={"step": 1})
        inodes.add((tmp_path / MANIFEST).stat().st_ino)
    assert len(inodes) - 1 == 2  # 2,000 events, one whole write per 1,000 (was 2,000 whole writes)
    assert [r.status for r in read_manifest(tmp_path).runs] == ["completed"] * 1000


def test_a_torn_last_line_is_skipped_and_a_resume_continues_the_numbering(tmp_path):
    manifest = _campaign(tmp_path, 2)
    manifest.update_run("r0", status="running", attempts=1)
    with (tmp_path / EVENTS).open("a") as log:
        log.write('{"seq": 2, "run": "r1", "set": {"status": "fa')  # the driver killed mid-write
    assert [r.status for r in read_manifest(tmp_path).runs] == ["running", "pending"]
    resumed = Manifest.load(tmp_path)
    assert resumed.seq == 1
    resumed.start_session()  # a whole write: the torn line is gone with the log
    assert not (tmp_path / EVENTS).exists()
    assert json.loads((tmp_path / MANIFEST).read_text())["runs"][0]["status"] == "running"


def test_a_compaction_between_a_readers_two_reads_leaves_one_moment(tmp_path):
    """A reader reads the events, then the manifest: if the driver folds and drops the events in between,
    the newer file already holds them all and none is applied twice over a later change."""
    manifest = _campaign(tmp_path, 2, compact_every=100)
    manifest.update_run("r0", status="running", attempts=1)
    events_seen = read_event_text(tmp_path / EVENTS)  # the reader's first read
    manifest.update_run("r0", status="completed", result={"step": 1})
    manifest.save()  # compaction by the driver
    manifest.update_run("r1", status="running", attempts=1)
    on_disk = json.loads((tmp_path / MANIFEST).read_text())  # the reader's second read
    changes, _ = changes_after(events_seen, on_disk["event_seq"])
    assert changes == {}  # the older events are already in the newer file: r0 stays completed
    assert [r["status"] for r in on_disk["runs"]] == ["completed", "pending"]


def test_the_test_helpers_json_view_matches_the_whole_file_after_a_save(tmp_path):
    manifest = _campaign(tmp_path, 2)
    manifest.update_run("r1", status="running", attempts=1)
    folded = json.loads(manifest_text(read_manifest(tmp_path), {}))
    manifest.save()
    whole = json.loads((tmp_path / MANIFEST).read_text())
    assert folded["runs"] == whole["runs"]


def test_a_driver_killed_between_the_whole_write_and_the_logs_removal_loses_and_repeats_nothing(tmp_path):
    manifest = _campaign(tmp_path, 2, compact_every=100)
    manifest.update_run("r0", status="running", attempts=1)
    manifest.update_run("r0", status="completed", result={"step": 1})
    log = (tmp_path / EVENTS).read_text()
    manifest.save()  # the whole file holds events 1-2 ...
    (tmp_path / EVENTS).write_text(log)  # ... and the kill came before the log was removed
    resumed = Manifest.load(tmp_path)
    assert resumed.seq == 2 and resumed.run("r0").status == "completed"
    resumed.update_run("r1", status="running", attempts=1)  # numbered after the events already folded in
    assert json.loads((tmp_path / EVENTS).read_text().splitlines()[-1])["seq"] == 3
    assert [r.status for r in read_manifest(tmp_path).runs] == ["completed", "running"]
