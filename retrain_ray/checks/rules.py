"""The config's rules: keys that tie several others together (spec 7, "Validation rules worth keeping"),
plus ours, the refused keys of the original, and the checks of `[campaign.adaptive]`.

Each rule is a small function of the sections it reads, returning `list[ConfigIssue]`, registered in `RULES`
with those sections; `collect_issues` runs all of them so every problem is reported at once. Single-key bounds are field constraints in
the section models. Warnings (spec 7) are rules of the same shape returning text, in `collect_warnings`.
`RetrainConfig` runs both through the hook of `retrain_ray.util.config_hooks` (see checks/__init__.py).

Departures from the original: the `unsloth` backend is rejected with a hint (retrain-ray does not ship
it); max / mlx / trtllm engines need LoRA (they load the trainer's weights as an adapter folder); `micro_batch_size` / `gradient_accumulation_steps` consistency is ours.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from typing import TYPE_CHECKING, Any, NamedTuple

from retrain_ray.algorithms.planning import DETECTORS
from retrain_ray.algorithms.recipes import ALGORITHMS
from retrain_ray.algorithms.registry import ADVANTAGES, TRANSFORMS, UNCERTAINTIES
from retrain_ray.backends.registry import (
    BACKEND_SPECS,
    ENGINE_SPECS,
    backend_spec,
    check_options,
    engine_spec,
    option_notes,
)
from retrain_ray.checks.shared_trainer import shared_trainer_issues
from retrain_ray.config.base import Section, check_choice
from retrain_ray.config.errors import ConfigIssue, did_you_mean
from retrain_ray.config.names import (
    ORIGINAL_ONLY_BACKENDS,
    UNCERTAINTY_PARAM_KEYS,
    canonical_uncertainty,
    uncertainty_kind_in_force,
)
from retrain_ray.config.sections_training import BackendSection
from retrain_ray.data.loading import SOURCES
from retrain_ray.environments import PROVIDERS
from retrain_ray.plugins.loader import is_dotted_path
from retrain_ray.rewards.registry import REWARD_BUILDERS
from retrain_ray.run.trainers.registry import (
    TRAINERS,
    no_training_warnings,
    trainer_config_issues,
    trainer_config_warnings,
)
from retrain_ray.run.trainers.rules import TrainerSettings

if TYPE_CHECKING:
    from retrain_ray.config.campaign_schema import CampaignSection, SqueezeSection
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import (
        BackpressureSection,
        DataSection,
        EchoSection,
        EnvironmentSection,
        InferenceSection,
        LoggingSection,
        OptimizerBatchSection,
        ResumeSection,
        RewardSection,
    )
    from retrain_ray.config.sections_training import AlgorithmSection, ModelSection, TrainingSection

class PluginKey(NamedTuple):
    """A config key that takes a dotted plugin path as well as its built-in names."""

    component: str  # its name in `retrain-ray plugins`
    label: str  # how messages name the key
    section: str
    key: str
    builtin: frozenset[str]

    @property
    def config_key(self) -> str:
        return f"{self.section}.{self.key}"


PLUGIN_KEYS: tuple[PluginKey, ...] = (
    PluginKey("advantage_mode", "advantage_mode", "algorithm", "advantage_mode", frozenset(ADVANTAGES.names())),
    PluginKey("transform_mode", "transform_mode", "algorithm", "transform_mode", frozenset(TRANSFORMS.names())),
    PluginKey("algorithm_mode", "algorithm_mode", "algorithm", "algorithm_mode", frozenset(ALGORITHMS.names())),
    PluginKey("uncertainty_kind", "uncertainty_kind", "algorithm", "uncertainty_kind", frozenset(UNCERTAINTIES.names())),
    PluginKey("backend", "[backend] backend", "backend", "backend", frozenset(BACKEND_SPECS)),
    PluginKey("inference_engine", "[inference] engine", "inference", "engine", frozenset(ENGINE_SPECS)),
    PluginKey("reward", "[reward] type", "reward", "type", frozenset(REWARD_BUILDERS)),
    PluginKey("data_source", "[data] source", "data", "source", frozenset(SOURCES)),
    PluginKey("planning_detector", "[planning] detector", "planning", "detector", frozenset(DETECTORS)),
    PluginKey("trainer", "[training] trainer", "training", "trainer", frozenset(TRAINERS)),
)
"""Every key that takes a dotted plugin path: `retrain-ray plugins` checks them, a campaign ships their code."""



class NameKey(NamedTuple):
    """A key whose value names a component: checked against that component's registry."""

    section: str
    key: str
    what: str  # how the message names the key
    known: AbstractSet[str]  # a registry's live keys where a component may be registered at run time
    dotted: bool = True  # a dotted plugin path is accepted too


