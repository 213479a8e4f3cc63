"""Preflight (spec 1.3): fail before any model loads, and before Ray starts, when a run's configuration
cannot work.

Runs two synthetic groups through the configured advantage pipeline (checks/probe.py) and checks them against
what the configured backend and engine can carry (token-varying advantages, per-token entropies); imports the
plugins a config names; and checks what is knowable of the model and data without loading them: a model that
is not here, `[training] max_tokens` against the model's context (its config.json), data that must be
downloaded while offline, and (for a campaign) sampling servers that do not answer.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit

from retrain_ray.checks.probe import preflight
from retrain_ray.models.context import (
    BUILTIN_CONTEXT,
    cached_snapshot,
    context_length,
    looks_like_hub_id,
    model_problem,
)
from retrain_ray.models.sentence_embedder import embedding_model_problem
from retrain_ray.plugins.loader import is_dotted_path, load_callable, load_object, use_search_paths
from retrain_ray.run.plugin_modes import resolve_modes
from retrain_ray.util.file_kinds import env_directory

if TYPE_CHECKING:  # explain imports this module: keep torch out of it
    from retrain_ray.backends.types import BackendCapabilities
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import (
        DataSection,
        EnvironmentSection,
        InferenceSection,
        PlanningSection,
        RewardSection,
    )
    from retrain_ray.config.sections_training import (
        AlgorithmSection,
        BackendSection,
        ModelSection,
        TrainingSection,
    )
    from retrain_ray.run.trainers.registry import TrainerSpec


class PreflightError(ValueError):
    """Every reason the run cannot start, one per line."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__("\n".join(problems))


CONNECT_TIMEOUT_S = 2.0


def endpoint_url(inference: InferenceSection, backend: BackendSection) -> str | None:
    """The server an HTTP sampling engine calls (its default when `[inference] url` is empty), else None."""
    # deferred: the config package loads pydantic, which importing this module does not need
    from retrain_ray.backends.registry import engine_spec

    if not engine_spec(inference.engine).shared_server or not _trains_locally(backend.backend):
        return None
    # deferred: loads httpx, which importing this module does not need
    from retrain_ray.engines.openai.engine import DEFAULT_URLS

    return inference.url or DEFAULT_URLS.get(inference.engine, DEFAULT_URLS["openai"])


def unreachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `url`'s host and port fails (None: it connects)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def endpoint_problems(configs: Iterable[tuple[InferenceSection, BackendSection]]) -> list[str]:
    """HTTP sampling servers (`[inference] engine = "openai" | "vllm" | "sglang"`) that do not answer."""
    # deferred: loads httpx, which importing this module does not need
    from retrain_ray.engines.openai.protocol import START_HINTS

    urls = {url: inference.engine for inference, backend in configs if (url := endpoint_url(inference, backend))}
    problems: list[str] = []
    for url, engine in urls.items():
        why = unreachable(url)
        if why:
            problems.append(f"inference.url: the {engine} server at {url} does not answer ({why}); start it (e.g. "
                            f"`{START_HINTS.get(engine, START_HINTS['openai'])}`) before the campaign, or set "
                            "[inference] url to where it runs")
    return problems


def _trainer_spec(trainer: str) -> TrainerSpec:
    # deferred: the trainer registry loads pydantic (config/), which importing this module does not need
    from retrain_ray.run.trainers.registry import trainer_spec

    return trainer_spec(trainer)


def runs_externally(trainer: str) -> bool:
    """A command or plugin runner trains the run (run/trainers/registry.py): it loads its own model and data."""
    return _trainer_spec(trainer).runs_outside_loop


def _trains_locally(backend: str) -> bool:
    """The backend's spec says it trains the run's own model here (backends/registry.py)."""
    # deferred: the config package loads pydantic, which importing this module does not need
    from retrain_ray.backends.registry import backend_spec

    return backend_spec(backend).trains_locally


def backend_capabilities(backend: BackendSection) -> BackendCapabilities:
    """The flags of the configured backend, from the one registry (plugin hooks, conservative default)."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import capabilities_for

    return capabilities_for(backend.backend, backend.options)[0]


def entropy_support(backend_section: BackendSection, inference_section: InferenceSection) -> tuple[bool, str]:
    """(provides, fix): whether the run's sampler returns per-token entropies, and what to change when the
    run asks for entropies it does not return. The built-in PyTorch engine under the built-in local backend
    returns them, and a plugin engine (which samples for the local backend) or plugin backend (which samples
    through what its factory returns) that declares them with its capability hook. Raises ValueError when
    the plugin does not import or its hook is malformed."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import ENGINE_HOOKS, engine_capabilities

    hooks = " / ".join(ENGINE_HOOKS["capabilities"])
    backend, engine = backend_section.backend, inference_section.engine
    inference = inference_section.model_dump()
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


