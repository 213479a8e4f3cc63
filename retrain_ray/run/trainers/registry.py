"""The trainer registry: what `[training] trainer` runs, one `TrainerSpec` per name.

* "retrain" (default): the RL loop (run/loop.py), with its SFT warm start.
* "sft": standalone supervised fine-tuning: every one of the run's `max_steps` steps is a warm-start step
  (run/trainers/sft.py): on the demonstrations of `sft_data_path` (pinned and checked as for the warm start),
  or, without a file, on the task's own answers; batches of `sft_batch_size` (0: batch_size x group_size),
  at `sft_lr` (0: lr), rows with phase "sft", checkpoints every `save_every` and at the end, resume as any
  run. `sft_warmup_steps` and `sft_target_correct_rate` do not apply (the whole run is SFT).
* "ttt_discover": test-time training on one problem (run/trainers/discover.py).
* "command" and dotted-path plugin runners train outside this process's loop (run/trainers/external.py).

`train_run` (run/train.py) is the one entry point of the CLI and of campaign trials; it asks `trainer_spec`
and runs what the spec names. Nothing else compares a trainer's name: callers read the spec's flags
(`runs_outside_loop`, `loads_plugin`) and `describe`. The load-time rules of `[training] trainer` and
`trainer_command` are each spec's `issues` / `warnings` (rules.py); the check pass (checks/rules.py) runs them
through `trainer_config_issues` / `trainer_config_warnings` whenever a config is built. So that it can, this
module loads no torch: the loop classes and external runners are imported when a run asks for them.

Adding a trainer: its runner in a module of this folder, and one `TrainerSpec` line in `TRAINERS` below.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.config.errors import ConfigIssue
from retrain_ray.plugins.loader import is_dotted_path
from retrain_ray.run.trainers.rules import (
    TrainerSettings,
    command_issues,
    entropic_warnings,
    no_command_issues,
    no_warnings,
    rl_loop_no_training,
    single_completion_warnings,
    single_problem_issues,
)

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import TrainingSection
    from retrain_ray.run.loop import RunLoop
    from retrain_ray.run.trainers.external import ExternalRun, RowFeed

ExternalRunner = Callable[["ExternalRun", "RowFeed"], Path]
"""Runs a trainer outside the loop to its end; the adapter path it leaves (raises when it fails)."""


def _as_configured(t: TrainingSection) -> TrainingSection:
    return t


def _anything_goes(loop: RunLoop) -> None:
    return None


def _rl_loop() -> type[RunLoop]:
    from retrain_ray.run.loop import RunLoop  # deferred: torch; the check pass reads the specs without it

    return RunLoop


def _discover_loop() -> type[RunLoop]:
    from retrain_ray.run.trainers.discover import DiscoverLoop  # deferred: torch

    return DiscoverLoop


def _command_runner() -> ExternalRunner:
    from retrain_ray.run.trainers.external import run_command_runner  # deferred: pyarrow

    return run_command_runner


def _plugin_runner() -> ExternalRunner:
    from retrain_ray.run.trainers.external import run_plugin_runner  # deferred: pyarrow

    return run_plugin_runner


@dataclass(frozen=True)
class TrainerSpec:
    """One trainer: what runs it (the loop `build_loop` builds in this process, or `run_outside` it), what it
    says it is, and the config rules of `[training]` that the config layer checks for it."""

    name: str
    summary: str  # what runs the run, in words (`retrain-ray explain`); `{command}` is `trainer_command`
    loop_class: Callable[[], type[RunLoop]] = _rl_loop  # the loop class of an in-process trainer
    outside: Callable[[], ExternalRunner] | None = None  # the runner of a trainer outside this process's loop
    prepare: Callable[[TrainingSection], TrainingSection] = _as_configured  # the `[training]` its loop runs
    check_loop: Callable[[RunLoop], None] = _anything_goes  # refuses a loop with nothing to train on
    loads_plugin: bool = False  # the name is a dotted path to a runner class, imported at preflight
    issues: Callable[[TrainerSettings], list[ConfigIssue]] = no_command_issues  # its `[training]` rules
    warnings: Callable[[TrainerSettings], list[str]] = no_warnings
    no_training: Callable[[TrainerSettings], list[str]] = no_warnings  # why a valid config trains nothing by RL
    rl_steps_only: bool = False  # every step an RL step of the RL loop: what a shared trainer can batch

    @property
    def build_loop(self) -> type[RunLoop]:
        """The loop class `train_run` builds for an in-process trainer."""
        return self.loop_class()

    @property
    def run_outside(self) -> ExternalRunner | None:
        """What runs the trainer outside this process's loop to its end (None: the loop runs it)."""
        return self.outside() if self.outside is not None else None

    @property
    def runs_outside_loop(self) -> bool:
        """True for runners that train outside this process's loop: the command runner and plugin runners."""
        return self.outside is not None

    def describe(self, trainer: str, command: str) -> str:
        """What runs the run, in words: `trainer` is the configured name (a plugin's dotted path)."""
        return f"{trainer}: {self.summary.format(command=command)}"