NAME_KEYS: tuple[NameKey, ...] = (
    NameKey("algorithm", "algorithm_mode", "algorithm_mode", frozenset(ALGORITHMS.names()) | {""}),
    NameKey("algorithm", "advantage_mode", "advantage_mode", frozenset(ADVANTAGES.names())),
    NameKey("algorithm", "transform_mode", "transform_mode", frozenset(TRANSFORMS.names())),
    NameKey("inference", "engine", "inference engine", ENGINE_SPECS.keys()),
    NameKey("planning", "detector", "planning detector", frozenset(DETECTORS)),
    NameKey("data", "source", "data source", frozenset(SOURCES)),
    NameKey("environment", "provider", "environment provider", frozenset(PROVIDERS) | {""}, dotted=False),
    NameKey("reward", "type", "reward type", frozenset(REWARD_BUILDERS)),
)
"""Keys naming a component, with the registry that knows the names (the backend: `_backend`)."""


def _unknown_name(section: Section, name: NameKey) -> ConfigIssue | None:
    """The issue of a name its registry does not know, worded as a single-key error (config/build.py)."""
    value = getattr(section, name.key)
    try:
        check_choice(value, name.known, name.what, name.dotted)
    except ValueError as exc:
        default = type(section).model_fields[name.key].default
        return ConfigIssue(f"{name.section}.{name.key}", value, f"Value error, {exc}",
                           f"edit [{name.section}] {name.key} (default: {default!r})")
    return None


def name_issues(cfg: RetrainConfig) -> tuple[list[ConfigIssue], RetrainConfig]:
    """The unknown names of `cfg`, and `cfg` with each replaced by its key's default, so the other rules
    check the rest as they would with the key left out (a bad key is reported once, by its own issue)."""
    issues: list[ConfigIssue] = []
    for name in NAME_KEYS:
        issue = _unknown_name(getattr(cfg, name.section), name)
        if issue is not None:
            issues.append(issue)
    if not issues:
        return [], cfg
    updates: dict[str, dict[str, object]] = {}
    for issue in issues:
        section, key = issue.location.split(".")
        updates.setdefault(section, {})[key] = type(getattr(cfg, section)).model_fields[key].default
    return issues, cfg.model_copy(update={s: getattr(cfg, s).model_copy(update=u) for s, u in updates.items()})


Rule = Callable[["RetrainConfig"], list[ConfigIssue]]


def _backend(backend: BackendSection) -> list[ConfigIssue]:
    name = backend.backend
    if name in BACKEND_SPECS or is_dotted_path(name):
        return []
    why = "is a backend of the original retrain that retrain-ray does not ship" \
        if name in ORIGINAL_ONLY_BACKENDS else "is not a known backend"
    return [ConfigIssue("backend.backend", name, f"{name!r} {why}",
                        "use \"local\" (PyTorch on this machine/cluster), \"tinker\", \"prime_rl\", or a dotted "
                        "plugin path")]


def _adapter_engines(inference: InferenceSection, backend: BackendSection, model: ModelSection) -> list[ConfigIssue]:
    engine = inference.engine
    spec = engine_spec(engine)
    issues: list[ConfigIssue] = []
    if spec.adapter_folder_only and backend_spec(backend.backend).trains_locally and model.finetune != "lora":
        issues.append(ConfigIssue("model.finetune", model.finetune,
                                  f"the {engine} engine loads the trainer's weights as a LoRA adapter folder only: "
                                  f"{spec.lora_only_reason}",
                                  'use [model] finetune = "lora", or [inference] engine = "openai" / "pytorch"'))
    if spec.url_required_reason and not inference.url and backend_spec(backend.backend).trains_locally:
        issues.append(ConfigIssue("inference.url", "", f"the {engine} engine needs a server: {spec.url_required_reason}",
                                  f'set [inference] url = "http://HOST:PORT" where the {engine} server runs'))
    return issues


