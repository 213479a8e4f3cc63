"""Config -> runtime objects of one run (task data, reward, policy, SEPA, planning, advisor)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

from retrain_ray.run.loop import RunComponents
from retrain_ray.run.types import RunObserver

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


def build_task(cfg):
    from retrain_ray.data.loading import load_examples_from_config

    return load_examples_from_config(cfg)


def build_reward(cfg):
    from retrain_ray.rewards import build_reward_from_config

    return build_reward_from_config(cfg)


def build_sepa(cfg, uses_sepa: bool):
    if not uses_sepa:
        return None
    from retrain_ray.algorithms import SEPAController

    s = cfg.sepa
    return SEPAController(
        sepa_steps=s.steps, sepa_schedule=s.schedule, sepa_delay_steps=s.delay_steps,
        sepa_correct_rate_gate=s.correct_rate_gate,
    )


def build_planning(cfg, needs_planning: bool):
    if not needs_planning:
        return None
    from retrain_ray.algorithms import RegexPlanningDetector

    return RegexPlanningDetector.from_grams_text(cfg.logging.strategic_grams)


def build_advisor(cfg):
    """In-process USL control when `[backpressure] enabled`; otherwise the original's no-op defaults."""
    from retrain_ray.backpressure.advisor import LocalAdvisor
    from retrain_ray.backpressure.types import NoOpAdvisor

    return LocalAdvisor.from_config(cfg) if cfg.backpressure.enabled else NoOpAdvisor()


def build_local_policy(cfg, device: str, cache_dir: Path | None = None):
    """(engine, backend, tokenizer) sharing one model in this process."""
    from retrain_ray.backends.local import build_local_policy as _build

    return _build(cfg, device=device, cache_dir=cache_dir)


def build_components(
    cfg,
    observer: RunObserver,
    *,
    policy: tuple[Any, Any, Any] | None = None,
    advisor: Any | None = None,
    hold_endpoint=None,
) -> RunComponents:
    from retrain_ray.algorithms import resolve_modes

    alg = cfg.algorithm
    modes = resolve_modes(alg.advantage_mode, alg.transform_mode, alg.algorithm_mode, alg.uncertainty_kind)
    engine, backend, tokenizer = policy or build_local_policy(cfg, resolve_device(cfg.backend.devices))
    task = build_task(cfg)
    return RunComponents(
        engine=engine,
        backend=backend,
        tokenizer=tokenizer,
        reward=build_reward(cfg),
        train_examples=list(task.train),
        eval_examples=list(task.eval),
        format_answer=task.format_answer,
        sepa=build_sepa(cfg, modes.uses_sepa_controller),
        detect_planning=build_planning(cfg, modes.needs_planning),
        needs_planning=modes.needs_planning,
        advisor=advisor or build_advisor(cfg),
        observer=observer,
        hold_endpoint=hold_endpoint,
    )
