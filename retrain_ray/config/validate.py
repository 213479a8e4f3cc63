"""Rules that tie several keys together (spec 7, "Validation rules worth keeping"), plus ours.

Each rule is a small function `cfg -> list[ConfigIssue]` registered in `RULES`; `collect_issues`
runs all of them so every problem is reported at once. Single-key bounds are field constraints in
the section models. Warnings (spec 7) are rules of the same shape returning text, in `WARNINGS`.

Departures from the original: the `unsloth` backend is rejected with a hint (retrain-ray does not ship
it); max / mlx / trtllm engines need LoRA (they load the trainer's weights as an adapter folder); `micro_batch_size` / `gradient_accumulation_steps` consistency is ours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from retrain_ray.config.adaptive_checks import metric_problem, rung_problem
from retrain_ray.config.backend_options import check_options
from retrain_ray.config.components import backend_spec, engine_spec
from retrain_ray.config.errors import ConfigIssue
from retrain_ray.config.names import (
    ORIGINAL_ONLY_BACKENDS,
    SUPPORTED_BACKENDS,
    UNCERTAINTY_PARAM_KEYS,
    canonical_uncertainty,
    is_dotted_path,
)
from retrain_ray.config.no_training import no_training_warnings
from retrain_ray.config.sections_core import BackendSection
from retrain_ray.config.trainers import trainer_issues, trainer_warnings
from retrain_ray.config.unimplemented import refused_keys

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

Rule = Callable[["RetrainConfig"], list[ConfigIssue]]


def _backend(cfg: RetrainConfig) -> list[ConfigIssue]:
    name = cfg.backend.backend
    if name in SUPPORTED_BACKENDS or is_dotted_path(name):
        return []
    why = "is a backend of the original retrain that retrain-ray does not ship" \
        if name in ORIGINAL_ONLY_BACKENDS else "is not a known backend"
    return [ConfigIssue("backend.backend", name, f"{name!r} {why}",
                        "use \"local\" (PyTorch on this machine/cluster), \"tinker\", \"prime_rl\", or a dotted "
                        "plugin path")]


def _adapter_engines(cfg: RetrainConfig) -> list[ConfigIssue]:
    engine = cfg.inference.engine
    if (engine_spec(engine).adapter_folder_only and backend_spec(cfg.backend.backend).trains_locally
            and cfg.model.finetune != "lora"):
        return [ConfigIssue("model.finetune", cfg.model.finetune,
                            f"the {engine} engine loads the trainer's weights as a LoRA adapter folder only",
                            'use [model] finetune = "lora", or [inference] engine = "openai" / "pytorch"')]
    return []


def _backend_options(cfg: RetrainConfig) -> list[ConfigIssue]:
    issues = check_options(cfg.backend.backend, cfg.backend.options)
    if cfg.backend.options.get("strict_deterministic") is True and cfg.training.seed < 0:
        issues.append(ConfigIssue("backend.options.strict_deterministic", True, "needs training.seed >= 0",
                                  "set [training] seed"))
    return issues


def _clipping(cfg: RetrainConfig) -> list[ConfigIssue]:
    t, issues = cfg.training, []
    if t.clip_eps_high > 0 and t.clip_eps <= 0:
        issues.append(ConfigIssue("training.clip_eps_high", t.clip_eps_high, "needs training.clip_eps > 0",
                                  "set clip_eps (e.g. 0.2) or clip_eps_high = 0"))
    if t.clip_cov_min >= t.clip_cov_max:
        issues.append(ConfigIssue("training.clip_cov_min", t.clip_cov_min,
                                  f"must be below clip_cov_max ({t.clip_cov_max})", "lower clip_cov_min"))
    if t.policy_loss_mode != "standard" and not backend_spec(cfg.backend.backend).trains_locally:
        issues.append(ConfigIssue("training.policy_loss_mode", t.policy_loss_mode,
                                  "non-standard policy losses need backend = \"local\"",
                                  "use policy_loss_mode = \"standard\" or the local backend"))
    return issues


def _micro_batches(cfg: RetrainConfig) -> list[ConfigIssue]:
    """Seed 001's effective batch (micro_batch_size x gradient_accumulation_steps) is what one optimizer
    step trains here: batch_size x group_size completions. Both given, they must agree."""
    t = cfg.training
    if t.micro_batch_size > 0 and t.gradient_accumulation_steps > 1:
        if t.micro_batch_size * t.gradient_accumulation_steps != t.rows_per_step:
            return [ConfigIssue(
                "training.gradient_accumulation_steps", t.gradient_accumulation_steps,
                f"with micro_batch_size = {t.micro_batch_size} gives an effective batch of "
                f"{t.micro_batch_size * t.gradient_accumulation_steps} completions per optimizer step, but a step "
                f"trains batch_size x group_size = {t.batch_size} x {t.group_size} = {t.rows_per_step}",
                "set batch_size x group_size to micro x accumulation, or set only one of micro_batch_size / "
                "gradient_accumulation_steps (the other follows from the step)")]
    return []


def _schedule_and_checkpoints(cfg: RetrainConfig) -> list[ConfigIssue]:
    t, issues = cfg.training, []
    if t.warmup_steps > 0 and t.warmup_ratio > 0:
        issues.append(ConfigIssue("training.warmup_ratio", t.warmup_ratio,
                                  f"and training.warmup_steps = {t.warmup_steps} both set the warmup",
                                  "keep one of warmup_steps / warmup_ratio"))
    if t.checkpoint_dir and cfg.campaign is not None:
        issues.append(ConfigIssue("training.checkpoint_dir", t.checkpoint_dir,
                                  "a campaign keeps each run's checkpoints in its own run directory (one shared "
                                  "checkpoint_dir would mix its runs)", "remove checkpoint_dir from the campaign file"))
    return issues


def _eval_split(cfg: RetrainConfig) -> list[ConfigIssue]:
    """`eval_every` needs held-out examples; sources without an eval split are refused, not silently
    never evaluated."""
    t, d = cfg.training, cfg.data
    if t.eval_every <= 0 or cfg.environment.provider:  # an environment holds its own eval examples back
        return []
    missing = ""
    if d.source == "builtin" and d.num_eval_examples == 0:
        missing = "[data] num_eval_examples = 0 holds no eval examples back"
    elif d.source == "file" and not d.eval_path:
        missing = "[data] source = \"file\" has no eval_path"
    elif d.source == "math" or is_dotted_path(d.source):
        missing = f"[data] source = {d.source!r} has no eval split"
    if not missing:
        return []
    return [ConfigIssue("training.eval_every", t.eval_every, f"evaluates on the eval split, but {missing}",
                        "give the data an eval split ([data] eval_path for a file, num_eval_examples > 0 for the "
                        "builtin tasks), or set eval_every = 0")]


ENGINE_ONLY_KEYS = ("attention_kernel", "kv_cache_dtype", "prefix_caching")
"""[inference] keys that only the embedded vLLM engine reads (a vLLM server takes them as its own flags)."""


def _engine_only_keys(cfg: RetrainConfig) -> list[ConfigIssue]:
    inf = cfg.inference
    if engine_spec(inf.engine).embeds_vllm or is_dotted_path(inf.engine):
        return []
    fields = type(inf).model_fields
    return [ConfigIssue(f"inference.{key}", getattr(inf, key),
                        f"acts only with engine = \"vllm-embedded\", not engine = {inf.engine!r}"
                        + (" (a server's engine takes it as a launch flag of the server)" if engine_spec(inf.engine).is_http
                           else " (the PyTorch engine has no such setting)"),
                        f"set [inference] engine = \"vllm-embedded\", or remove {key}")
            for key in ENGINE_ONLY_KEYS if getattr(inf, key) != fields[key].default]


def _uncertainty(cfg: RetrainConfig) -> list[ConfigIssue]:
    a, issues = cfg.algorithm, []
    given = {k: a.transform_params[k] for k in UNCERTAINTY_PARAM_KEYS if k in a.transform_params}
    kinds = {canonical_uncertainty(str(v)) for v in given.values()}
    if len(kinds) > 1 or (kinds and a.uncertainty_kind != "surprisal" and a.uncertainty_kind not in kinds):
        issues.append(ConfigIssue("algorithm.transform_params", given,
                                  f"conflicts with algorithm.uncertainty_kind = {a.uncertainty_kind!r}",
                                  "name the uncertainty kind in one place only"))
    issues.extend(_shared_engine_issues(cfg))
    kind = effective_uncertainty_kind(cfg)
    engine = cfg.inference.engine  # a plugin engine's declared capabilities are checked by preflight
    if kind == "shannon_entropy" and ((not engine_spec(engine).gives_entropies and not is_dotted_path(engine))
                                      or not backend_spec(cfg.backend.backend).samples_with_entropies):
        issues.append(ConfigIssue("algorithm.uncertainty_kind", kind,
                                  "shannon_entropy needs inference.engine = \"pytorch\" (or a plugin engine that "
                                  "declares entropies) and a backend other than tinker and prime_rl",
                                  "use surprisal or predictive_variance"))
    return issues


def effective_uncertainty_kind(cfg: RetrainConfig) -> str:
    """The kind in force: a transform_params override replaces the default `surprisal` (spec 7)."""
    for key in UNCERTAINTY_PARAM_KEYS:
        if key in cfg.algorithm.transform_params:
            return canonical_uncertainty(str(cfg.algorithm.transform_params[key]))
    return cfg.algorithm.uncertainty_kind


BUILTIN_ENVIRONMENTS = frozenset({"digit_chain"})  # retrain_ray/environments BUILTIN (config loads no torch)


def _environment(cfg: RetrainConfig) -> list[ConfigIssue]:
    e, issues = cfg.environment, []
    if e.provider and not e.id:
        issues.append(ConfigIssue("environment.id", e.id, f"provider {e.provider!r} needs an environment id",
                                  "set [environment] id"))
    if e.provider == "openenv" and e.id and not e.id.startswith(("http://", "https://", "ws://", "wss://")):
        issues.append(ConfigIssue("environment.id", e.id, "an openenv id must be an http(s) or ws(s) URL",
                                  "write the environment's URL"))
    if e.provider == "openenv" and cfg.training.sft_warmup_steps > 0 and not cfg.training.sft_data_path:
        issues.append(ConfigIssue("training.sft_warmup_steps", cfg.training.sft_warmup_steps, "an OpenEnv server "
                                  "keeps its answers to itself, so its examples give the warm start no targets",
                                  "set sft_data_path (an SFT data file) or sft_warmup_steps = 0"))
    if e.provider == "builtin" and e.id and e.id not in BUILTIN_ENVIRONMENTS:
        issues.append(ConfigIssue("environment.id", e.id, "is no built-in environment",
                                  f"choose one of {', '.join(sorted(BUILTIN_ENVIRONMENTS))}"))
    if cfg.training.tl_grpo and e.provider == "verifiers" and cfg.training.tl_grpo_branch_mode == "action_space":
        issues.append(ConfigIssue("training.tl_grpo_branch_mode", "action_space", "a verifiers environment names "
                                  "no action space to branch on", "set tl_grpo_branch_mode = \"llm\""))
    if e.auto_install and e.provider != "verifiers":
        issues.append(ConfigIssue("environment.auto_install", True, "installs verifiers environments from the "
                                  f"Environments Hub, and this provider is {e.provider or 'unset'!r}",
                                  "set auto_install = false, or provider = \"verifiers\" with a hub id (owner/name)"))
    if cfg.training.tl_grpo and not e.provider:
        issues.append(ConfigIssue("training.tl_grpo", True, "TL-GRPO assigns credit per turn of a multi-turn "
                                  "environment, and this run has none",
                                  "set [environment] provider and id (e.g. builtin / digit_chain) or tl_grpo = false"))
    return issues


def _checkpoint_artifacts(cfg: RetrainConfig) -> list[ConfigIssue]:
    lg, issues = cfg.logging, []
    if lg.checkpoint_artifacts == "wandb":
        if not lg.wandb_project:
            issues.append(ConfigIssue("logging.checkpoint_artifacts", "wandb", "needs logging.wandb_project",
                                      "set wandb_project or checkpoint_artifacts = \"auto\""))
        if cfg.training.save_every <= 0:
            issues.append(ConfigIssue("logging.checkpoint_artifacts", "wandb", "needs training.save_every > 0",
                                      "set save_every (e.g. 20)"))
    return issues


def _trackers_installed(cfg: RetrainConfig) -> list[ConfigIssue]:
    # deferred: loads pyarrow, which importing this module does not need
    from retrain_ray.trackers.requirements import missing_trackers

    return [ConfigIssue(m.key, m.value, f"asks for {m.module}, which is not installed",
                        f"pip install 'retrain-ray[{m.extra}]' (or unset {m.key})")
            for m in missing_trackers(cfg.logging)]


def _echo(cfg: RetrainConfig) -> list[ConfigIssue]:
    e, issues = cfg.echo, []
    if e.enabled and e.weight <= 0:
        issues.append(ConfigIssue("echo.weight", e.weight, "must be > 0 when echo is enabled",
                                  "set weight (default 0.05) or enabled = false"))
    if e.enabled and not cfg.environment.provider:
        issues.append(ConfigIssue("echo.enabled", True, "ECHO trains on the observation tokens of multi-turn "
                                  "episodes, and this run has no environment",
                                  "set [environment] provider and id (e.g. builtin / digit_chain) or enabled = false"))
    if e.enabled and not backend_spec(cfg.backend.backend).trains_locally:
        issues.append(ConfigIssue("echo.enabled", True, f"ECHO needs the loss in the trainer's own forward pass: "
                                  f"only the local backend has it, not {cfg.backend.backend!r}",
                                  "set [backend] backend = \"local\" or enabled = false"))
    if e.target_retention == "all" and e.entropy_floor != 0:
        issues.append(ConfigIssue("echo.entropy_floor", e.entropy_floor, "must be 0 with target_retention = \"all\"",
                                  "set entropy_floor = 0 or target_retention = \"bounded\""))
    return issues


def _sft_loss(cfg: RetrainConfig) -> list[ConfigIssue]:
    t = cfg.training
    if t.sft_loss_fn != "importance_sampling" or backend_spec(cfg.backend.backend).sft_importance_sampling:
        return []
    return [ConfigIssue("training.sft_loss_fn", t.sft_loss_fn, f"the {cfg.backend.backend} backend trains the warm "
                        "start with cross-entropy only", "set sft_loss_fn = \"cross_entropy\" (or \"auto\")")]


def _optimizer_batch(cfg: RetrainConfig) -> list[ConfigIssue]:
    ob = cfg.optimizer_batch
    if not (ob.capture or ob.replay_path):
        pins = {"expected_logical_sha256": ob.expected_logical_sha256,
                "expected_manifest_sha256": ob.expected_manifest_sha256,
                "allow_config_differences": ob.allow_config_differences}
        return [ConfigIssue(f"optimizer_batch.{k}", v, "has no effect without capture = true or a replay_path",
                            "set [optimizer_batch] replay_path (or capture = true), or remove the key")
                for k, v in pins.items() if v]
    if ob.capture and ob.replay_path:
        return [ConfigIssue("optimizer_batch.capture", True, "a run either captures its batch or replays one",
                            "remove capture = true, or remove replay_path")]
    b, t = cfg.backend, cfg.training
    needs = {  # key: (its value, whether it will do, what it needs)
        "backend.backend": (b.backend, backend_spec(b.backend).trains_locally, "a local backend"),
        "backend.devices": (b.devices, "," not in b.devices, "a single device"),
        "training.max_steps": (t.max_steps, t.max_steps == 1, "1 (the one step after the checkpoint)"),
        "training.save_every": (t.save_every, t.save_every == 0, "0"),
        "backpressure.enabled": (cfg.backpressure.enabled, not cfg.backpressure.enabled, "false"),
        "resume.from": (cfg.resume.from_, bool(cfg.resume.from_), "the checkpoint (or run directory) to start from"),
    }
    issues = [ConfigIssue(loc, value, f"optimizer-batch capture/replay needs {want}",
                          f"set {loc}, or turn off [optimizer_batch]")
              for loc, (value, ok, want) in needs.items() if not ok]
    if ob.capture and ob.expected_manifest_sha256:
        issues.append(ConfigIssue("optimizer_batch.expected_manifest_sha256", ob.expected_manifest_sha256,
                                  "pins a capture to replay; a capture run writes a new manifest",
                                  "remove it (expected_logical_sha256 pins what a capture must reproduce)"))
    if ob.capture and ob.allow_config_differences:
        issues.append(ConfigIssue("optimizer_batch.allow_config_differences", ob.allow_config_differences,
                                  "applies to a replay only", "remove it, or set replay_path instead of capture"))
    return issues


def _data_and_reward(cfg: RetrainConfig) -> list[ConfigIssue]:
    issues = []
    if cfg.data.source == "file" and not cfg.data.path:
        issues.append(ConfigIssue("data.path", "", "data.source = \"file\" needs a path",
                                  "set [data] path to a JSONL or Parquet file"))
    if cfg.reward.type == "custom" and not cfg.reward.custom_module:
        issues.append(ConfigIssue("reward.custom_module", "", "reward.type = \"custom\" needs a module",
                                  "set custom_module (and custom_function, default \"score\")"))
    if cfg.backpressure.min_batch_size > cfg.backpressure.max_batch_size:
        issues.append(ConfigIssue("backpressure.min_batch_size", cfg.backpressure.min_batch_size,
                                  f"exceeds max_batch_size ({cfg.backpressure.max_batch_size})",
                                  "lower min_batch_size or raise max_batch_size"))
    return issues


def _squeeze(cfg: RetrainConfig) -> list[ConfigIssue]:
    """[squeeze] acts on an adapter it names, else on the LoRA adapter this file's run(s) train."""
    sq = cfg.squeeze
    if sq is None:
        return []
    if sq.adapter_path and cfg.campaign is not None:
        return [ConfigIssue("squeeze.adapter_path", sq.adapter_path, "a campaign squeezes its first completed run",
                            "remove adapter_path, or squeeze that adapter with `retrain-ray squeeze PATH`")]
    if not sq.adapter_path and (cfg.model.finetune != "lora" or not backend_spec(cfg.backend.backend).trains_locally):
        return [ConfigIssue("squeeze", "[squeeze]", "squeeze analyses a local LoRA adapter, but this file trains "
                            f"finetune = {cfg.model.finetune!r} on backend {cfg.backend.backend!r}",
                            "set [model] finetune = \"lora\" with backend = \"local\", or remove [squeeze]")]
    rank, issues = cfg.model.lora_rank, []
    if not sq.adapter_path and sq.compress_to > rank:
        issues.append(ConfigIssue("squeeze.compress_to", sq.compress_to, f"exceeds model.lora_rank ({rank})",
                                  f"use 1..{rank}, or 0 for the recommended rank"))
    if not sq.adapter_path and any(not 1 <= k <= rank for k in sq.target_ranks):
        issues.append(ConfigIssue("squeeze.target_ranks", sq.target_ranks, f"each must lie in 1..{rank}",
                                  "model.lora_rank is the largest rank there is"))
    return issues


