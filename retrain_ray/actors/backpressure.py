"""BackPressureActor: the campaign's central back-pressure controller, hosted in Ray (DESIGN decision 4).

A thin async wrapper: per run it hosts a `LocalAdvisor` (USL controller with the original's semantics
and the trainer's application rules, so the returned Decision's `recommended_batch_size` is the batch
size for the run's next step); per shared resource a `PooledController` (see backpressure/pooled.py).
When a throttle actor is registered for a resource, every change of the pooled capacity is pushed to
it with `throttle.resize.remote(capacity)` (pooled mode only). A shared trainer (actors/shared_trainer.py)
registers itself the same way, its resource named after it: its capacity is the most members per batched step. Every observation and its decision go
to `backpressure.arrows` (Arrow IPC stream, flushed per row), and `ray.util.metrics` gauges export
p*, sigma, kappa, throughput and utilization per run and per pool.

One actor per campaign, named "<campaign>/backpressure" in the caller's namespace, `num_cpus=0`, high
`max_concurrency`, created with `get_if_exists=True` and not detached. `RemoteAdvisor` is the client
each run gets: it implements BackPressureAdvisor with a timeout; on timeout it logs a warning and holds.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any

import ray
import ray.exceptions
from ray.util.metrics import Gauge

from retrain_ray.actors.restarts import CONTROL_RESTARTS, record_restart
from retrain_ray.actors.throttle_support import ascii_tags, throttle_name
from retrain_ray.actors.worker_env import SERVICE_RUNTIME_ENV
from retrain_ray.backpressure.advisor import LocalAdvisor
from retrain_ray.backpressure.arrow_log import DecisionLog, free_log_path
from retrain_ray.backpressure.pooled import PooledController, PooledDecision
from retrain_ray.backpressure.settings import BackPressureSettings
from retrain_ray.backpressure.types import Decision, StepObservation, default_decision

__all__ = ["BackPressureActor", "RemoteAdvisor", "backpressure_name", "start_backpressure_actor"]

log = logging.getLogger(__name__)

MAX_CONCURRENCY = 1000
POOL_RUN_TAG = "__pool__"


def backpressure_name(campaign: str) -> str:
    return f"{campaign}/backpressure"


BP_GAUGES = ("p_star", "sigma", "kappa", "throughput", "utilization", "capacity")  # retrain_bp_<name>


class _Gauges:
    def __init__(self, campaign: str) -> None:
        keys = ("campaign", "run", "resource")
        self.campaign = campaign
        self.g = {n: Gauge(f"retrain_bp_{n}", description=f"back pressure {n}", tag_keys=keys)
                  for n in BP_GAUGES}

    def run(self, run_id: str, resource: str, d: Decision) -> None:
        tags = ascii_tags({"campaign": self.campaign, "run": run_id, "resource": resource})
        for name, v in (("p_star", d.p_star), ("sigma", d.sigma), ("kappa", d.kappa),
                        ("throughput", d.throughput), ("utilization", d.utilization)):
            self.g[name].set(float(v), tags=tags)

    def pool(self, pd: PooledDecision, throughput: float) -> None:
        tags = ascii_tags({"campaign": self.campaign, "run": POOL_RUN_TAG, "resource": pd.resource})
        for name, v in (("p_star", pd.p_star), ("sigma", pd.sigma), ("kappa", pd.kappa),
                        ("throughput", throughput), ("capacity", pd.capacity)):
            self.g[name].set(float(v), tags=tags)


@ray.remote(num_cpus=0, max_concurrency=MAX_CONCURRENCY, runtime_env=SERVICE_RUNTIME_ENV,  # pyright: ignore[reportCallIssue]  # ray's overloads omit max_concurrency
            max_restarts=CONTROL_RESTARTS, max_task_retries=-1)
class BackPressureActor:
    """Receives every run's step observations; per-run and pooled USL fits; logs and gauges.

    Restarted by Ray when it dies (`CONTROL_RESTARTS`), the calls in flight retried: its decision log goes on
    in a new segment (`free_log_path`), the throttles are found again by name, and the fits start again
    from the runs' next observations (the runs hold their batch size meanwhile). The restart is recorded
    for the driver to report (actors/restarts.py)."""

    def __init__(self, campaign: str, settings: BackPressureSettings, log_path: str | None = None) -> None:
        self._campaign = campaign
        self._settings = settings
        self._runs: dict[str, LocalAdvisor] = {}
        self._last: dict[str, Decision] = {}
        self._pools: dict[str, PooledController] = {}
        self._throttles: dict[str, Any] = {}
        self._log = DecisionLog(free_log_path(Path(log_path))) if log_path else None
        self._gauges = _Gauges(campaign)
        self._restarted = bool(ray.get_runtime_context().was_current_actor_reconstructed)
        if self._restarted and log_path:
            record_restart(Path(log_path), "back-pressure")  # the campaign directory

    def _throttle(self, resource: str) -> Any:
        """The throttle registered for `resource`; after a restart, found again by its name (an endpoint's
        throttle actor, or a shared trainer, whose resource is its own actor name)."""
        if resource not in self._throttles and self._restarted:
            self._throttles[resource] = self._find(throttle_name(self._campaign, resource)) or self._find(resource)
        return self._throttles.get(resource)

    @staticmethod
    def _find(name: str) -> Any:
        try:
            return ray.get_actor(name, namespace=ray.get_runtime_context().namespace)
        except ValueError:  # no such actor
            return None

    def _advisor(self, run_id: str) -> LocalAdvisor:
        if run_id not in self._runs:
            s = self._settings
            self._runs[run_id] = LocalAdvisor(s.controller(), s.enabled, s.min_batch_size, s.max_batch_size)
        return self._runs[run_id]

    def _pooled(self, obs: StepObservation) -> PooledDecision | None:
        if not (self._settings.pooled and obs.resource):
            return None
        pool = self._pools.get(obs.resource)
        if pool is None:
            pool = self._pools[obs.resource] = self._settings.pooled_controller(obs.resource)
        pd = pool.observe(obs)
        throttle = self._throttle(obs.resource)
        if pd.changed and throttle is not None:
            throttle.resize.remote(pd.capacity)  # fire and forget: the next change supersedes it
        self._gauges.pool(pd, sum(v.tokens_per_s for v in pool.runs.values()))
        return pd

    async def observe(self, obs: StepObservation) -> Decision:
        d = self._advisor(obs.run_id).advise(obs)
        pd = self._pooled(obs)
        if pd is not None:
            d = dataclasses.replace(d, pooled_p_star=pd.p_star, capacity=pd.capacity)
        self._last[obs.run_id] = d
        if self._log is not None:
            self._log.write(obs, d, pd)
        self._gauges.run(obs.run_id, obs.resource, d)
        return d

    async def initial_batch_size(self, run_id: str, batch_size: int, start_step: int = 0) -> int:
        return self._advisor(run_id).initial_batch_size(batch_size, start_step)

    async def state(self, run_id: str) -> dict[str, Any]:
        """The run's controller state (JSON-safe), for its checkpoint."""
        return self._advisor(run_id).state_dict()

    async def load_state(self, run_id: str, state: dict[str, Any]) -> None:
        self._advisor(run_id).load_state_dict(state)

    async def set_throttle(self, resource: str, throttle: Any) -> int | None:
        """Register the throttle of `resource`; pushes the current pooled capacity, if any."""
        self._throttles[resource] = throttle
        pool = self._pools.get(resource)
        if pool is not None and self._settings.pooled:
            throttle.resize.remote(pool.capacity)
            return pool.capacity
        return None

    async def snapshot(self) -> dict[str, Any]:
        return {
            "campaign": self._campaign,
            "runs": {r: d.to_metrics() for r, d in self._last.items()},
            "pools": {r: dataclasses.asdict(p.decision()) for r, p in self._pools.items()},
            "log_path": str(self._log.path) if self._log else None,
            "settings": dataclasses.asdict(self._settings),
        }

    async def pid(self) -> int:
        """The actor's process id (what a fault test or an operator's `kill` needs)."""
        return os.getpid()

    async def close(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def start_backpressure_actor(campaign: str, namespace: str, settings: BackPressureSettings,
                             log_path: str | Path | None = None) -> Any:
    """Create (or get, if it exists) the campaign's back-pressure actor; `log_path` is a directory."""
    return BackPressureActor.options(  # pyright: ignore[reportAttributeAccessIssue]  # an @ray.remote class
        name=backpressure_name(campaign), namespace=namespace, get_if_exists=True
    ).remote(campaign, settings, str(log_path) if log_path is not None else None)


class RemoteAdvisor:
    """BackPressureAdvisor over the campaign actor. Picklable (holds only the handle and names).

    `trains_at_resource`: the shared resource serves the run's training step (a shared trainer), not its
    sampling (an endpoint): the time the step spent there is its `train_time_s` (less its wait for the batched
    step, run/loop.py), sent as the observation's `sample_time_s` (the pooled fit's "time at the resource",
    backpressure/pooled.py)."""

    def __init__(self, actor_handle: Any, run_id: str, resource: str = "", timeout_s: float = 30.0, *,
                 trains_at_resource: bool = False) -> None:
        self.actor, self.run_id, self.resource = actor_handle, run_id, resource
        self.timeout_s = float(timeout_s)
        self.trains_at_resource = trains_at_resource

    def _get(self, ref: Any) -> Any:
        return ray.get(ref, timeout=self.timeout_s)

    def initial_batch_size(self, batch_size: int, start_step: int = 0) -> int:
        try:
            return int(self._get(self.actor.initial_batch_size.remote(self.run_id, batch_size, start_step)))
        except ray.exceptions.GetTimeoutError:
            log.warning("back-pressure actor did not answer in %.0f s; starting at batch size %d",
                        self.timeout_s, batch_size)
            return int(batch_size)

    def advise(self, obs: StepObservation) -> Decision:
        if obs.run_id != self.run_id or obs.resource != self.resource:
            obs = dataclasses.replace(obs, run_id=self.run_id, resource=self.resource)
        if self.trains_at_resource:
            obs = dataclasses.replace(obs, sample_time_s=obs.train_time_s)
        try:
            return self._get(self.actor.observe.remote(obs))
        except ray.exceptions.GetTimeoutError:
            log.warning("back-pressure actor did not answer in %.0f s (run %s, step %d): holding "
                        "batch size %d", self.timeout_s, self.run_id, obs.step, obs.batch_size)
            return default_decision(obs.batch_size, obs.group_size)

    def state_dict(self) -> dict[str, Any]:
        return self._get(self.actor.state.remote(self.run_id))

    def load_state_dict(self, d: dict[str, Any]) -> None:
        self._get(self.actor.load_state.remote(self.run_id, d))
