"""Observers share one base, `RunObserver`: no-op hooks that take keyword extras (like Ray Tune's
`Callback`), so an observer overrides only what it needs and a hook or extra added later breaks none."""

from __future__ import annotations

import ast
import io
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import retrain_ray
from retrain_ray.cli.progress import ProgressObserver
from retrain_ray.config import apply_overrides, load_config, parse_overrides
from retrain_ray.logs import ArrowRunObserver, ConsoleObserver, MultiObserver, NullObserver, read_stream
from retrain_ray.logs.observers import RunObserver
from retrain_ray.run.train import train_run

ROOT = Path(retrain_ray.__file__).parent
TESTS = Path(__file__).parents[1]
SMOKE = ROOT.parent / "configs" / "smoke.toml"
HOOKS = ("on_step", "on_generations", "on_eval", "on_checkpoint", "close")


def _classes() -> list[tuple[str, str, list[str], bool]]:
    """(file, class, base names, defines a hook) of every class in the package and the tests."""
    found = []
    for path in [*ROOT.rglob("*.py"), *TESTS.rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                # on_checkpoint alone is no sign: Ray Tune's Callback has one too
                hooks = any(isinstance(item, ast.FunctionDef) and item.name in ("on_step", "on_generations", "on_eval")
                            for item in node.body)
                found.append((path.name, node.name, [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases], hooks))
    return found


def test_every_observer_inherits_run_observer():
    classes = _classes()
    observers = {"RunObserver"}
    while True:  # RunObserver's subclasses, by name, to any depth
        more = {name for _, name, bases, _ in classes if set(bases) & observers} - observers
        if not more:
            break
        observers |= more
    hooked = [(f, name) for f, name, _, hooks in classes if hooks and name != "RunObserver"]
    orphans = [(f, name) for f, name in hooked if name not in observers]
    assert not orphans, f"observers must inherit RunObserver (retrain_ray.logs.observers): {orphans}"
    assert len(hooked) >= 12  # Arrow, console, multi, gauges, Tune, recorder, progress, 3 trackers, tests


class OnlySteps(RunObserver):
    """Overrides one hook; the base's no-ops take every other call."""

    def __init__(self) -> None:
        self.steps: list[int] = []

    def on_step(self, row: Any, **info: Any) -> None:
        self.steps.append(int(row["step"]))


def test_an_observer_overriding_only_on_step_sees_every_row_of_a_real_run(tmp_path):
    """Two warm-start steps, two RL steps, an eval and a checkpoint every 2 steps, on the tiny model."""
    flags = {"log_dir": tmp_path, "max_steps": 4, "sft_warmup_steps": 2, "sft_target_correct_rate": 0,
             "batch_size": 2, "group_size": 2, "save_every": 2, "eval_every": 2, "eval_examples": 2}
    cfg = apply_overrides(load_config(SMOKE), parse_overrides(
        [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", str(v))]))
    only = OnlySteps()
    outcome = train_run(cfg, run_name="only-steps", run_dir=tmp_path, observers=[only])
    assert outcome.status == "completed"
    assert only.steps == [row["step"] for row in read_stream(tmp_path, "metrics").to_pylist()]
    assert only.steps[:2] == [0, 1] and len(read_stream(tmp_path, "eval")) == 2


@pytest.mark.parametrize("make", [
    RunObserver, NullObserver, OnlySteps,
    lambda tmp: ArrowRunObserver(tmp, "run-x"),
    lambda tmp: ConsoleObserver(console=Console(file=io.StringIO())),
    lambda tmp: ProgressObserver(4, console=Console(file=io.StringIO())),
    lambda tmp: MultiObserver(OnlySteps(), NullObserver()),
], ids=["base", "null", "only_steps", "arrow", "console", "progress", "multi"])
def test_hooks_accept_keyword_extras_they_do_not_know(make, tmp_path):
    observer = make(tmp_path) if make.__name__ == "<lambda>" else make()
    row = {"step": 0, "phase": "rl", "mean_reward": 0.5, "correct_rate": 0.5, "tokens_per_second": 1.0, "loss": 0.1}
    observer.on_step(row, added_later=1)
    observer.on_generations([], added_later=1)
    observer.on_eval({"step": 0, "eval_mean_reward": 0.5, "eval_correct_rate": 0.5, "num_examples": 2},
                     added_later=1)
    observer.on_checkpoint(0, tmp_path, added_later=1)
    observer.close(added_later=1)
    assert all(callable(getattr(observer, hook)) for hook in HOOKS)