def _adaptive(cfg: RetrainConfig) -> list[ConfigIssue]:
    """[campaign.adaptive]: rungs a run reports at, seeds to start and add, a budget the grid fits."""
    camp = cfg.campaign
    ad = camp.adaptive if camp is not None else None
    if camp is None or ad is None:
        return []

    issues, loc = [], "campaign.adaptive"
    bad = rung_problem(ad.rungs, camp.max_steps, cfg.training.save_every)
    if bad:
        issues.append(ConfigIssue(f"{loc}.rungs", ad.rungs, bad[0], bad[1]))
    bad = metric_problem(ad.metric)
    if bad:
        issues.append(ConfigIssue(f"{loc}.metric", ad.metric, bad[0], bad[1]))
    if len(camp.seeds) < ad.max_seeds:
        issues.append(ConfigIssue(f"{loc}.max_seeds", ad.max_seeds, f"[campaign].seeds lists only {len(camp.seeds)} "
                                  "seeds: the first min_seeds start, the next ones are added in order",
                                  f"list at least {ad.max_seeds} seeds in [campaign].seeds, or lower max_seeds"))
    grid = len(camp.conditions) * ad.min_seeds * camp.max_steps
    if 0 < ad.budget_steps < grid:
        issues.append(ConfigIssue(f"{loc}.budget_steps", ad.budget_steps, f"below the {grid} steps the first seeds "
                                  f"take ({len(camp.conditions)} conditions x {ad.min_seeds} seeds x {camp.max_steps})",
                                  f"raise it to at least {grid}, or 0 for no limit"))
    return issues


