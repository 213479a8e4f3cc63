"""A shared vLLM engine batches several runs' requests (engines/vllm/batching.py, core.py).

The collector alone (threads, no vLLM), then a real vLLM CPU engine on the built-in tiny model: two
runs with adapters whose greedy outputs differ, sampled in ONE batch, each get exactly what they get
served alone; a run's new adapter version loads while another run's request waits, the waiting request
keeps the version it asked for, and the replaced version is removed once nothing uses it.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from retrain_ray.engines.vllm.batching import Job, RequestBatcher
from retrain_ray.engines.vllm.core import INSTALL_HINT, vllm_available

MODEL = "builtin:tiny-h256-l2"
PROMPTS = [[1, 5, 6, 7], [1, 9, 9], [1, 12]]


def _submit_all(batcher: RequestBatcher[str, str], runs: list[str]) -> list[Job[str, str]]:
    jobs = [Job(run, f"{run}-request") for run in runs]
    threads = [threading.Thread(target=batcher.submit, args=(job,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return jobs


def test_collector_serves_concurrent_runs_in_one_batch_and_serial_one_at_a_time():
    seen: list[list[str]] = []

    def execute(requests):
        seen.append(list(requests))
        return [r.upper() for r in requests]

    batched = RequestBatcher(execute, mode="batch", window_s=60.0, target=lambda: 3)
    jobs = _submit_all(batched, ["a", "b", "c"])
    assert len(seen) == 1 and sorted(seen[0]) == ["a-request", "b-request", "c-request"]
    assert [(j.output, j.batch_runs) for j in jobs] == [("A-REQUEST", 3), ("B-REQUEST", 3), ("C-REQUEST", 3)]

    seen.clear()
    serial = RequestBatcher(execute, mode="serial", window_s=60.0, target=lambda: 3)
    jobs = _submit_all(serial, ["a", "b", "c"])
    assert [len(batch) for batch in seen] == [1, 1, 1]
    assert all(j.batch_runs == 1 and j.output == j.request.upper() for j in jobs)


def test_collector_hands_an_engine_error_to_every_caller_of_the_batch():
    def execute(requests):
        raise RuntimeError("engine fell over")

    jobs = _submit_all(RequestBatcher(execute, window_s=60.0, target=lambda: 2), ["a", "b"])
    assert all(isinstance(j.error, RuntimeError) for j in jobs)
    with pytest.raises(ValueError, match="batching mode 'parallel'"):
        RequestBatcher(execute, mode="parallel")


# one vLLM engine start plus six adapter loads: minutes on the shared 2-core machine, so extended
needs_vllm_installed = pytest.mark.skipif(not vllm_available(), reason=f"vLLM is not installed: {INSTALL_HINT}")


@pytest.fixture(scope="module")
def core():
    from retrain_ray.backends.local import LoraSettings
    from retrain_ray.engines.vllm.core import VLLMCore, VLLMSettings
    from retrain_ray.models.loading import resolve_model_path

    engine = VLLMCore(VLLMSettings(str(resolve_model_path(MODEL)), lora=LoraSettings(rank=8), dtype="float32",
                                   max_loras=2, extra_args={"max_model_len": 128}))
    yield engine
    engine.close()


def _adapter(seed: int) -> dict[str, torch.Tensor]:
    """LoRA tensors that move the tiny model's greedy continuations far from the base model's."""
    from retrain_ray.backends.local import LoraSettings, PolicySettings, load_trainable_model
    from retrain_ray.engines.weights import export_trainable

    model, _ = load_trainable_model(MODEL, PolicySettings(finetune="lora", lora=LoraSettings(rank=8), seed=seed),
                                    device="cpu")
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.requires_grad and "lora_B" in name:
                p.add_(torch.randn(p.shape, generator=gen) * 2.0)
    return export_trainable(model)


def _greedy(core, run: str, version: int):
    from retrain_ray.engines import SamplingParams

    out = core.generate_batched(run, PROMPTS, 1, SamplingParams(max_tokens=8, temperature=0.0), version)
    return [[s.token_ids for s in group] for group in out.results], out


def _concurrently(*calls):
    results: list[object] = [None] * len(calls)

    def call(i: int) -> None:
        results[i] = calls[i]()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    return results


def _wait_until(predicate, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.01)


@pytest.mark.extended
@needs_vllm_installed
def test_two_runs_in_one_batch_each_sample_their_own_adapter(core):
    from retrain_ray.engines import WeightUpdate

    core.load_weights("run-a", WeightUpdate(1, _adapter(1)))
    core.load_weights("run-b", WeightUpdate(1, _adapter(2)))
    core.batcher.window_s = 0.0  # served alone: no waiting for the other run
    alone = {run: _greedy(core, run, 1)[0] for run in ("run-a", "run-b")}
    assert alone["run-a"] != alone["run-b"]  # the adapters' outputs differ, so a mix-up would show

    core.batcher.window_s = 60.0  # the first caller waits for the other run (2 clients), then one batch
    batches = core.batcher.batches
    (a_ids, a_out), (b_ids, b_out) = _concurrently(lambda: _greedy(core, "run-a", 1), lambda: _greedy(core, "run-b", 1))
    assert core.batcher.batches == batches + 1
    assert (a_out.batch_runs, b_out.batch_runs) == (2, 2)
    assert (a_out.adapter, b_out.adapter) == ("run-a-v1", "run-b-v1")
    assert a_ids == alone["run-a"] and b_ids == alone["run-b"]


@pytest.mark.extended
@needs_vllm_installed
def test_a_sync_while_another_request_waits_keeps_versions_apart_and_evicts_the_old_one(core):
    from retrain_ray.engines import WeightUpdate

    core.load_weights("run-a", WeightUpdate(1, _adapter(1)))
    core.load_weights("run-b", WeightUpdate(1, _adapter(2)))
    core.batcher.window_s = 0.0
    b_v1 = _greedy(core, "run-b", 1)[0]
    old_id = core.client("run-b").lora_request.lora_int_id

    core.batcher.window_s = 60.0  # run-b's v1 request now waits in the collector for run-a
    waiting: list[object] = []
    thread = threading.Thread(target=lambda: waiting.append(_greedy(core, "run-b", 1)))
    thread.start()
    _wait_until(lambda: core.batcher.waiting == 1, "run-b's request to queue")
    core.load_weights("run-b", WeightUpdate(2, _adapter(3)))  # no pause: the engine is not running a batch
    loaded = set(core.llm.llm_engine.list_loras())
    assert old_id in loaded and core.client("run-b").lora_request.lora_int_id in loaded  # v1 is still in use

    _greedy(core, "run-a", 1)  # completes the batch that run-b's v1 request waits in
    thread.join(timeout=300)
    ids, out = waiting[0]
    assert out.adapter == "run-b-v1" and out.batch_runs == 2
    assert ids == b_v1  # the waiting request sampled the version it asked for, not the one loaded meanwhile
    assert old_id not in set(core.llm.llm_engine.list_loras())  # evicted once no request used it
    assert core.adapters.retired == 0

    core.batcher.window_s = 0.0
    b_v2, out = _greedy(core, "run-b", 2)
    assert out.adapter == "run-b-v2" and b_v2 != b_v1
    with pytest.raises(RuntimeError, match="expected 1"):
        core.generate("run-b", PROMPTS, 1, _params(), expect_version=1)


def _params():
    from retrain_ray.engines import SamplingParams

    return SamplingParams(max_tokens=8, temperature=0.0)
