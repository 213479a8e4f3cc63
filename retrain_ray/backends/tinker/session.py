"""One run's connection to the remote training API: clients, throttle, retries, counters.

The backend (training) and the engine (sampling) share one `TinkerSession`: the training client
lives here, and so does the sampling client of the newest checkpoint. Every SDK call goes through
`call()`: it holds a throttle slot (`with throttle.hold():`), fires the call, waits on its future with
a timeout, and retries transient failures with exponential backoff (`retry.py`). Retries and samples
lost after every retry are counted and reported by `runtime_metrics()` as `tinker_retries` and
`tinker_failed_samples`.

The SDK client interface the tinker backend calls, as Protocols.

Both the official SDK's `tinker.ServiceClient` / `TrainingClient` / `SamplingClient` and the local
stand-in (`standin.py`) satisfy these; they cover only the methods and arguments our backend uses. The
SDK's objects enter through `sdk_service_client` (one cast: its futures are `BackcompatClientFuture`
subclasses whose keyword-rich signatures a type checker cannot match to these narrower Protocols).

SamplingEngine on the remote training API's sampling client (spec 1.8 `sample`, `checkpoint`).

`generate` fires one `sample(prompt=ModelInput.from_ints(ids), num_samples, SamplingParams(...))`
future per prompt, all before collecting any, then collects each with `sample_timeout_s`; the whole
round holds one throttle slot (the original held its slot for the entire call, too). Prompts whose
future failed transiently (502/503/504, timeout) are fired again in the next round after an
exponential backoff, up to `max_attempts` rounds. A prompt that still fails becomes, per
`[backend.options] on_sample_failure`, an error (default) or an empty group; either way it is counted
in `tinker_failed_samples`. The original always returned an empty group, silently.

Weights live on the server: `load_weights` takes only a version (empty `WeightUpdate.tensors`) and
calls `save_weights_and_get_sampling_client(f"step_{version}")`. Entropies are not available
(`None`), as in the original. Logprobs are whatever the service reports for the sampled tokens.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Generator
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeVar, Unpack, cast

from retrain_ray.backends.tinker.options import TinkerOptions
from retrain_ray.backends.tinker.standin import StandinOptions, StandinServiceClient
from retrain_ray.engines.types import HoldsSlots, SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.util.retry import RetryCounters, RetryPolicy, call_with_retry, is_transient

if TYPE_CHECKING:
    import tinker
    from tinker import types
    from tinker.types import SampleResponse
    from tinker.types import SamplingParams as SDKSamplingParams

    from retrain_ray.models import Tokenizer


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


T_co = TypeVar("T_co", covariant=True)


class SDKFuture(Protocol[T_co]):
    """An SDK call in flight: `.result(timeout)` waits for its value or raises its error."""

    def result(self, timeout: float | None = None) -> T_co: ...


class SamplingClient(Protocol):
    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams
    ) -> SDKFuture[types.SampleResponse]: ...


class TrainingClient(Protocol):
    def get_tokenizer(self) -> Tokenizer: ...

    def forward(self, data: list[types.Datum], loss_fn: types.LossFnType) -> SDKFuture[types.ForwardBackwardOutput]: ...

    def forward_backward(
        self, data: list[types.Datum], loss_fn: types.LossFnType
    ) -> SDKFuture[types.ForwardBackwardOutput]: ...

    def optim_step(self, optim_params: types.AdamParams) -> SDKFuture[types.OptimStepResponse]: ...

    def save_state(self, name: str) -> SDKFuture[types.SaveWeightsResponse]: ...

    def save_weights_for_sampler(self, name: str) -> SDKFuture[types.SaveWeightsForSamplerResponse]: ...

    def save_weights_and_get_sampling_client(self, name: str) -> SDKFuture[SamplingClient]: ...

    def load_state_with_optimizer(self, path: str) -> SDKFuture[types.LoadWeightsResponse]: ...


class ServiceClient(Protocol):
    def create_lora_training_client(self, base_model: str, rank: int) -> SDKFuture[TrainingClient]: ...


def sdk_service_client(client: tinker.ServiceClient) -> ServiceClient:
    """The official SDK's client as a `ServiceClient`: the one place its objects are cast."""
    return cast("ServiceClient", client)