def backend_problems(backend: BackendSection) -> list[str]:
    """A plugin backend whose module or hooks do not load, or whose options its schema does not know."""
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.backends.registry import capabilities_for, plugin_option_schema

    name = backend.backend
    if not is_dotted_path(name):
        return []
    try:
        capabilities_for(name, backend.options)
        schema = plugin_option_schema(name)
    except (ValueError, TypeError) as exc:
        return [f"preflight: {exc}"]
    return [f"preflight: backend.options.{k}: not in the option schema of plugin backend {name!r} "
            f"(known: {sorted(schema)})" for k in backend.options if schema is not None and k not in schema]


def engine_plugin_problems(inference: InferenceSection, backend: BackendSection) -> list[str]:
    """A dotted `[inference] engine` samples for the built-in local backend, in the run's own process."""
    engine = inference.engine
    if not is_dotted_path(engine):
        return []
    where = f"preflight: inference.engine = {engine!r}: a plugin engine samples for the local backend"
    if not _trains_locally(backend.backend):
        return [f"{where}, not for backend {backend.backend!r} (which samples itself): use a built-in engine, "
                "or build the plugin engine inside the plugin backend's factory"]
    if "," in backend.devices:
        return [f"{where} in the run's own process, on one device: set backend.devices to one device "
                f"(not {backend.devices!r})"]
    return []


def plugin_problems(data: DataSection, reward: RewardSection, planning: PlanningSection,
                    inference: InferenceSection) -> list[str]:
    """Dotted data/reward/detector/engine plugins that do not import (factories are called only by the run)."""
    problems: list[str] = []
    for kind, path in (("[data] source", data.source), ("[reward] type", reward.type),
                       ("[planning] detector", planning.detector), ("[inference] engine", inference.engine)):
        if is_dotted_path(path):
            try:
                load_callable(path, kind)
            except ValueError as exc:
                problems.append(f"preflight: {exc}")
    return problems


def runner_plugin_problems(training: TrainingSection) -> list[str]:
    """A dotted `[training] trainer` that does not import (the command runner has nothing to import)."""
    trainer = training.trainer
    if not _trainer_spec(trainer).loads_plugin:
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


class ModelSections(Protocol):
    """The sections `model_problems` reads of each run's config."""

    @property
    def model(self) -> ModelSection: ...
    @property
    def backend(self) -> BackendSection: ...
    @property
    def training(self) -> TrainingSection: ...
    @property
    def planning(self) -> PlanningSection: ...
    @property
    def algorithm(self) -> AlgorithmSection: ...


def model_problems(configs: Iterable[ModelSections]) -> list[str]:
    """Why a run's model cannot be loaded here (not cached and not downloadable, no such folder), checked
    once per distinct model before anything starts. Only the local backend loads the model itself. The
    semantic planning detector's `[planning] model` is checked too, where the run detects planning."""
    configs = list(configs)
    wanted = {(c.model.model, c.model.revision, bool(c.model.local_files_only))
              for c in configs if _trains_locally(c.backend.backend) and not runs_externally(c.training.trainer)}
    found = (model_problem(name, rev, local_files_only=lfo) for name, rev, lfo in sorted(wanted))
    embedders = {c.planning.model for c in configs if c.planning.detector == "semantic" and _needs_planning(c.algorithm)}
    planning = (embedding_model_problem(name) for name in sorted(embedders))
    return [f"model.model: {p}" for p in found if p] + [p for p in planning if p]


def _model_context(model: ModelSection) -> int | None:
    """The model's context from its config.json where it is here (a local folder, the Hub cache), the built-in
    models' own; None where it is not known before the run resolves the model (not cached: model_problems)."""
    name = model.model
    if name.startswith("builtin:"):
        return BUILTIN_CONTEXT
    folder = Path(name).expanduser()
    if (folder / "config.json").is_file():
        return context_length(folder)
    snapshot = cached_snapshot(name, model.revision) if looks_like_hub_id(name) else None
    return context_length(snapshot) if snapshot is not None else None


