"""A campaign run's files named relative to the driver's working directory, made absolute for its trial.

The user writes `sft_data_path = "data/sft.jsonl"` (or `[data] path`, `eval_path`) meaning the directory they start the campaign from (as
`retrain-ray train` reads it), but a trial runs in Ray Tune's trial directory: the relative path named no file
there and every run failed with "no such file" (found with configs/digit-chain-campaign.toml). The trial joins
such paths to the driver's working directory (`TrialContext.plugin_root`, where the config's plugins are
looked up too) before it checks, resumes or trains the run, so the run, its checkpoints and its resume check
all see the one absolute path. Absolute paths and `~` paths are left as written.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import cast

from pydantic import BaseModel

from retrain_ray.campaign.plan import RunPlan

DRIVER_RELATIVE_KEYS = {"training": ("sft_data_path", "sft_audit_path", "sft_token_audit_path"),
                        "data": ("path", "eval_path")}
"""The keys, by config section, naming a file the run reads."""


def _absolute(value: str, driver_dir: str) -> str:
    if not value or value.startswith("~") or Path(value).is_absolute():
        return value
    return str(Path(driver_dir) / value)


def with_driver_paths(plan: RunPlan, driver_dir: str) -> RunPlan:
    """`plan` with its relative `DRIVER_RELATIVE_KEYS` joined to `driver_dir` (the same plan when none is)."""
    sections: dict[str, BaseModel] = {}
    for name, keys in DRIVER_RELATIVE_KEYS.items():
        section = cast("BaseModel", getattr(plan.config, name))
        changed = {key: new for key in keys
                   if (new := _absolute(getattr(section, key), driver_dir)) != getattr(section, key)}
        if changed:
            sections[name] = section.model_copy(update=changed)
    if not sections:
        return plan
    return dataclasses.replace(plan, config=plan.config.model_copy(update=sections))