def _backend_options(backend: BackendSection, training: TrainingSection) -> list[ConfigIssue]:
    issues = check_options(backend.backend, backend.options)
    if backend.options.get("strict_deterministic") is True and training.seed < 0:
        issues.append(ConfigIssue("backend.options.strict_deterministic", True, "needs training.seed >= 0",
                                  "set [training] seed"))
    return issues


def _clipping(training: TrainingSection, backend: BackendSection) -> list[ConfigIssue]:
    t, issues = training, []
    if t.clip_eps_high > 0 and t.clip_eps <= 0:
        issues.append(ConfigIssue("training.clip_eps_high", t.clip_eps_high, "needs training.clip_eps > 0",
                                  "set clip_eps (e.g. 0.2) or clip_eps_high = 0"))
    if t.clip_cov_min >= t.clip_cov_max:
        issues.append(ConfigIssue("training.clip_cov_min", t.clip_cov_min,
                                  f"must be below clip_cov_max ({t.clip_cov_max})", "lower clip_cov_min"))
    if t.policy_loss_mode != "standard" and not backend_spec(backend.backend).trains_locally:
        issues.append(ConfigIssue("training.policy_loss_mode", t.policy_loss_mode,
                                  "non-standard policy losses need backend = \"local\"",
                                  "use policy_loss_mode = \"standard\" or the local backend"))
    return issues


def _micro_batches(training: TrainingSection) -> list[ConfigIssue]:
    """Seed 001's effective batch (micro_batch_size x gradient_accumulation_steps) is what one optimizer
    step trains here: batch_size x group_size completions. Both given, they must agree."""
    t = training
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


def _schedule_and_checkpoints(training: TrainingSection, campaign: CampaignSection | None) -> list[ConfigIssue]:
    t, issues = training, []
    if t.warmup_steps > 0 and t.warmup_ratio > 0:
        issues.append(ConfigIssue("training.warmup_ratio", t.warmup_ratio,
                                  f"and training.warmup_steps = {t.warmup_steps} both set the warmup",
                                  "keep one of warmup_steps / warmup_ratio"))
    if t.checkpoint_dir and campaign is not None:
        issues.append(ConfigIssue("training.checkpoint_dir", t.checkpoint_dir,
                                  "a campaign keeps each run's checkpoints in its own run directory (one shared "
                                  "checkpoint_dir would mix its runs)", "remove checkpoint_dir from the campaign file"))
    return issues


def _eval_split(training: TrainingSection, data: DataSection, environment: EnvironmentSection) -> list[ConfigIssue]:
    """`eval_every` and `eval_at_start` need held-out examples; sources without an eval split are refused, not silently
    never evaluated."""
    t, d = training, data
    if (t.eval_every <= 0 and not t.eval_at_start) or environment.provider:  # an environment holds its own
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
    key, value = ("training.eval_every", t.eval_every) if t.eval_every > 0 else ("training.eval_at_start", True)
    return [ConfigIssue(key, value, f"evaluates on the eval split, but {missing}",
                        "give the data an eval split ([data] eval_path for a file, num_eval_examples > 0 for the "
                        "builtin tasks), or set eval_every = 0 and eval_at_start = false")]


ENGINE_ONLY_KEYS = ("attention_kernel", "kv_cache_dtype", "prefix_caching")
"""[inference] keys that only the embedded vLLM engine reads (a vLLM server takes them as its own flags)."""


def _engine_only_keys(inference: InferenceSection) -> list[ConfigIssue]:
    inf = inference
    if engine_spec(inf.engine).embeds_vllm or is_dotted_path(inf.engine):
        return []
    fields = type(inf).model_fields
    return [ConfigIssue(f"inference.{key}", getattr(inf, key),
                        f"acts only with engine = \"vllm-embedded\", not engine = {inf.engine!r}"
                        + (" (a server's engine takes it as a launch flag of the server)" if engine_spec(inf.engine).is_http
                           else " (the PyTorch engine has no such setting)"),
                        f"set [inference] engine = \"vllm-embedded\", or remove {key}")
            for key in ENGINE_ONLY_KEYS if getattr(inf, key) != fields[key].default]


