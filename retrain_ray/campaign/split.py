"""Split placement for a trial: an InferenceActor and a TrainerActor on the trial's GPU bundles.

For the cpu and gpu placements the run builds its own engine and backend in the trial process, so
`split_policy` yields None. For split placement it starts the two actors pinned to bundles 1 and 2
of the trial's placement group, writes where they landed (node, pid, GPU ids Ray gave each) to
`<work_dir>/placement.json` (one entry per attempt), yields remote proxies `(engine, backend,
tokenizer)` for `train_run(policy=...)`, and kills the actors when the run ends.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.backends.types import Policy

if TYPE_CHECKING:
    from retrain_ray.actors.run_actors import SplitActors
    from retrain_ray.campaign.plan import RunPlan
    from retrain_ray.campaign.trial import TrialContext

PLACEMENT_FILE = "placement.json"


def _record_placement(work_dir: Path, actors: SplitActors) -> None:
    work_dir.mkdir(parents=True, exist_ok=True)
    path = work_dir / PLACEMENT_FILE
    attempts = cast("list[object]", json.loads(path.read_text())) if path.is_file() else []  # one entry per attempt
    attempts.append(actors.placements())
    path.write_text(json.dumps(attempts, indent=2))


@contextmanager
def split_policy(ctx: TrialContext, plan: RunPlan) -> Generator[Policy | None]:
    if ctx.control.engine is not None:  # the campaign's shared vLLM engine samples; the run trains here
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.actors.shared_vllm import shared_vllm_policy

        yield shared_vllm_policy(plan.config, ctx.control.engine, plan.run_name,
                                 throttle=ctx.control.throttle_for(plan.run_name), timeout_s=ctx.timeout_s)
        return
    if plan.placement is None or plan.placement.mode != "split":
        yield None
        return
    # deferred: loads torch, which importing this module does not need
    from retrain_ray.actors.run_actors import start_split_actors, stop_split_actors

    actors = start_split_actors(plan.config, name=f"{ctx.campaign}/{plan.run_name}",
                                namespace=ctx.namespace, timeout_s=ctx.timeout_s)
    try:
        _record_placement(Path(plan.work_dir), actors)
        yield actors.policy()
    finally:
        stop_split_actors(actors)
