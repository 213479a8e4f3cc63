"""Split placement: an InferenceActor and a TrainerActor on their own GPUs, driven by the trial.

Both actors sit in the trial's STRICT_PACK placement group (bundle 1: inference, bundle 2: trainer)
with `num_cpus=0, num_gpus=1`, named `<campaign>/<run>/inference` and `.../trainer`. After each
optimizer step the trainer's exported weights (adapter tensors for LoRA, all trainable tensors for
full fine-tuning; CPU tensors) travel through the object store tagged with their version; the
inference actor installs them and confirms the version, and `generate` refuses any other version
than the one the driver expects (it never samples from weights it was not told about).

`EngineProxy` and `BackendProxy` implement the SamplingEngine and TrainBackend protocols over the
actor handles (every `ray.get` has a timeout), for `train_run(policy=...)`.

One-step-off pipelining (`[inference] one_step_off = true`, the original's split-mode behaviour):
`BackendProxy.train_step` submits step t's update and returns step t-1's result, so the sampler
draws step t+1's completions (from the weights after update t-1) while the trainer computes update
t. `version` counts submitted updates, so the loop's row has `staleness = 1` for pipelined steps;
`reports_sync_loss` is false: a row's loss is the previous update's, the first pipelined step's
loss is NaN, and the last update's loss is in no row. SFT steps, checkpoints and weight exports
that need the newest weights first wait for the update in flight.

On a machine without CUDA (fake GPUs in tests) the actors still get distinct GPU ids from Ray and
run torch on the CPU.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray
import torch
from ray.util import get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from retrain_ray.backends.registry import engine_spec
from retrain_ray.backends.types import Policy, TrainStepResult
from retrain_ray.engines.types import SamplingParams, WeightUpdate

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.models import Tokenizer


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def _placement_info(role: str) -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    return {"role": role, "node_id": ctx.get_node_id(), "pid": os.getpid(),
            "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])]}


@ray.remote(num_cpus=0, num_gpus=1)
class InferenceActor:
    """Hosts the run's sampler (its own copy of the model layout, fed with WeightUpdates)."""

    def __init__(self, config: RetrainConfig) -> None:
        if engine_spec(config.inference.engine).embeds_vllm:  # vLLM on this actor's GPU, fed WeightUpdates
            # deferred: loads transformers, which importing this module does not need
            from retrain_ray.backends.local.policy import build_vllm_engine
            from retrain_ray.models.loading import load_tokenizer

            self._engine = build_vllm_engine(config, device=_device())
            m = config.model
            self._tokenizer = load_tokenizer(m.model, revision=m.revision, local_files_only=m.local_files_only)
            return
        # deferred: loads transformers, which importing this module does not need
        from retrain_ray.backends.local import build_split_engine, settings_from_config

        self._engine, self._tokenizer = build_split_engine(config.model.model, settings_from_config(config),
                                                           device=_device())

    def placement(self) -> dict[str, Any]:
        return _placement_info("inference")

    def tokenizer(self) -> Any:
        return self._tokenizer

    def weights_version(self) -> int:
        return self._engine.weights_version

    def load_weights(self, update: WeightUpdate) -> int:
        self._engine.load_weights(update)
        return self._engine.weights_version

    def rng_state(self) -> Any:
        return self._engine.generator.get_state()

    def set_rng_state(self, state: Any) -> None:
        self._engine.generator.set_state(state)

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                 expect_version: int) -> list:
        if self._engine.weights_version != expect_version:
            raise RuntimeError(f"inference weights are version {self._engine.weights_version}, "
                               f"expected {expect_version}: load_weights first")
        return self._engine.generate(prompt_ids_P, num_samples, params)


@ray.remote(num_cpus=0, num_gpus=1)
class TrainerActor:
    """Hosts the run's LocalBackend (its own model; exports weights with tensors)."""

    def __init__(self, config: RetrainConfig) -> None:
        from retrain_ray.backends.local import build_local_backend  # defers torch

        self._backend = build_local_backend(config, _device())

    def placement(self) -> dict[str, Any]:
        return _placement_info("trainer")

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._backend, method)(*args, **kwargs)

    def get(self, attribute: str) -> Any:
        return getattr(self._backend, attribute)

    @ray.method(num_returns=2)
    def train_and_export(self, batch: Any, lr: float, weight_decay: float) -> tuple[Any, WeightUpdate]:
        """One update, then its weights: the export is ready the moment the update is."""
        result = self._backend.train_step(batch, lr=lr, weight_decay=weight_decay)
        return result, self._backend.export_weights()


class RemoteGenerator:
    """The InferenceActor's sampling generator, as far as checkpoints need it: get/set its state."""

    def __init__(self, actor: Any, timeout_s: float) -> None:
        self._actor, self._timeout_s = actor, timeout_s

    def get_state(self) -> Any:
        return ray.get(self._actor.rng_state.remote(), timeout=self._timeout_s)

    def set_state(self, state: Any) -> None:
        ray.get(self._actor.set_rng_state.remote(state), timeout=self._timeout_s)


