"""`[campaign] shared_trainer = true`: which runs can train on one shared base model copy, checked before Ray.

Two checks, each naming the reason and the fix:

* `shared_trainer_issues(cfg)` (a rule of every config, checks/rules.py `RULES`): what one run must be to
  join a shared trainer: LoRA (full fine-tuning trains its own base), the local backend (a remote or plugin
  backend trains elsewhere), a sampler the trainer can feed (`sampler_of`: the PyTorch engine, which samples
  from the trainer's copy, or on CPU the campaign's shared vLLM engine, `engine = "vllm-embedded"` with `shared =
  true`, which takes each member's adapter from the trainer after every step), a built-in model (the shared
  trainer wraps the lean Llama), LoRA dropout 0 (its random masks could not follow the solo run's), no
  supervised warm start (the shared trainer has RL steps only), one device (no split placement).
* `member_problems(configs)` (the campaign plan, over every run of the matrix): what the members must share
  with each other: the base model (and revision), its dtype, the LoRA target modules and layers. Ranks and
  alphas may differ: the shared trainer pads adapters to the largest rank.

They mirror `SharedTrainer.join_problems`, which the trainer actor asks again when each run joins (so a run
that slipped past, a plugin's or an edited config's, is refused there with the same reasons); these read the
config alone, so `explain` and the driver need no model and no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from retrain_ray.backends.registry import backend_spec, lora_targets_of, resolved_options
from retrain_ray.config.errors import ConfigIssue
from retrain_ray.config.names import gpu_count
from retrain_ray.models.context import lean_applies
from retrain_ray.plugins.loader import is_dotted_path
from retrain_ray.run.trainers.registry import trainer_spec

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

KEY = "campaign.shared_trainer"
SAMPLER = "pytorch"
"""The engine that samples from the shared trainer's copy (the embedded default)."""
VLLM_SAMPLER = "vllm-embedded"
"""The engine whose campaign-wide instance (`[inference] shared = true`) samples for the members, synced from the
trainer after every step (campaign/shared_trainer_policy.py)."""


def shares(cfg: RetrainConfig) -> bool:
    """Whether `cfg`'s campaign trains its runs on a shared trainer."""
    return cfg.campaign is not None and cfg.campaign.shared_trainer


def shared_trainer_issues(cfg: RetrainConfig) -> list[ConfigIssue]:
    """Every reason a run of `cfg` cannot join a shared trainer (empty when it can, or when not asked)."""
    if not shares(cfg):
        return []
    return [ConfigIssue(KEY, True, message, fix) for message, fix in _run_problems(cfg)]


def _run_problems(cfg: RetrainConfig) -> list[tuple[str, str]]:
    alone = "or set [campaign] shared_trainer = false"
    problems: list[tuple[str, str]] = []
    if cfg.model.finetune != "lora":
        problems.append((f"[model] finetune = {cfg.model.finetune!r}: only LoRA runs share one base model copy",
                         f'set [model] finetune = "lora", {alone}'))
    spec = backend_spec(cfg.backend.backend)
    if not spec.trains_locally:
        where = "a plugin backend" if spec.is_plugin else "a remote backend"
        problems.append((f"[backend] backend = {cfg.backend.backend!r} is {where}: it trains elsewhere, not on the "
                         "shared copy", f'set [backend] backend = "local", {alone}'))
    problems += _sampler_problems(cfg, alone)
    options = cfg.backend.options
    if not lean_applies(cfg.model.model, trust_remote_code=bool(options.get("trust_remote_code")),
                        model_impl=str(options.get("model_impl", "auto"))):
        problems.append((f"[model] model = {cfg.model.model!r}: the shared trainer runs the models the lean path "
                         "loads (builtin:..., smollm2:135m, plain Llama folders: docs/models.md)",
                         f"use such a model, {alone}"))
    if cfg.lora.dropout > 0:
        problems.append((f"[lora] dropout = {cfg.lora.dropout}: its random masks could not follow the solo run's",
                         f"set [lora] dropout = 0, {alone}"))
    problems += _step_problems(cfg, alone)
    return problems


