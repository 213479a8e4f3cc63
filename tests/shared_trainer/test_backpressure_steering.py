"""The pooled back pressure steers the shared trainer's coalesced batch, on the session Ray: the trainer actor
registers itself with the campaign's back-pressure actor as the throttle of its own resource, its members report
under that resource, and the pooled fit's capacity reaches the trainer (`resize`) and limits its batched steps."""

from __future__ import annotations

import json
import random
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray
from helpers import GRPO, wait_for, write_campaign
from safetensors.torch import load_file

from retrain_ray.actors.backpressure import RemoteAdvisor, backpressure_name, start_backpressure_actor
from retrain_ray.actors.shared_trainer import TrainerSpec, start_shared_trainer, trainer_name
from retrain_ray.backends.local.policy import build_local_policy, settings_from_config
from retrain_ray.backends.types import TrainBackend, TrainBatch
from retrain_ray.backpressure.arrow_log import read_decision_log
from retrain_ray.backpressure.settings import BackPressureSettings
from retrain_ray.backpressure.types import StepObservation
from retrain_ray.campaign import Campaign
from retrain_ray.campaign.shared_trainer_policy import member_policy
from retrain_ray.config import RetrainConfig

NS = "retrain-ray-tests"
TIMEOUT_S = 120.0


def _config(seed: int) -> RetrainConfig:
    return RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "finetune": "lora", "lora_rank": 4}, "backend": {"devices": "cpu"},
        "training": {"seed": seed, "max_steps": 2}})


def _batch(seed: int) -> TrainBatch:
    rng = random.Random(seed)
    rows = [[rng.randrange(3, 60) for _ in range(7)] for _ in range(4)]
    return TrainBatch(tokens_D=rows, logprobs_D=[[0.0] * 3 + [-1.5] * 4 for _ in rows],
                      advantages_D=[[0.0] * 3 + [rng.choice([-1.0, 1.0])] * 4 for _ in rows], prompt_lens_D=[3] * 4)


def _observe_until_resized(trainer: object, advisors: list[RemoteAdvisor]) -> list[int]:
    """Both members report rounds of steps (each spent mostly in the trainer) until the trainer was resized; the
    capacities it got. The trainer's registration is fire and forget: a round before it lands is not pushed."""
    step = [0]

    def resized() -> list[int]:
        for advisor in advisors:
            advisor.advise(StepObservation("-", step[0], 2, 4, 400, 1.0, sample_time_s=0.1, train_time_s=0.8))
        step[0] += 1
        return ray.get(trainer.capacities.remote(), timeout=TIMEOUT_S)  # pyright: ignore[reportAttributeAccessIssue]

    return wait_for(resized, timeout_s=60, what="the pooled capacity to reach the shared trainer", poll_s=0.1)


@pytest.mark.extended  # real Ray, 6-9 s: the coalescer's capacity has default-tier unit tests
def test_the_pooled_capacity_reaches_the_trainer_and_limits_its_batches(ray_4cpu_4gpu, tmp_path):
    campaign = f"bp-st-{uuid.uuid4().hex[:6]}"
    bp = start_backpressure_actor(campaign, NS, BackPressureSettings(enabled=True, pooled_warmup_rounds=4),
                                  log_path=tmp_path)
    name = trainer_name(campaign, ray.get_runtime_context().get_node_id())
    spec = TrainerSpec(model="builtin:tiny", layout=settings_from_config(_config(1)).lora, threads=1, window_s=2.0)
    trainer = start_shared_trainer(spec, name=name, namespace=NS, members=2, campaign_dir=tmp_path,
                                   node_id=ray.get_runtime_context().get_node_id(), num_gpus=0,
                                   backpressure=backpressure_name(campaign))
    try:
        advisors = [RemoteAdvisor(bp, run, name, timeout_s=TIMEOUT_S, trains_at_resource=True) for run in ("a", "b")]
        capacities = _observe_until_resized(trainer, advisors)
        assert capacities[0] == 1  # the pooled sweep starts at one member per batched step
        snapshot = ray.get(bp.snapshot.remote(), timeout=TIMEOUT_S)
        pooled = snapshot["pools"][name]["capacity"]
        assert snapshot["runs"]["a"]["bp_capacity"] == pooled  # the run's metrics row carries the trainer's capacity
        wait_for(lambda: ray.get(trainer.capacities.remote(), timeout=TIMEOUT_S)[-1] == pooled, timeout_s=30,  # pyright: ignore[reportAttributeAccessIssue]
                 what="the trainer to hold the pooled capacity")
        ray.get(trainer.resize.remote(1), timeout=TIMEOUT_S)  # pin it: the sweep may have moved on to 2
        _two_members_step_together(trainer, tmp_path)
        figures = ray.get(trainer.figures.remote(), timeout=TIMEOUT_S)
        # two members stepping at once within a 2 s window: one member per batched step (unlimited: one step of 2)
        assert figures["capacity"] == 1.0 and figures["steps"] == 4.0 and figures["mean_batch_runs"] == 1.0
    finally:
        ray.kill(trainer, no_restart=True)
        ray.kill(bp, no_restart=True)
    for run, seed, first_batch in (("a", 1, 10), ("b", 2, 20)):  # the batch a run went in does not change it
        assert _solo_difference(tmp_path, run, seed, first_batch) < 1e-5


