"""The shared trainer actor and a member trial's proxies (actors/shared_trainer.py,
campaign/shared_trainer_policy.py) on the session Ray, with the tiny built-in model:

* two member runs trained through their proxy backends on the same batches as each run's own solo local backend
  end with the same adapters (the proxies add nothing to the library's exactness), and their checkpoint files are
  the solo backend's;
* the proxy engine samples from the trainer's copy under the run's adapter and refuses a version it did not sync;
* a killed trainer actor comes back empty (Ray restarts it, noted in control_restarts.jsonl): a member's next call
  fails, and the member joining again and loading its checkpoint continues exactly where it was.
"""

from __future__ import annotations

import json
import random
from concurrent.futures import ThreadPoolExecutor

import pytest
import ray
import torch
from helpers import wait_for
from safetensors.torch import load_file

from retrain_ray.actors.restarts import RESTARTS_FILE
from retrain_ray.actors.shared_trainer import TrainerSpec, start_shared_trainer
from retrain_ray.backends.local.policy import build_local_policy, settings_from_config
from retrain_ray.backends.types import TrainBatch
from retrain_ray.campaign.shared_trainer_policy import member_policy
from retrain_ray.config import RetrainConfig
from retrain_ray.engines.types import SamplingParams

STEPS = 3
TIMEOUT_S = 120.0


def run_config(seed: int, rank: int = 4) -> RetrainConfig:
    return RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "finetune": "lora", "lora_rank": rank}, "backend": {"devices": "cpu"},
        "training": {"seed": seed, "max_steps": STEPS, "micro_batch_size": 2}})


def batch(seed: int) -> TrainBatch:
    rng = random.Random(seed)
    rows = [[rng.randrange(3, 60) for _ in range(7)] for _ in range(4)]
    return TrainBatch(tokens_D=rows, logprobs_D=[[0.0] * 3 + [-1.5] * 4 for _ in rows],
                      advantages_D=[[0.0] * 3 + [rng.choice([-1.0, 1.0])] * 4 for _ in rows],
                      prompt_lens_D=[3] * 4)


@pytest.fixture
def trainer(ray_4cpu_4gpu, tmp_path):
    spec = TrainerSpec(model="builtin:tiny", layout=settings_from_config(run_config(1)).lora, threads=1)
    name = f"test/shared_trainer/{tmp_path.name}"
    actor = start_shared_trainer(spec, name=name, namespace="shared-trainer-test", members=2,
                                 node_id=ray.get_runtime_context().get_node_id(), num_gpus=0, campaign_dir=tmp_path)
    yield actor
    ray.kill(actor, no_restart=True)


def adapter(directory) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "adapter" / "adapter_model.safetensors"))


def test_members_end_with_their_solo_adapters_on_the_same_batches(trainer, tmp_path):
    configs = {"run-a": run_config(1, rank=4), "run-b": run_config(2, rank=8)}  # ranks may differ
    with member_policy(configs["run-a"], trainer, "run-a", timeout_s=TIMEOUT_S) as a, \
            member_policy(configs["run-b"], trainer, "run-b", timeout_s=TIMEOUT_S) as b:
        shared = {"run-a": a.backend, "run-b": b.backend}
        assert all(backend.version == 0 for backend in shared.values())  # asked once; counted from here
        with ThreadPoolExecutor(2) as pool:  # as two trials do: their concurrent steps meet in the coalescer
            for step in range(STEPS):
                calls = [pool.submit(backend.train_step, batch(10 * step + k), lr=1e-2, weight_decay=0.01)
                         for k, backend in enumerate(shared.values())]
                assert all(c.result(timeout=TIMEOUT_S).loss == c.result().loss for c in calls)
        for run, backend in shared.items():
            assert backend.version == STEPS == ray.get(trainer.version.remote(run), timeout=TIMEOUT_S)
            (tmp_path / run).mkdir()
            backend.save_checkpoint(tmp_path / run)
    for k, (run, cfg) in enumerate(configs.items()):
        solo = build_local_policy(cfg, device="cpu").backend
        for step in range(STEPS):
            solo.train_step(batch(10 * step + k), lr=1e-2, weight_decay=0.01)
        (tmp_path / f"{run}-solo").mkdir()
        solo.save_checkpoint(tmp_path / f"{run}-solo")
        got, want = adapter(tmp_path / run), adapter(tmp_path / f"{run}-solo")
        assert got.keys() == want.keys()
        largest = max(float((got[n] - want[n]).abs().max()) for n in want)
        assert largest < 1e-5, f"{run}: largest adapter difference {largest}"
    assert ray.get(trainer.figures.remote(), timeout=TIMEOUT_S)["members"] == 0  # both left


