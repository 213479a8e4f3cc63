"""Config -> runtime objects of one run (task data, reward, policy, SEPA, planning, advisor)."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from retrain_ray.algorithms import RegexPlanningDetector, parse_strategic_grams
from retrain_ray.algorithms.planning_semantic import PLANNING_SENTENCES, SemanticPlanningDetector
from retrain_ray.algorithms.sepa import SEPAController
from retrain_ray.backends.registry import backend_spec, build_policy_for, engine_spec
from retrain_ray.backends.request import PolicyRequest
from retrain_ray.backends.types import Policy
from retrain_ray.backpressure.advisor import LocalAdvisor
from retrain_ray.backpressure.types import BackPressureAdvisor, NoOpAdvisor
from retrain_ray.compat import provide_original_names
from retrain_ray.data.files import row_origin
from retrain_ray.data.fit import ContextLimit, fit_prompts
from retrain_ray.data.loading import load_examples_from_config
from retrain_ray.data.types import TaskData
from retrain_ray.environments.types import Environment
from retrain_ray.models.sentence_embedder import load_embedder
from retrain_ray.plugins.loader import is_dotted_path
from retrain_ray.rewards import build_reward_from_config
from retrain_ray.rewards.types import Reward
from retrain_ray.run.loop import RunComponents
from retrain_ray.run.plugin_modes import resolve_modes
from retrain_ray.run.rollout import PlanningDetector
from retrain_ray.run.types import RunObserver

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import DataSection, EnvironmentSection, PlanningSection
    from retrain_ray.config.sections_training import BackendSection, ModelSection, SepaSection
    from retrain_ray.models.context import PromptCodec
    from retrain_ray.throttle.types import Throttle

log = logging.getLogger(__name__)


def resolve_device(devices: str) -> str:
    """`backend.devices` -> a torch device for single-process placement ("cpu" without CUDA)."""
    first = devices.split(",")[0].strip().lower()
    if first in ("cpu", "") or not torch.cuda.is_available():
        if first.startswith("gpu"):
            log.warning("backend.devices=%r but no CUDA device is visible: running on CPU", devices)
        return "cpu"
    index = first.split(":")[1] if ":" in first else "0"
    return f"cuda:{index}" if torch.cuda.device_count() > 1 else "cuda"


def build_task(cfg: RetrainConfig) -> TaskData:
    """The run's examples, every prompt checked against the model's context (run/build.py): call it
    before `build_policy`, so that a prompt the model cannot take is refused before the model loads."""
    return fit_task(_load_task(cfg), model=cfg.model, data=cfg.data, backend=cfg.backend,
                    max_tokens=cfg.training.max_tokens)


def _load_task(cfg: RetrainConfig) -> TaskData:
    if cfg.environment.provider:
        # deferred: an environment's package (verifiers) loads only for runs that use one
        from retrain_ray.environments import load_environment

        train, held_out = load_environment(cfg.environment).examples()
        if not train:
            raise ValueError(f"[environment] {cfg.environment.provider} {cfg.environment.id!r} has no examples")
        return TaskData(train=train, eval=held_out)
    if is_dotted_path(cfg.data.source):
        # deferred: loads pydantic, which importing this module does not need
        from retrain_ray.run.plugins import load_plugin_examples

        examples = load_plugin_examples(cfg)
        if not examples:
            raise ValueError(f"[data] source {cfg.data.source!r} loaded no examples")
        return TaskData(train=examples, eval=[])
    return load_examples_from_config(cfg.data, cfg.training)


def build_reward(cfg: RetrainConfig, throttle: Throttle | None = None) -> Reward:
    provide_original_names()  # a custom reward module written for the original imports `retrain.rewards`, ...
    if is_dotted_path(cfg.reward.type):
        # deferred: loads pydantic, which importing this module does not need
        from retrain_ray.run.plugins import create_reward

        return create_reward(cfg)
    return build_reward_from_config(cfg.reward, cfg.plugins, throttle)


def build_sepa(s: SepaSection, uses_sepa: bool) -> SEPAController | None:
    if not uses_sepa:
        return None
    return SEPAController(
        sepa_steps=s.steps, sepa_schedule=s.schedule, sepa_delay_steps=s.delay_steps,
        sepa_correct_rate_gate=s.correct_rate_gate,
    )


def build_planning(cfg: RetrainConfig, needs_planning: bool) -> PlanningDetector | None:
    """`[planning] detector`: "regex", "semantic", "none" (no planning tokens) or a dotted plugin path."""
    detector = cfg.planning.detector
    if not needs_planning or detector in ("none", ""):
        return None
    if detector == "semantic":
        return build_semantic_detector(cfg.planning, cfg.logging.strategic_grams)
    if detector != "regex":
        # deferred: loads pydantic, which importing this module does not need
        from retrain_ray.run.plugins import create_detector

        return create_detector(cfg)
    return RegexPlanningDetector.from_grams_text(cfg.logging.strategic_grams)


def build_semantic_detector(planning: PlanningSection, strategic_grams: str) -> SemanticPlanningDetector:
    """The embedding detector: `[planning] model` and `threshold`; the strategic grams anchor planning."""
    plan_phrases = [*parse_strategic_grams(strategic_grams), *PLANNING_SENTENCES]
    return SemanticPlanningDetector(load_embedder(planning.model), threshold=planning.threshold,
                                    plan_phrases=plan_phrases)


def build_policy(
    cfg: RetrainConfig, *, throttle: Throttle | None = None, run_name: str = "run", cache_dir: Path | None = None,
) -> Policy:
    """The sampler, trainer and tokenizer of this config.

    Remote engines take the throttle themselves and hold one slot per request (holding a slot around
    a whole `generate` would make a run wait for a second slot while it holds one):
      * `[backend] backend = "tinker"`: the remote training API's sampler and trainer;
      * `[backend] backend = "prime_rl"`: PRIME-RL's inference server and trainer (or their local stand-in);
      * a dotted `[backend] backend` or `[inference] engine`: the plugin's factory (`_plugin_policy`);
      * `[inference] engine` = openai / vllm / sglang / max / mlx / trtllm: an HTTP sampler + the local trainer;
      * `[inference] engine = "vllm-embedded"`: vLLM in this process + the local trainer;
      * otherwise the PyTorch engine and the local trainer share one model in this process.
    """
    request = PolicyRequest(cfg, resolve_device(cfg.backend.devices), throttle, run_name, cache_dir)
    backend = backend_spec(cfg.backend.backend)
    if backend.factory:
        return build_policy_for(backend.factory, request)
    if backend.is_plugin or engine_spec(cfg.inference.engine).is_plugin:
        return _plugin_policy(request)
    return _builtin_policy(request)


def _builtin_policy(request: PolicyRequest) -> Policy:
    """The local trainer with the sampler of `[inference] engine` (its spec's factory)."""
    factory = engine_spec(request.cfg.inference.engine).factory
    if factory is None:  # only a plugin engine's spec has none, and it goes through `_plugin_policy`
        raise ValueError(f"[inference] engine = {request.cfg.inference.engine!r} has no built-in factory")
    return build_policy_for(factory, request)


def _plugin_policy(request: PolicyRequest) -> Policy:
    """A plugin backend's policy, or a plugin engine's with the local trainer. `context.builtin_policy()`
    is what `_builtin_policy` builds for the local backend (its default options under a plugin backend,
    the PyTorch engine under a plugin engine)."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.backends.local import build_local_trainer
    from retrain_ray.backends.plugins import (
        PluginContext,
        build_plugin_backend_policy,
        build_plugin_engine_policy,
    )

    cfg, device = request.cfg, request.device
    plugin_backend = backend_spec(cfg.backend.backend).is_plugin
    base = cfg.replace_section("backend", backend="local", options={}) if plugin_backend else \
        cfg.replace_section("inference", engine="pytorch")
    context = PluginContext(cfg, device, request.run_name, request.throttle,
                            build_builtin=lambda: _builtin_policy(dataclasses.replace(request, cfg=base)))
    if plugin_backend:
        return build_plugin_backend_policy(context)
    return build_plugin_engine_policy(
        context, lambda: build_local_trainer(cfg, device, cache_dir=request.cache_dir,
                                             settings=request.local_settings))


def build_components(
    cfg: RetrainConfig,
    observer: RunObserver,
    *,
    policy: Policy,
    advisor: BackPressureAdvisor | None = None,
    task: TaskData | None = None,
    throttle: Throttle | None = None,
) -> RunComponents:
    """The run's parts; `task` is `build_task(cfg)` when the caller loaded it already (before the policy);
    `throttle` guards the reward's endpoint calls (the judge)."""
    alg = cfg.algorithm
    modes = resolve_modes(alg.advantage_mode, alg.transform_mode, alg.algorithm_mode, alg.uncertainty_kind)
    task = task if task is not None else build_task(cfg)
    return RunComponents(
        engine=policy.engine,
        backend=policy.backend,
        tokenizer=policy.tokenizer,
        reward=build_reward(cfg, throttle),
        train_examples=list(task.train),
        eval_examples=list(task.eval),
        format_answer=task.format_answer,
        sepa=build_sepa(cfg.sepa, modes.uses_sepa_controller),
        detect_planning=build_planning(cfg, modes.needs_planning),
        needs_planning=modes.needs_planning,
        # in-process USL control when `[backpressure] enabled`; otherwise the original's no-op defaults
        advisor=advisor or (LocalAdvisor.from_config(cfg.backpressure, cfg.model, cfg.backend) if cfg.backpressure.enabled else NoOpAdvisor()),
        observer=observer,
        environment=build_environment(cfg.environment),
    )


def build_environment(env: EnvironmentSection) -> Environment | None:
    """The run's `[environment]` (None: single-turn prompts from `[data]`)."""
    if not env.provider:
        return None
    # deferred: an environment's package (verifiers) loads only for runs that use one
    from retrain_ray.environments import load_environment

    return load_environment(env)


# ---- prompts against the model's context ---------------------------------------------------------------
# A run's examples against its model's context (data/fit.py), from the config: the context read from the
# model folder's config.json and the tokenizer (cheap), never the model itself, so an over-long prompt is
# refused before any model memory is taken.
#
# Skipped, with a log line, where the context is not known here: a remote training API (`tinker`) or a
# plugin backend, which hold the model elsewhere, and a model folder whose config.json names no context.


def _codec_and_context(m: ModelSection, remote_code: bool, model_impl: str) -> tuple[PromptCodec, int] | None:
    # deferred: loads torch and the tokenizer's library, which importing this module does not need
    from retrain_ray.models.context import PromptCodec, context_length, lean_applies
    from retrain_ray.models.lean_loading import tokenizer_of
    from retrain_ray.models.loading import load_tokenizer, resolve_model_path

    folder = resolve_model_path(m.model, revision=m.revision, local_files_only=bool(m.local_files_only))
    context = context_length(folder)
    if context is None:
        log.info("model %r: its config.json names no context length; prompt lengths are not checked", m.model)
        return None
    tokenizer = tokenizer_of(folder) if lean_applies(m.model, trust_remote_code=remote_code, model_impl=model_impl) \
        else load_tokenizer(folder, trust_remote_code=remote_code)
    return PromptCodec(tokenizer), context


def _origin(data: DataSection, split: str) -> Callable[[int], str]:
    if data.source == "file":
        path = data.path if split == "train" else data.eval_path
        return lambda i: row_origin(path, i)
    what = f"[data] source {data.source!r}" + (f", task {data.task!r}" if data.source == "builtin" else "")
    return lambda i: f"{what}, {split} example {i}"


def fit_task(task: TaskData, *, model: ModelSection, data: DataSection, backend: BackendSection,
             max_tokens: int) -> TaskData:
    """`task` with every prompt checked against the model's context (data/fit.py) and `max_tokens` of
    completion; raises PromptTooLongError naming the rows, or truncates them when `[data] truncate_prompts`."""
    if not backend_spec(backend.backend).trains_locally:  # tinker, prime_rl, or a plugin backend
        log.info("backend %r holds the model elsewhere: prompt lengths are not checked against its context",
                 backend.backend)
        return task
    options = backend.options
    found = _codec_and_context(model, bool(options.get("trust_remote_code")), str(options.get("model_impl", "auto")))
    if found is None:
        return task
    codec, context = found
    limit = ContextLimit(context=context, max_tokens=max_tokens, model=model.model)
    truncate = data.truncate_prompts
    train = fit_prompts(task.train, limit=limit, codec=codec, truncate=truncate, origin=_origin(data, "train"))
    evals = fit_prompts(task.eval, limit=limit, codec=codec, truncate=truncate, origin=_origin(data, "eval"))
    return replace(task, train=train, eval=evals)
