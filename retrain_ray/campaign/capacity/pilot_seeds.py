"""`explain --calibrate DIR --detect D [--power P]`: how many seeds a difference of D needs, from the
seed-to-seed spread the pilot's campaigns measured (results/seeds_needed.py). A run's value is what
the campaign compares: its adaptive metric over its window, else mean_reward over the last
`SIGNIFICANCE_WINDOW` steps (as `results`); the test level is the campaign's adaptive alpha, else 0.05.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import JsonValue

from retrain_ray.config.campaign_schema import CampaignSection
from retrain_ray.logs.manifest import MANIFEST
from retrain_ray.results.campaign_results import SIGNIFICANCE_WINDOW, CampaignResults
from retrain_ray.results.seeds_needed import seeds_needed

DEFAULT_METRIC = "mean_reward"
DEFAULT_ALPHA = 0.05


def pilot_campaigns(directory: Path) -> list[Path]:
    """The campaign directories of a pilot: DIR itself when it holds a manifest, else those one level below."""
    if (directory / MANIFEST).is_file():
        return [directory]
    return sorted(p.parent for p in directory.glob(f"*/{MANIFEST}"))


def pilot_values(directory: Path, metric: str, window: int) -> dict[str, list[float]]:
    """Per condition, one value per finished pilot run (`CampaignResults.run_values`), over all its campaigns."""
    values: dict[str, list[float]] = {}
    for campaign_dir in pilot_campaigns(directory):
        for condition, runs in CampaignResults.from_dir(campaign_dir).run_values(metric, window=window).items():
            values.setdefault(condition, []).extend(runs)
    return values


def seeds_for_difference(calibrate: str, campaign: CampaignSection, detect: float,
                         power: float) -> dict[str, JsonValue]:
    """What explain states: the spread and the seeds needed (`text`), or why the pilot cannot tell (`error`)."""
    adaptive = campaign.adaptive
    metric = adaptive.metric if adaptive else DEFAULT_METRIC
    window = int(adaptive.window) if adaptive else SIGNIFICANCE_WINDOW
    alpha = float(adaptive.alpha) if adaptive else DEFAULT_ALPHA
    values = pilot_values(Path(calibrate), metric, window)
    out: dict[str, JsonValue] = {"metric": metric, "window": window, "detect": detect, "alpha": alpha, "power": power,
                                 "pilot_seeds": {c: len(v) for c, v in values.items()}}
    few = {c: len(v) for c, v in values.items() if len(v) < 2}
    if not values or few:
        counts = ", ".join(f"{c}: {n}" for c, n in few.items()) or f"no finished run logs {metric}"
        out["error"] = (f"seeds needed: the pilot in {calibrate} has fewer than 2 seeds per condition ({counts}); "
                        f"the seed-to-seed spread needs 2 or more finished seeds of each condition: run the pilot "
                        "with [campaign] seeds = [1, 2] or more")
        return out
    needed = seeds_needed(values, detect, alpha=alpha, power=power)
    out.update(spread=needed.spread.pooled, seeds_per_condition=needed.seeds_per_condition,
               text=f"seeds needed ({metric}, mean of the last {window} steps): {needed.describe()}")
    return out