def _uncertainty(algorithm: AlgorithmSection, inference: InferenceSection, backend: BackendSection,
                 model: ModelSection) -> list[ConfigIssue]:
    a, issues = algorithm, []
    given = {k: a.transform_params[k] for k in UNCERTAINTY_PARAM_KEYS if k in a.transform_params}
    kinds = {canonical_uncertainty(str(v)) for v in given.values()}
    if len(kinds) > 1 or (kinds and a.uncertainty_kind != "surprisal" and a.uncertainty_kind not in kinds):
        issues.append(ConfigIssue("algorithm.transform_params", given,
                                  f"conflicts with algorithm.uncertainty_kind = {a.uncertainty_kind!r}",
                                  "name the uncertainty kind in one place only"))
    issues.extend(_shared_engine_issues(inference, model, backend))
    kind = uncertainty_kind_in_force(algorithm)
    engine = inference.engine  # a plugin engine's declared capabilities are checked by preflight
    if kind == "shannon_entropy" and ((not engine_spec(engine).gives_entropies and not is_dotted_path(engine))
                                      or not backend_spec(backend.backend).samples_with_entropies):
        issues.append(ConfigIssue("algorithm.uncertainty_kind", kind,
                                  "shannon_entropy needs inference.engine = \"pytorch\" (or a plugin engine that "
                                  "declares entropies) and a backend other than tinker and prime_rl",
                                  "use surprisal or predictive_variance"))
    return issues


BUILTIN_ENVIRONMENTS = frozenset({"digit_chain"})  # retrain_ray/environments BUILTIN (config loads no torch)


def _environment(environment: EnvironmentSection, training: TrainingSection) -> list[ConfigIssue]:
    e, issues = environment, []
    if e.provider and not e.id:
        issues.append(ConfigIssue("environment.id", e.id, f"provider {e.provider!r} needs an environment id",
                                  "set [environment] id"))
    if e.provider == "openenv" and e.id and not e.id.startswith(("http://", "https://", "ws://", "wss://")):
        issues.append(ConfigIssue("environment.id", e.id, "an openenv id must be an http(s) or ws(s) URL",
                                  "write the environment's URL"))
    if e.provider == "openenv" and training.sft_warmup_steps > 0 and not training.sft_data_path:
        issues.append(ConfigIssue("training.sft_warmup_steps", training.sft_warmup_steps, "an OpenEnv server "
                                  "keeps its answers to itself, so its examples give the warm start no targets",
                                  "set sft_data_path (an SFT data file) or sft_warmup_steps = 0"))
    if e.provider == "builtin" and e.id and e.id not in BUILTIN_ENVIRONMENTS:
        issues.append(ConfigIssue("environment.id", e.id, "is no built-in environment",
                                  f"choose one of {', '.join(sorted(BUILTIN_ENVIRONMENTS))}"))
    if training.tl_grpo and e.provider == "verifiers" and training.tl_grpo_branch_mode == "action_space":
        issues.append(ConfigIssue("training.tl_grpo_branch_mode", "action_space", "a verifiers environment names "
                                  "no action space to branch on", "set tl_grpo_branch_mode = \"llm\""))
    if e.auto_install and e.provider != "verifiers":
        issues.append(ConfigIssue("environment.auto_install", True, "installs verifiers environments from the "
                                  f"Environments Hub, and this provider is {e.provider or 'unset'!r}",
                                  "set auto_install = false, or provider = \"verifiers\" with a hub id (owner/name)"))
    if training.tl_grpo and not e.provider:
        issues.append(ConfigIssue("training.tl_grpo", True, "TL-GRPO assigns credit per turn of a multi-turn "
                                  "environment, and this run has none",
                                  "set [environment] provider and id (e.g. builtin / digit_chain) or tl_grpo = false"))
    return issues


def _checkpoint_artifacts(logging: LoggingSection, training: TrainingSection) -> list[ConfigIssue]:
    lg, issues = logging, []
    if lg.checkpoint_artifacts == "wandb":
        if not lg.wandb_project:
            issues.append(ConfigIssue("logging.checkpoint_artifacts", "wandb", "needs logging.wandb_project",
                                      "set wandb_project or checkpoint_artifacts = \"auto\""))
        if training.save_every <= 0:
            issues.append(ConfigIssue("logging.checkpoint_artifacts", "wandb", "needs training.save_every > 0",
                                      "set save_every (e.g. 20)"))
    return issues


