"""The campaign's control plane: handles of its shared control actors, handed to every trial.

The driver starts one throttle per shared endpoint the config uses (the remote training API when
`[backend] backend = "tinker"`, capacity `[backend].max_concurrent`; a shared inference server when
`[inference] engine` is an HTTP engine, capacity `[inference].max_concurrent`) and the back-pressure
actor when `[backpressure].enabled`. The back-pressure actor gets each throttle, so its pooled fit can
set the endpoint's capacity near the pooled p*. A trial turns the handles into per-run clients.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import ray
from ray import ObjectRef
from ray.actor import ActorHandle

from retrain_ray.actors.backpressure import RemoteAdvisor, start_backpressure_actor
from retrain_ray.actors.throttle import start_throttle
from retrain_ray.actors.worker_env import SERVICE_RUNTIME_ENV
from retrain_ray.backends.registry import backend_spec, engine_spec
from retrain_ray.backpressure.settings import BackPressureSettings
from retrain_ray.campaign.capacity.packing import shared_engine_slot
from retrain_ray.throttle.client import ThrottleClient

if TYPE_CHECKING:
    from retrain_ray.config import RetrainConfig
    from retrain_ray.config.sections_runtime import InferenceSection
    from retrain_ray.config.sections_training import BackendSection


class _RemoteMethod(Protocol):
    def remote(self, *args: object) -> ObjectRef[object]: ...


class _BackPressureHandle(Protocol):
    """The back-pressure actor's method the control plane calls (actors/backpressure.py)."""

    set_throttle: _RemoteMethod



@dataclass(frozen=True)
class SharedEndpoint:
    """The shared endpoint a run calls and the concurrency the campaign allows it; name "" when none."""

    name: str = ""
    capacity: int = 0


def shared_endpoint(backend: BackendSection, inference: InferenceSection) -> SharedEndpoint:
    """The backend's throttled endpoint ("tinker": `[backend].max_concurrent`), else a shared inference
    server ("inference": `[inference].max_concurrent`), else none."""
    throttled = backend_spec(backend.backend).throttled_endpoint
    if throttled:
        return SharedEndpoint(throttled, backend.max_concurrent)
    if engine_spec(inference.engine).shared_server or inference.shared:
        return SharedEndpoint("inference", inference.max_concurrent)
    return SharedEndpoint()


@dataclass(frozen=True)
class ControlPlane:
    """Actor handles (picklable) of the campaign's control actors; empty where not started."""

    throttles: dict[str, object] = field(default_factory=dict[str, object])  # endpoint -> its throttle actor
    backpressure: object | None = None  # the back-pressure actor
    endpoint: str = ""
    timeout_s: float = 600.0
    lease_ttl_s: float = 30.0
    engine: object | None = None  # the campaign's shared vLLM actor (`[inference] shared = true`)
    # `[campaign] shared_trainer = true`: node id -> the shared trainer actors on it (campaign/shared_trainers.py)
    shared_trainers: dict[str, tuple[object, ...]] = field(default_factory=dict[str, tuple[object, ...]])

    def throttle_for(self, run_name: str) -> ThrottleClient | None:
        handle = self.throttles.get(self.endpoint)
        if handle is None:
            return None
        return ThrottleClient(handle, run_name, timeout_s=self.timeout_s, lease_ttl_s=self.lease_ttl_s)

    def advisor_for(self, run_name: str, trainer: str = "") -> RemoteAdvisor | None:
        """The run's back-pressure client: its steps pooled under the shared endpoint, or under `trainer` (the
        name of the shared trainer it is a member of), whose capacity is then the pooled fit's."""
        if self.backpressure is None:
            return None
        if trainer:
            return RemoteAdvisor(self.backpressure, run_name, trainer, timeout_s=self.timeout_s, trains_at_resource=True)
        return RemoteAdvisor(self.backpressure, run_name, self.endpoint, timeout_s=self.timeout_s)


