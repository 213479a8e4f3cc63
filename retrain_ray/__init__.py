"""retrain-ray: Ray-distributed campaign orchestrator for RLVR runs on language models.

Public API (imported lazily, so `import retrain_ray` stays cheap):

    from retrain_ray import Campaign, load_config
    results = Campaign.from_toml("configs/smoke-campaign.toml").run()
    results.summary(by="condition")
"""

from __future__ import annotations

import importlib
from typing import Any

from retrain_ray.util.config_hooks import ConfigCheck, register_config_check

__version__ = "0.1.0"

_EXPORTS = {
    "Campaign": "retrain_ray.campaign",
    "CampaignError": "retrain_ray.campaign",
    "CampaignResults": "retrain_ray.results",
    "RetrainConfig": "retrain_ray.config",
    "ConfigError": "retrain_ray.config",
    "load_config": "retrain_ray.config",
    "train_run": "retrain_ray.run.train",
    "RunOutcome": "retrain_ray.run.types",
    "compute_group_advantages": "retrain_ray.run.plugin_modes",
    "USLController": "retrain_ray.backpressure",
}

__all__ = ["__version__", *_EXPORTS]


def _config_issues(cfg: Any) -> list[Any]:
    # deferred: the check pass loads pydantic and the component registries; `import retrain_ray` stays cheap
    from retrain_ray.checks.rules import collect_issues

    return collect_issues(cfg)


def _config_warnings(cfg: Any) -> list[str]:
    # deferred: as above
    from retrain_ray.checks.rules import collect_warnings

    return collect_warnings(cfg)


register_config_check(ConfigCheck(_config_issues, _config_warnings))


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'retrain_ray' has no attribute {name!r}")