def context_problems(training: TrainingSection, model: ModelSection) -> list[str]:
    """`[training] max_tokens` that leaves no position for a prompt in the model's context: every run would
    refuse its data at start (data/fit.py), one after another; refused here, before any run starts."""
    context = _model_context(model)
    if context is None or training.max_tokens < context:
        return []
    return [f"training.max_tokens: = {training.max_tokens:,} leaves no room for a prompt in the {context:,} "
            f"positions of model {model.model!r}: lower [training] max_tokens below {context:,}"]


def data_download_problems(data: DataSection, environment: EnvironmentSection) -> list[str]:
    """Data that must be downloaded while this process is offline (`[data] source = "math"` with
    HF_HUB_OFFLINE / HF_DATASETS_OFFLINE set): the run would fail at its start, in every trial. A run with
    an `[environment]` takes its examples from it, not from `[data]`."""
    # deferred: the data package, which importing this module does not need
    from retrain_ray.data.loading import MATH_DATASET, OFFLINE_HINT, is_offline

    if data.source != "math" or environment.provider or not is_offline():
        return []
    return [f"data.source: [data] source = \"math\" downloads {MATH_DATASET}, but HF_HUB_OFFLINE is set. "
            f"{OFFLINE_HINT}"]


def _needs_planning(alg: AlgorithmSection) -> bool:
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
    if runs_externally(cfg.training.trainer):  # a command or plugin runner: it loads its own model and data
        return runner_plugin_problems(cfg.training)
    imports = plugin_problems(cfg.data, cfg.reward, cfg.planning, cfg.inference)
    backend = backend_problems(cfg.backend)
    if backend:  # the capability flags the probe needs are unknown
        return imports + backend
    try:
        entropies, fix = entropy_support(cfg.backend, cfg.inference)
    except ValueError as exc:  # an engine that does not import (reported once) or a malformed hook
        entropies, fix = True, ""  # unknown: its own problem is reported instead (no entropy problem, no fix)
        imports += [] if f"preflight: {exc}" in imports else [f"preflight: {exc}"]
    alg = cfg.algorithm
    problems = preflight(
        backend_capabilities(cfg.backend).preserves_token_advantages,
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
    here = model_problems([cfg]) if check_model else []
    replays: list[str] = []
    if cfg.optimizer_batch.replay_path:  # a capture that does not read back, match its pins or the config
        # deferred: the capture's batch type lives beside the backends, which importing this module does not need
        from retrain_ray.run.optimizer_batch import CaptureSettings, settings_replay_problems

        replays = [f"preflight: {p}" for p in settings_replay_problems(CaptureSettings.of(cfg))]
    return imports + engine_plugin_problems(cfg.inference, cfg.backend) + here + problems + replays


def _context(training: TrainingSection, backend: BackendSection, model: ModelSection) -> list[str]:
    """`context_problems` where the run trains the model here (a remote or plugin backend holds it elsewhere)."""
    if runs_externally(training.trainer) or not _trains_locally(backend.backend):
        return []
    return context_problems(training, model)


def check_run(cfg: RetrainConfig) -> None:
    """Raises PreflightError listing every problem; returns quietly when the run can start."""
    problems = run_problems(cfg)
    if problems:
        raise PreflightError(problems)


def campaign_problems(cfg: RetrainConfig) -> list[str]:
    """Preflight of every condition of a campaign (or of a single run), all problems at once, each
    prefixed with its condition; models, data downloads and sampling servers are checked once each. Runs in
    the driver, before Ray starts."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import expand_runs

    environment = environment_problems()
    if environment:  # reported once, not per condition
        return environment
    configs = [r.config for r in expand_runs(cfg)]
    downloads = dict.fromkeys(p for c in configs for p in data_download_problems(c.data, c.environment))
    servers = endpoint_problems((c.inference, c.backend) for c in configs)
    return model_problems(configs) + list(downloads) + servers + condition_problems(cfg)


def condition_problems(cfg: RetrainConfig) -> list[str]:
    """`campaign_problems` without the model check: what is wrong with the configuration itself, whatever
    machine it runs on (`explain` reports what this machine lacks as warnings: checks/machine.py)."""
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
        problems += [prefix + p for p in run_problems(run.config, check_model=False)
                     + _context(run.config.training, run.config.backend, run.config.model)]
    return problems
