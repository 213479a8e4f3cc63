"""Checks of `[campaign.adaptive]` that need more than the section itself: its rungs against the campaign's
steps and checkpoints, and its metric against the columns runs log. Used when the config loads
(config/validate.py) and by the adaptive plan (campaign/adaptive/plan.py)."""

from __future__ import annotations

from retrain_ray.config.errors import did_you_mean

EVAL_COLUMNS = ("eval_mean_reward", "eval_correct_rate")


def rung_problem(rungs: list[int], max_steps: int, save_every: int) -> tuple[str, str] | None:
    """(what is wrong, the fix) with the rungs of a campaign of `max_steps` steps, or None."""
    late = [r for r in rungs if r > max_steps]
    if late:
        return (f"rungs {late} lie past [campaign].max_steps = {max_steps}",
                f"give steps from 1 to {max_steps}, or raise [campaign].max_steps")
    off = [r for r in rungs if r != max_steps and (save_every <= 0 or r % save_every)]
    if off:
        return (f"rungs {off} are not steps at which runs checkpoint ([training].save_every = {save_every}): a run "
                "reports to the campaign only with its checkpoints",
                f"use multiples of save_every or the last step {max_steps}, or set save_every to divide every rung")
    return None


def metric_problem(metric: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) when `metric` is no numeric column the runs log, or None."""
    # deferred: pyarrow and the log schemas load only for a config that has [campaign.adaptive]
    import pyarrow as pa

    from retrain_ray.logs.schemas import METRICS_SCHEMA  # deferred: imports pyarrow

    numeric = [f.name for f in METRICS_SCHEMA if pa.types.is_floating(f.type) or pa.types.is_integer(f.type)]
    known = [n for n in numeric if n != "step"] + list(EVAL_COLUMNS)
    if metric in known:
        return None
    return (f"no logged column is called {metric!r}",
            f"use a column of the metrics log (mean_reward, correct_rate, loss, ...) or eval_correct_rate "
            f"{did_you_mean(metric, known)}".rstrip())
