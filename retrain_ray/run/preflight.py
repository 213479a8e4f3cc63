"""Preflight (spec 1.3): fail before any model loads when a run's configuration cannot work.

Runs two synthetic groups through the configured advantage pipeline and checks them against what the
configured backend and engine can carry (token-varying advantages, per-token entropies).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from retrain_ray.algorithms import preflight, resolve_modes
from retrain_ray.models.context import model_problem
from retrain_ray.models.sentence_embedder import embedding_model_problem
from retrain_ray.plugins.loader import is_dotted_path, load_callable, load_object, use_search_paths
from retrain_ray.util.file_kinds import env_directory

if TYPE_CHECKING:  # explain imports this module: keep torch out of it
    from retrain_ray.backends.types import BackendCapabilities
    from retrain_ray.config.schema import RetrainConfig


class PreflightError(ValueError):
    """Every reason the run cannot start, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


def runs_externally(cfg: RetrainConfig) -> bool:
    """A command or plugin runner trains the run (run/runners.py): it loads its own model and data."""
    # deferred: the config package loads pydantic, which importing this module does not need
    from retrain_ray.config.trainers import runs_externally as external

    return external(cfg.training.trainer)


def _trains_locally(backend: str) -> bool:
    """The backend's spec says it trains the run's own model here (backends/registry.py)."""
    # deferred: the config package loads pydantic, which importing this module does not need
    from retrain_ray.backends.registry import backend_spec

    return backend_spec(backend).trains_locally


def backend_capabilities(cfg: RetrainConfig) -> BackendCapabilities:
    """The flags of the configured backend, from the one registry (plugin hooks, conservative default)."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import capabilities_for

    return capabilities_for(cfg.backend.backend, cfg.backend.options)[0]


def entropy_support(cfg: RetrainConfig) -> tuple[bool, str]:
    """(provides, fix): whether the run's sampler returns per-token entropies, and what to change when the
    run asks for entropies it does not return. The built-in PyTorch engine under the built-in local backend
    returns them, and a plugin engine (which samples for the local backend) or plugin backend (which samples
    through what its factory returns) that declares them with its capability hook. Raises ValueError when
    the plugin does not import or its hook is malformed."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import ENGINE_HOOKS, engine_capabilities

    hooks = " / ".join(ENGINE_HOOKS["capabilities"])
    backend, engine, inference = cfg.backend.backend, cfg.inference.engine, cfg.inference.model_dump()
    if is_dotted_path(backend):
        return (engine_capabilities(backend, inference, kind="[backend] backend")[0].returns_token_entropies,
                f"The plugin backend {backend!r} does not declare them: give its factory or module "
                f"{hooks} = {{'returns_token_entropies': True}} (and return entropies: its engine fills "
                "SampleResult.entropies when params.compute_entropy, or its TrainHelper has sample_with_entropy), "
                "or use uncertainty_kind='surprisal'.")
    generic = ("Use the PyTorch engine (or a plugin engine that declares entropies) on a local backend, or "
               "uncertainty_kind='surprisal'.")
    if not _trains_locally(backend):
        return False, generic
    provides = engine_capabilities(engine, inference)[0].returns_token_entropies
    if not is_dotted_path(engine):
        return provides, generic
    return provides, (f"The plugin engine {engine!r} does not declare them: give its factory or module "
                      f"{hooks} = {{'returns_token_entropies': True}} (and fill SampleResult.entropies when "
                      "params.compute_entropy), or use uncertainty_kind='surprisal'.")


def backend_problems(cfg: RetrainConfig) -> list[str]:
    """A plugin backend whose module or hooks do not load, or whose options its schema does not know."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import capabilities_for, plugin_option_schema

    name = cfg.backend.backend
    if not is_dotted_path(name):
        return []
    try:
        capabilities_for(name, cfg.backend.options)
        schema = plugin_option_schema(name)
    except (ValueError, TypeError) as exc:
        return [f"preflight: {exc}"]
    return [f"preflight: backend.options.{k}: not in the option schema of plugin backend {name!r} "
            f"(known: {sorted(schema)})" for k in cfg.backend.options if schema is not None and k not in schema]


def engine_plugin_problems(cfg: RetrainConfig) -> list[str]:
    """A dotted `[inference] engine` samples for the built-in local backend, in the run's own process."""
    engine = cfg.inference.engine
    if not is_dotted_path(engine):
        return []
    where = f"preflight: inference.engine = {engine!r}: a plugin engine samples for the local backend"
    if not _trains_locally(cfg.backend.backend):
        return [f"{where}, not for backend {cfg.backend.backend!r} (which samples itself): use a built-in engine, "
                "or build the plugin engine inside the plugin backend's factory"]
    if "," in cfg.backend.devices:
        return [f"{where} in the run's own process, on one device: set backend.devices to one device "
                f"(not {cfg.backend.devices!r})"]
    return []


def plugin_problems(cfg: RetrainConfig) -> list[str]:
    """Dotted data/reward/detector/engine plugins that do not import (factories are called only by the run)."""
    problems: list[str] = []
    for kind, path in (("[data] source", cfg.data.source), ("[reward] type", cfg.reward.type),
                       ("[planning] detector", cfg.planning.detector), ("[inference] engine", cfg.inference.engine)):
        if is_dotted_path(path):
            try:
                load_callable(path, kind)
            except ValueError as exc:
                problems.append(f"preflight: {exc}")
    return problems


