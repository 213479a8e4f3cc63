"""The campaign's shared trainer actor (`[campaign] shared_trainer = true`): one per node (one per GPU where the
runs hold GPUs), named under the campaign's `actor_scope`, hosting one `CoalescingTrainer` over one
`SharedTrainer` (retrain_ray/shared_trainer/): the base model copy, every member run's adapter and AdamW state.

A member run's trial holds no model: its `TrainBackend` and `SamplingEngine` (campaign/shared_trainer_policy.py)
call this actor. The actor is threaded (`max_concurrency` above the members), so the members' concurrent
`train_step` calls meet in the coalescer and go as one batched forward/backward. `TrainerHost` is the plain
class behind it (testable without Ray); one lock keeps a step, a sampling call and a checkpoint from touching
the model at once (the serving rows and the grouped LoRA's routing are the model's state while they run).

Sampling: the members' concurrent `generate` calls are coalesced like their steps (`CoalescingTrainer.generate`):
one batched decode from the trainer's copy, each row under its own run's adapter and drawn from its own generator,
seeded per call by the run (shared_trainer/sampling.py).

Back pressure (`[backpressure] enabled` with `pooled`): the trainer is a shared resource like an endpoint. It
registers itself with the campaign's back-pressure actor as the "throttle" of the resource named after it (its
actor name), its members report their steps under that resource, and the pooled fit's capacity comes back through
`resize(capacity)`: the most members one batched step takes (coalescer.py). A restarted trainer registers again
and gets the capacity in force.

Killed, Ray restarts it (`max_restarts`): it comes back empty, notes the restart in the campaign's
`control_restarts.jsonl` (actors/restarts.py), and each member's next call fails ("not a member"), so Tune
retries the run from its last checkpoint like any failed run (counted in the manifest), and the retried trial
joins again and loads that checkpoint into the trainer.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

import ray
import torch

from retrain_ray.actors.restarts import CONTROL_RESTARTS, record_restart
from retrain_ray.backends.local.policy import PolicySettings
from retrain_ray.backends.types import TrainStepResult
from retrain_ray.engines.pytorch.engine import eos_ids, pad_id
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightUpdate
from retrain_ray.models import Tokenizer
from retrain_ray.models.lean_loading import load_lean_model_and_tokenizer
from retrain_ray.models.lora import LoraSettings
from retrain_ray.shared_trainer import (
    CoalescingTrainer,
    SampleRequest,
    SharedStepResult,
    SharedTrainer,
    StepRequest,
)

log = logging.getLogger(__name__)

MAX_THREADS = 256
"""The actor's threads at most: members beyond wait their turn in Ray's queue (the coalescer does not wait for
them past its window)."""


@dataclass(frozen=True)
class TrainerSpec:
    """What one shared trainer is built from (the members' common model and LoRA layout). Frozen and picklable:
    Ray keeps it to rebuild the actor after a restart."""

    model: str
    layout: LoraSettings
    dtype: str = "auto"
    device: str = "cpu"
    window_s: float = 0.05
    """How long a member's step waits for the others before the pending ones go (coalescer.py)."""
    threads: int = 0
    """Torch threads of the actor on CPU (0: every core of the node)."""


class _RemoteMethod(Protocol):
    def remote(self, *args: object) -> object: ...


class _BackPressure(Protocol):
    """The back-pressure actor's method a trainer calls (actors/backpressure.py)."""

    set_throttle: _RemoteMethod


class _LockedTrainer(SharedTrainer):
    """A `SharedTrainer` whose batched step holds the host's model lock (the coalescer calls it from a member's
    thread, outside its own lock)."""

    lock: threading.RLock

    def train_step(self, requests: Mapping[str, StepRequest]) -> SharedStepResult:
        with self.lock:
            return super().train_step(requests)

    def generate(self, requests: Mapping[str, SampleRequest]) -> dict[str, list[list[SampleResult]]]:
        with self.lock:
            return super().generate(requests)


class TrainerHost:
    """The shared trainer, its coalescer and its sampler ids: what the actor hosts, as a plain class."""

    def __init__(self, spec: TrainerSpec) -> None:
        model, tokenizer = load_lean_model_and_tokenizer(spec.model, dtype=spec.dtype)
        device = spec.device if torch.cuda.is_available() else "cpu"  # Ray's fake GPUs in tests: torch on CPU
        trainer = _LockedTrainer(model.to(torch.device(device)), spec.layout, dtype=spec.dtype,
                                 eos_token_ids=eos_ids(model, cast("Tokenizer", tokenizer)), pad_token_id=pad_id(cast("Tokenizer", tokenizer)))
        trainer.lock = threading.RLock()
        self.trainer = trainer
        self.lock = trainer.lock
        self.coalescer = CoalescingTrainer(trainer, window_s=spec.window_s)
        self.samples = 0

    def add_run(self, run_id: str, settings: PolicySettings) -> None:
        """Joins the run with its fresh adapter (a retried run already a member starts afresh: its trial loads
        its checkpoint next)."""
        with self.lock:
            if run_id in self.trainer.members:
                self.coalescer.remove_run(run_id)
            self.coalescer.add_run(run_id, settings)

    def remove_run(self, run_id: str) -> None:
        with self.lock:
            if run_id in self.trainer.members:
                self.coalescer.remove_run(run_id)

    def train_step(self, run_id: str, request: StepRequest, timeout_s: float) -> TrainStepResult:
        return self.coalescer.train_step(run_id, request, timeout_s=timeout_s)

    def generate(self, run_id: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams, *,
                 seed: int, expect_version: int, timeout_s: float = 600.0) -> list[list[SampleResult]]:
        """The run's completions under its adapter, in the next coalesced decode with the other members'."""
        with self.lock:
            version = self.trainer.version(run_id)
            if version != expect_version:
                raise RuntimeError(f"run {run_id!r} asked to sample from weights version {expect_version}, but its "
                                   f"adapter in the shared trainer is at version {version}: sync weights first")
            self.samples += 1
        # outside the lock: the coalescer waits here for the other members' requests
        return self.coalescer.generate(run_id, prompt_ids_P, num_samples, params, seed=seed, timeout_s=timeout_s)

    def version(self, run_id: str) -> int:
        with self.lock:
            return self.trainer.version(run_id)

    def save_checkpoint(self, run_id: str, directory: str) -> None:
        with self.lock:
            self.trainer.save_checkpoint(run_id, Path(directory))

    def load_checkpoint(self, run_id: str, directory: str) -> None:
        with self.lock:
            self.trainer.load_checkpoint(run_id, Path(directory))

    def export_weights(self, run_id: str) -> WeightUpdate:
        with self.lock:
            return self.trainer.export_weights(run_id)

    def export_adapter(self, run_id: str) -> WeightUpdate:
        """The run's whole adapter at its version, for the campaign's shared vLLM engine (it loads adapters whole)."""
        with self.lock:
            return self.trainer.export_adapter(run_id)

    def resize(self, capacity: int) -> int:
        """The most members one batched step takes from now on (the pooled back pressure's capacity)."""
        return self.coalescer.resize(capacity)

    def figures(self) -> dict[str, float]:
        """Members, batched steps and decodes so far and their mean sizes in runs, sampling calls, the capacity
        in force (0: no limit) and how many times back pressure set it, the actor's pid."""
        sizes, decodes = self.coalescer.batch_sizes, self.coalescer.decode_sizes
        return {"members": float(len(self.trainer.members)), "steps": float(len(sizes)),
                "mean_batch_runs": sum(sizes) / len(sizes) if sizes else 0.0, "samples": float(self.samples),
                "decodes": float(len(decodes)), "mean_decode_runs": sum(decodes) / len(decodes) if decodes else 0.0,
                "capacity": float(self.coalescer.capacity or 0), "resizes": float(len(self.coalescer.resizes)),
                "pid": float(os.getpid())}

    def capacities(self) -> list[int]:
        """Every capacity back pressure set, in order."""
        return list(self.coalescer.resizes)


@ray.remote(num_cpus=0)
class SharedTrainerActor:
    """Hosts one `TrainerHost`; every method names the member run it is for."""

    def __init__(self, spec: TrainerSpec, name: str, campaign_dir: str, backpressure: str = "") -> None:
        if ray.get_runtime_context().was_current_actor_reconstructed:
            record_restart(Path(campaign_dir), name)
        if not torch.cuda.is_available():
            torch.set_num_threads(spec.threads or os.cpu_count() or 1)
        self._host = TrainerHost(spec)
        if backpressure:
            _register(backpressure, name)

    def add_run(self, run_id: str, settings: PolicySettings) -> None:
        self._host.add_run(run_id, settings)

    def remove_run(self, run_id: str) -> None:
        self._host.remove_run(run_id)

    def train_step(self, run_id: str, request: StepRequest, timeout_s: float) -> TrainStepResult:
        return self._host.train_step(run_id, request, timeout_s)

    def generate(self, run_id: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                 seed: int, expect_version: int) -> list[list[SampleResult]]:
        return self._host.generate(run_id, prompt_ids_P, num_samples, params, seed=seed, expect_version=expect_version)

    def version(self, run_id: str) -> int:
        return self._host.version(run_id)

    def save_checkpoint(self, run_id: str, directory: str) -> None:
        self._host.save_checkpoint(run_id, directory)

    def load_checkpoint(self, run_id: str, directory: str) -> None:
        self._host.load_checkpoint(run_id, directory)

    def export_weights(self, run_id: str) -> WeightUpdate:
        return self._host.export_weights(run_id)

    def export_adapter(self, run_id: str) -> WeightUpdate:
        return self._host.export_adapter(run_id)

    def resize(self, capacity: int) -> int:
        return self._host.resize(capacity)

    def figures(self) -> dict[str, float]:
        return self._host.figures()

    def capacities(self) -> list[int]:
        return self._host.capacities()


def _register(backpressure: str, name: str) -> None:
    """Registers this actor with the back-pressure actor named `backpressure` as the throttle of the resource
    `name`, fire and forget: that actor calls `resize` when it has a capacity (at once, after a restart)."""
    try:
        actor = ray.get_actor(backpressure, namespace=ray.get_runtime_context().namespace)
    except ValueError:  # gone (the campaign ended): nothing steers this trainer; its batches take every member
        log.warning("shared trainer %s: no back-pressure actor %r to register with", name, backpressure)
        return
    cast("_BackPressure", actor).set_throttle.remote(name, ray.get_runtime_context().current_actor)


def trainer_name(scope: str, node_id: str, slot: int = 0) -> str:
    """The name of the shared trainer on `node_id` (its `slot`-th, one per GPU) of the campaign `scope`."""
    return f"{scope}/shared_trainer/{node_id}/{slot}"


def start_shared_trainer(spec: TrainerSpec, *, name: str, namespace: str, node_id: str, num_gpus: float,
                         members: int, campaign_dir: Path, backpressure: str = "") -> object:
    """Starts (or finds, on a resumed driver) one shared trainer pinned to `node_id`, threaded for `members`
    concurrent callers, restarted by Ray when killed; registered with the back-pressure actor named
    `backpressure` (in `namespace`), if any, as the throttle of the resource named `name`."""
    # deferred: Ray's scheduling strategies load only for a campaign that starts a trainer
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return SharedTrainerActor.options(  # pyright: ignore[reportUnknownMemberType, reportGeneralTypeIssues]  # an @ray.remote class
        name=name, namespace=namespace, get_if_exists=True, num_gpus=num_gpus,
        max_concurrency=min(MAX_THREADS, max(4, 2 * members + 2)), max_restarts=CONTROL_RESTARTS, max_task_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    ).remote(spec, name, str(campaign_dir), backpressure)
