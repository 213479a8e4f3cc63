"""Parquet copies of a campaign's logs, read with pandas, polars and DuckDB while the campaign runs,
and `CampaignResults` as a Tune-ResultGrid-like view (rows written by our recorder, RecorderCore)."""

from __future__ import annotations

import glob

import pandas as pd
import pytest
from recorded_campaign import CONDITIONS, RESUME_AT, SEEDS, STEPS, reward, run_name, write_campaign

from retrain_ray.backpressure.arrow_log import BP_SCHEMA
from retrain_ray.logs import ArrowStreamWriter
from retrain_ray.logs.parquet_export import export_campaign
from retrain_ray.results.campaign_results import CampaignResults, RunError

N_RUNS = len(CONDITIONS) * len(SEEDS)


@pytest.fixture(scope="module")
def live_campaign(tmp_path_factory):
    """A campaign whose recorder still has every run's stream open (as while it runs)."""
    campaign_dir = tmp_path_factory.mktemp("camp") / "live"
    campaign_dir.mkdir()
    recorder = write_campaign(campaign_dir, close=False)
    with ArrowStreamWriter(campaign_dir / "backpressure.arrows", BP_SCHEMA) as bp:
        rows = [{"time": 1.0, "run": run_name("fast", 1), "step": t, "resource": "local", "p": 8.0,
                 "regime": "optimal", "action": "hold"} for t in (0, 1, 1)]
        for row in rows:  # one batch per observation, as the back-pressure actor writes them
            bp.write_rows([row])
    recorder.export_parquet(run_name("fast", 1))
    yield campaign_dir
    recorder.close()


def _check_metrics(df: pd.DataFrame) -> None:
    assert len(df) == N_RUNS * STEPS
    assert not df.duplicated(["run", "step"]).any()
    assert set(df["campaign"]) == {"live"}
    assert {(c, s) for c, s in zip(df["condition"], df["seed"], strict=True)} == {(c, s) for c in CONDITIONS for s in SEEDS}
    row = df[(df["run"] == run_name("fast", 2)) & (df["step"] == RESUME_AT)].iloc[0]
    assert row["mean_reward"] == pytest.approx(reward("fast", 2, RESUME_AT, resumed=True))  # resume wins
    row = df[(df["run"] == run_name("slow", 3)) & (df["step"] == 0)].iloc[0]
    assert row["mean_reward"] == pytest.approx(reward("slow", 3, 0))


def test_pandas_polars_duckdb_read_a_running_campaign(live_campaign):
    pattern = str(live_campaign / "runs" / "*" / "metrics.parquet")
    files = sorted(glob.glob(pattern))
    assert len(files) == N_RUNS
    assert not list(live_campaign.rglob(".*.tmp"))  # no temporary file left behind
    _check_metrics(pd.concat([pd.read_parquet(f) for f in files], ignore_index=True))

    polars = pytest.importorskip("polars")
    _check_metrics(polars.read_parquet(pattern).to_pandas())

    duckdb = pytest.importorskip("duckdb")
    _check_metrics(duckdb.sql(f"select * from read_parquet('{pattern}')").df())
    by_condition = duckdb.sql(
        f"select condition, count(distinct seed) as seeds, max(step) as last from '{pattern}' group by 1 order by 1"
    ).fetchall()
    assert by_condition == [("fast", 3, STEPS - 1), ("slow", 3, STEPS - 1)]
    evals = duckdb.sql(f"select run, seed, eval_correct_rate from '{live_campaign}/runs/*/eval.parquet'").df()
    assert len(evals) == N_RUNS and set(evals["seed"]) == set(SEEDS)
    gens = polars.read_parquet(str(live_campaign / "runs" / "*" / "generations.parquet"))
    assert gens.height == N_RUNS and set(gens["condition"].to_list()) == set(CONDITIONS)
    bp = duckdb.sql(f"select run, condition, seed, step from '{live_campaign}/backpressure.parquet'").fetchall()
    assert bp == [(run_name("fast", 1), "fast", 1, 0), (run_name("fast", 1), "fast", 1, 1)]  # (run, step) once


def test_export_campaign_rebuilds_parquet_of_a_killed_campaign(tmp_path):
    campaign_dir = tmp_path / "killed"
    campaign_dir.mkdir()
    write_campaign(campaign_dir, parquet_every_s=3600.0, close=False)
    for copy in campaign_dir.glob("runs/*/*.parquet"):  # killed before its recorder wrote any copy
        copy.unlink()
    written = export_campaign(campaign_dir)
    assert len(written) == N_RUNS * 3
    fresh = pd.read_parquet(campaign_dir / "runs" / run_name("slow", 1) / "metrics.parquet")
    assert list(fresh["step"]) == list(range(STEPS))


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    campaign_dir = tmp_path_factory.mktemp("camp") / "done"
    campaign_dir.mkdir()
    write_campaign(campaign_dir, failed=run_name("slow", 2), parquet_every_s=3600.0)
    return CampaignResults.from_dir(campaign_dir)


def test_results_follow_tune_result_grid(results):
    assert len(results) == N_RUNS
    assert [r.run_name for r in results] == [run_name(c, s) for c in CONDITIONS for s in SEEDS]
    first = results[0]
    assert (first.condition, first.seed) == ("slow", 1)
    assert first.path == results.campaign_dir / "runs" / run_name("slow", 1)
    assert list(first.metrics_dataframe["step"]) == list(range(STEPS))
    assert first.metrics["mean_reward"] == pytest.approx(reward("slow", 1, STEPS - 1, resumed=True))
    assert first.checkpoint is None  # no checkpoint was written
    assert [type(e) for e in results.errors] == [RunError]
    assert results.errors[0].run_name == run_name("slow", 2) and "boom" in str(results.errors[0])


def test_get_best_result_scopes(results):
    assert results.get_best_result("mean_reward", "max").run_name == run_name("fast", 3)
    assert results.get_best_result("mean_reward", "min", scope="all").run_name == run_name("slow", 1)
    assert results.get_best_result("loss", "min", scope="last-3-avg").run_name == run_name("fast", 3)
    with pytest.raises(ValueError, match="scope"):
        results.get_best_result("loss", "min", scope="first")
    with pytest.raises(ValueError, match="never_logged"):
        results.get_best_result("never_logged")


def test_history_long_format(results):
    long = results.history(metrics=("mean_reward", "eval_mean_reward"))
    assert list(long.columns) == ["campaign", "run", "condition", "seed", "step", "metric", "value"]
    rewards = long[long["metric"] == "mean_reward"]
    assert len(rewards) == N_RUNS * STEPS and not rewards.duplicated(["run", "step"]).any()
    evals = long[long["metric"] == "eval_mean_reward"]
    assert len(evals) == N_RUNS and set(evals["step"]) == {STEPS - 1}
    one = long[(long["run"] == run_name("fast", 1)) & (long["step"] == 3) & (long["metric"] == "mean_reward")]
    assert one["value"].item() == pytest.approx(reward("fast", 1, 3)) and one["seed"].item() == 1