def _step_problems(cfg: RetrainConfig, alone: str) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    t = cfg.training
    rl_loop = trainer_spec(t.trainer).rl_steps_only
    if t.sft_warmup_steps > 0 or not rl_loop:
        what = f"trainer = {t.trainer!r}" if not rl_loop else f"sft_warmup_steps = {t.sft_warmup_steps}"
        problems.append((f"[training] {what}: the shared trainer makes RL steps only (no supervised or "
                         "outside-the-loop steps)", f"use [training] trainer = \"retrain\" with sft_warmup_steps = 0, {alone}"))
    if "," in cfg.backend.devices:
        problems.append((f"[backend] devices = {cfg.backend.devices!r}: a shared trainer's member holds no device "
                         "of its own (no split placement)", f'set [backend] devices = "cpu" or "gpu:0", {alone}'))
    return problems


def samples_with_vllm(cfg: RetrainConfig) -> bool:
    """Whether the members sample from the campaign's shared vLLM engine (else from the trainer's own copy)."""
    return cfg.inference.engine == VLLM_SAMPLER and cfg.inference.shared


def _sampler_problems(cfg: RetrainConfig, alone: str) -> list[tuple[str, str]]:
    engine = cfg.inference.engine
    if is_dotted_path(engine) or engine not in (SAMPLER, VLLM_SAMPLER):
        return [(f"[inference] engine = {engine!r}: a shared trainer's runs sample from its copy with the PyTorch "
                 "engine, or from the campaign's shared vLLM engine",
                 f'set [inference] engine = "pytorch", or "vllm-embedded" with shared = true, {alone}')]
    if engine == SAMPLER:
        return []
    if not cfg.inference.shared:
        return [(f"[inference] engine = {engine!r} with shared = false: a member's trial holds no model, and a vLLM "
                 "engine of its own would hold a second base copy; the shared trainer feeds the campaign's one "
                 "shared vLLM engine only", f'set [inference] shared = true, or engine = "pytorch", {alone}')]
    if gpu_count(cfg.backend.devices) > 0:
        return [(f"[inference] engine = {engine!r} on [backend] devices = {cfg.backend.devices!r}: a shared trainer "
                 "takes each GPU whole, leaving no share of it to the shared vLLM engine (the two on one card are not "
                 "planned yet)", f'set [backend] devices = "cpu", or engine = "pytorch" on GPUs, {alone}')]
    return []


def member_problems(configs: Mapping[str, RetrainConfig]) -> list[str]:
    """Every reason the runs (run name -> its own config, a condition's overrides applied) cannot train on one
    shared trainer: a run that cannot join (a condition may override the base config), then what the members
    differ in that they must share. Empty: they can train together."""
    problems: dict[str, list[str]] = {}
    for run_name, cfg in configs.items():
        for message, fix in _run_problems(cfg):
            problems.setdefault(f"{KEY}: {message}. Fix: {fix}", []).append(run_name)
    found = [f"{text} (runs {', '.join(runs[:3])}{', ...' if len(runs) > 3 else ''})" for text, runs in problems.items()]
    return found + _differences(list(configs.values()))


def _differences(configs: list[RetrainConfig]) -> list[str]:
    fields = {"[model] model": _model, "[inference] dtype": lambda c: c.inference.dtype,
              "LoRA target modules and layers (lora_target_modules, lora_layers_to_transform, lora_layers_pattern)":
                  _targets}
    problems: list[str] = []
    for what, read in fields.items():
        seen = sorted({read(c) for c in configs})
        if len(seen) > 1:
            problems.append(f"{KEY}: the runs differ in {what}: {seen[:3]}; the members of a shared trainer share "
                            f"one base copy and its adapted modules. Fix: give every condition the same {what}, "
                            "or set [campaign] shared_trainer = false")
    return problems


def _model(cfg: RetrainConfig) -> str:
    return f"{cfg.model.model}@{cfg.model.revision}" if cfg.model.revision else cfg.model.model


def _targets(cfg: RetrainConfig) -> str:
    b = cfg.backend
    options = resolved_options(b.backend, dict(b.options))
    targets = ",".join(lora_targets_of(b.backend, b.options))
    return f"{targets}|{options.get('lora_layers_to_transform', '')}|{options.get('lora_layers_pattern', '')}"
