"""Which pilot warm starts measure the planned one's length (issue 34, item 7).

With `sft_target_correct_rate` set, a warm start runs until its probe reaches the target or until its
`sft_warmup_steps`, whichever comes first. A pilot's warm start that stopped at the pilot's own (smaller)
`sft_warmup_steps` says only that the target had not been reached by then: a 2-step pilot warm start
made the estimate of a 100-step one 48 s. Such a pilot is not refused (its seconds per step, start-up
and teardown stay good figures); its warm-start length is not used: the run is estimated with the
planned warm start's full length, an upper bound, and a warning says so and how to measure it.
"""

from __future__ import annotations

from collections.abc import Sequence

from retrain_ray.campaign.capacity.calibration import RunFigures


def reached_target(run: RunFigures, target: float) -> bool:
    """The pilot run's warm start ended because its probe reached `target` (figures built without the
    probe, by hand, count as reached when RL followed)."""
    if not run.warm_start_ended or run.warm_start_capped:
        return False
    return run.warm_start_last_probe is None or run.warm_start_last_probe >= target


def capped_pilot_warnings(sft_warmup_steps: int, target: float, max_steps: int,
                          pilots: Sequence[RunFigures]) -> list[str]:
    """A warning when pilot warm starts ended at their own cap, shorter than the planned one."""
    cap = min(sft_warmup_steps, max_steps)
    if cap == 0 or target <= 0:
        return []
    capped = [r for r in pilots if r.warm_start_ended and not reached_target(r, target) and r.warm_start_steps < cap]
    if not capped:
        return []
    lengths = ", ".join(str(n) for n in sorted({r.warm_start_steps for r in capped}))
    return [f"warning: {len(capped)} pilot run(s) ended their warm start at their own sft_warmup_steps ({lengths} "
            f"steps) without reaching sft_target_correct_rate = {target}: that says nothing of when this campaign's "
            f"reaches it, so the estimate assumes the full {cap} warm-start steps (an upper bound); run the pilot with "
            f"sft_warmup_steps = {cap} to measure it"]
