"""The Ray a campaign driver connects to, the Tune settings its driver runs with, and the alive nodes'
resources that placement plans against (`alive_node_resources`; the planning is campaign/capacity/placement.py).

`connect()` joins `address`, else RAY_ADDRESS, else starts a local Ray. A local Ray started without
the dashboard is lean: besides the GCS, the raylet and its two agents it starts no dashboard head
(with the dashboard off Ray still starts one serving only its usage-stats module, and `ray.init`
waits about a second for it to publish its address before it starts the raylet), no log monitor (it
streams worker output to drivers; a local campaign driver does not take it, `log_to_driver=False`)
and no autoscaler monitor (one machine, nothing to scale), and its dashboard agent listens on a free
port instead of the fixed 52365 (on a machine with other Rays it otherwise retries the bind for 3-4 s
before the raylet can finish starting). Each of those is a Python process importing much of Ray,
which on a small machine takes CPU from the driver while the campaign starts. Without the head, Ray's
state API and job submission (both served by it) are not available on that Ray; the campaign uses
neither, and `--dashboard` starts the full Ray.

It also starts the first trials' processes warm: Ray starts one worker process per CPU as soon as the
driver connects, and each imports what a trial imports (`preload`, campaign/preload.py) while the
driver starts the recorder and Tune. Tune gives its trials a runtime env of their own (environment
variables); without it a trial's env is the empty one of those processes, so Ray hands them to the
trials instead of starting new ones.

`connect()` also turns off what Tune's `fit()` does by default that a campaign does not use: its
CSV and TensorBoardX result loggers (the campaign records every row itself; TensorBoardX loads torch
into the driver, which costs seconds to import and seconds more at exit; the driver passes Tune's JSON
logger itself, which the ResultGrid `fit()` returns reads) and the usage tag of the callbacks passed
in, which imports every integration Tune knows (mlflow, wandb, comet, aim) to compare class names.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator, Sequence
from typing import cast

import ray
import ray._private.node as ray_node
import ray._private.parameter as ray_parameter

from retrain_ray.actors.worker_env import PRELOAD_ENV_VAR, PRELOAD_MODULE
from retrain_ray.campaign.observer import CampaignObserver

# Tune's experiment state is snapshotted every 2 s (`TUNE_GLOBAL_CHECKPOINT_S`, Tune's own default is
# 10 s or more) and copied to the campaign directory as often (experiment.STATE_SYNC_S), so a restore after
# a killed driver finds each run's checkpoint of about 2 s before the kill.
TUNE_ENV = {
    "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
    "TUNE_GLOBAL_CHECKPOINT_S": "2",
    "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
}


# What a trial imports before its run's first step: Tune's trainable, the trial and the run loop (torch)
TRIAL_MODULES = ("ray.tune.trainable.function_trainable", "retrain_ray.campaign.trial", "retrain_ray.run.train")


def trial_modules(*, peft: bool) -> list[str]:
    """The modules to preload, with peft (and with it transformers) when a run imports it
    (models/context.py `uses_peft`): a built-in model's LoRA is torch-only, and importing peft for it
    would only take CPU from the campaign's start."""
    return [*TRIAL_MODULES, *(["peft"] if peft else [])]


def _tune_env() -> None:
    """Tune's environment for a campaign driver (a value the user set wins)."""
    for key, value in TUNE_ENV.items():
        os.environ.setdefault(key, value)


def _no_usage_tag() -> None:
    import ray.air._internal.usage as air_usage  # here: loads Tune, which the driver imports after Ray starts

    air_usage.tag_callbacks = _no_tag


def _no_tag(callbacks: object) -> bool:
    return False


def connect(address: str | None, *, dashboard: bool = False, preload: Sequence[str] = (),
            observer: CampaignObserver | None = None) -> bool:
    """Connects to `address`, else RAY_ADDRESS, else starts a local Ray; True if this call started Ray.
    `preload`: modules the worker processes of a local Ray import as they start (see the module doc)."""
    _tune_env()
    started = False if ray.is_initialized() else _init(address, dashboard=dashboard, preload=preload,
                                                        observer=observer or CampaignObserver())
    _no_usage_tag()
    if started:
        _trials_in_the_workers_env()
    return started