def test_the_proxy_engine_samples_the_runs_adapter_version_only(trainer):
    with member_policy(run_config(3), trainer, "run-c", timeout_s=TIMEOUT_S) as policy:
        params = SamplingParams(max_tokens=3, temperature=1.0)
        out = policy.engine.generate([[5, 6, 7], [8, 9]], 2, params)
        assert [len(group) for group in out] == [2, 2] and all(0 < len(s.token_ids) <= 3 for g in out for s in g)
        policy.backend.train_step(batch(0), lr=1e-2, weight_decay=0.0)
        with pytest.raises(ray.exceptions.RayTaskError, match="version 0.*at version 1"):
            policy.engine.generate([[5, 6, 7]], 1, params)
        policy.engine.load_weights(policy.backend.export_weights())
        assert policy.engine.weights_version == 1 and len(policy.engine.generate([[5, 6, 7]], 1, params)) == 1


def test_a_killed_trainer_restarts_and_a_member_continues_from_its_checkpoint(trainer, tmp_path):
    cfg = run_config(4)
    with member_policy(cfg, trainer, "run-d", timeout_s=TIMEOUT_S) as policy:
        policy.backend.train_step(batch(1), lr=1e-2, weight_decay=0.0)
        policy.backend.save_checkpoint(tmp_path)
        saved = adapter(tmp_path)
        ray.kill(trainer, no_restart=False)
        wait_for(lambda: (tmp_path / RESTARTS_FILE).is_file(), timeout_s=TIMEOUT_S, what="the trainer's restart")
        with pytest.raises(ray.exceptions.RayError):  # "not a member", or the actor unavailable while it restarts
            policy.backend.train_step(batch(2), lr=1e-2, weight_decay=0.0)  # either way the run fails and Tune retries it
        assert ray.get(trainer.figures.remote(), timeout=TIMEOUT_S)["members"] == 0  # it came back empty
    with member_policy(cfg, trainer, "run-d", timeout_s=TIMEOUT_S) as policy:  # the retried trial joins again
        policy.backend.load_checkpoint(tmp_path)
        assert policy.backend.version == 1
        (tmp_path / "again").mkdir()
        policy.backend.save_checkpoint(tmp_path / "again")
        reloaded = adapter(tmp_path / "again")
        assert all(torch.equal(reloaded[n], saved[n]) for n in saved)
        policy.backend.train_step(batch(2), lr=1e-2, weight_decay=0.0)
        assert policy.backend.version == 2
    restarts = [json.loads(line) for line in (tmp_path / RESTARTS_FILE).read_text().splitlines()]
    assert [r["actor"] for r in restarts] == [f"test/shared_trainer/{tmp_path.name}"]


def test_members_concurrent_sampling_goes_as_one_decode(ray_4cpu_4gpu, tmp_path):
    # a long window: the decode goes once both members are pending, however slow the box is
    spec = TrainerSpec(model="builtin:tiny", layout=settings_from_config(run_config(1)).lora, threads=1, window_s=30.0)
    actor = start_shared_trainer(spec, name=f"test/shared_trainer/{tmp_path.name}", namespace="shared-trainer-test",
                                 members=2, node_id=ray.get_runtime_context().get_node_id(), num_gpus=0,
                                 campaign_dir=tmp_path)
    try:
        params = SamplingParams(max_tokens=3, temperature=1.0)
        with member_policy(run_config(4), actor, "run-d", timeout_s=TIMEOUT_S) as d, \
                member_policy(run_config(5), actor, "run-e", timeout_s=TIMEOUT_S) as e, \
                ThreadPoolExecutor(2) as pool:
            calls = [pool.submit(p.engine.generate, [[5, 6, 7], [8, 9]], 2, params) for p in (d, e)]
            outs = [c.result(timeout=TIMEOUT_S) for c in calls]
            figures = ray.get(actor.figures.remote(), timeout=TIMEOUT_S)
        assert all([len(group) for group in out] == [2, 2] for out in outs)
        assert (figures["decodes"], figures["mean_decode_runs"]) == (1.0, 2.0)
    finally:
        ray.kill(actor, no_restart=True)
