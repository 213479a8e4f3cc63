"""The campaign's control plane: handles of its shared control actors, handed to every trial.

The driver starts the throttle (one per shared endpoint) and the back-pressure actor when the
config needs them, and packs their handles here; a trial turns them into per-run clients
(`ThrottleClient`, `RemoteAdvisor`). With neither, runs get no throttle and their own local advisor.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ControlPlane:
    """Actor handles (picklable) of the campaign's control actors; None where not started."""

    throttle: Any | None = None
    backpressure: Any | None = None
    endpoint: str = ""
    timeout_s: float = 600.0
    lease_ttl_s: float = 30.0

    def throttle_for(self, run_name: str) -> Any | None:
        if self.throttle is None:
            return None
        from retrain_ray.throttle.client import ThrottleClient

        return ThrottleClient(self.throttle, run_name, timeout_s=self.timeout_s)

    def advisor_for(self, run_name: str) -> Any | None:
        if self.backpressure is None:
            return None
        from retrain_ray.actors.backpressure import RemoteAdvisor

        return RemoteAdvisor(self.backpressure, run_name, self.endpoint or "local", timeout_s=self.timeout_s)


def start_control_plane(config: Any, campaign: str, *, namespace: str) -> ControlPlane:
    """Starts the control actors the config asks for: a throttle for a shared remote endpoint
    (backend tinker), a back-pressure actor when `[backpressure].enabled`."""
    throttle = backpressure = None
    endpoint = ""
    if config.backend.backend == "tinker":
        from retrain_ray.actors.throttle import start_throttle

        endpoint = "tinker"
        throttle = start_throttle(
            campaign, endpoint, config.backend.max_concurrent, namespace=namespace,
            lease_ttl_s=config.backend.lease_ttl_s,
        )
    if config.backpressure.enabled:
        from retrain_ray.actors.backpressure import start_backpressure_actor

        backpressure = start_backpressure_actor(campaign, namespace, config.backpressure)
    return ControlPlane(
        throttle=throttle, backpressure=backpressure, endpoint=endpoint,
        timeout_s=config.backend.acquire_timeout_s, lease_ttl_s=config.backend.lease_ttl_s,
    )
