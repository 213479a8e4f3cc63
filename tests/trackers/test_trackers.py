"""Experiment trackers: W&B (offline), MLflow (local file store) and TensorBoard (event files) receive
the rows the Arrow logs receive; each is read back from what it wrote."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import GRPO, TINY_CPU, write_campaign
from ray import cloudpickle

from retrain_ray.config import ConfigError, RetrainConfig
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run
from retrain_ray.trackers import RunIdentity, build_trackers

cloudpickle.register_pickle_by_value(sys.modules[__name__])
sys.path.insert(0, str(Path(__file__).parents[1]))
from wandb_records import read_run  # noqa: E402

pytest.importorskip("wandb")
pytest.importorskip("mlflow")
pytest.importorskip("tensorboard")

RUN = {
    **TINY_CPU,
    # supervised steps: each writes a row (an untrained model's RL steps often carry no signal: no row)
    "training": {"batch_size": 2, "group_size": 4, "max_tokens": 4, "max_steps": 3, "save_every": 2,
                 "sft_warmup_steps": 3, "seed": 3},
    "algorithm": GRPO,
}


@pytest.fixture(autouse=True)
def _read_mlflow_file_store(monkeypatch):
    """The test reads the file store back with its own MlflowClient: MLflow 3 wants the opt-in."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")


def tracked_config(tmp_path: Path, **logging) -> RetrainConfig:
    all_three = {"wandb_project": "rr-test", "wandb_mode": "offline", "checkpoint_artifacts": "auto",
                 "mlflow_tracking_uri": (tmp_path / "mlruns").as_uri(), "tensorboard": True}
    return RetrainConfig.model_validate({**RUN, "logging": {"log_dir": str(tmp_path / "run"), **all_three,
                                                           **logging}})


def wandb_run_file(root: Path, run_id: str) -> Path:
    found = sorted(root.rglob(f"run-{run_id}.wandb"))
    assert len(found) == 1, f"expected one W&B run file for {run_id} under {root}, got {found}"
    return found[0]


def mlflow_runs(tracking_uri: str, experiment: str) -> list:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    return client.search_runs([exp.experiment_id])


