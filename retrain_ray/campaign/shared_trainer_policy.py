"""A member run's policy under `[campaign] shared_trainer = true`: its trial holds no model, only the tokenizer.

`SharedTrainerBackend` (a `TrainBackend`) forwards `train_step`, `version`, checkpoints and weight exports to
the campaign's shared trainer actor on the trial's node (actors/shared_trainer.py); `SharedTrainerEngine` (a
`SamplingEngine`) asks the actor for the run's completions from the one copy under the run's adapter. The run
loop (run/) sees a backend and an engine as any run's, and knows nothing of Ray.

The engine shares the trainer's weights (as the PyTorch engine shares the local trainer's model): a weight sync
is a version bump, and the actor refuses to sample from any other version than the one the run synced. Its
seeds come from the run's own generator (`generator`, seeded by `[training] seed`), which the run's checkpoints
save and restore as any engine's, so a resumed run draws the same seeds.

With the campaign's shared vLLM engine (`[inference] engine = "vllm-embedded"`, `shared = true`) the run samples
there instead (`member_policy(..., sampler=SharedVLLMEngine(...))`, actors/shared_vllm.py), as a packed run does:
that engine holds its own base copy, so the backend's weight sync carries the run's whole adapter from the trainer
(`export_adapter`: LoRA tensors only, never a base weight), which the engine loads as the run's next adapter
version. The run loop's sync (run/loop.py `sync_weights`) is unchanged: before sampling step k it loads the
trainer's version after step k-1 and the engine refuses to sample from any other.

`member_policy` joins the run to the trainer for the life of its trial (`add_run`; a resumed run then loads its
checkpoint through `load_checkpoint`, as train_run does for any backend) and leaves it when the run ends,
finished, failed or stopped (`remove_run`). Every call has the trial's timeout.
"""

from __future__ import annotations

from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import ray
import torch
from ray import ObjectRef
from ray.exceptions import RayError

from retrain_ray.backends.local.options import CAPABILITIES
from retrain_ray.backends.types import BackendCapabilities, Policy, TrainBatch, TrainStepResult
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams, WeightUpdate
from retrain_ray.shared_trainer import StepRequest

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

SEED_RANGE = 2**62


class _RemoteMethod(Protocol):
    def remote(self, *args: object) -> ObjectRef[object]: ...


class TrainerCalls:
    """The shared trainer actor's methods for one run, each a `ray.get` with a timeout."""

    def __init__(self, actor: object, run_id: str, *, timeout_s: float) -> None:
        self.actor, self.run_id, self.timeout_s = actor, run_id, timeout_s

    def call(self, method: str, *args: object) -> object:
        remote = cast("_RemoteMethod", getattr(self.actor, method))
        return ray.get(remote.remote(self.run_id, *args), timeout=self.timeout_s)


class SharedTrainerBackend:
    """`TrainBackend` of a member run: every update and checkpoint is the shared trainer's. `sync_tensors`: the
    run's sampler holds its own base copy (the shared vLLM engine), so a weight sync carries the run's adapter."""

    capabilities: BackendCapabilities = CAPABILITIES  # the local backend's files and exact resume

    def __init__(self, calls: TrainerCalls, *, sync_tensors: bool = False) -> None:
        self._calls = calls
        self.sync_tensors = sync_tensors
        self._version: int | None = None

    @property
    def version(self) -> int:
        """The run's updates so far: asked of the trainer once, then counted here, since only this run's own
        calls change it (a step, a checkpoint load); the run loop reads it three times a step."""
        if self._version is None:
            self._version = cast("int", self._calls.call("version"))
        return self._version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        request = StepRequest(batch, lr=lr, weight_decay=weight_decay)
        # the actor's own wait for the coalesced step ends before the call's timeout, so its error is the one seen
        result = cast("TrainStepResult", self._calls.call("train_step", request, 0.9 * self._calls.timeout_s))
        if self._version is not None:  # a refused update (an error raised above) leaves the version as it was
            self._version += 1
        return result

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        raise NotImplementedError("the shared trainer makes RL steps only: a supervised step (an SFT warm start, "
                                  "trainer = \"sft\") is refused at config time; set [campaign] shared_trainer = "
                                  "false for this run")

    def export_weights(self) -> WeightUpdate:
        """The run's whole adapter at its version for a sampler with its own copy; else the version only (the
        sampler reads the trainer's copy: no tensors travel)."""
        if self.sync_tensors:
            return cast("WeightUpdate", self._calls.call("export_adapter"))
        return WeightUpdate(version=self.version)

    def save_checkpoint(self, directory: Path) -> None:
        self._calls.call("save_checkpoint", str(directory))

    def load_checkpoint(self, directory: Path) -> None:
        self._calls.call("load_checkpoint", str(directory))
        self._version = None  # the checkpoint's: asked again


class SharedTrainerEngine:
    """`SamplingEngine` of a member run: completions from the shared trainer's copy under the run's adapter."""

    def __init__(self, calls: TrainerCalls, *, seed: int) -> None:
        self._calls = calls
        self.generator = torch.Generator().manual_seed(seed)
        self._version = 0

    @property
    def weights_version(self) -> int:
        return self._version

    def load_weights(self, update: WeightUpdate) -> None:
        self._version = update.version

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int,
                 params: SamplingParams) -> list[list[SampleResult]]:
        seed = int(torch.randint(SEED_RANGE, (1,), generator=self.generator).item())
        results = self._calls.call("generate", prompt_ids_P, num_samples, params, seed, self._version)
        return cast("list[list[SampleResult]]", results)


@contextmanager
def member_policy(config: RetrainConfig, actor: object, run_id: str, *, timeout_s: float,
                  sampler: SamplingEngine | None = None) -> Generator[Policy]:
    """The run's policy over the shared trainer `actor`, the run a member while the block runs. It samples from
    the trainer's copy, or with `sampler` (an engine holding its own base copy, fed the run's adapter)."""
    # deferred: loads the tokenizer's library and the local backend's settings, which the driver does not need
    from retrain_ray.backends.local.policy import settings_from_config
    from retrain_ray.models.light_tokenizer import LightTokenizer
    from retrain_ray.models.loading import resolve_model_path

    settings = settings_from_config(config)
    calls = TrainerCalls(actor, run_id, timeout_s=timeout_s)
    tokenizer = LightTokenizer.from_folder(resolve_model_path(config.model.model), padding_side="left")
    calls.call("add_run", settings)
    try:
        if sampler is None:
            sampler = SharedTrainerEngine(calls, seed=settings.seed)
            sampler.load_weights(WeightUpdate(version=cast("int", calls.call("version"))))
            yield Policy(sampler, SharedTrainerBackend(calls), tokenizer)
        else:
            yield Policy(sampler, SharedTrainerBackend(calls, sync_tensors=True), tokenizer)
    finally:
        _leave(calls)


def _leave(calls: TrainerCalls) -> None:
    """Leaves the trainer; a trainer that is gone (killed, restarted empty) has nothing to drop."""
    try:
        calls.call("remove_run")
    except (RayError, TimeoutError):  # the run's own outcome matters more than its leaving
        pass
