"""The campaign's control plane: handles of its shared control actors, handed to every trial.

The driver starts one throttle per shared endpoint the config uses (the remote training API when
`[backend] backend = "tinker"`, capacity `[backend].max_concurrent`; a shared inference server when
`[inference] engine` is an HTTP engine, capacity `[inference].max_concurrent`) and the back-pressure
actor when `[backpressure].enabled`. The back-pressure actor gets each throttle, so its pooled fit can
set the endpoint's capacity near the pooled p*. A trial turns the handles into per-run clients.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast

import ray
from ray import ObjectRef

from retrain_ray.actors.backpressure import RemoteAdvisor, start_backpressure_actor
from retrain_ray.actors.throttle import start_throttle
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

    def throttle_for(self, run_name: str) -> ThrottleClient | None:
        handle = self.throttles.get(self.endpoint)
        if handle is None:
            return None
        return ThrottleClient(handle, run_name, timeout_s=self.timeout_s, lease_ttl_s=self.lease_ttl_s)

    def advisor_for(self, run_name: str) -> RemoteAdvisor | None:
        if self.backpressure is None:
            return None
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
