"""LOCAL STAND-IN for the tinker SDK's client objects. For tests only; it is not the service.

The remote training API cannot be reached from here, so the backend is tested against these
classes, which speak the same SDK-facing interface the backend uses (`ServiceClient.
create_lora_training_client`, `TrainingClient.forward / forward_backward / optim_step / save_state /
save_weights_for_sampler / save_weights_and_get_sampling_client / load_state[_with_optimizer] /
get_tokenizer`, `SamplingClient.sample`, futures with `.result(timeout)`), take and return the real
`tinker.types` objects, and are backed by a real tiny torch model (LoRA via PEFT), so sampling and
training really happen. Select it with `[backend.options] client = "standin"`. The service's documented
shapes (tinker-cookbook's docs/losses.mdx and docs/save-load.mdx) are recorded in
tests/fixtures/protocols/tinker.json; tests/backends/test_standin_protocols.py checks this class against them.

Behaviour, as far as the stand-in models the service:
* losses: `importance_sampling` = -sum_t exp(lp_t - old_lp_t) A_t, `cross_entropy` = -sum_t w_t lp_t,
  summed over datums and reported as `metrics["loss:sum"]`; `forward` returns per-datum `logprobs`
  of the target tokens (plain T = 1 log-softmax). Other loss names are rejected.
* gradients accumulate over `forward_backward` calls until `optim_step(AdamParams)` applies AdamW
  (lr, betas, eps, weight decay, and `grad_clip_norm` when > 0) and zeroes them.
* sampling uses temperature / top-p and reports the tempered, renormalised logprobs of the drawn
  tokens (the PyTorch engine's sampler), from a frozen copy of the weights taken at save time.
* `save_state` / `save_weights_for_sampler` write files under `store_dir` and return
  `tinker://<run>/state/<name>` and `tinker://<run>/sampler_weights/<name>`; loading a sampler path as
  training state is refused (hazard 13.10 would surface here).

Fault injection: `faults={"sample": ["502", "timeout"], "optim_step": ["504"]}` makes the next calls of
those methods fail (their futures raise `tinker.InternalServerError` with that HTTP status, or
`TimeoutError`), one list entry per call. `on_call(method_name)` is called on every SDK call.
"""

from __future__ import annotations

import copy
import itertools
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypedDict, TypeVar

import httpx
import numpy as np
import torch

from retrain_ray.engines.pytorch.engine import PyTorchEngine
from retrain_ray.engines.types import SamplingParams as EngineParams
from retrain_ray.models import Tokenizer, hf_tokenizer
from retrain_ray.models.tokenizer import single_id

if TYPE_CHECKING:
    from tinker import types

T = TypeVar("T")

FAULT_KINDS = ("502", "503", "504", "timeout", "502-applied", "504-applied", "timeout-applied")
"""`<kind>-applied`: the stand-in runs the call (the server applied it), then the answer is lost."""


class StandinFuture(Generic[T]):
    """A finished SDK future: `.result(timeout)` returns the value or raises the injected error."""

    def __init__(self, outcome: tuple[T] | BaseException) -> None:
        self._outcome = outcome  # (value,) or the error

    def result(self, timeout: float | None = None) -> T:
        if isinstance(self._outcome, BaseException):
            raise self._outcome
        return self._outcome[0]


class StandinOptions(TypedDict, total=False):
    """The stand-in service's keyword arguments besides `base_url` (see `StandinServiceClient`)."""

    store_dir: str | Path | None
    cache_dir: str | Path | None
    faults: dict[str, list[str]] | None
    on_call: Callable[[str], None] | None
    seed: int


def _fault_error(kind: str, method: str) -> BaseException:
    # deferred: tinker is an optional extra, imported only when used
    import tinker

    request = httpx.Request("POST", f"http://tinker-standin.invalid/{method}")
    kind = kind.removesuffix("-applied")
    if kind == "timeout":
        return TimeoutError(f"stand-in: {method} timed out (injected)")
    response = httpx.Response(int(kind), request=request)
    return tinker.InternalServerError(f"stand-in: {method} -> HTTP {kind} (injected)", response=response, body=None)