class EngineProxy:
    """SamplingEngine over an InferenceActor; remembers the version the actor last confirmed."""

    def __init__(self, actor: Any, timeout_s: float) -> None:
        self._actor, self._timeout_s = actor, timeout_s
        self._version = cast(int, ray.get(actor.weights_version.remote(), timeout=timeout_s))
        # checkpoints capture and restore it like a local engine's, so split runs resume exactly
        self.generator = RemoteGenerator(actor, timeout_s)

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams) -> list:
        ref = self._actor.generate.remote(prompt_ids_P, num_samples, params, self._version)
        return ray.get(ref, timeout=self._timeout_s)

    def load_weights(self, update: WeightUpdate) -> None:
        if update.version == self._version:
            return  # the actor confirmed these very weights already (versions count one trainer's updates)
        self._version = cast(int, ray.get(self._actor.load_weights.remote(update), timeout=self._timeout_s))


class BackendProxy:
    """TrainBackend over a TrainerActor, synchronous or one-step-off pipelined (see module doc)."""

    def __init__(self, actor: Any, timeout_s: float, *, one_step_off: bool = False) -> None:
        self._actor, self._timeout_s, self.one_step_off = actor, timeout_s, one_step_off
        caps = self._get("capabilities")
        self.capabilities = dataclasses.replace(caps, reports_sync_loss=False) if one_step_off else caps
        self._done_version = self._get("version")
        self._pending: tuple[Any, Any] | None = None  # (result ref, weights ref) of the update in flight
        self._last_update: Any = None  # weights ref of the newest finished update
        self._unreported: Any = None  # result of a finished update no train_step has returned yet

    def _get(self, attribute: str) -> Any:
        return ray.get(self._actor.get.remote(attribute), timeout=self._timeout_s)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        self._drain()
        return ray.get(self._actor.call.remote(method, *args, **kwargs), timeout=self._timeout_s)

    def _drain(self) -> None:
        """Waits for the update in flight (if any) and keeps its result until a train_step returns it."""
        if self._pending is None:
            return
        result_ref, weights_ref = self._pending
        self._pending = None
        self._unreported = ray.get(result_ref, timeout=self._timeout_s)
        self._done_version += 1
        self._last_update = weights_ref

    @property
    def version(self) -> int:
        """Updates submitted so far (equals the trainer's version once the one in flight is done)."""
        return self._done_version + (1 if self._pending is not None else 0)

    def train_step(self, batch: Any, *, lr: float, weight_decay: float) -> Any:
        if not self.one_step_off:
            result = self._call("train_step", batch, lr=lr, weight_decay=weight_decay)
            self._done_version += 1
            return result
        self._drain()
        previous, self._unreported = self._unreported, None
        self._pending = tuple(self._actor.train_and_export.remote(batch, lr, weight_decay))
        if previous is None:  # the first pipelined update: no earlier update to report yet
            return TrainStepResult(loss=float("nan"), metrics={})
        return previous

    def sft_step(self, batch: Any, *, lr: float, weight_decay: float) -> Any:
        result = self._call("sft_step", batch, lr=lr, weight_decay=weight_decay)
        self._done_version += 1
        return result

    def export_weights(self) -> WeightUpdate:
        """The newest *finished* update's weights; with one update in flight, that is version - 1."""
        if self._pending is not None and self._last_update is not None:
            update = cast(WeightUpdate, ray.get(self._last_update, timeout=self._timeout_s))
            if update.version == self._done_version:
                return update
        return self._call("export_weights")

    def save_checkpoint(self, directory: Path) -> None:
        self._call("save_checkpoint", directory)  # same node (STRICT_PACK): the path is shared

    def load_checkpoint(self, directory: Path) -> None:
        self._call("load_checkpoint", directory)
        self._done_version = self._get("version")


@dataclass
class SplitActors:
    inference: Any
    trainer: Any
    timeout_s: float
    one_step_off: bool = False

    def policy(self) -> Policy:
        tokenizer = cast("Tokenizer", ray.get(self.inference.tokenizer.remote(), timeout=self.timeout_s))
        backend = BackendProxy(self.trainer, self.timeout_s, one_step_off=self.one_step_off)
        return Policy(EngineProxy(self.inference, self.timeout_s), backend, tokenizer)

    def placements(self) -> list[dict[str, Any]]:
        """Where each actor runs: role, node id, pid and the GPU ids Ray gave it."""
        refs = [self.inference.placement.remote(), self.trainer.placement.remote()]
        return ray.get(refs, timeout=self.timeout_s)


def start_split_actors(config: RetrainConfig, *, name: str, namespace: str, timeout_s: float) -> SplitActors:
    """Starts both actors in the current trial's placement group (bundles 1 and 2)."""
    pg = get_current_placement_group()
    if pg is None:
        raise RuntimeError("split placement needs to run inside a Tune trial's placement group")

    def pinned(index: int) -> dict[str, Any]:
        return {"num_cpus": 0, "num_gpus": 1, "namespace": namespace,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)}

    inference = InferenceActor.options(name=f"{name}/inference", **pinned(1)).remote(config)
    trainer = TrainerActor.options(name=f"{name}/trainer", **pinned(2)).remote(config)
    return SplitActors(inference, trainer, timeout_s, one_step_off=bool(config.inference.one_step_off))


def stop_split_actors(actors: SplitActors) -> None:
    for handle in (actors.inference, actors.trainer):
        ray.kill(handle)
