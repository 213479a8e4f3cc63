"""A run's examples against its model's context (data/fit.py), from the config: the context read from the
model folder's config.json and the tokenizer (cheap), never the model itself, so an over-long prompt is
refused before any model memory is taken.

Skipped, with a log line, where the context is not known here: a remote training API (`tinker`) or a
plugin backend, which hold the model elsewhere, and a model folder whose config.json names no context.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING

from retrain_ray.backends.registry import backend_spec
from retrain_ray.data.files import row_origin
from retrain_ray.data.fit import ContextLimit, fit_prompts
from retrain_ray.data.types import TaskData

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.models.context import PromptCodec

log = logging.getLogger(__name__)


def _codec_and_context(cfg: RetrainConfig) -> tuple[PromptCodec, int] | None:
    # deferred: loads torch and the tokenizer's library, which importing this module does not need
    from retrain_ray.models.context import PromptCodec, context_length, lean_applies
    from retrain_ray.models.light_tokenizer import LightTokenizer
    from retrain_ray.models.loading import load_tokenizer, resolve_model_path

    m = cfg.model
    folder = resolve_model_path(m.model, revision=m.revision, local_files_only=bool(m.local_files_only))
    context = context_length(folder)
    if context is None:
        log.info("model %r: its config.json names no context length; prompt lengths are not checked", m.model)
        return None
    remote_code = bool(cfg.backend.options.get("trust_remote_code"))
    tokenizer = LightTokenizer.from_folder(folder) if lean_applies(m.model, trust_remote_code=remote_code) else \
        load_tokenizer(folder, trust_remote_code=remote_code)
    return PromptCodec(tokenizer), context


def _origin(cfg: RetrainConfig, split: str) -> Callable[[int], str]:
    data = cfg.data
    if data.source == "file":
        path = data.path if split == "train" else data.eval_path
        return lambda i: row_origin(path, i)
    what = f"[data] source {data.source!r}" + (f", task {data.task!r}" if data.source == "builtin" else "")
    return lambda i: f"{what}, {split} example {i}"


def fit_task(cfg: RetrainConfig, task: TaskData) -> TaskData:
    """`task` with every prompt checked against the model's context (data/fit.py); raises
    PromptTooLongError naming the rows, or truncates them when `[data] truncate_prompts`."""
    backend = cfg.backend.backend
    if not backend_spec(backend).trains_locally:  # tinker, prime_rl, or a plugin backend
        log.info("backend %r holds the model elsewhere: prompt lengths are not checked against its context", backend)
        return task
    found = _codec_and_context(cfg)
    if found is None:
        return task
    codec, context = found
    limit = ContextLimit(context=context, max_tokens=cfg.training.max_tokens, model=cfg.model.model)
    truncate = cfg.data.truncate_prompts
    train = fit_prompts(task.train, limit=limit, codec=codec, truncate=truncate, origin=_origin(cfg, "train"))
    evals = fit_prompts(task.eval, limit=limit, codec=codec, truncate=truncate, origin=_origin(cfg, "eval"))
    return replace(task, train=train, eval=evals)