def _trackers_installed(logging: LoggingSection) -> list[ConfigIssue]:
    # deferred: loads pyarrow, which importing this module does not need
    from retrain_ray.trackers.build import missing_trackers

    return [ConfigIssue(m.key, m.value, f"asks for {m.module}, which is not installed",
                        f"pip install 'retrain-ray[{m.extra}]' (or unset {m.key})")
            for m in missing_trackers(logging)]


def _echo(echo: EchoSection, environment: EnvironmentSection, backend: BackendSection) -> list[ConfigIssue]:
    e, issues = echo, []
    if e.enabled and e.weight <= 0:
        issues.append(ConfigIssue("echo.weight", e.weight, "must be > 0 when echo is enabled",
                                  "set weight (default 0.05) or enabled = false"))
    if e.enabled and not environment.provider:
        issues.append(ConfigIssue("echo.enabled", True, "ECHO trains on the observation tokens of multi-turn "
                                  "episodes, and this run has no environment",
                                  "set [environment] provider and id (e.g. builtin / digit_chain) or enabled = false"))
    if e.enabled and not backend_spec(backend.backend).trains_locally:
        issues.append(ConfigIssue("echo.enabled", True, f"ECHO needs the loss in the trainer's own forward pass: "
                                  f"only the local backend has it, not {backend.backend!r}",
                                  "set [backend] backend = \"local\" or enabled = false"))
    if e.target_retention == "all" and e.entropy_floor != 0:
        issues.append(ConfigIssue("echo.entropy_floor", e.entropy_floor, "must be 0 with target_retention = \"all\"",
                                  "set entropy_floor = 0 or target_retention = \"bounded\""))
    return issues


def _sft_loss(training: TrainingSection, backend: BackendSection) -> list[ConfigIssue]:
    t = training
    if t.sft_loss_fn != "importance_sampling" or backend_spec(backend.backend).sft_importance_sampling:
        return []
    return [ConfigIssue("training.sft_loss_fn", t.sft_loss_fn, f"the {backend.backend} backend trains the warm "
                        "start with cross-entropy only", "set sft_loss_fn = \"cross_entropy\" (or \"auto\")")]


