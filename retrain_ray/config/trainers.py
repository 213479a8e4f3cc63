"""`[training] trainer` and `trainer_command`, checked at load time (what each runner does: run/trainers/registry.py).

* `trainer` is one of `TRAINERS` ("retrain", "sft", "ttt_discover", "command") or a dotted plugin path;
* `trainer = "command"` needs a `trainer_command`, and its template may name only `COMMAND_PLACEHOLDERS`
  (`{{` and `}}` are literal braces, as in `str.format`);
* a `trainer_command` with another trainer would be ignored silently: it is refused instead;
* `trainer = "ttt_discover"` optimizes one single-turn problem: an `[environment]` (multi-turn episodes) is
  refused, as the original refuses multi-turn environments.
"""

from __future__ import annotations

import string
from typing import TYPE_CHECKING

from retrain_ray.config.errors import ConfigIssue
from retrain_ray.config.names import TRAINERS, is_dotted_path

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

COMMAND_PLACEHOLDERS = ("config_path", "log_dir", "adapter_path", "model")
_PLACEHOLDERS_TEXT = ", ".join("{" + p + "}" for p in COMMAND_PLACEHOLDERS)
ENTROPIC_MODES = frozenset({"discover_entropic", "ttt_discover_entropic"})


def runs_externally(trainer: str) -> bool:
    """True for runners that train outside this process's loop: the command runner and plugin runners.

    Kept for checks/preflight.py until it asks the trainer registry (`trainer_spec(name).runs_outside_loop`,
    run/trainers/registry.py), which the config layer may not import."""
    return trainer == "command" or (trainer not in TRAINERS and is_dotted_path(trainer))


def template_problem(template: str) -> str:
    """Why `template` cannot be formatted with the command placeholders ("" when it can)."""
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
    except ValueError as exc:
        return f"the template does not parse ({exc}); write a literal brace as {{{{ or }}}}"
    for name in fields:
        if name not in COMMAND_PLACEHOLDERS:
            shown = "{" + name + "}" if name else "{}"
            return f"unknown placeholder {shown}; the template may use {_PLACEHOLDERS_TEXT}"
    return ""


def trainer_issues(cfg: RetrainConfig) -> list[ConfigIssue]:
    t = cfg.training
    if t.trainer not in TRAINERS and not is_dotted_path(t.trainer):
        return [ConfigIssue("training.trainer", t.trainer, "is not a known trainer",
                            f"use one of {', '.join(sorted(TRAINERS))}, or a dotted path to a runner class "
                            "(package.module:Class) whose run(config) returns the adapter path")]
    if t.trainer == "command":
        if not t.trainer_command.strip():
            return [ConfigIssue("training.trainer_command", t.trainer_command, 'trainer = "command" needs a command',
                                f"set trainer_command to a shell command; it may use {_PLACEHOLDERS_TEXT}")]
        problem = template_problem(t.trainer_command)
        return [ConfigIssue("training.trainer_command", t.trainer_command, problem, "fix the template")] \
            if problem else []
    if t.trainer_command:
        return [ConfigIssue("training.trainer_command", t.trainer_command,
                            f'is used only by trainer = "command" (trainer is {t.trainer!r})',
                            'remove trainer_command, or set trainer = "command"')]
    if t.trainer == "ttt_discover" and cfg.environment.provider:
        return [ConfigIssue("environment.provider", cfg.environment.provider,
                            'trainer = "ttt_discover" optimizes one single-turn problem; multi-turn environment '
                            "episodes are not supported (as in the original)",
                            "remove [environment], or use trainer = \"retrain\"")]
    return []


def trainer_warnings(cfg: RetrainConfig) -> list[str]:
    t, alg = cfg.training, cfg.algorithm
    if t.trainer == "ttt_discover" and alg.algorithm_mode not in ENTROPIC_MODES and not is_dotted_path(alg.algorithm_mode):
        return [f'training.trainer = "ttt_discover" trains with the configured advantages '
                f"({alg.algorithm_mode or alg.advantage_mode + '+' + alg.transform_mode}); TTT-Discover's own are "
                '[algorithm] algorithm_mode = "ttt_discover_entropic"']
    return []
