"""Split placement: an InferenceActor and a TrainerActor on their own GPUs, driven by the trial.

Both actors sit in the trial's STRICT_PACK placement group (bundle 1: inference, bundle 2: trainer)
with `num_cpus=0, num_gpus=1`, named `<campaign>/<run>/inference` and `.../trainer`. After each
optimizer step the trainer's exported weights (adapter tensors for LoRA, CPU tensors) travel through
the object store tagged with their version; the inference actor installs them and confirms the
version before it samples (`generate` refuses a stale version).

`EngineProxy` and `BackendProxy` implement the SamplingEngine and TrainBackend protocols over the
actor handles (every `ray.get` has a timeout), for `train_run(policy=...)`.

Known limit: tested only through the placement logic on fake GPUs; the actors themselves need CUDA.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from retrain_ray.engines.types import SamplingParams, WeightUpdate


def _build(config: Any) -> tuple[Any, Any, Any]:
    from retrain_ray.run.build import build_local_policy

    return build_local_policy(config, "cuda:0")


@ray.remote(num_cpus=0, num_gpus=1)
class InferenceActor:
    def __init__(self, config: Any) -> None:
        self._engine, _, self._tokenizer = _build(config)

    def tokenizer(self) -> Any:
        return self._tokenizer

    def weights_version(self) -> int:
        return self._engine.weights_version

    def load_weights(self, update: WeightUpdate) -> int:
        self._engine.load_weights(update)
        return self._engine.weights_version

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                 expect_version: int) -> list:
        if self._engine.weights_version != expect_version:
            raise RuntimeError(f"inference weights are version {self._engine.weights_version}, "
                               f"expected {expect_version}: load_weights first")
        return self._engine.generate(prompt_ids_P, num_samples, params)


@ray.remote(num_cpus=0, num_gpus=1)
class TrainerActor:
    def __init__(self, config: Any) -> None:
        _, self._backend, _ = _build(config)

    def call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return getattr(self._backend, method)(*args, **kwargs)

    def get(self, attribute: str) -> Any:
        return getattr(self._backend, attribute)


class EngineProxy:
    """SamplingEngine over an InferenceActor."""

    def __init__(self, actor: Any, timeout_s: float) -> None:
        self._actor, self._timeout_s = actor, timeout_s
        self._version = ray.get(actor.weights_version.remote(), timeout=timeout_s)

    @property
    def weights_version(self) -> int:
        return self._version

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams) -> list:
        ref = self._actor.generate.remote(prompt_ids_P, num_samples, params, self._version)
        return ray.get(ref, timeout=self._timeout_s)

    def load_weights(self, update: WeightUpdate) -> None:
        self._version = ray.get(self._actor.load_weights.remote(update), timeout=self._timeout_s)


class BackendProxy:
    """TrainBackend over a TrainerActor."""

    def __init__(self, actor: Any, timeout_s: float) -> None:
        self._actor, self._timeout_s = actor, timeout_s
        self.capabilities = self._get("capabilities")

    def _get(self, attribute: str) -> Any:
        return ray.get(self._actor.get.remote(attribute), timeout=self._timeout_s)

    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        return ray.get(self._actor.call.remote(method, *args, **kwargs), timeout=self._timeout_s)

    @property
    def version(self) -> int:
        return self._get("version")

    def train_step(self, batch: Any, *, lr: float, weight_decay: float) -> Any:
        return self._call("train_step", batch, lr=lr, weight_decay=weight_decay)

    def sft_step(self, batch: Any, *, lr: float, weight_decay: float) -> Any:
        return self._call("sft_step", batch, lr=lr, weight_decay=weight_decay)

    def export_weights(self) -> WeightUpdate:
        return self._call("export_weights")

    def save_checkpoint(self, directory: Path) -> None:
        self._call("save_checkpoint", directory)  # same node (STRICT_PACK): the path is shared

    def load_checkpoint(self, directory: Path) -> None:
        self._call("load_checkpoint", directory)


@dataclass
class SplitActors:
    inference: Any
    trainer: Any
    timeout_s: float

    def policy(self) -> tuple[Any, Any, Any]:
        tokenizer = ray.get(self.inference.tokenizer.remote(), timeout=self.timeout_s)
        return EngineProxy(self.inference, self.timeout_s), BackendProxy(self.trainer, self.timeout_s), tokenizer


def start_split_actors(config: Any, *, name: str, namespace: str, timeout_s: float) -> SplitActors:
    """Starts both actors in the current trial's placement group (bundles 1 and 2)."""
    from ray.util import get_current_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    pg = get_current_placement_group()
    if pg is None:
        raise RuntimeError("split placement needs to run inside a Tune trial's placement group")

    def pinned(index: int) -> dict[str, Any]:
        return {"num_cpus": 0, "num_gpus": 1, "namespace": namespace,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=index)}

    inference = InferenceActor.options(name=f"{name}/inference", **pinned(1)).remote(config)
    trainer = TrainerActor.options(name=f"{name}/trainer", **pinned(2)).remote(config)
    return SplitActors(inference, trainer, timeout_s)


def stop_split_actors(actors: SplitActors) -> None:
    for handle in (actors.inference, actors.trainer):
        ray.kill(handle)
