"""A few columns of many runs at once (logs/run_columns.py): from each run's current Parquet copy, or its
stream while the copy is older, with every step once (the resumed write wins); and the readers built on it
(`get_dataframe`, `run_values`, `history`, `status`) give what reading each run's own log gives."""

from __future__ import annotations

import pandas as pd
import pytest
from recorded_campaign import (
    CONDITIONS,
    RESUME_AT,
    SEEDS,
    STEPS,
    metrics_row,
    reward,
    run_name,
    write_campaign,
)

from retrain_ray.logs import read_stream
from retrain_ray.logs.run_columns import RUN, _sources, read_run_columns
from retrain_ray.results.campaign_results import CampaignResults, read_history
from retrain_ray.results.status import campaign_status

COLUMNS = ("step", "mean_reward", "loss", "trained")
NAMES = [run_name(c, s) for c in CONDITIONS for s in SEEDS]


@pytest.fixture(params=["closed", "live"])
def campaign(request, tmp_path):
    """Closed: every run's Parquet copy is current. Live: each run logged a row after its copy was written
    (the copy is stale), so the streams are read. One run never logged."""
    directory = tmp_path / request.param
    directory.mkdir()
    recorder = write_campaign(directory, close=request.param == "closed", parquet_every_s=3600.0,
                              pending=run_name("slow", 2))
    if request.param == "live":  # the last step logged again after the copy (as a retried step is)
        for condition, seed in ((c, s) for c in CONDITIONS for s in SEEDS if run_name(c, s) != run_name("slow", 2)):
            recorder.append(run_name(condition, seed), "metrics", [metrics_row(condition, seed, STEPS - 1, resumed=True)])
    yield directory
    recorder.close()


def test_columns_of_every_run_match_each_runs_own_log(campaign):
    copies, live = _sources(campaign / "runs", NAMES, "metrics")
    assert (len(copies), len(live)) == ((len(NAMES) - 1, 0) if campaign.name == "closed" else (0, len(NAMES) - 1))
    frame = read_run_columns(campaign / "runs", NAMES, COLUMNS)
    assert list(frame.columns) == [RUN, *COLUMNS]
    assert run_name("slow", 2) not in set(frame[RUN])  # no log: no rows
    for name in set(NAMES) - {run_name("slow", 2)}:
        own = read_stream(campaign / "runs" / name).select(list(COLUMNS)).to_pandas()
        mine = frame[frame[RUN] == name].drop(columns=RUN).reset_index(drop=True)
        pd.testing.assert_frame_equal(mine, own, check_dtype=False)
    fast_1 = frame[frame[RUN] == run_name("fast", 1)]
    assert list(fast_1["step"]) == list(range(STEPS))  # steps re-logged after the resume appear once
    assert fast_1["mean_reward"].iloc[RESUME_AT] == pytest.approx(reward("fast", 1, RESUME_AT, resumed=True))


def test_the_campaign_tables_equal_those_read_run_by_run(campaign):
    results = CampaignResults.from_dir(campaign)
    by_run = pd.DataFrame([results._run_row(entry) for entry in results.runs])  # each run's own log
    pd.testing.assert_frame_equal(results.get_dataframe()[by_run.columns], by_run, check_dtype=False)
    values = results.run_values("mean_reward", window=3)
    for condition in CONDITIONS:
        seeds = [s for s in SEEDS if run_name(condition, s) != run_name("slow", 2)]
        expected = [sum(reward(condition, s, t, resumed=True) for t in range(STEPS - 3, STEPS)) / 3 for s in seeds]
        assert values[condition] == pytest.approx(expected)
    long = results.history(metrics=("mean_reward", "eval_mean_reward"))
    one = long[(long["run"] == run_name("fast", 3)) & (long["metric"] == "mean_reward")]
    assert list(one["value"]) == pytest.approx(list(read_history(campaign / "runs" / run_name("fast", 3))["mean_reward"]))
    evals = long[long["metric"] == "eval_mean_reward"]
    assert len(evals) == len(NAMES) - 1 and set(evals["condition"]) == set(CONDITIONS)


def test_status_reads_every_runs_last_row_in_one_pass(campaign):
    status = campaign_status(campaign)
    runs = {r["run_name"]: r for r in status["runs"]}
    assert runs[run_name("slow", 2)]["step"] is None and runs[run_name("slow", 2)]["reward_sparkline"] == ""
    fast_2 = runs[run_name("fast", 2)]
    assert fast_2["step"] == STEPS - 1 and fast_2["seconds_per_step"] == pytest.approx(2.0)
    assert fast_2["mean_reward"] == pytest.approx(reward("fast", 2, STEPS - 1, resumed=True))
    assert len(fast_2["reward_sparkline"]) == STEPS  # fewer rows than the sparkline's 24 points
