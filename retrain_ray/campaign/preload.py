"""Imported by every worker process of a campaign's local Ray as it starts (Ray's
`preload_python_modules`, set by campaign/local_ray.py): a trial's heavy imports (Ray Tune's trainable,
torch, the run loop, and peft and transformers for LoRA on a model that is not built in) run in the
worker processes Ray starts ahead, one per CPU, as soon as the driver connects, while the driver is
still starting the recorder and Tune. The first runs' trials get these processes (their runtime env is
the same empty one), warm.

The modules come from `PRELOAD_ENV_VAR` (comma-separated), which the driver sets while it starts the
local Ray. A service actor's process (actors/worker_env.py) imports none of them.
"""

from __future__ import annotations

import importlib
import logging
import os

from retrain_ray.actors.worker_env import PRELOAD_ENV_VAR, SERVICE_ENV_VAR
from retrain_ray.compat import provide_original_names

PRELOADED: list[str] = []  # what this process imported here (the trial reports whether it found any)
log = logging.getLogger(__name__)


def preload() -> list[str]:
    if os.environ.get(SERVICE_ENV_VAR) == "1":
        return PRELOADED
    provide_original_names()  # plugins written for the original import `retrain.data`, ...
    for name in filter(None, os.environ.get(PRELOAD_ENV_VAR, "").split(",")):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001  # the trial imports it again and fails there, with its traceback
            log.warning("preloading %s failed: %s", name, exc)
            continue
        PRELOADED.append(name)
    return PRELOADED


preload()
