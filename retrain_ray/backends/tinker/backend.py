"""TrainBackend on the remote training API (spec 1.8 `train_step`, `save_adapter`, `load_state`).

One RL update = one loss variant (below) + `optim_step(AdamParams(lr, beta1, beta2, eps,
weight_decay, grad_clip_norm))`. Variants, chosen by `clip_eps` as in the original:

* `importance_sampling` (clip_eps == 0): the service's own loss, -sum_t exp(lp_t - old_lp_t) A_t;
  the reported loss is `metrics["loss:sum"] / num_datums`, as in the original.
* `ppo_dual_clip` (clip_eps > 0): `forward`, the dual-clip loss evaluated locally (`loss.py`,
  token-mean, a documented departure from the original's sequence-mean), then `forward_backward`
  with the loss's gradient as advantages.

Checkpoints: `save_checkpoint(dir)` calls `save_state` (weights + optimizer, for resume) and
`save_weights_for_sampler` (for evaluation/export) and writes both paths to `dir/tinker_state.json`.
`load_checkpoint(dir)` passes the *state* path to `load_state_with_optimizer`. This fixes hazard
13.10 (the original stored the sampler path and handed it to `load_state`).

Exactly once: `forward_backward` accumulates a gradient and `optim_step` moves the weights, so
neither may run twice. The session retries them only after failures that prove the server did not
run them (refused connection, 429, 503); after an ambiguous one (502, 504, timeout) the step raises
`AmbiguousCallError` and the run resumes from its last checkpoint, whose server state
(`load_state_with_optimizer`) holds no half-applied step. Reads (`forward`, sampling) and saves are
retried on every transient failure.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar, Unpack

from retrain_ray.backends.tinker.loss import (
    ClipSettings,
    dual_clip_loss_and_grads,
    rl_datums,
    sft_datums,
    with_inputs,
)
from retrain_ray.backends.tinker.options import CAPABILITIES, parse_tinker_options
from retrain_ray.backends.tinker.session import TinkerEngine, TinkerSession, make_service_client
from retrain_ray.backends.tinker.standin import StandinOptions
from retrain_ray.backends.types import Policy, TrainBatch, TrainStepResult
from retrain_ray.engines.types import WeightUpdate

if TYPE_CHECKING:
    from tinker.types import Datum, ForwardBackwardOutput

    from retrain_ray.backends.tinker.session import ServiceClient
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.engines.types import HoldsSlots

TINKER_CAPABILITIES = CAPABILITIES
STATE_FILE = "tinker_state.json"

LossStep = Callable[["TinkerBackend", "list[Datum]"], tuple[float, dict[str, float]]]


def _logprobs_of(output: ForwardBackwardOutput) -> list[list[float]]:
    return [[float(x) for x in out["logprobs"].tolist()] for out in output.loss_fn_outputs]


def importance_sampling_step(backend: TinkerBackend, datums: list[Datum]) -> tuple[float, dict[str, float]]:
    out = backend.session.call(
        "forward_backward(importance_sampling)",
        lambda: backend.session.training_client.forward_backward(datums, loss_fn="importance_sampling"),
        idempotent=False,
    )
    return float(out.metrics["loss:sum"]) / max(len(datums), 1), {"clip_fraction": 0.0}


def ppo_dual_clip_step(backend: TinkerBackend, datums: list[Datum]) -> tuple[float, dict[str, float]]:
    tc = backend.session.training_client
    fwd = backend.session.call("forward", lambda: tc.forward(datums, loss_fn="importance_sampling"))
    new_lp_D = _logprobs_of(fwd)
    old_lp_D = [d.loss_fn_inputs["logprobs"].tolist() for d in datums]
    adv_D = [d.loss_fn_inputs["advantages"].tolist() for d in datums]
    loss, grads_D, metrics = dual_clip_loss_and_grads(new_lp_D, old_lp_D, adv_D, backend.clip)
    second = [
        with_inputs(d, logprobs=lp, advantages=[-g for g in grads])
        for d, lp, grads in zip(datums, new_lp_D, grads_D, strict=True)
    ]
    backend.session.call(
        "forward_backward(ppo_dual_clip)", lambda: tc.forward_backward(second, loss_fn="importance_sampling"),
        idempotent=False,
    )
    return loss, metrics


LOSS_STEPS: dict[str, LossStep] = {
    "importance_sampling": importance_sampling_step,
    "ppo_dual_clip": ppo_dual_clip_step,
}


def loss_variant(clip: ClipSettings) -> str:
    """The custom dual-clip loss when it clips (clip_eps or clip_ratio_c set), else the service's own
    importance-sampling loss, which is the same loss unclipped (L = -ratio A)."""
    return "ppo_dual_clip" if clip.clip_eps > 0 or clip.clip_ratio_c > 0 else "importance_sampling"


class TinkerBackend:
    """Trains a LoRA adapter on the service through a `TinkerSession` shared with `TinkerEngine`."""

    capabilities = TINKER_CAPABILITIES

    def __init__(
        self,
        session: TinkerSession,
        *,
        clip: ClipSettings,
        beta1: float,
        beta2: float,
        eps: float,
        grad_clip_norm: float,
    ) -> None:
        self.session = session
        self.clip = clip
        self.adam = {"beta1": beta1, "beta2": beta2, "eps": eps, "grad_clip_norm": grad_clip_norm}
        self._version = 0
        self._loss_step = LOSS_STEPS[loss_variant(clip)]

    @property
    def version(self) -> int:
        return self._version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        loss, metrics = self._loss_step(self, rl_datums(batch))
        self._optim_step(lr, weight_decay)
        return TrainStepResult(loss=loss, metrics={**metrics, **self.session.runtime_metrics()})

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        datums, _count = sft_datums(batch)
        tc = self.session.training_client
        loss_fn = batch.sft_loss  # importance_sampling: the datums' logprobs are zero, as the original's
        out = self.session.call(f"forward_backward({loss_fn})", lambda: tc.forward_backward(datums, loss_fn=loss_fn),
                                idempotent=False)
        self._optim_step(lr, weight_decay)
        return TrainStepResult(loss=float(out.metrics["loss:sum"]), metrics=self.session.runtime_metrics())

    def _optim_step(self, lr: float, weight_decay: float) -> None:
        # deferred: tinker is an optional extra, imported only when used
        from tinker import types

        params = types.AdamParams(learning_rate=lr, weight_decay=weight_decay, **self.adam)
        tc = self.session.training_client
        self.session.call("optim_step", lambda: tc.optim_step(params), idempotent=False)
        self._version += 1

    def export_weights(self) -> WeightUpdate:
        """Version only: the weights stay on the service (the engine checkpoints them there)."""
        return WeightUpdate(version=self._version)

    def save_checkpoint(self, directory: Path) -> None:
        tc, tag = self.session.training_client, uuid.uuid4().hex[:8]
        name = f"v{self._version}_{tag}"
        state = self.session.call(f"save_state({name!r})", lambda: tc.save_state(name=name))
        sampler = self.session.call(
            f"save_weights_for_sampler({name!r})", lambda: tc.save_weights_for_sampler(name=f"{name}_sampler")
        )
        record = {"state_path": state.path, "sampler_path": sampler.path, "version": self._version,
                  "base_model": self.session.base_model}
        (Path(directory) / STATE_FILE).write_text(json.dumps(record, indent=1))

    def load_checkpoint(self, directory: Path) -> None:
        path = Path(directory) / STATE_FILE
        if not path.is_file():
            raise FileNotFoundError(
                f"{path} is missing: this checkpoint was not written by the tinker backend (or is incomplete); "
                "resume from a checkpoint of a tinker run"
            )
        record = json.loads(path.read_text())
        tc = self.session.training_client
        self.session.call(
            "load_state_with_optimizer", lambda: tc.load_state_with_optimizer(record["state_path"])
        )
        self._version = int(record["version"])
        self.session.sampling_client = None  # sample from the restored weights, not a stale snapshot

    def runtime_metrics(self) -> dict[str, float]:
        return self.session.runtime_metrics()


_T = TypeVar("_T")


def build_tinker_policy(
    cfg: RetrainConfig, throttle: HoldsSlots | None = None, *, service_client: ServiceClient | None = None,
    **standin_kwargs: Unpack[StandinOptions],
) -> Policy:
    """The Tinker sampler and trainer from a RetrainConfig; `service_client` overrides the SDK's (tests)."""
    options = parse_tinker_options(cfg.backend.options)
    service = service_client or make_service_client(options, cfg.model.base_url, **standin_kwargs)
    session = TinkerSession(
        service, base_model=cfg.model.model, rank=cfg.model.lora_rank, throttle=throttle, options=options
    )
    t, o = cfg.training, cfg.optimizer
    backend = TinkerBackend(
        session,
        clip=ClipSettings(t.clip_eps, t.clip_eps_high, t.clip_ratio_c),
        beta1=o.beta1, beta2=o.beta2, eps=o.eps, grad_clip_norm=o.grad_clip_norm,
    )
    tokenizer = session.call("get_tokenizer", lambda: _Ready(session.training_client.get_tokenizer()))
    return Policy(TinkerEngine(session), backend, tokenizer)


class _Ready(Generic[_T]):
    """Wraps a value that a synchronous SDK method returned, so `session.call` can treat it as a future."""

    def __init__(self, value: _T) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> _T:
        return self.value
