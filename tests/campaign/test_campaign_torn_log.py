"""A campaign run whose metrics log was torn (a recorder cut off mid-write) resumes from Tune's
checkpoint and logs the lost steps again: the recorder cuts the torn segment back to its complete
batches and the run resumes from its newest checkpoint at or before the last step still logged.

The tear is real bytes on disk: at its checkpoint after step 5 the first attempt has the recorder
close the run's segment, truncates `metrics.arrows` in the middle of its last record batch (the rows
of steps that this very checkpoint covers) and fails. The campaign ends with the run errored; the
same campaign is then resumed (`Campaign.from_dir`, Tune's restore with `resume_errored`).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pyarrow as pa
import pytest
from helpers import TINY_RUN, write_campaign

from retrain_ray.campaign import Campaign
from retrain_ray.logs import read_stream
from retrain_ray.logs.stream import segment_paths

STEPS, TEAR_AT = 8, 5
RUN = "grpo+none_s1"


def batch_bounds(path: Path) -> list[int]:
    """Byte offsets in an Arrow stream file where each record batch ends (the first: the schema's end)."""
    with pa.OSFile(str(path)) as source:
        reader = pa.ipc.open_stream(source)
        bounds = [source.tell()]
        for _ in reader:
            bounds.append(source.tell())
    return bounds


def segment_steps(path: Path) -> list[int]:
    """The steps of one segment's rows, in write order (raises on a torn segment)."""
    with pa.OSFile(str(path)) as source:
        return [s for batch in pa.ipc.open_stream(source) for s in batch.column("step").to_pylist()]


def tearing_runner(config, **kwargs):
    """train_run whose first attempt tears its metrics log at the checkpoint after step TEAR_AT, then fails."""
    import ray

    from retrain_ray.campaign.plan import actor_scope
    from retrain_ray.campaign.recorder import recorder_name
    from retrain_ray.logs.types import RunObserver
    from retrain_ray.run.train import train_run

    log_dir = Path(kwargs["run_dir"]).parent
    marker = log_dir / "torn.txt"

    class Tear(RunObserver):
        def on_checkpoint(self, step, directory, **info):
            if step != TEAR_AT or marker.exists():
                return
            cdir = log_dir.parent.parent
            recorder = ray.get_actor(recorder_name(actor_scope(cdir.name, cdir)))
            ray.get(recorder.close_run.remote(kwargs["run_name"]), timeout=60)
            path = log_dir / "metrics.arrows"
            bounds = batch_bounds(path)
            cut = (bounds[-2] + bounds[-1]) // 2  # the middle of the last record batch
            with open(path, "r+b") as f:
                f.truncate(cut)
            marker.write_text(f"{cut} of {bounds[-1]}")
            raise RuntimeError(f"injected: metrics.arrows torn at byte {cut} after step {step}")

    kwargs["observers"] = [*kwargs["observers"], Tear()]
    return train_run(config, **kwargs)


def test_the_recorder_cuts_a_torn_segment_back_and_names_the_last_step_it_holds(tmp_path):
    from recorded_campaign import metrics_row

    from retrain_ray.campaign.recorder import RecorderCore

    core = RecorderCore(tmp_path, parquet_every_s=1e9)
    for batch in ([0, 1], [2, 3], [4, 5]):
        core.append("r", "metrics", [metrics_row("grpo", 1, s) for s in batch])
    assert core.repair_metrics("r") is None  # the open segment is closed first: nothing torn
    path = tmp_path / "runs" / "r" / "metrics.arrows"
    bounds = batch_bounds(path)
    with open(path, "r+b") as f:
        f.truncate((bounds[-2] + bounds[-1]) // 2)
    assert core.repair_metrics("r") == 3
    assert segment_steps(path) == [0, 1, 2, 3]  # complete batches kept, readable without a warning
    assert core.repair_metrics("r") is None and core.repair_metrics("never-ran") is None
    core.append("r", "metrics", [metrics_row("grpo", 1, 4)])  # the resumed run writes a new segment
    assert [p.name for p in segment_paths(path.parent, "metrics")] == ["metrics.arrows", "metrics.1.arrows"]


@pytest.mark.extended  # two campaigns, 85 s under load
@pytest.mark.timeout(600)
def test_a_campaign_run_resumed_after_a_torn_log_logs_every_step_once(ray_4cpu_4gpu, tmp_path):
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    toml = write_campaign(tmp_path / "torn.toml", base=TINY_RUN, logging={"log_dir": f"{tmp_path}/logs/x"},
                          campaign={"name": "torn", "seeds": [1], "max_steps": STEPS, "parallel": True,
                                    "max_failures": 0, "trial_start_timeout_s": 240})
    first = Campaign.from_toml(toml, root=tmp_path, runner=tearing_runner).run(progress=False)
    assert first.runs[0].status != "completed"
    run_dir = tmp_path / "torn" / "runs" / RUN
    assert (run_dir / "torn.txt").exists()
    with pytest.warns(RuntimeWarning, match="torn"):
        kept = read_stream(run_dir)["step"].to_pylist()
    lost = sorted(set(range(TEAR_AT + 1)) - set(kept))
    assert lost and max(lost) == TEAR_AT, kept  # the torn batch held the checkpointed steps' last rows

    again = Campaign.from_dir(tmp_path / "torn", runner=tearing_runner).run(progress=False)
    assert again.runs[0].status == "completed"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the torn segment was repaired: reading it warns no more
        assert read_stream(run_dir)["step"].to_pylist() == list(range(STEPS))
    first_segment, *later = segment_paths(run_dir, "metrics")
    assert segment_steps(first_segment) == kept  # cut back to its complete batches
    rewritten = [s for seg in later for s in segment_steps(seg)]
    assert set(lost) <= set(rewritten)  # the torn steps' rows written again
    assert min(rewritten) <= max(kept, default=-1) + 1  # resumed at or before the last logged step
    assert (run_dir / "work" / "checkpoints" / "final").is_dir()
