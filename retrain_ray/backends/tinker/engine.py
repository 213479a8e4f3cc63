"""SamplingEngine on the remote training API's sampling client (spec 1.8 `sample`, `checkpoint`).

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

import logging
import time
from types import ModuleType
from typing import TYPE_CHECKING

from retrain_ray.backends.tinker.session import TinkerSession
from retrain_ray.engines.types import SampleResult, SamplingParams, WeightsVersion, WeightUpdate
from retrain_ray.util.retry import is_transient

if TYPE_CHECKING:
    from tinker.types import SampleResponse
    from tinker.types import SamplingParams as SDKSamplingParams

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
