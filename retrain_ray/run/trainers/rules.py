"""The load-time rules of `[training] trainer` and `trainer_command`, one function per trainer kind; each
`TrainerSpec` (registry.py) names its own, and the check pass (checks/rules.py) runs them on every config.

* `trainer = "command"` needs a `trainer_command`, and its template may name only `COMMAND_PLACEHOLDERS`
  (`{{` and `}}` are literal braces, as in `str.format`);
* a `trainer_command` with another trainer would be ignored silently: it is refused instead;
* `trainer = "ttt_discover"` optimizes one single-turn problem: an `[environment]` (multi-turn episodes) is
  refused, as the original refuses multi-turn environments; it warns when the advantages are not its own.

This module imports only config/ and util/: the check pass runs it whenever a config is built.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrain_ray.config.errors import ConfigIssue
from retrain_ray.plugins.loader import is_dotted_path

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection
    from retrain_ray.config.sections_runtime import EnvironmentSection
    from retrain_ray.config.sections_training import AlgorithmSection, TrainingSection

COMMAND_PLACEHOLDERS = ("config_path", "log_dir", "adapter_path", "model")
_PLACEHOLDERS_TEXT = ", ".join("{" + p + "}" for p in COMMAND_PLACEHOLDERS)
ENTROPIC_MODES = frozenset({"discover_entropic", "ttt_discover_entropic"})


@dataclass(frozen=True)
class TrainerSettings:
    """The sections the trainer rules read, built once per config by the check pass."""

    training: TrainingSection
    algorithm: AlgorithmSection
    environment: EnvironmentSection
    campaign: CampaignSection | None


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


def command_issues(settings: TrainerSettings) -> list[ConfigIssue]:
    """The command runner: a command to run, whose template formats."""
    command = settings.training.trainer_command
    if not command.strip():
        return [ConfigIssue("training.trainer_command", command, 'trainer = "command" needs a command',
                            f"set trainer_command to a shell command; it may use {_PLACEHOLDERS_TEXT}")]
    problem = template_problem(command)
    return [ConfigIssue("training.trainer_command", command, problem, "fix the template")] if problem else []


def no_command_issues(settings: TrainerSettings) -> list[ConfigIssue]:
    """Every other trainer: a `trainer_command` would be ignored, so it is refused."""
    t = settings.training
    if t.trainer_command:
        return [ConfigIssue("training.trainer_command", t.trainer_command,
                            f'is used only by trainer = "command" (trainer is {t.trainer!r})',
                            'remove trainer_command, or set trainer = "command"')]
    return []


def single_problem_issues(settings: TrainerSettings) -> list[ConfigIssue]:
    """TTT-Discover: no trainer_command, and no multi-turn environment."""
    issues = no_command_issues(settings)
    if issues or not settings.environment.provider:
        return issues
    return [ConfigIssue("environment.provider", settings.environment.provider,
                        'trainer = "ttt_discover" optimizes one single-turn problem; multi-turn environment '
                        "episodes are not supported (as in the original)",
                        "remove [environment], or use trainer = \"retrain\"")]


def no_warnings(settings: TrainerSettings) -> list[str]:
    return []


def entropic_warnings(settings: TrainerSettings) -> list[str]:
    """TTT-Discover trains with the configured advantages; its own are the entropic ones."""
    alg = settings.algorithm
    if alg.algorithm_mode in ENTROPIC_MODES or is_dotted_path(alg.algorithm_mode):
        return []
    return [f'training.trainer = "ttt_discover" trains with the configured advantages '
            f"({alg.algorithm_mode or alg.advantage_mode + '+' + alg.transform_mode}); TTT-Discover's own are "
            '[algorithm] algorithm_mode = "ttt_discover_entropic"']


# What makes a valid config train nothing by RL (issue 34, "no silent no-ops"); each RL trainer's spec names
# the ones that apply to it, so no trainer name is compared here. The same text is logged when a run starts
# (run/train.py), and a run's end summary counts the steps that trained nothing (results/untrained.py).


def effective_max_steps(settings: TrainerSettings) -> int:
    """The steps each run takes: `[campaign] max_steps` replaces `[training] max_steps` in a campaign."""
    return settings.campaign.max_steps if settings.campaign is not None else settings.training.max_steps


def all_warm_start_warnings(settings: TrainerSettings) -> list[str]:
    """Every step a warm-start (SFT) step: `sft_warmup_steps >= max_steps` leaves no RL step."""
    t = settings.training
    max_steps = effective_max_steps(settings)
    if t.sft_warmup_steps < max_steps:
        return []
    source = "[campaign] max_steps" if settings.campaign is not None else "training.max_steps"
    unless = (f" unless the correct rate reaches sft_target_correct_rate = {t.sft_target_correct_rate} first"
              if t.sft_target_correct_rate > 0 else "")
    return [f"training.sft_warmup_steps = {t.sft_warmup_steps} covers all {max_steps} steps ({source}): every "
            f"step is a warm-start (SFT) step and no RL step runs{unless}, so reward and correct_rate stay empty; "
            'raise max_steps above sft_warmup_steps, or use trainer = "sft" for a supervised run']


def single_completion_warnings(settings: TrainerSettings) -> list[str]:
    """`group_size = 1`: each group is one completion, its group-relative advantage is 0: nothing trains."""
    if settings.training.group_size != 1:
        return []
    return ["training.group_size = 1: each group has one completion, so every group-relative advantage is 0 "
            "and no RL step trains (rows say trained = false); use group_size >= 2"]


def rl_loop_no_training(settings: TrainerSettings) -> list[str]:
    """The RL loop with its warm start: both cases."""
    return all_warm_start_warnings(settings) + single_completion_warnings(settings)