RULES: tuple[Rule, ...] = (
    refused_keys, _backend, _backend_options, _adapter_engines, _clipping, _micro_batches,
    _schedule_and_checkpoints, _eval_split, _engine_only_keys, _uncertainty, _environment,
    _checkpoint_artifacts, _trackers_installed, _echo, _sft_loss, _optimizer_batch, _data_and_reward, _squeeze,
    _adaptive, trainer_issues,
)


def collect_issues(cfg: RetrainConfig) -> list[ConfigIssue]:
    """Every cross-key problem of a config (empty when valid)."""
    return [issue for rule in RULES for issue in rule(cfg)]


def _warnings(cfg: RetrainConfig) -> list[str]:
    out = []
    default_adapter = BackendSection.model_fields["adapter_path"].default
    if cfg.backend.adapter_path.startswith("/tmp") and cfg.backend.adapter_path != default_adapter:
        out.append(f"backend.adapter_path = {cfg.backend.adapter_path!r} is under /tmp and may be wiped")
    if cfg.training.temperature > 2:
        out.append(f"training.temperature = {cfg.training.temperature} is above 2: samples will be near random")
    if cfg.training.save_every == 0:
        out.append("training.save_every = 0: no checkpoints, a failed run cannot resume")
    if cfg.training.weight_decay < 0:
        out.append(f"training.weight_decay = {cfg.training.weight_decay} is negative")
    if cfg.training.clip_eps > 0 and not backend_spec(cfg.backend.backend).honours_clip_eps:
        out.append(f"training.clip_eps is set but backend {cfg.backend.backend!r} may ignore it")
    return out


def collect_warnings(cfg: RetrainConfig) -> list[str]:
    """Spec 7 warnings: the config is valid but probably not what was meant."""
    return _warnings(cfg) + trainer_warnings(cfg) + no_training_warnings(cfg)


def _shared_engine_issues(cfg: RetrainConfig) -> list[ConfigIssue]:
    """`[inference] shared = true`: one vLLM engine for a campaign's LoRA runs."""
    inf = cfg.inference
    if not inf.shared:
        return []
    if not engine_spec(inf.engine).embeds_vllm:
        return [ConfigIssue("inference.shared", True, f"a shared engine is the embedded vLLM engine, not {inf.engine!r}",
                            'set [inference] engine = "vllm-embedded"')]
    if cfg.model.finetune != "lora":
        return [ConfigIssue("inference.shared", True,
                            "runs with full fine-tuning cannot share one vLLM engine (one set of weights per engine)",
                            'use [model] finetune = "lora", or shared = false')]
    if not backend_spec(cfg.backend.backend).trains_locally:
        return [ConfigIssue("inference.shared", True, f"the shared engine samples for the local backend, not for "
                            f"{cfg.backend.backend!r} (a plugin or remote backend builds its own sampler)",
                            'use [backend] backend = "local", or shared = false')]
    return []
