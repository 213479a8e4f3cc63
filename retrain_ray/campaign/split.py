"""Split placement for a trial: an InferenceActor and a TrainerActor on the trial's GPU bundles.

For the cpu and gpu placements the run builds its own engine and backend in the trial process, so
`split_policy` yields None. For split placement it starts the two actors pinned to bundles 1 and 2
of the trial's placement group, yields remote proxies `(engine, backend, tokenizer)` for
`train_run(policy=...)`, and kills the actors when the run ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def split_policy(ctx: Any, plan: Any) -> Iterator[tuple[Any, Any, Any] | None]:
    if plan.placement is None or plan.placement.mode != "split":
        yield None
        return
    from retrain_ray.actors.run_actors import start_split_actors, stop_split_actors

    actors = start_split_actors(plan.config, name=f"{ctx.campaign}/{plan.run_name}",
                                namespace=ctx.namespace, timeout_s=ctx.timeout_s)
    try:
        yield actors.policy()
    finally:
        stop_split_actors(actors)
