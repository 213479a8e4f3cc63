"""Stagger: consecutive run starts are at least `stagger_seconds` apart, across the whole campaign.

The original parent process slept `stagger_seconds` between launches while filling free slots
(spec 5.2). Under Tune the trials start themselves, so each trial asks a small campaign actor for a
start slot at trial start and sleeps until it: slot = max(now, previous slot + stagger).
"""

from __future__ import annotations

import time
from typing import cast

import ray
from ray.actor import ActorHandle

from retrain_ray.actors.worker_env import SERVICE_RUNTIME_ENV


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