def _every_step_supervised(t: TrainingSection) -> TrainingSection:
    """"sft": every step a warm-start step, without a probe."""
    return t.model_copy(update={"sft_warmup_steps": t.max_steps, "sft_target_correct_rate": 0.0})


def _has_sft_targets(loop: RunLoop) -> None:
    if loop.warm_start.rows is None and loop.parts.format_answer is None:
        raise ValueError('trainer = "sft" has nothing to train on: set [training] sft_data_path to a JSONL file of '
                         f"demonstrations (the data source {loop.cfg.data.source!r} gives no reference answers to "
                         "train on)")


TRAINERS: dict[str, TrainerSpec] = {spec.name: spec for spec in (
    TrainerSpec("retrain", "the RL loop", no_training=rl_loop_no_training, rl_steps_only=True),
    TrainerSpec("sft", "standalone SFT (every step supervised)", prepare=_every_step_supervised,
                check_loop=_has_sft_targets),
    TrainerSpec("ttt_discover", "TTT-Discover on the data's first example", loop_class=_discover_loop,
                issues=single_problem_issues, warnings=entropic_warnings, no_training=single_completion_warnings),
    TrainerSpec("command", "{command}", outside=_command_runner, issues=command_issues),
)}
PLUGIN_RUNNER = TrainerSpec("plugin", "plugin runner", outside=_plugin_runner, loads_plugin=True)
"""The spec of every dotted-path `[training] trainer` (`package.module:Class`)."""


def trainer_spec(name: str) -> TrainerSpec:
    """The spec of `[training] trainer = name`: a registered trainer, or `PLUGIN_RUNNER` for a dotted path."""
    spec = TRAINERS.get(name)
    if spec is not None:
        return spec
    if is_dotted_path(name):
        return PLUGIN_RUNNER
    raise ValueError(f"[training] trainer = {name!r} is not a known trainer; use one of {', '.join(sorted(TRAINERS))}, "
                     "or a dotted path to a runner class (package.module:Class)")


def trainer_config_issues(settings: TrainerSettings) -> list[ConfigIssue]:
    """The problems of `[training] trainer` / `trainer_command`: an unknown name, else the trainer's own rules."""
    name = settings.training.trainer
    if name not in TRAINERS and not is_dotted_path(name):
        return [ConfigIssue("training.trainer", name, "is not a known trainer",
                            f"use one of {', '.join(sorted(TRAINERS))}, or a dotted path to a runner class "
                            "(package.module:Class) whose run(config) returns the adapter path")]
    return trainer_spec(name).issues(settings)


def trainer_config_warnings(settings: TrainerSettings) -> list[str]:
    """The warnings of the configured trainer (none for an unknown name: its issue is reported)."""
    name = settings.training.trainer
    if name not in TRAINERS and not is_dotted_path(name):
        return []
    return trainer_spec(name).warnings(settings)


def no_training_warnings(settings: TrainerSettings) -> list[str]:
    """What makes a valid config train nothing by RL (empty when it trains, or for an unknown trainer)."""
    name = settings.training.trainer
    if name not in TRAINERS and not is_dotted_path(name):
        return []
    return trainer_spec(name).no_training(settings)


def condition_warnings(runs: Iterable[tuple[str, RetrainConfig]]) -> list[str]:
    """`no_training_warnings` of a campaign's runs, once per condition (`(condition, run config)` pairs;
    seeds do not change these keys), or once for all when every condition has it."""
    by_condition: dict[str, list[str]] = {}
    for condition, cfg in runs:
        settings = TrainerSettings(cfg.training, cfg.algorithm, cfg.environment, cfg.campaign)
        by_condition.setdefault(condition, no_training_warnings(settings))
    texts = dict.fromkeys(w for found in by_condition.values() for w in found)
    return [f"every condition: {w}" if all(w in found for found in by_condition.values())
            else f"condition {', '.join(c for c, found in by_condition.items() if w in found)}: {w}"
            for w in texts]
