"""The SDK client interface the tinker backend calls, as Protocols.

Both the official SDK's `tinker.ServiceClient` / `TrainingClient` / `SamplingClient` and the local
stand-in (`standin.py`) satisfy these; they cover only the methods and arguments our backend uses. The
SDK's objects enter through `sdk_service_client` (one cast: its futures are `BackcompatClientFuture`
subclasses whose keyword-rich signatures a type checker cannot match to these narrower Protocols).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeVar, cast

if TYPE_CHECKING:
    import tinker
    from tinker import types

    from retrain_ray.models.types import Tokenizer

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