def start_control_plane(config: RetrainConfig, campaign: str, *, namespace: str, campaign_dir: Path | None = None) -> ControlPlane:
    """Starts the throttle of the shared endpoint (if any) and the back-pressure actor (if enabled)."""
    endpoint = shared_endpoint(config.backend, config.inference)
    throttles: dict[str, object] = {}
    if endpoint.name:
        throttles[endpoint.name] = start_throttle(
            campaign, endpoint.name, endpoint.capacity, namespace=namespace,
            lease_ttl_s=config.backend.lease_ttl_s, campaign_dir=campaign_dir,
        )
    backpressure = None
    if config.backpressure.enabled:
        # the pooled capacity never exceeds the limit the user configured for the endpoint
        bounds = {"max_capacity": endpoint.capacity} if endpoint.name else {}
        settings = BackPressureSettings.from_config(config.backpressure, config.model, config.backend, **bounds)
        backpressure = _start_backpressure(settings, campaign, namespace, campaign_dir, throttles)
    engine = None
    if config.inference.shared:
        # deferred: loads torch, which importing this module does not need
        from retrain_ray.actors.shared_vllm import start_shared_engine

        engine_config, gpus = shared_engine_slot(config)
        engine = start_shared_engine(engine_config, campaign, namespace=namespace, num_gpus=gpus)
    return ControlPlane(
        throttles=throttles, backpressure=backpressure, endpoint=endpoint.name,
        timeout_s=config.backend.acquire_timeout_s, lease_ttl_s=config.backend.lease_ttl_s, engine=engine,
    )


def _start_backpressure(settings: BackPressureSettings, campaign: str, namespace: str, campaign_dir: Path | None,
                        throttles: dict[str, object]) -> object:
    actor = cast("_BackPressureHandle", start_backpressure_actor(campaign, namespace, settings, campaign_dir))
    for resource, handle in throttles.items():
        ray.get(actor.set_throttle.remote(resource, handle), timeout=60)
    return actor


# Stagger: consecutive run starts are at least `stagger_seconds` apart, across the whole campaign.
#
# The original parent process slept `stagger_seconds` between launches while filling free slots
# (spec 5.2). Under Tune the trials start themselves, so each trial asks a small campaign actor for a
# start slot at trial start and sleeps until it: slot = max(now, previous slot + stagger).
class StaggerClock:
    """Plain-Python slot arithmetic; `reserve(now)` returns how long the caller must wait."""

    def __init__(self, stagger_seconds: float) -> None:
        self.stagger_seconds = stagger_seconds
        self._last_slot: float | None = None

    def reserve(self, now: float) -> float:
        slot = now if self._last_slot is None else max(now, self._last_slot + self.stagger_seconds)
        self._last_slot = slot
        return slot - now


@ray.remote(num_cpus=0, max_concurrency=16, runtime_env=SERVICE_RUNTIME_ENV)  # pyright: ignore[reportCallIssue, reportUntypedClassDecorator]  # ray's overloads omit max_concurrency
class StartGate:
    def __init__(self, stagger_seconds: float) -> None:
        self._clock = StaggerClock(stagger_seconds)

    async def reserve(self) -> float:
        return self._clock.reserve(time.time())


def gate_name(campaign: str) -> str:
    return f"{campaign}/start_gate"


def start_gate(campaign: str, stagger_seconds: float, *, namespace: str) -> ActorHandle[object]:
    handle = StartGate.options(name=gate_name(campaign), namespace=namespace, get_if_exists=True).remote(  # pyright: ignore[reportAttributeAccessIssue, reportUnknownMemberType, reportUnknownVariableType]  # an @ray.remote class
        stagger_seconds
    )
    return cast("ActorHandle[object]", handle)


def wait_for_start_slot(campaign: str, namespace: str, *, timeout_s: float) -> float:
    """Sleeps until this trial's start slot; returns the seconds waited. No gate -> no wait."""
    try:
        gate = ray.get_actor(gate_name(campaign), namespace=namespace)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
    except ValueError:
        return 0.0
    delay = float(cast(float, ray.get(gate.reserve.remote(), timeout=timeout_s)))
    time.sleep(delay)
    return delay