class _Calls:
    """Fault schedule and call hook shared by every client of one stand-in service."""

    def __init__(self, faults: dict[str, list[str]] | None, on_call: Callable[[str], None] | None) -> None:
        self.faults = {k: list(v) for k, v in (faults or {}).items()}
        for method, kinds in self.faults.items():
            bad = [k for k in kinds if k not in FAULT_KINDS]
            if bad:
                raise ValueError(f"stand-in faults[{method!r}] has unknown kinds {bad}; use {FAULT_KINDS}")
        self.on_call = on_call
        self.counts: dict[str, int] = {}

    def enter(self, method: str) -> BaseException | None:
        self.counts[method] = self.counts.get(method, 0) + 1
        if self.on_call is not None:
            self.on_call(method)
        queue = self.faults.get(method)
        return _fault_error(queue.pop(0), method) if queue else None

    def future(self, method: str, compute: Callable[[], T]) -> StandinFuture[T]:
        queue = self.faults.get(method)
        applied_then_lost = bool(queue) and queue[0].endswith("-applied")
        error = self.enter(method)
        if applied_then_lost:
            compute()
        return StandinFuture(error) if error is not None else StandinFuture((compute(),))


class StandinServiceClient:
    """Stand-in for `tinker.ServiceClient`, serving local models (e.g. `builtin:tiny`)."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        store_dir: str | Path | None = None,
        cache_dir: str | Path | None = None,
        faults: dict[str, list[str]] | None = None,
        on_call: Callable[[str], None] | None = None,
        seed: int = 0,
    ) -> None:
        self.base_url = base_url
        self.store_dir = Path(store_dir) if store_dir else Path(tempfile.mkdtemp(prefix="tinker-standin-"))
        self.cache_dir = cache_dir
        self.calls = _Calls(faults, on_call)
        self.seed = seed

    def create_lora_training_client(
        self, base_model: str, rank: int = 32, **_: object
    ) -> StandinFuture[StandinTrainingClient]:
        return self.calls.future(
            "create_lora_training_client", lambda: StandinTrainingClient(self, base_model, rank)
        )


def _load_lora_model(base_model: str, rank: int, cache_dir: str | Path | None) -> tuple[torch.nn.Module, Tokenizer]:
    # deferred: loads transformers, which importing this module does not need
    from retrain_ray.models import load_model_and_tokenizer
    from retrain_ray.models.lean_lora import LoraSettings, apply_lora

    try:
        model, tokenizer = load_model_and_tokenizer(base_model, cache_dir=cache_dir)
    except FileNotFoundError as err:
        raise ValueError(
            f"the tinker stand-in serves only local models, not {base_model!r}: set [model] model = "
            "'builtin:tiny' (or a local model folder) when [backend.options] client = 'standin'"
        ) from err
    torch.manual_seed(0)  # pyright: ignore[reportUnknownMemberType]
    return apply_lora(model, LoraSettings(rank=rank)), hf_tokenizer(tokenizer)


def _target_logprobs(model: torch.nn.Module, datum: types.Datum) -> torch.Tensor:
    ids = torch.tensor([datum.model_input.to_ints()], dtype=torch.long)
    targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
    logits = model(input_ids=ids).logits[0].float()
    return torch.log_softmax(logits, -1).gather(-1, targets[:, None]).squeeze(-1)


def _datum_loss(loss_fn: str, lp_T: torch.Tensor, inputs: dict[str, types.TensorData]) -> torch.Tensor:
    if loss_fn == "importance_sampling":
        old_T = inputs["logprobs"].to_torch().float()
        adv_T = inputs["advantages"].to_torch().float()
        return -(torch.exp(lp_T - old_T) * adv_T).sum()
    if loss_fn == "cross_entropy":
        return -(inputs["weights"].to_torch().float() * lp_T).sum()
    raise ValueError(f"the tinker stand-in implements loss_fn 'importance_sampling' and 'cross_entropy', not {loss_fn!r}")


class StandinTrainingClient:
    """Stand-in for `tinker.TrainingClient`: a LoRA model trained in this process."""

    def __init__(self, service: StandinServiceClient, base_model: str, rank: int) -> None:
        self.service, self.calls = service, service.calls
        self.run_id = f"standin-{uuid.uuid4().hex[:8]}"
        self.base_model = base_model
        self.model, self.tokenizer = _load_lora_model(base_model, rank, service.cache_dir)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=1e-4)
        self.sample_seeds = itertools.count(service.seed)

    def get_tokenizer(self) -> Tokenizer:
        self.calls.enter("get_tokenizer")
        return self.tokenizer

    def _run_losses(self, data: list[types.Datum], loss_fn: str, backward: bool) -> types.ForwardBackwardOutput:
        # deferred: tinker is an optional extra, imported only when used
        from tinker import types

        outputs: list[dict[str, types.TensorData]] = []
        total = 0.0
        for datum in data:
            with torch.set_grad_enabled(backward):
                lp_T = _target_logprobs(self.model, datum)
                loss = _datum_loss(loss_fn, lp_T, datum.loss_fn_inputs)
                if backward:
                    loss.backward()  # pyright: ignore[reportUnknownMemberType]
            total += float(loss.detach())
            outputs.append({"logprobs": types.TensorData.from_torch(lp_T.detach().float())})
        return types.ForwardBackwardOutput(
            loss_fn_output_type="standin", loss_fn_outputs=outputs, metrics={"loss:sum": total}
        )

    def forward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: object = None
    ) -> StandinFuture[types.ForwardBackwardOutput]:
        return self.calls.future("forward", lambda: self._run_losses(data, loss_fn, backward=False))

    def forward_backward(
        self, data: list[types.Datum], loss_fn: str, loss_fn_config: object = None
    ) -> StandinFuture[types.ForwardBackwardOutput]:
        return self.calls.future("forward_backward", lambda: self._run_losses(data, loss_fn, backward=True))

    def optim_step(
        self, optim_params: types.AdamParams | None = None, *, adam_params: types.AdamParams | None = None
    ) -> StandinFuture[types.OptimStepResponse]:
        return self.calls.future("optim_step", lambda: self._optim_step(optim_params or adam_params))

    def _optim_step(self, p: types.AdamParams | None) -> types.OptimStepResponse:
        # deferred: tinker is an optional extra, imported only when used
        from tinker import types

        if p is None:
            raise ValueError("stand-in optim_step: pass AdamParams (optim_params or adam_params)")
        for group in self.optimizer.param_groups:
            group.update(lr=p.learning_rate, betas=(p.beta1, p.beta2), eps=p.eps, weight_decay=p.weight_decay)
        norm = torch.nn.utils.clip_grad_norm_(self.params, p.grad_clip_norm if p.grad_clip_norm > 0 else float("inf"))
        self.optimizer.step()  # pyright: ignore[reportUnknownMemberType]
        self.optimizer.zero_grad(set_to_none=True)
        return types.OptimStepResponse(metrics={"grad_norm": float(norm)})

    def _path(self, kind: str, name: str) -> tuple[str, Path]:
        path = self.service.store_dir / self.run_id / kind / f"{name}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        return f"tinker://{self.run_id}/{kind}/{name}", path

    def _trainable(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def save_state(self, name: str, **_: object) -> StandinFuture[types.SaveWeightsResponse]:
        def save() -> types.SaveWeightsResponse:
            # deferred: tinker is an optional extra, imported only when used
            from tinker import types

            uri, path = self._path("state", name)
            torch.save({"weights": self._trainable(), "optimizer": self.optimizer.state_dict()}, path)
            return types.SaveWeightsResponse(path=uri)

        return self.calls.future("save_state", save)

    def save_weights_for_sampler(self, name: str, **_: object) -> StandinFuture[types.SaveWeightsForSamplerResponse]:
        def save() -> types.SaveWeightsForSamplerResponse:
            # deferred: tinker is an optional extra, imported only when used
            from tinker import types

            uri, path = self._path("sampler_weights", name)
            torch.save({"weights": self._trainable()}, path)
            return types.SaveWeightsForSamplerResponse(path=uri)

        return self.calls.future("save_weights_for_sampler", save)

    def save_weights_and_get_sampling_client(
        self, name: str | None = None, **_: object
    ) -> StandinFuture[StandinSamplingClient]:
        return self.calls.future("save_weights_and_get_sampling_client", lambda: StandinSamplingClient(self))

    def load_state(self, path: str, **_: object) -> StandinFuture[types.LoadWeightsResponse]:
        return self.calls.future("load_state", lambda: self._load(path, with_optimizer=False))

    def load_state_with_optimizer(self, path: str, **_: object) -> StandinFuture[types.LoadWeightsResponse]:
        return self.calls.future("load_state_with_optimizer", lambda: self._load(path, with_optimizer=True))

    def _load(self, uri: str, with_optimizer: bool) -> types.LoadWeightsResponse:
        # deferred: tinker is an optional extra, imported only when used
        from tinker import types

        parts = uri.removeprefix("tinker://").split("/")
        if len(parts) != 3 or parts[1] != "state":
            raise ValueError(f"stand-in load_state: {uri!r} is not a training-state path (tinker://<run>/state/<name>)")
        file = self.service.store_dir / parts[0] / "state" / f"{parts[2]}.pt"
        if not file.is_file():
            raise FileNotFoundError(f"stand-in load_state: no saved state at {uri!r}")
        saved = torch.load(file, weights_only=True)
        with torch.no_grad():
            for n, p in self.model.named_parameters():
                if n in saved["weights"]:
                    p.copy_(saved["weights"][n])
        if with_optimizer:
            self.optimizer.load_state_dict(saved["optimizer"])
        self.optimizer.zero_grad(set_to_none=True)  # a loaded state has no pending gradient
        return types.LoadWeightsResponse(path=uri)


class StandinSamplingClient:
    """Stand-in for `tinker.SamplingClient`: samples from a frozen copy of the weights."""

    def __init__(self, trainer: StandinTrainingClient) -> None:
        self.calls, self._seeds = trainer.calls, trainer.sample_seeds
        self.model = copy.deepcopy(trainer.model).eval()
        tok = trainer.tokenizer
        self._eos, self._pad = single_id(tok.eos_token_id, "eos_token_id"), single_id(tok.pad_token_id, "pad_token_id")

    def sample(
        self, prompt: types.ModelInput, num_samples: int, sampling_params: types.SamplingParams, **_: object
    ) -> StandinFuture[types.SampleResponse]:
        return self.calls.future("sample", lambda: self._sample(prompt, num_samples, sampling_params))

    def _sample(self, prompt: types.ModelInput, num_samples: int, sp: types.SamplingParams) -> types.SampleResponse:
        # deferred: tinker is an optional extra, imported only when used
        from tinker import types

        engine = PyTorchEngine(self.model, eos_token_id=self._eos, pad_token_id=self._pad, seed=next(self._seeds))
        params = EngineParams(max_tokens=sp.max_tokens or 16, temperature=sp.temperature, top_p=sp.top_p)
        results = engine.generate([prompt.to_ints()], num_samples, params)[0]
        sequences = [
            types.SampledSequence(
                stop_reason=r.finish_reason, sequence_id=uuid.uuid4().hex,
                tokens_np=np.asarray(r.token_ids, dtype=np.int32), logprobs_np=np.asarray(r.logprobs, dtype=np.float32),
            )
            for r in results
        ]
        return types.SampleResponse(sequences=sequences)