def mlflow_history(tracking_uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    from mlflow import MlflowClient

    return [(m.step, m.value) for m in MlflowClient(tracking_uri=tracking_uri).get_metric_history(run_id, key)]


def tensorboard_scalars(directory: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, str]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(directory), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    texts = {tag.split("/text_summary")[0]: acc.Tensors(tag)[0].tensor_proto.string_val[0].decode()
             for tag in acc.Tags()["tensors"]}
    return scalars, texts


def arrow_series(run_dir: Path, column: str) -> list[tuple[int, float]]:
    return [(r["step"], r[column]) for r in read_stream(run_dir, "metrics").to_pylist() if r[column] is not None]


def assert_series(actual: list[tuple[int, float]], expected: list[tuple[int, float]]) -> None:
    """Same steps; same values to float32 precision (TensorBoard stores float32)."""
    assert [step for step, _ in actual] == [step for step, _ in expected]
    assert [v for _, v in actual] == pytest.approx([v for _, v in expected], rel=1e-6)


def test_single_run_is_tracked_by_wandb_mlflow_and_tensorboard(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb"))
    cfg = tracked_config(tmp_path)
    run_dir = tmp_path / "run"
    identity = RunIdentity("grpo+none_s3", "grpo+none", 3, campaign="camp")
    outcome = train_run(cfg, run_name=identity.run_name, run_dir=run_dir,
                        observers=build_trackers(cfg, identity, run_dir))
    assert outcome.status == "completed"
    loss = arrow_series(run_dir, "loss")
    assert [s for s, _ in loss] == [0, 1, 2]

    wandb = read_run(wandb_run_file(tmp_path / "wandb", f"rr-{identity.key}"))
    assert_series([(h["_step"], h["train/loss"]) for h in wandb["history"]], loss)
    run = wandb["run"]
    assert (run.project, run.run_group, run.job_type, run.display_name) == ("rr-test", "camp", "grpo-none",
                                                                            "grpo+none_s3")
    assert list(run.tags) == ["grpo+none", "seed3"]
    assert [(a.name, a.type, set(a.aliases)) for a in wandb["artifacts"]] == [
        ("grpo-none_s3-checkpoint", "model", {"latest", "checkpoint_step_2"}),
        ("grpo-none_s3-checkpoint", "model", {"latest", "final"}),
    ]

    uri = cfg.logging.mlflow_tracking_uri
    (mlrun,) = mlflow_runs(uri, "camp")
    assert {k: mlrun.data.tags[k] for k in ("condition", "seed", "campaign", "mlflow.runName")} == {
        "condition": "grpo+none", "seed": "3", "campaign": "camp", "mlflow.runName": "grpo+none_s3"}
    assert_series(mlflow_history(uri, mlrun.info.run_id, "train/loss"), loss)
    assert mlrun.info.status == "FINISHED"

    scalars, texts = tensorboard_scalars(run_dir / "tensorboard")
    assert_series(scalars["train/loss"], loss)
    assert_series(scalars["train/tokens_per_step"], arrow_series(run_dir, "tokens_per_step"))
    assert texts["run/condition"] == "grpo+none" and texts["run/seed"] == "3"


def test_a_retried_run_continues_its_mlflow_run(tmp_path):
    cfg = tracked_config(tmp_path, wandb_project="", tensorboard=False, mlflow_experiment="exp")
    identity = RunIdentity("a_s1", "a", 1, campaign="c")
    for step in (0, 1):  # two attempts of the same run, one row each
        (tracker,) = build_trackers(cfg, identity, tmp_path)
        tracker.on_step({"step": step, "loss": 0.5 + step, "phase": "rl"})
        tracker.close()
    (only,) = mlflow_runs(cfg.logging.mlflow_tracking_uri, "exp")
    assert mlflow_history(cfg.logging.mlflow_tracking_uri, only.info.run_id, "train/loss") == [(0, 0.5), (1, 1.5)]


@pytest.mark.parametrize(("key", "value", "module", "extra"), [
    ("wandb_project", "p", "wandb", "wandb"),
    ("mlflow_tracking_uri", "file:///tmp/mlruns", "mlflow", "mlflow"),
    ("tensorboard", True, "tensorboard", "tensorboard"),
])
def test_a_tracker_that_is_not_installed_is_a_config_error(monkeypatch, key, value, module, extra):
    monkeypatch.setitem(sys.modules, module, None)  # import of `module` fails as if not installed
    with pytest.raises(ConfigError) as err:
        RetrainConfig.model_validate({"logging": {key: value}})
    text = str(err.value)
    assert f"logging.{key}" in text and f"pip install 'retrain-ray[{extra}]'" in text



def tracked_campaign(tmp_path: Path, mlruns: str) -> Path:
    """Two runs of a 3-step campaign with all three trackers, both at once: the driver creates the
    MLflow experiment before they start (two trials creating it in a file store raced, one record lost)."""
    return write_campaign(
        tmp_path / "tracked.toml", algorithm=GRPO,
        training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "save_every": 2, "sft_warmup_steps": 3},
        logging={"log_dir": f"{tmp_path}/logs", "wandb_project": "rr-campaign", "wandb_mode": "offline",
                 "mlflow_tracking_uri": mlruns, "tensorboard": True},
        campaign={"name": "tracked", "seeds": [1, 2], "max_steps": 3, "parallel": True, "max_workers": 2})


def test_the_driver_creates_the_campaigns_mlflow_experiment_once_for_all_runs(tmp_path):
    from mlflow import MlflowClient

    from retrain_ray.campaign.experiment import mlflow_experiments
    from retrain_ray.campaign.plan import build_plan
    from retrain_ray.config import load_config

    mlruns = (tmp_path / "mlruns").as_uri()
    plan = build_plan(load_config(tracked_campaign(tmp_path, mlruns)), root=tmp_path / "campaigns")
    ids = mlflow_experiments(plan)
    (experiment,) = [e for e in MlflowClient(tracking_uri=mlruns).search_experiments() if e.name != "Default"]
    assert experiment.name == "tracked"
    assert ids == {"grpo+none_s1": experiment.experiment_id, "grpo+none_s2": experiment.experiment_id}
    assert mlflow_experiments(plan) == ids  # a resumed campaign finds it again


@pytest.mark.extended
def test_campaign_tracks_each_run_once_with_its_step_metrics(ray_4cpu_4gpu, tmp_path):
    from mlflow import MlflowClient

    from retrain_ray.campaign import Campaign

    mlruns = (tmp_path / "mlruns").as_uri()
    toml = tracked_campaign(tmp_path, mlruns)
    results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    assert results.errors == []
    cdir = tmp_path / "campaigns" / "tracked"
    by_name = {r.data.tags["run_name"]: r for r in mlflow_runs(mlruns, "tracked")}
    assert sorted(by_name) == ["grpo+none_s1", "grpo+none_s2"]  # every run's record, in one experiment
    assert sorted(e.name for e in MlflowClient(tracking_uri=mlruns).search_experiments()) == ["Default", "tracked"]
    for name, seed in (("grpo+none_s1", 1), ("grpo+none_s2", 2)):
        loss = arrow_series(cdir / "runs" / name, "loss")  # the recorder's Arrow log on the driver
        assert [s for s, _ in loss] == [0, 1, 2]
        mlrun = by_name[name]
        assert (mlrun.data.tags["condition"], mlrun.data.tags["seed"]) == ("grpo+none", str(seed))
        assert_series(mlflow_history(mlruns, mlrun.info.run_id, "train/loss"), loss)

        wandb = read_run(wandb_run_file(cdir, f"rr-{RunIdentity(name, '', seed, 'tracked').key}"))
        assert (wandb["run"].run_group, list(wandb["run"].tags)) == ("tracked", ["grpo+none", f"seed{seed}"])
        assert_series([(h["_step"], h["train/loss"]) for h in wandb["history"]], loss)

        (events,) = {p.parent for p in (cdir / "runs" / name).rglob("events.out.tfevents.*")}
        scalars, texts = tensorboard_scalars(events)
        assert_series(scalars["train/loss"], loss)
        assert texts["run/campaign"] == "tracked" and texts["run/seed"] == str(seed)