def _init(address: str | None, *, dashboard: bool, preload: Sequence[str], observer: CampaignObserver) -> bool:
    target = address or os.environ.get("RAY_ADDRESS") or "local"
    if target != "local":
        ray.init(address=target, namespace="retrain-ray", log_to_driver=True)  # pyright: ignore[reportUnknownMemberType]
        observer.on_notice(f"connected to the Ray cluster at {target}")
        return False
    with contextlib.nullcontext() if dashboard else lean_local_ray(), _worker_env(PRELOAD_ENV_VAR, ",".join(preload)):
        ray.init(  # pyright: ignore[reportUnknownMemberType]
            address="local", namespace="retrain-ray", log_to_driver=False, include_dashboard=dashboard,
            _system_config=_warm_workers_config() if preload else None)
    return True


def _trials_in_the_workers_env() -> None:
    """Tune's trials get no runtime env of their own, so Ray can hand them the processes it started
    ahead. Tune gives them `PL_DISABLE_FORK` (for PyTorch Lightning, which no run uses) and copies of
    driver variables it knows (AWS credentials, RAY_TRAIN_*, ...): the workers of a local Ray started by
    this driver inherit its environment at `ray.init` anyway, variables included."""
    import ray.tune.execution.class_cache as tune_class_cache  # here: loads Tune

    tune_class_cache.DEFAULT_ENV_VARS.pop("PL_DISABLE_FORK", None)
    tune_class_cache.ENV_VARS_TO_PROPAGATE = set()  # pyright: ignore[reportAttributeAccessIssue]


def _warm_workers_config() -> dict[str, object]:
    """Ray's settings for warm trial processes: each worker process imports `PRELOAD_MODULE` as it
    starts, and an idle one is kept 60 s (Ray's default: 1 s) before Ray ends it for exceeding one
    worker per CPU. The recorder's process counts against that limit, so with the default Ray ended
    the processes it had started ahead while they were still importing, before Tune's trials came
    (seen at load 14-25), and the trials waited for new ones."""
    return {"preload_python_modules": [PRELOAD_MODULE], "idle_worker_killing_time_threshold_ms": 60_000}


@contextlib.contextmanager
def _worker_env(key: str, value: str) -> Generator[None]:
    """`key=value` in the environment of the Ray processes started inside (they inherit the driver's),
    not in the driver's after."""
    before = os.environ.get(key)
    os.environ[key] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


class _LeanParams(ray_parameter.RayParams):
    """RayParams of a local node without log monitor, autoscaler monitor or fixed agent port."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # pyright: ignore[reportArgumentType, reportUnknownMemberType]  # RayParams' own arguments, passed on
        self.include_log_monitor = False
        self.no_monitor = True
        self.dashboard_agent_listen_port = 0


def _no_api_server(node: object, **options: object) -> None:
    """Stands in for `Node.start_api_server`: no dashboard head (the node's dashboard URL stays None)."""


@contextlib.contextmanager
def lean_local_ray() -> Generator[None]:
    """While inside, a `ray.init()` that starts a local node starts it lean (see the module doc).

    `ray.init` builds its node's parameters with `ray._private.parameter.RayParams(...)`, which offers
    none of these three; they are set on the object it builds, for this call only. The node starts its
    dashboard head with `Node.start_api_server` whatever the parameters say; that is replaced, for this
    call only, by one that starts nothing.
    """
    params, api_server = ray_parameter.RayParams, ray_node.Node.start_api_server
    ray_parameter.RayParams = _LeanParams  # type: ignore[misc]
    ray_node.Node.start_api_server = _no_api_server  # type: ignore[method-assign]
    try:
        yield
    finally:
        ray_parameter.RayParams = params  # type: ignore[misc]
        ray_node.Node.start_api_server = api_server  # type: ignore[method-assign]


def alive_node_resources() -> list[dict[str, float]]:
    """Total resources of every alive node of the connected Ray cluster."""
    nodes = cast(list[dict[str, object]], ray.nodes())
    return [dict(cast(dict[str, float], n["Resources"])) for n in nodes if n.get("Alive")]
