"""The trainer registry (run/trainers/registry.py): one spec per `[training] trainer` name, the names the config
accepts, and the flags and words its callers read instead of comparing names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import retrain_ray
from retrain_ray.run.trainers.external import run_command_runner, run_plugin_runner
from retrain_ray.run.trainers.registry import PLUGIN_RUNNER, TRAINERS, trainer_spec


def test_the_registry_names_the_trainers_the_config_accepts(tmp_path):
    """The registry is the one list of names: the config accepts each of its names and refuses others with them."""
    from helpers import write_config

    from retrain_ray.config import load_config
    from retrain_ray.config.errors import ConfigError

    command = {"command": {"trainer_command": "python train.py {log_dir}"}}
    for name in TRAINERS:
        path = write_config(tmp_path / f"{name}.toml", training={"trainer": name, **command.get(name, {})})
        assert load_config(path).training.trainer == name
    with pytest.raises(ConfigError, match="is not a known trainer.*use one of command, retrain, sft, ttt_discover"):
        load_config(write_config(tmp_path / "ppo.toml", training={"trainer": "ppo"}))


def test_command_and_plugin_runners_run_outside_the_loop():
    outside = {name for name, spec in TRAINERS.items() if spec.runs_outside_loop}
    assert outside == {"command"}
    assert trainer_spec("command").run_outside is run_command_runner
    assert trainer_spec("my_pkg.runners:Runner") is PLUGIN_RUNNER
    assert PLUGIN_RUNNER.run_outside is run_plugin_runner and PLUGIN_RUNNER.loads_plugin
    assert not any(spec.loads_plugin for spec in TRAINERS.values())


def test_describe_says_what_runs_the_run():
    assert trainer_spec("retrain").describe("retrain", "") == "retrain: the RL loop"
    assert trainer_spec("sft").describe("sft", "") == "sft: standalone SFT (every step supervised)"
    assert trainer_spec("ttt_discover").describe("ttt_discover", "") == \
        "ttt_discover: TTT-Discover on the data's first example"
    assert trainer_spec("command").describe("command", "python train.py {log_dir}") == \
        "command: python train.py {log_dir}"
    assert trainer_spec("pkg.mod:R").describe("pkg.mod:R", "") == "pkg.mod:R: plugin runner"


def test_an_unknown_name_is_refused_naming_the_trainers():
    with pytest.raises(ValueError, match="not a known trainer; use one of command, retrain, sft, ttt_discover"):
        trainer_spec("ppo")


def test_sft_runs_every_step_supervised(tmp_path):
    from helpers import write_config

    from retrain_ray.config import load_config

    cfg = load_config(write_config(tmp_path / "run.toml", training={"trainer": "sft", "max_steps": 5,
                                                                     "sft_target_correct_rate": 0.5}))
    t = trainer_spec("sft").prepare(cfg.training)
    assert (t.sft_warmup_steps, t.sft_target_correct_rate) == (5, 0.0)
    assert trainer_spec("retrain").prepare(cfg.training) is cfg.training


def _trainer_name_comparisons(source: str) -> list[int]:
    """Lines where `trainer` / `x.trainer` is compared (==, !=, in, not in) with a string literal."""
    def is_trainer(node: ast.expr) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "trainer") or \
            (isinstance(node, ast.Name) and node.id == "trainer")

    def is_text(node: ast.expr) -> bool:
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return bool(node.elts) and all(is_text(e) for e in node.elts)
        return isinstance(node, ast.Constant) and isinstance(node.value, str)

    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(is_trainer(s) for s in sides) and any(is_text(s) for s in sides):
                lines.append(node.lineno)
    return lines


def test_the_comparison_finder_sees_names_and_attributes():
    source = 'if cfg.training.trainer == "sft": pass\nif trainer in ("a", "b"): pass\nif spec.trainer: pass\n'
    assert _trainer_name_comparisons(source) == [1, 2]


def test_no_module_of_run_compares_a_trainer_name_outside_the_registry():
    run = Path(retrain_ray.__file__).parent / "run"
    # checks/preflight.py moves to checks/ (its runner_plugin_problems is to ask `trainer_spec(name).loads_plugin`)
    pending = {run / "preflight.py"}
    found = {str(p.relative_to(run)): lines for p in sorted(run.rglob("*.py"))
             if p not in pending and p != run / "trainers" / "registry.py"
             and (lines := _trainer_name_comparisons(p.read_text()))}
    assert found == {}
