"""`train_run`: one run from a config, with resume. The entry point the CLI and Ray trials call."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.backends.types import Policy, resume_caveat
from retrain_ray.backpressure.types import BackPressureAdvisor
from retrain_ray.engines.vllm.logs import VLLM_LOG_FILE, log_vllm_to
from retrain_ray.logs import (
    ArrowRunObserver,
    MultiObserver,
    write_run_meta,
)
from retrain_ray.plugins.loader import use_search_paths
from retrain_ray.run.build import build_components, build_policy, build_task
from retrain_ray.run.epochs import apply_epochs
from retrain_ray.run.loop import RunLoop
from retrain_ray.run.resume.checkpoint import load_state, resolve_resume_dir
from retrain_ray.run.resume.point import checkpoint_dir_resume, checkpoint_root, rewind_past_torn_rows
from retrain_ray.run.state import TrainerState, engine_generators, restore_rng_state, seed_everything
from retrain_ray.run.trainers.external import external_run, run_external
from retrain_ray.run.trainers.registry import trainer_spec
from retrain_ray.run.trainers.rules import TrainerSettings
from retrain_ray.run.types import RunObserver, RunOutcome
from retrain_ray.throttle.filelock import FileLockThrottle
from retrain_ray.util.file_kinds import directory_problem
from retrain_ray.util.secrets import redact

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import AlgorithmSection, BackendSection, TrainingSection
    from retrain_ray.run.trainers.registry import ExternalRunner
    from retrain_ray.throttle.types import Throttle

log = logging.getLogger(__name__)


def condition_of(alg: AlgorithmSection) -> str:
    """The condition label of a single run (a campaign passes its own, with its overrides)."""
    return alg.algorithm_mode or f"{alg.advantage_mode}+{alg.transform_mode}"


def _fanout(run_dir: Path, run_name: str, observers: Sequence[RunObserver], local_logs: bool,
            jsonl: bool) -> RunObserver:
    local = [ArrowRunObserver(run_dir, run_name, jsonl=jsonl)] if local_logs else []
    return MultiObserver(*local, *observers)


def _restore(loop: RunLoop, checkpoint: Path) -> TrainerState:
    state = load_state(checkpoint)
    parts = loop.parts
    loop.read_payload(checkpoint)
    if parts.sepa is not None and state.sepa:
        parts.sepa.load_state_dict(state.sepa)
    if state.backpressure:
        parts.advisor.load_state_dict(state.backpressure)
    restore_rng_state(state.rng, engine_generators(parts.engine))
    t = loop.cfg.training
    # the saved baseline counts only while TL-GRPO is on (spec 10); a checkpoint without one starts afresh
    baseline = (state.tl_grpo_ema if state.tl_grpo_ema is not None else t.tl_grpo_ema_init) if t.tl_grpo else None
    log.info("resuming %s after step %d from %s", loop.run_name, state.step, checkpoint)
    caps = parts.backend.capabilities
    if caps.checkpoint_resume_mode != "exact" or caps.resume_runtime_dependent:
        log.warning("%s: %s", loop.run_name, resume_caveat(caps))
    return replace(state, tl_grpo_ema=baseline)


def train_run(
    config: RetrainConfig,
    *,
    run_name: str,
    run_dir: Path,
    observers: Sequence[RunObserver] = (),
    advisor: BackPressureAdvisor | None = None,
    throttle: Throttle | None = None,
    resume_from: Path | None = None,
    policy: Policy | None = None,
    local_logs: bool = True,
) -> RunOutcome:
    """Trains one run to `training.max_steps`, writing logs and checkpoints under `run_dir`.

    `resume_from` is a run directory or a checkpoint directory: the run continues after its last
    complete checkpoint, and the metrics log keeps each step once. `policy` (engine, backend,
    tokenizer) lets a caller supply remote proxies (split placement); by default it is built from the
    config (`build_policy`), and `throttle` guards the calls of remote engines. `local_logs=False`
    skips the Arrow files in `run_dir` when an observer already records the rows elsewhere (the
    campaign's recorder actor).
    """
    throttle = run_throttle(config.backend, throttle, run_name)
    run_dir = Path(run_dir)
    _check_run_dir(run_dir)
    use_search_paths(config.plugins.search_paths)  # the run's plugins (modes, rewards...) are looked up there
    trainer = trainer_spec(config.training.trainer)
    settings = TrainerSettings(config.training, config.algorithm, config.environment, config.campaign)
    for warning in trainer.no_training(settings):  # said at load time too; here for a campaign's worker log
        log.warning("%s: %s", run_name, warning)
    if trainer.run_outside is not None:  # `trainer = "command"` or a plugin runner: no model, data or loop here
        return _train_external(trainer.run_outside, config, run_name, run_dir, observers, local_logs)
    config = config.model_copy(update={"training": trainer.prepare(config.training)})  # "sft": every step supervised
    # before anything is written or the model loads: bad data stops the run here
    task, steps = apply_epochs(config.training, build_task(config))
    if steps.steps != config.training.max_steps:
        config = config.replace_section("training", max_steps=steps.steps)
    if steps.limited_by == "num_epochs":
        log.info("%s: %s", run_name, steps.explanation)
    if resume_from is None:
        resume_from = checkpoint_dir_resume(config.training, config.model_dump(mode="json"), run_name)  # raises for another run's checkpoints
        if resume_from is not None:
            log.warning("%s: resuming from %s, the newest verified checkpoint in [training] checkpoint_dir",
                        run_name, resume_from)
    run_dir.mkdir(parents=True, exist_ok=True)
    checkpoint = resolve_resume_dir(resume_from) if resume_from else None
    if checkpoint is not None and local_logs:
        checkpoint = rewind_past_torn_rows(run_dir, checkpoint)
    seed_everything(config.training.seed)
    meta = _meta(config, run_name)
    write_run_meta(run_dir, meta)
    root = checkpoint_root(config.training)
    if root is not None:
        write_run_meta(root, meta)  # names the run and config of the checkpoints there (run/resume/point.py)
    log_vllm_to(run_dir / VLLM_LOG_FILE)  # an embedded vLLM's log lines: the run's file, not the console
    observer = _fanout(run_dir, run_name, observers, local_logs, config.logging.jsonl)
    try:
        policy = policy or build_policy(config, throttle=throttle, run_name=run_name)
        parts = build_components(config, observer, policy=policy, advisor=advisor, task=task, throttle=throttle)
        loop = trainer.build_loop(config, parts, run_name=run_name, run_dir=run_dir, condition=condition_of(config.algorithm))
        trainer.check_loop(loop)
        state = _restore(loop, checkpoint) if checkpoint else _fresh_state(config.training, parts.advisor)
        # trainer_state.json says what this run's backend restores (its capability), not a fixed "exact"
        return loop.run(replace(state, resume_mode=parts.backend.capabilities.checkpoint_resume_mode))
    finally:
        observer.close()
        log_vllm_to(None)


def _meta(config: RetrainConfig, run_name: str) -> dict[str, object]:
    return {"run_name": run_name, "condition": condition_of(config.algorithm), "seed": config.training.seed,
            "config": redact(config.model_dump(mode="json"))}


def _train_external(runner: ExternalRunner, config: RetrainConfig, run_name: str, run_dir: Path,
                    observers: Sequence[RunObserver], local_logs: bool) -> RunOutcome:
    """A run of an external runner (run/trainers/external.py): its metrics rows reach the run's observers."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_run_meta(run_dir, _meta(config, run_name))
    observer = _fanout(run_dir, run_name, observers, local_logs, config.logging.jsonl)
    try:
        run = external_run(config, run_name=run_name, run_dir=run_dir, condition=condition_of(config.algorithm),
                           observer=observer)
        return run_external(run, runner)
    finally:
        observer.close()


def run_throttle(b: BackendSection, given: Throttle | None, run_name: str) -> Throttle | None:
    """The caller's throttle (a campaign's actor); else `[backend] throttle_dir`'s file locks, shared with the runs
    launched by hand against the same endpoint; else none."""
    if not b.throttle_dir:
        return given
    if given is not None:
        log.info("%s: the campaign's throttle guards the endpoint calls; [backend] throttle_dir %s is not used",
                 run_name, b.throttle_dir)
        return given
    return FileLockThrottle(b.throttle_dir, b.max_concurrent, timeout_s=b.acquire_timeout_s)


def _check_run_dir(run_dir: Path) -> None:
    """A run directory (or one of its parents) that exists as a file, a device, ... is refused naming it."""
    problem = directory_problem(run_dir)
    if problem:
        raise NotADirectoryError(f"run directory {problem}; set [logging] log_dir (--log-dir DIR) to a "
                                 "directory, or move the file away")


def _fresh_state(t: TrainingSection, advisor: BackPressureAdvisor) -> TrainerState:
    initial = getattr(advisor, "initial_batch_size", None)
    batch_size = initial(t.batch_size) if initial else t.batch_size
    return TrainerState(current_batch_size=batch_size, current_group_size=t.group_size,
                        tl_grpo_ema=t.tl_grpo_ema_init if t.tl_grpo else None)