def _two_members_step_together(trainer: object, directory: Path) -> None:
    """Members a and b each take two steps at once, as two trials do, and save their checkpoints."""
    with member_policy(_config(1), trainer, "a", timeout_s=TIMEOUT_S) as a, \
            member_policy(_config(2), trainer, "b", timeout_s=TIMEOUT_S) as b:
        def steps(backend: TrainBackend, seed: int) -> None:
            for step in range(2):
                backend.train_step(_batch(seed + step), lr=1e-2, weight_decay=0.0)

        with ThreadPoolExecutor(2) as pool:
            for future in [pool.submit(steps, a.backend, 10), pool.submit(steps, b.backend, 20)]:
                future.result(timeout=TIMEOUT_S)
        for run, policy in (("a", a), ("b", b)):
            (directory / run).mkdir()
            policy.backend.save_checkpoint(directory / run)


def _solo_difference(directory: Path, run: str, seed: int, first_batch: int) -> float:
    """The largest difference between the run's adapter in `directory` and the same run trained alone."""
    solo = build_local_policy(_config(seed), device="cpu").backend
    for step in range(2):
        solo.train_step(_batch(first_batch + step), lr=1e-2, weight_decay=0.0)
    (directory / f"{run}-solo").mkdir()
    solo.save_checkpoint(directory / f"{run}-solo")
    got, want = (load_file(str(directory / d / "adapter" / "adapter_model.safetensors")) for d in (run, f"{run}-solo"))
    assert got.keys() == want.keys()
    return max(float((got[n] - want[n]).abs().max()) for n in want)


def _watch_capacities(name: str, namespace: str, seen: list[list[int]], done: threading.Event) -> None:
    """Polls the campaign's trainer for the capacities back pressure set until the campaign ends (it kills the
    trainer then); keeps the latest list in `seen`."""
    deadline = time.monotonic() + 600
    while not done.is_set() and time.monotonic() < deadline:
        try:
            trainer = ray.get_actor(name, namespace=namespace)
            seen.append(ray.get(trainer.capacities.remote(), timeout=30))
        except Exception:  # noqa: BLE001 - not started yet, or already ended with the campaign
            pass
        time.sleep(0.5)


@pytest.mark.extended  # a two-run campaign on shared cores: about a minute
@pytest.mark.timeout(900)
def test_a_shared_trainer_campaign_with_back_pressure_steers_its_trainer(ray_4cpu_4gpu, tmp_path):
    from retrain_ray.campaign.plan import actor_scope

    name = "shared-bp"
    toml = write_campaign(
        tmp_path / f"{name}.toml", model={"finetune": "lora", "lora_rank": 4}, backend={"devices": "cpu"},
        training={"batch_size": 2, "group_size": 4, "max_tokens": 4, "lr": 3e-3},
        reward={"type": "custom", "custom_module": "operator:lt"}, algorithm=GRPO,
        backpressure={"enabled": True}, logging={"log_dir": f"{tmp_path}/logs/x"},
        campaign={"name": name, "seeds": [1], "max_steps": 6, "parallel": True, "max_workers": 2,
                  "shared_trainer": True},
        conditions=[GRPO, {"advantage_mode": "maxrl", "transform_mode": "none"}])
    cdir = tmp_path / "campaigns" / name
    trainer = trainer_name(actor_scope(name, cdir), ray.get_runtime_context().get_node_id())
    seen: list[list[int]] = []
    done = threading.Event()
    watcher = threading.Thread(target=_watch_capacities, daemon=True,
                               args=(trainer, ray.get_runtime_context().namespace, seen, done))
    watcher.start()
    try:
        results = Campaign.from_toml(toml, root=tmp_path / "campaigns").run(progress=False)
    finally:
        done.set()
        watcher.join(timeout=60)
    manifest = json.loads((cdir / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["completed"] * 2
    capacities = max(seen, key=len, default=[])
    assert capacities and capacities[0] == 1, f"back pressure never resized the trainer: {seen[-3:]}"
    log = read_decision_log(cdir / "backpressure.arrows").to_pandas()
    steered = log[log["resource"] == trainer]
    assert len(steered) == 12 and set(steered["capacity"].dropna()) >= {1}  # every step pooled under the trainer
    for run in results.get_dataframe()["run_name"]:  # each step's row carries the capacity (in its extras)
        rows = pq.read_table(cdir / "runs" / run / "metrics.parquet").to_pydict()
        assert rows["step"] == list(range(6))
        assert all(dict(extras)["bp_capacity"] in capacities for extras in rows["extras"])
