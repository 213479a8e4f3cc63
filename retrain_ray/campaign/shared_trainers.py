"""The campaign side of `[campaign] shared_trainer = true`: where the shared trainers go and which one a run uses.

The driver starts one shared trainer actor per alive node (one per GPU of a node where the runs train on GPUs:
the trainer takes the GPU, the member trials take none), each pinned to its node and named under the campaign's
`actor_scope` (actors/shared_trainer.py). A trial uses a trainer of its own node, so the checkpoint directories
it names are the trainer's too; among a node's trainers the run's name picks one, the same one on every retry.
The member runs' trials hold no model, so a shared campaign's runs are planned on CPU (`member_plans`).
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

import ray

from retrain_ray.actors.backpressure import backpressure_name

if TYPE_CHECKING:
    from retrain_ray.actors.shared_trainer import TrainerSpec
    from retrain_ray.campaign.plan import CampaignPlan, RunPlan

@dataclasses.dataclass(frozen=True)
class TrainerSlot:
    """One shared trainer to start: its node, its GPU (0: CPU) and its name."""

    node_id: str
    slot: int
    num_gpus: float


# A member trial's CPU reservation when `cpus_per_run` is not set: it tokenizes, scores and logs, while the
# trainer actor (which reserves none: it runs on the members' share) does the model's work.
SHARED_MEMBER_CPUS = 0.1


def member_plans(runs: Sequence[RunPlan], *, shared: bool) -> list[RunPlan]:
    """The runs of a shared campaign as their trials run them: on CPU, holding no model (the trainer does);
    the runs as they are when the campaign shares no trainer."""
    if not shared:
        return list(runs)
    return [dataclasses.replace(r, devices="cpu", in_process=True, gpu_share=1.0) for r in runs]


def trains_on_gpu(plan: CampaignPlan) -> bool:
    """Whether the members' own configs ask for a GPU: their shared trainers then take one each."""
    return any(r.config.backend.devices.strip().lower().startswith("gpu") for r in plan.all_runs)


def trainer_slots(nodes: Sequence[Mapping[str, object]], *, gpus: bool) -> list[TrainerSlot]:
    """One trainer per alive node with CPUs, or per GPU of each node with GPUs when the runs train on GPUs
    (`nodes`: `ray.nodes()` entries)."""
    slots: list[TrainerSlot] = []
    for node in nodes:
        resources = cast("Mapping[str, float]", node.get("Resources") or {})
        if not node.get("Alive") or resources.get("CPU", 0) <= 0:
            continue
        count = int(resources.get("GPU", 0)) if gpus else 0
        node_id = str(node["NodeID"])
        slots += [TrainerSlot(node_id, k, 1.0) for k in range(count)] or [TrainerSlot(node_id, 0, 0.0)]
    return slots


def trainer_spec(plan: CampaignPlan, *, gpu: bool) -> TrainerSpec:
    """The trainer of the plan's members: their common model, LoRA layout and dtype (checks/shared_trainer.py
    refused members that differ in them)."""
    # deferred: loads torch, which the driver imports only for a campaign that shares a trainer
    from retrain_ray.actors.shared_trainer import TrainerSpec
    from retrain_ray.backends.local.policy import settings_from_config

    first = plan.all_runs[0].config
    settings = settings_from_config(first)
    return TrainerSpec(model=first.model.model, layout=settings.lora, dtype=settings.dtype,
                       device="cuda" if gpu else "cpu")


def start_shared_trainers(plan: CampaignPlan, *, namespace: str, backpressure: bool = False
                          ) -> dict[str, tuple[object, ...]]:
    """Starts the campaign's shared trainers, each registered with the campaign's back-pressure actor (when
    `backpressure`) as the throttle of its own resource; node id -> its trainers' handles (empty when the plan
    shares none)."""
    if not plan.shared_trainer or not plan.all_runs:
        return {}
    # deferred: loads torch, which the driver imports only for a campaign that shares a trainer
    from retrain_ray.actors.shared_trainer import start_shared_trainer, trainer_name

    gpus = trains_on_gpu(plan)
    members = max(1, plan.schedule.max_concurrent)
    trainers: dict[str, list[object]] = {}
    for slot in trainer_slots(cast("list[dict[str, object]]", ray.nodes()), gpus=gpus):
        spec = trainer_spec(plan, gpu=slot.num_gpus > 0)
        handle = start_shared_trainer(spec, name=trainer_name(plan.actor_scope, slot.node_id, slot.slot),
                                      namespace=namespace, node_id=slot.node_id, num_gpus=slot.num_gpus,
                                      members=members, campaign_dir=plan.campaign_dir, backpressure=backpressure_name(plan.actor_scope) if backpressure else "")
        trainers.setdefault(slot.node_id, []).append(handle)
    return {node: tuple(handles) for node, handles in trainers.items()}


def trainer_for(trainers: Mapping[str, Sequence[object]], run_name: str, node_id: str) -> object:
    """The shared trainer of a run on `node_id`: one of that node's, picked by the run's name."""
    slot = trainer_slot(trainers, run_name, node_id)  # first: it says what to do when the node has none
    return trainers[node_id][slot]


def trainer_slot(trainers: Mapping[str, Sequence[object]], run_name: str, node_id: str) -> int:
    """Which of `node_id`'s trainers the run uses (the same on every retry)."""
    handles = trainers.get(node_id)
    if not handles:
        raise RuntimeError(f"run {run_name}: no shared trainer on node {node_id} (the driver started them on "
                           f"{sorted(trainers)}); a node added after the campaign started has none: restart the "
                           "campaign (it resumes) to start one there")
    return zlib.crc32(run_name.encode()) % len(handles)


def trainer_resource(trainers: Mapping[str, Sequence[object]], scope: str, run_name: str, node_id: str) -> str:
    """The back-pressure resource of the run's shared trainer: the trainer's actor name."""
    # deferred: loads torch, which the driver imports only for a campaign that shares a trainer
    from retrain_ray.actors.shared_trainer import trainer_name

    return trainer_name(scope, node_id, trainer_slot(trainers, run_name, node_id))
