"""One run's connection to the remote training API: clients, throttle, retries, counters.

The backend (training) and the engine (sampling) share one `TinkerSession`: the training client
lives here, and so does the sampling client of the newest checkpoint. Every SDK call goes through
`call()`: it holds a throttle slot (`with throttle.hold():`), fires the call, waits on its future with
a timeout, and retries transient failures with exponential backoff (`retry.py`). Retries and samples
lost after every retry are counted and reported by `runtime_metrics()` as `tinker_retries` and
`tinker_failed_samples`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import TypeVar, Unpack

from retrain_ray.backends.tinker.client_types import (
    SamplingClient,
    SDKFuture,
    ServiceClient,
    sdk_service_client,
)
from retrain_ray.backends.tinker.options import TinkerOptions
from retrain_ray.backends.tinker.standin import StandinOptions, StandinServiceClient
from retrain_ray.engines.types import HoldsSlots
from retrain_ray.util.retry import RetryCounters, RetryPolicy, call_with_retry

T = TypeVar("T")


class NullThrottle:
    """Never waits. The default when a run shares the endpoint with no one."""

    @contextlib.contextmanager
    def hold(self) -> Generator[None, None, None]:
        yield None


def make_service_client(options: TinkerOptions, base_url: str, **standin_kwargs: Unpack[StandinOptions]) -> ServiceClient:
    """The official SDK's ServiceClient, or the local stand-in when `options.client == "standin"`."""
    if options.client == "standin":
        return StandinServiceClient(base_url=base_url or None, **standin_kwargs)
    try:
        # deferred: tinker is an optional extra, imported only when used
        import tinker
    except ImportError as err:
        raise ImportError(
            "backend 'tinker' needs the tinker SDK: pip install 'retrain-ray[tinker]'"
        ) from err
    return sdk_service_client(tinker.ServiceClient(base_url=base_url or None))


class TinkerSession:
    """Training client, current sampling client and the call discipline around both."""

    def __init__(
        self,
        service_client: ServiceClient,
        *,
        base_model: str,
        rank: int,
        throttle: HoldsSlots | None = None,
        options: TinkerOptions | None = None,
    ) -> None:
        self.options = options or TinkerOptions()
        self.throttle: HoldsSlots = throttle if throttle is not None else NullThrottle()
        self.policy = RetryPolicy(self.options.max_attempts, self.options.backoff_s)
        self.counters = RetryCounters()
        self.failed_samples = 0
        self.base_model = base_model
        self.service_client = service_client
        self.training_client = self.call(
            "create_lora_training_client",
            lambda: service_client.create_lora_training_client(base_model=base_model, rank=rank),
        )
        self.sampling_client: SamplingClient | None = None
        self.sampler_path = ""

    def call(self, what: str, fire: Callable[[], SDKFuture[T]], timeout_s: float | None = None, *,
             idempotent: bool = True) -> T:
        """`fire()` returns an SDK future; its result, under a throttle slot, with retries
        (`idempotent=False`: only retries that cannot run the call twice, see `call_with_retry`)."""
        timeout = timeout_s or self.options.call_timeout_s

        def attempt() -> T:
            with self.throttle.hold():
                return fire().result(timeout=timeout)

        return call_with_retry(attempt, what=f"tinker {what}", policy=self.policy, counters=self.counters,
                               idempotent=idempotent)

    def checkpoint(self, name: str) -> None:
        """Saves the trained weights server side and samples from them from now on."""
        self.sampling_client = self.call(
            f"save_weights_and_get_sampling_client({name!r})",
            lambda: self.training_client.save_weights_and_get_sampling_client(name=name),
        )
        self.sampler_path = name

    def runtime_metrics(self) -> dict[str, float]:
        return {
            "tinker_retries": float(self.counters.retries),
            "tinker_failed_samples": float(self.failed_samples),
        }
