"""Reading a campaign back from its directory: `CampaignResults` (tables, statistics, plots), the
report, the status matrix and the live view. Nothing here needs Ray: it reads `manifest.json`
(`retrain_ray.logs.manifest`) and the recorder's Arrow logs.

Names are imported lazily (PEP 562), so `import retrain_ray.results` loads neither pandas nor matplotlib.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports on first use
    from retrain_ray.results.campaign_results import CampaignResults, RunError, RunResult

_EXPORTS = {"CampaignResults": "campaign_results", "RunResult": "campaign_results", "RunError": "campaign_results"}

__all__ = ["CampaignResults", "RunError", "RunResult"]


def __getattr__(name: str) -> object:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'retrain_ray.results' has no attribute {name!r}")
    return getattr(importlib.import_module(f"retrain_ray.results.{_EXPORTS[name]}"), name)