def runner_plugin_problems(cfg: RetrainConfig) -> list[str]:
    """A dotted `[training] trainer` that does not import (the command runner has nothing to import)."""
    trainer = cfg.training.trainer
    if trainer == "command":
        return []
    try:
        load_object(trainer, "[training] trainer")
    except ValueError as exc:
        return [f"preflight: {exc}"]
    return []


DIRECTORY_ENV_VARS = ("RETRAIN_RAY_CACHE", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME",
                      "WANDB_DIR", "RAY_TMPDIR")
"""Environment variables that name a directory: our model cache (models/loading.py), the Hugging Face
cache (models/context.py), W&B's files, Ray's temporary files."""


def environment_problems() -> list[str]:
    """Each environment variable of DIRECTORY_ENV_VARS that names a file (or a device, ...), with the fix."""
    problems: list[str] = []
    for key in DIRECTORY_ENV_VARS:
        try:
            env_directory(key)
        except NotADirectoryError as exc:
            problems.append(f"preflight: {exc}")
    return problems


def model_problems(configs: Iterable[RetrainConfig]) -> list[str]:
    """Why a run's model cannot be loaded here (not cached and not downloadable, no such folder), checked
    once per distinct model before anything starts. Only the local backend loads the model itself. The
    semantic planning detector's `[planning] model` is checked too, where the run detects planning."""
    configs = list(configs)
    wanted = {(c.model.model, c.model.revision, bool(c.model.local_files_only))
              for c in configs if _trains_locally(c.backend.backend) and not runs_externally(c)}
    found = (model_problem(name, rev, local_files_only=lfo) for name, rev, lfo in sorted(wanted))
    embedders = {c.planning.model for c in configs if c.planning.detector == "semantic" and _needs_planning(c)}
    planning = (embedding_model_problem(name) for name in sorted(embedders))
    return [f"model.model: {p}" for p in found if p] + [p for p in planning if p]


def _needs_planning(cfg: RetrainConfig) -> bool:
    alg = cfg.algorithm
    try:
        modes = resolve_modes(alg.advantage_mode, alg.transform_mode, alg.algorithm_mode, alg.uncertainty_kind)
    except ValueError:  # a plugin mode that does not import: reported by the probe; assume it may need planning
        return True
    return modes.needs_planning


def run_problems(cfg: RetrainConfig, *, check_model: bool = True) -> list[str]:
    """Every reason one run's configuration cannot start (spec 1.3): plugins that do not import, a
    model that cannot be resolved, and the synthetic probe against the backend's capabilities."""
    use_search_paths(cfg.plugins.search_paths)
    environment = environment_problems()
    if environment:  # the model and its cache cannot be looked up
        return environment
    if runs_externally(cfg):  # a command or plugin runner: it loads its own model and data
        return runner_plugin_problems(cfg)
    backend = backend_problems(cfg)
    if backend:  # the capability flags the probe needs are unknown
        return plugin_problems(cfg) + backend
    imports = plugin_problems(cfg)
    try:
        entropies, fix = entropy_support(cfg)
    except ValueError as exc:  # an engine that does not import (reported once) or a malformed hook
        entropies, fix = True, ""  # unknown: its own problem is reported instead (no entropy problem, no fix)
        imports += [] if f"preflight: {exc}" in imports else [f"preflight: {exc}"]
    alg = cfg.algorithm
    problems = preflight(
        backend_capabilities(cfg).preserves_token_advantages,
        alg.advantage_mode,
        alg.transform_mode,
        alg.algorithm_mode,
        alg.uncertainty_kind,
        alg.transform_params,
        entropies,
        advantage_params=alg.advantage_params,
        algorithm_params=alg.params,
        entropy_fix=fix,
    )
    return (imports + engine_plugin_problems(cfg) + (model_problems([cfg]) if check_model else [])
            + problems + _replay_problems(cfg))


def _replay_problems(cfg: RetrainConfig) -> list[str]:
    """`[optimizer_batch] replay_path`: a capture that does not read back, match its pins or the config."""
    if not cfg.optimizer_batch.replay_path:
        return []
    # deferred: the capture's batch type lives beside the backends, which importing this module does not need
    from retrain_ray.run.optimizer_batch import replay_problems

    return [f"preflight: {p}" for p in replay_problems(cfg)]


def check_run(cfg: RetrainConfig) -> None:
    """Raises PreflightError listing every problem; returns quietly when the run can start."""
    problems = run_problems(cfg)
    if problems:
        raise PreflightError(problems)


def campaign_problems(cfg: RetrainConfig) -> list[str]:
    """Preflight of every condition of a campaign (or of a single run), all problems at once, each
    prefixed with its condition; models are checked once each. Runs in the driver, before Ray starts."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import expand_runs

    environment = environment_problems()
    if environment:  # reported once, not per condition
        return environment
    return model_problems([r.config for r in expand_runs(cfg)]) + condition_problems(cfg)


def condition_problems(cfg: RetrainConfig) -> list[str]:
    """`campaign_problems` without the model check: what is wrong with the configuration itself, whatever
    machine it runs on (`explain` reports what this machine lacks as warnings: run/environment.py)."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import expand_runs

    runs = expand_runs(cfg)
    problems: list[str] = []
    seen: set[str] = set()
    for run in runs:
        if run.condition_label in seen:
            continue
        seen.add(run.condition_label)
        prefix = f"condition {run.condition_label!r}: " if cfg.campaign is not None else ""
        problems += [prefix + p for p in run_problems(run.config, check_model=False)]
    return problems
