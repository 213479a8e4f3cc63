"""`[inference] engine = "vllm-embedded"`: `VLLMEngine`, the `SamplingEngine` of one run over a `VLLMCore`
(core.py: its own, or a campaign's shared one), and `SleepDuringUpdates`, the trainer wrapper that frees
the card for each optimizer step when vLLM and the trainer share one GPU."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.engines.types import SampleResult, SamplingParams, WeightUpdate
from retrain_ray.engines.vllm.core import VLLMCore, VLLMSettings

if TYPE_CHECKING:

    from retrain_ray.backends.types import TrainBackend, TrainBatch, TrainStepResult


class SeedCursor:
    """A client's position in its seed sequence (its call count), saved and restored like an RNG state,
    so a resumed run draws the samples an uninterrupted one would."""

    def __init__(self, core: VLLMCore, name: str) -> None:
        self._core, self._name = core, name

    def get_state(self) -> int:
        return self._core.client(self._name).calls

    def set_state(self, state: int) -> None:
        self._core.client(self._name).calls = int(state)



class VLLMEngine:
    """SamplingEngine of one run over a `VLLMCore` (its own, or shared with other runs)."""

    def __init__(self, core: VLLMCore, *, name: str = "run", owns_core: bool = True) -> None:
        self.core, self.name, self.owns_core = core, name, owns_core
        core.client(name)
        self.generator = SeedCursor(core, name)  # checkpoints capture it as the engine's generator

    @classmethod
    def start(cls, settings: VLLMSettings, *, name: str = "run") -> VLLMEngine:
        return cls(VLLMCore(settings), name=name)

    @property
    def weights_version(self) -> int:
        return self.core.version(self.name)

    def load_weights(self, update: WeightUpdate) -> None:
        self.core.load_weights(self.name, update)

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        return self.core.generate(self.name, prompt_ids_P, num_samples, params, self.weights_version)

    def sleep(self) -> None:
        self.core.sleep()

    def close(self) -> None:
        if self.owns_core:
            self.core.close()


class SleepDuringUpdates:
    """A TrainBackend that puts the engine to sleep for each update (one GPU shared with vLLM)."""

    def __init__(self, backend: TrainBackend, engine: VLLMEngine) -> None:
        self._backend, self._engine = backend, engine
        self.capabilities = backend.capabilities

    def __getattr__(self, name: str) -> object:
        return getattr(self._backend, name)

    @property
    def version(self) -> int:
        return self._backend.version

    def train_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        self._engine.sleep()
        return self._backend.train_step(batch, lr=lr, weight_decay=weight_decay)

    def sft_step(self, batch: TrainBatch, *, lr: float, weight_decay: float) -> TrainStepResult:
        self._engine.sleep()
        return self._backend.sft_step(batch, lr=lr, weight_decay=weight_decay)

    def export_weights(self) -> WeightUpdate:
        return self._backend.export_weights()

    def save_checkpoint(self, directory: Path) -> None:
        self._backend.save_checkpoint(directory)

    def load_checkpoint(self, directory: Path) -> None:
        self._backend.load_checkpoint(directory)