def _optimizer_batch(optimizer_batch: OptimizerBatchSection, backend: BackendSection, training: TrainingSection, backpressure: BackpressureSection, resume: ResumeSection) -> list[ConfigIssue]:
    ob = optimizer_batch
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
    b, t = backend, training
    needs = {  # key: (its value, whether it will do, what it needs)
        "backend.backend": (b.backend, backend_spec(b.backend).trains_locally, "a local backend"),
        "backend.devices": (b.devices, "," not in b.devices, "a single device"),
        "training.max_steps": (t.max_steps, t.max_steps == 1, "1 (the one step after the checkpoint)"),
        "training.save_every": (t.save_every, t.save_every == 0, "0"),
        "backpressure.enabled": (backpressure.enabled, not backpressure.enabled, "false"),
        "resume.from": (resume.from_, bool(resume.from_), "the checkpoint (or run directory) to start from"),
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


def _data_and_reward(data: DataSection, reward: RewardSection, backpressure: BackpressureSection) -> list[ConfigIssue]:
    issues = []
    if data.source == "file" and not data.path:
        issues.append(ConfigIssue("data.path", "", "data.source = \"file\" needs a path",
                                  "set [data] path to a JSONL or Parquet file"))
    if reward.type == "custom" and not reward.custom_module:
        issues.append(ConfigIssue("reward.custom_module", "", "reward.type = \"custom\" needs a module",
                                  "set custom_module (and custom_function, default \"score\")"))
    if backpressure.min_batch_size > backpressure.max_batch_size:
        issues.append(ConfigIssue("backpressure.min_batch_size", backpressure.min_batch_size,
                                  f"exceeds max_batch_size ({backpressure.max_batch_size})",
                                  "lower min_batch_size or raise max_batch_size"))
    return issues


def _squeeze(squeeze: SqueezeSection | None, campaign: CampaignSection | None, model: ModelSection, backend: BackendSection) -> list[ConfigIssue]:
    """[squeeze] acts on an adapter it names, else on the LoRA adapter this file's run(s) train."""
    sq = squeeze
    if sq is None:
        return []
    if sq.adapter_path and campaign is not None:
        return [ConfigIssue("squeeze.adapter_path", sq.adapter_path, "a campaign squeezes its first completed run",
                            "remove adapter_path, or squeeze that adapter with `retrain-ray squeeze PATH`")]
    if not sq.adapter_path and (model.finetune != "lora" or not backend_spec(backend.backend).trains_locally):
        return [ConfigIssue("squeeze", "[squeeze]", "squeeze analyses a local LoRA adapter, but this file trains "
                            f"finetune = {model.finetune!r} on backend {backend.backend!r}",
                            "set [model] finetune = \"lora\" with backend = \"local\", or remove [squeeze]")]
    rank, issues = model.lora_rank, []
    if not sq.adapter_path and sq.compress_to > rank:
        issues.append(ConfigIssue("squeeze.compress_to", sq.compress_to, f"exceeds model.lora_rank ({rank})",
                                  f"use 1..{rank}, or 0 for the recommended rank"))
    if not sq.adapter_path and any(not 1 <= k <= rank for k in sq.target_ranks):
        issues.append(ConfigIssue("squeeze.target_ranks", sq.target_ranks, f"each must lie in 1..{rank}",
                                  "model.lora_rank is the largest rank there is"))
    return issues


def _adaptive(campaign: CampaignSection | None) -> list[ConfigIssue]:
    """[campaign.adaptive]: rungs a run reports at, seeds to start and add, a budget the grid fits."""
    camp = campaign
    ad = camp.adaptive if camp is not None else None
    if camp is None or ad is None:
        return []

    issues, loc = [], "campaign.adaptive"
    bad = rung_problem(ad.rungs, camp.max_steps)
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


REFUSED: dict[tuple[str, str], str] = {}
"""None today: every key of the original has its effect here (a new refusal names its reason)."""

ValueRule = Callable[[Any], str]

BY_VALUE: dict[tuple[str, str], ValueRule] = {}
"""Keys implemented for some values only: none today (every value the original accepts works)."""


def _default(section: Any, key: str) -> Any:
    for name, info in type(section).model_fields.items():
        if (info.alias or name) == key:
            return info.get_default(call_default_factory=True), getattr(section, name)
    raise KeyError(key)


def refused_keys(sections: Mapping[str, object]) -> list[ConfigIssue]:
    """An issue for every refused key set away from its default, and every refused value."""
    issues = []
    for (section_name, key), why in REFUSED.items():
        default, value = _default(sections[section_name], key)
        if value != default:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      f"remove the key (default {default!r})"))
    for (section_name, key), rule in BY_VALUE.items():
        _, value = _default(sections[section_name], key)
        why = rule(value)
        if why:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      "choose a supported value"))
    return issues


EVAL_COLUMNS = ("eval_mean_reward", "eval_correct_rate")


def rung_problem(rungs: list[int], max_steps: int) -> tuple[str, str] | None:
    """(what is wrong, the fix) with the rungs of a campaign of `max_steps` steps, or None. Any step may be a
    rung: each run checkpoints at its campaign's rungs ([training] checkpoint_steps, config/matrix.py)."""
    late = [r for r in rungs if r > max_steps]
    if late:
        return (f"rungs {late} lie past [campaign].max_steps = {max_steps}",
                f"give steps from 1 to {max_steps}, or raise [campaign].max_steps")
    return None


