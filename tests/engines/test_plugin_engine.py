"""Sampling through a dotted-path plugin engine (issue 12): `[inference] engine = "module.factory"`, the
factory contract of backends/plugins.py, with the test plugins of tests/fixtures/plugins/recording_engine.py.
Real short runs of the tiny CPU model: the local backend trains, the plugin engine samples."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from helpers import install_test_plugins, write_config

from retrain_ray.checks.preflight import PreflightError, check_run, run_problems
from retrain_ray.cli.explain import describe_run
from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.build import build_policy
from retrain_ray.run.train import train_run


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    return install_test_plugins(tmp_path, monkeypatch)


def _toml(workdir: Path, engine: str, **backend) -> Path:
    return write_config(
        workdir / "run.toml", inference={"engine": engine}, backend={"devices": "cpu", **backend},
        reward={"type": "varied_reward.make"}, algorithm={"advantage_mode": "grpo", "transform_mode": "none"},
        training={"seed": 5, "batch_size": 2, "group_size": 3, "max_tokens": 4, "max_steps": 2, "save_every": 2},
        logging={"log_dir": str(workdir / "logs" / "run")})


def _train(workdir: Path, engine: str) -> tuple[list[dict], object]:
    cfg = load_config(_toml(workdir, engine))
    check_run(cfg)
    run_dir = workdir / "logs" / "run"
    outcome = train_run(cfg, run_name="engine", run_dir=run_dir)
    assert outcome.status == "completed"
    assert any(run_dir.glob("checkpoints/*/*.safetensors"))
    return read_stream(run_dir, "metrics").to_pylist(), sys.modules["plugins.recording_engine"]


def test_a_plugin_engine_wrapping_the_pytorch_engine_samples_a_run(workdir):
    rows, plugin = _train(workdir, "recording_engine:make_engine")
    assert [r["step"] for r in rows] == [0, 1]
    assert plugin.GENERATED == [(2, 3, 0), (2, 3, 1)]  # every rollout went through it, on the trainer's weights
    assert plugin.LOADED == [(1, 0)]  # shares the local backend's model: a sync moves only the version
    assert all(0 < r["rl/sampled_action_tokens"] <= 2 * 3 * 4 for r in rows)


def test_a_plugin_engine_with_its_own_model_receives_the_trainers_tensors(workdir):
    rows, plugin = _train(workdir, "recording_engine.own_copy")
    assert [r["step"] for r in rows] == [0, 1]
    assert [v for _, _, v in plugin.GENERATED] == [0, 1]
    (version, tensors), = plugin.LOADED
    assert version == 1 and tensors > 0  # the full fine-tuned weights, exported after step 0


def test_a_factory_returning_no_engine_is_named_with_its_key(workdir):
    cfg = load_config(_toml(workdir, "recording_engine.not_an_engine"))
    with pytest.raises(ValueError) as info:
        build_policy(cfg)
    text = str(info.value)
    assert "[inference] engine='recording_engine.not_an_engine'" in text
    assert "['weights_version', 'generate', 'load_weights']" in text


def test_preflight_refuses_a_plugin_engine_it_cannot_use(workdir):
    missing = load_config(_toml(workdir, "recording_engine.no_such_factory"))
    with pytest.raises(PreflightError, match=r"recording_engine.no_such_factory.*has no attribute"):
        check_run(missing)
    two = load_config(_toml(workdir, "recording_engine.make_engine", devices="gpu:0,gpu:1"))
    assert any("set backend.devices to one device" in p for p in run_problems(two, check_model=False))
    assert describe_run(two)["inference_engine"] == ("recording_engine.make_engine: plugin engine in the run's "
                                                      "process, for the local backend")
    plugin_backend = load_config(_toml(workdir, "recording_engine.make_engine",
                                       backend="counting_backend.make_backend"))
    assert any("not for backend 'counting_backend.make_backend'" in p
               for p in run_problems(plugin_backend, check_model=False))


def _entropy_toml(workdir: Path, engine: str) -> Path:
    return write_config(
        workdir / "entropy.toml", inference={"engine": engine}, backend={"devices": "cpu"},
        reward={"type": "varied_reward.make"},
        algorithm={"advantage_mode": "grpo", "transform_mode": "gtpo", "uncertainty_kind": "shannon_entropy"},
        training={"seed": 5, "batch_size": 2, "group_size": 3, "max_tokens": 4, "max_steps": 2, "save_every": 0},
        logging={"log_dir": str(workdir / "logs" / "entropy")})


def test_shannon_entropy_is_refused_for_a_plugin_engine_that_does_not_declare_entropies(workdir):
    (problem,) = run_problems(load_config(_entropy_toml(workdir, "recording_engine.make_engine")), check_model=False)
    assert "uncertainty_kind='shannon_entropy' needs per-token entropies" in problem
    assert "'recording_engine.make_engine' does not declare them" in problem
    assert "retrain_engine_capabilities / RETRAIN_ENGINE_CAPABILITIES" in problem
    (problem,) = run_problems(load_config(_entropy_toml(workdir, "entropy_engine.bad_hook")), check_model=False)
    assert "entropy_engine.bad_hook" in problem and "{'entropies': 'yes'}" in problem


def test_a_plugin_engine_declaring_entropies_trains_on_them(workdir):
    """With the hook, preflight accepts and the engine's entropies reach the GTPO transform: every token's
    uncertainty is the engine's constant, so the executed-token mean is that constant and its variance 0."""
    cfg = load_config(_entropy_toml(workdir, "entropy_engine:make_engine"))
    check_run(cfg)
    run_dir = workdir / "logs" / "entropy"
    assert train_run(cfg, run_name="entropy", run_dir=run_dir).status == "completed"
    plugin = sys.modules["plugins.entropy_engine"]
    assert plugin.ASKED == [True, True]
    rows = read_stream(run_dir, "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    for row in rows:
        assert row["exec_surprisal_mean"] == pytest.approx(plugin.ENTROPY)
        assert row["exec_surprisal_var"] == pytest.approx(0.0, abs=1e-12)


def test_the_plugin_listing_shows_an_engines_declared_capabilities(workdir, capsys):
    from retrain_ray.cli.catalog import backend_catalog, plugins_report

    report = plugins_report(str(_entropy_toml(workdir, "entropy_engine:make_engine")))
    engine = report["references"]["inference.engine"]
    assert engine["capabilities"] == {"returns_token_entropies": True} and engine["source"] == "plugin/hook"
    assert report["engine_hooks"] == {"capabilities": ["retrain_engine_capabilities", "RETRAIN_ENGINE_CAPABILITIES"]}
    plugin_engine = backend_catalog()["plugin_engine"]
    assert plugin_engine["default_capabilities"] == {"returns_token_entropies": False}


def test_the_plugin_listing_gives_a_callable_hook_the_inference_section_as_preflight_does(workdir):
    from retrain_ray.cli.catalog import plugins_report

    toml = _entropy_toml(workdir, "entropy_engine.section_hook")
    assert run_problems(load_config(toml), check_model=False) == []
    engine = plugins_report(str(toml))["references"]["inference.engine"]
    assert engine["capabilities"] == {"returns_token_entropies": True} and engine["source"] == "plugin/hook"
