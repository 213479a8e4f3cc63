"""Campaigns on Ray: `Campaign(...).run()` runs conditions x seeds as one Ray Tune trial per run.

Names are imported lazily (PEP 562): a trial process imports `retrain_ray.campaign.trial` and never
needs the driver (`Campaign`, with Tune's driver side and Parquet export).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.campaign.driver import Campaign
    from retrain_ray.campaign.plan import CampaignError
    from retrain_ray.results import CampaignResults, RunResult

# module of each name; reading results back lives in retrain_ray.results (re-exported here, public API)
_EXPORTS = {"Campaign": "retrain_ray.campaign.driver", "CampaignError": "retrain_ray.campaign.plan",
            "CampaignResults": "retrain_ray.results", "RunResult": "retrain_ray.results"}

__all__ = ["Campaign", "CampaignError", "CampaignResults", "RunResult"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrain_ray.campaign' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