log = logging.getLogger(__name__)


def _sdk_types() -> ModuleType:
    # deferred: tinker is an optional extra, imported only when used
    from tinker import types

    return types


def to_sample_results(response: SampleResponse) -> list[SampleResult]:
    """An SDK `SampleResponse` -> SampleResults (stop reason "stop" or "length")."""
    out: list[SampleResult] = []
    for seq in response.sequences:
        logprobs = seq.logprobs
        if logprobs is None or len(logprobs) != len(seq.tokens):
            raise ValueError("tinker returned a sequence without per-token logprobs; they are required for RL")
        finish = "stop" if seq.stop_reason == "stop" else "length"
        out.append(SampleResult(tuple(int(t) for t in seq.tokens), tuple(float(x) for x in logprobs), finish))
    return out


class TinkerEngine(WeightsVersion):
    """Samples from the newest server-side checkpoint of a `TinkerSession`."""

    def __init__(self, session: TinkerSession) -> None:
        self.session = session

    def load_weights(self, update: WeightUpdate) -> None:
        if update.tensors:
            raise ValueError(
                "the tinker engine samples from server-side weights; it cannot install local tensors "
                f"(got {len(update.tensors)}): pair it with the tinker backend, whose export is version-only"
            )
        self.session.checkpoint(f"step_{update.version}")
        self._version = update.version

    def generate(
        self, prompt_ids_P: list[list[int]], num_samples: int, params: SamplingParams
    ) -> list[list[SampleResult]]:
        if self.session.sampling_client is None:
            self.session.checkpoint(f"step_{self._version}")
        sdk_params = _sdk_types().SamplingParams(
            max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p
        )
        results: dict[int, list[SampleResult]] = {}
        pending = list(range(len(prompt_ids_P)))
        opts = self.session.options
        errors: dict[int, BaseException] = {}
        for attempt in range(1, opts.max_attempts + 1):
            errors = self._round(prompt_ids_P, pending, num_samples, sdk_params, results)
            pending = sorted(errors)
            if not pending:
                break
            if attempt < opts.max_attempts:
                self.session.counters.retries += len(pending)
                log.warning("tinker sample: %d prompt(s) failed transiently (attempt %d/%d), retrying",
                            len(pending), attempt, opts.max_attempts)
                time.sleep(self.session.policy.delay_s(attempt))
        if pending:
            self._fail(pending, errors, num_samples)
        return [results.get(i, []) for i in range(len(prompt_ids_P))]

    def _round(
        self, prompt_ids_P: list[list[int]], indices: list[int], num_samples: int, sdk_params: SDKSamplingParams,
        results: dict[int, list[SampleResult]],
    ) -> dict[int, BaseException]:
        """Fire every pending prompt, then collect; returns the transient errors by prompt index."""
        types, client = _sdk_types(), self.session.sampling_client
        if client is None:
            raise RuntimeError("tinker: no sampling client; the engine checkpoints before it samples")
        timeout = self.session.options.sample_timeout_s
        errors: dict[int, BaseException] = {}
        with self.session.throttle.hold():
            futures = {
                i: client.sample(
                    prompt=types.ModelInput.from_ints(list(prompt_ids_P[i])),
                    num_samples=num_samples, sampling_params=sdk_params,
                )
                for i in indices
            }
            for i, future in futures.items():
                try:
                    results[i] = to_sample_results(future.result(timeout=timeout))
                except Exception as err:
                    if not is_transient(err):
                        raise
                    errors[i] = err
        return errors

    def _fail(self, pending: list[int], errors: dict[int, BaseException], num_samples: int) -> None:
        self.session.failed_samples += len(pending) * num_samples
        self.session.counters.failures += len(pending)
        first = errors[pending[0]]
        message = (
            f"tinker sample failed for {len(pending)} prompt(s) after {self.session.options.max_attempts} "
            f"attempt(s), last error: {first!r}"
        )
        if self.session.options.on_sample_failure == "error":
            raise RuntimeError(
                message + "; the service is unhealthy or overloaded. To keep training with empty groups "
                "instead, set [backend.options] on_sample_failure = \"empty_group\""
            ) from first
        log.error("%s; returning empty groups ([backend.options] on_sample_failure = \"empty_group\")", message)