def metric_problem(metric: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) when `metric` is no numeric column the runs log, or None."""
    # deferred: pyarrow and the log schemas load only for a config that has [campaign.adaptive]
    import pyarrow as pa

    from retrain_ray.logs.schemas import METRICS_SCHEMA  # deferred: imports pyarrow

    numeric = [f.name for f in METRICS_SCHEMA if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
    known = [n for n in numeric if n != "step"] + list(EVAL_COLUMNS)
    if metric in known:
        return None
    return (f"no logged column is called {metric!r}",
            f"use a column of the metrics log (mean_reward, correct_rate, loss, ...) or eval_correct_rate "
            f"{did_you_mean(metric, known)}".rstrip())


RULES: tuple[Rule, ...] = (
    lambda cfg: refused_keys(dict(cfg)),
    lambda cfg: _backend(cfg.backend),
    lambda cfg: _backend_options(cfg.backend, cfg.training),
    lambda cfg: _adapter_engines(cfg.inference, cfg.backend, cfg.model),
    lambda cfg: _clipping(cfg.training, cfg.backend),
    lambda cfg: _micro_batches(cfg.training),
    lambda cfg: _schedule_and_checkpoints(cfg.training, cfg.campaign),
    lambda cfg: _eval_split(cfg.training, cfg.data, cfg.environment),
    lambda cfg: _engine_only_keys(cfg.inference),
    lambda cfg: _uncertainty(cfg.algorithm, cfg.inference, cfg.backend, cfg.model),
    lambda cfg: _environment(cfg.environment, cfg.training),
    lambda cfg: _checkpoint_artifacts(cfg.logging, cfg.training),
    lambda cfg: _trackers_installed(cfg.logging),
    lambda cfg: _echo(cfg.echo, cfg.environment, cfg.backend),
    lambda cfg: _sft_loss(cfg.training, cfg.backend),
    lambda cfg: _optimizer_batch(cfg.optimizer_batch, cfg.backend, cfg.training, cfg.backpressure, cfg.resume),
    lambda cfg: _data_and_reward(cfg.data, cfg.reward, cfg.backpressure),
    lambda cfg: _squeeze(cfg.squeeze, cfg.campaign, cfg.model, cfg.backend),
    lambda cfg: _adaptive(cfg.campaign),
    shared_trainer_issues,
    lambda cfg: trainer_config_issues(TrainerSettings(cfg.training, cfg.algorithm, cfg.environment, cfg.campaign)),
)
"""Each rule with the sections it reads."""


def collect_issues(cfg: RetrainConfig) -> list[ConfigIssue]:
    """Every problem of a config the section models cannot see alone: unknown component names, then the
    cross-key rules (empty when valid)."""
    issues, known = name_issues(cfg)
    return issues + [issue for rule in RULES for issue in rule(known)]


def _warnings(backend: BackendSection, training: TrainingSection) -> list[str]:
    out = []
    default_adapter = BackendSection.model_fields["adapter_path"].default
    if backend.adapter_path.startswith("/tmp") and backend.adapter_path != default_adapter:
        out.append(f"backend.adapter_path = {backend.adapter_path!r} is under /tmp and may be wiped")
    if training.temperature > 2:
        out.append(f"training.temperature = {training.temperature} is above 2: samples will be near random")
    if training.save_every == 0:
        out.append("training.save_every = 0: no checkpoints, a failed run cannot resume")
    if training.weight_decay < 0:
        out.append(f"training.weight_decay = {training.weight_decay} is negative")
    if training.clip_eps > 0 and not backend_spec(backend.backend).honours_clip_eps:
        out.append(f"training.clip_eps is set but backend {backend.backend!r} may ignore it")
    return out


def collect_warnings(cfg: RetrainConfig) -> list[str]:
    """Spec 7 warnings: the config is valid but probably not what was meant."""
    settings = TrainerSettings(cfg.training, cfg.algorithm, cfg.environment, cfg.campaign)
    return (_warnings(cfg.backend, cfg.training) + option_notes(cfg.backend.backend, cfg.backend.options)
            + trainer_config_warnings(settings) + no_training_warnings(settings))


def _shared_engine_issues(inference: InferenceSection, model: ModelSection, backend: BackendSection) -> list[ConfigIssue]:
    """`[inference] shared = true`: one vLLM engine for a campaign's LoRA runs."""
    inf = inference
    if not inf.shared:
        return []
    if not engine_spec(inf.engine).embeds_vllm:
        return [ConfigIssue("inference.shared", True, f"a shared engine is the embedded vLLM engine, not {inf.engine!r}",
                            'set [inference] engine = "vllm-embedded"')]
    if model.finetune != "lora":
        return [ConfigIssue("inference.shared", True,
                            "runs with full fine-tuning cannot share one vLLM engine (one set of weights per engine)",
                            'use [model] finetune = "lora", or shared = false')]
    if not backend_spec(backend.backend).trains_locally:
        return [ConfigIssue("inference.shared", True, f"the shared engine samples for the local backend, not for "
                            f"{backend.backend!r} (a plugin or remote backend builds its own sampler)",
                            'use [backend] backend = "local", or shared = false')]
    return []
