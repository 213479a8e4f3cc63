"""How the trainer's weights reach vLLM: LoRA versions as PEFT folders (`write_peft_adapter`, their
`AdapterLedger`), full weights pushed into the worker's model in place (`push_full_weights`), and which
layers a full-weight sync leaves alone on purpose, with a check that no other one is.

vLLM's layerwise reload (`reload_weights`) warns "<Layer>: Failed to load weights" for every layer that
got no tensor from the update, and puts that layer's old tensors back. Two kinds of layers get none on
every sync, correctly:

* layers with buffers only: `RotaryEmbedding`'s cos/sin cache is computed from the model's config at
  start-up and never changes (no checkpoint holds it, and the trainer's `inv_freq` is a buffer, not a
  parameter, so it is not sent either);
* layers whose parameters all belong to a layer before them: a tied LM head (`ParallelLMHead`) *is* the
  embedding's weight, loaded under `embed_tokens`; the old tensor put back is that same, now updated,
  tensor (the CPU build's prepacked copy for the logits GEMM is redone by the caller).

Their warnings are dropped (logged at DEBUG: they came on every step and said nothing). Any other layer
that got nothing means the update missed weights vLLM samples with: the sync fails naming it, instead of
sampling from half-updated weights.
"""

from __future__ import annotations

import json
import logging
import tempfile
import threading
from collections import Counter
from collections.abc import Generator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch

from retrain_ray.models.lora import LoraSettings

if TYPE_CHECKING:
    from vllm.lora.request import LoRARequest

LAYERWISE_LOGGER = "vllm.model_executor.model_loader.reload.layerwise"
_FAILED = "%s: Failed to load weights"  # vLLM's message (its format string), args = (layer class name,)

log = logging.getLogger(__name__)


def layers_without_own_weights(model: torch.nn.Module) -> set[str]:
    """Class names of the layers that no update loads: buffers only, or parameters tied to an earlier layer.

    A class counts only when every one of its instances is such a layer, so a class that also holds
    real weights somewhere (the embedding a head is tied to) is still checked.
    """
    first_owner: dict[int, torch.nn.Module] = {}
    for module in model.modules():
        for param in _own(module):
            first_owner.setdefault(id(param), module)
    verdicts: Counter[tuple[str, bool]] = Counter()
    for module in model.modules():
        params = _own(module)
        buffers_only = not params and any(True for _ in module.buffers(recurse=False))
        tied = bool(params) and all(first_owner[id(p)] is not module for p in params)
        verdicts[(type(module).__name__, buffers_only or tied)] += 1
    return {name for name, quiet in verdicts if quiet and (name, False) not in verdicts}


def _own(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return list(module.parameters(recurse=False))


class _ReloadGaps(logging.Filter):
    """Drops vLLM's warning for the expected layers and remembers any other layer it names."""

    def __init__(self, expected: set[str]) -> None:
        super().__init__()
        self.expected = expected
        self.unexpected: list[str] = []

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg != _FAILED or not isinstance(record.args, tuple) or not record.args:
            return True
        layer = str(record.args[0])
        if layer in self.expected:
            log.debug("weight sync: %s has no weights of its own in vLLM (computed buffers or tied); kept", layer)
            return False
        self.unexpected.append(layer)
        return True


@contextmanager
def reload_gaps_checked(model: torch.nn.Module) -> Generator[None]:
    """Around `reload_weights`: quiet for the layers that never get weights, an error for any other one."""
    gaps = _ReloadGaps(layers_without_own_weights(model))
    logger = logging.getLogger(LAYERWISE_LOGGER)
    level = logger.level
    logger.setLevel(min(logger.getEffectiveLevel(), logging.WARNING))  # the check needs the warning emitted
    logger.addFilter(gaps)
    try:
        yield
    finally:
        logger.removeFilter(gaps)
        logger.setLevel(level)
    if gaps.unexpected:
        raise RuntimeError(
            f"full-weight sync: vLLM got no weights for layer(s) {sorted(set(gaps.unexpected))} and kept their old "
            "tensors; the trainer's update must carry every weight vLLM samples with (Hugging Face names)"
        )


def adapter_scratch_dir() -> Path:
    """Where adapter versions are written for vLLM to load: tmpfs when the machine has it."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="retrain-vllm-", dir=shm if shm.is_dir() else None))



def write_peft_adapter(folder: Path, lora: LoraSettings, tensors: dict[str, torch.Tensor]) -> None:
    """A PEFT adapter folder from the trainer's LoRA tensors (PEFT names, `.default` dropped)."""
    from safetensors.torch import save_file  # pyright: ignore[reportUnknownVariableType]

    folder.mkdir(parents=True, exist_ok=True)
    save_file({k.replace(".default", ""): v.detach().to("cpu").contiguous() for k, v in tensors.items()},
              str(folder / "adapter_model.safetensors"))
    (folder / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA", "task_type": "CAUSAL_LM", "r": lora.rank, "lora_alpha": lora.effective_alpha,
        "lora_dropout": lora.dropout, "target_modules": list(lora.target_modules), "bias": "none",
    }))



def _hf_name(name: str) -> str:
    """A trainer parameter name as the checkpoint names it (PEFT's wrapper prefix removed)."""
    for prefix in ("base_model.model.",):
        if name.startswith(prefix):
            return name[len(prefix):]
    return name



class _ModelRunner(Protocol):
    def reload_weights(self, *, weights_iterator: list[tuple[str, torch.Tensor]], is_checkpoint_format: bool) -> object: ...

    def get_model(self) -> torch.nn.Module: ...



class _Worker(Protocol):
    """What `push_full_weights` uses of a vLLM worker (its class differs by device)."""

    @property
    def model_runner(self) -> _ModelRunner: ...



def push_full_weights(worker: _Worker, tensors: dict[str, torch.Tensor]) -> None:
    """Runs inside the vLLM worker: the trainer's tensors (checkpoint names) into the model, in place.

    `reload_weights` re-runs the layers' weight loaders (fusing q/k/v, gate/up) on the live model. A
    tied LM head gets no weights of its own, so its post-load step (on CPU: a prepacked copy of the
    weight for the logits GEMM) is not re-run and would keep unembedding with the old embedding: redo
    it for every vocabulary embedding (they keep their weight, so this is idempotent).
    """
    # deferred: vllm is an optional extra, imported only when used
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    model = worker.model_runner.get_model()
    with reload_gaps_checked(model):  # rotary caches and a tied head get nothing, on purpose; nothing else may
        worker.model_runner.reload_weights(weights_iterator=[(_hf_name(n), t) for n, t in tensors.items()],
                                           is_checkpoint_format=True)
    for module in model.modules():
        if isinstance(module, VocabParallelEmbedding) and hasattr(module, "quant_method"):
            module.quant_method.process_weights_after_loading(module)



class AdapterLedger:
    """Which adapter versions queued or running requests use, and which replaced ones await removal."""

    def __init__(self) -> None:
        self._in_use: Counter[int] = Counter()
        self._retired: dict[int, tuple[LoRARequest, Path]] = {}
        self._lock = threading.Lock()

    def hold(self, lora: LoRARequest | None) -> None:
        if lora is not None:
            with self._lock:
                self._in_use[lora.lora_int_id] += 1

    def release(self, lora: LoRARequest | None) -> None:
        if lora is not None:
            with self._lock:
                self._in_use[lora.lora_int_id] -= 1

    def retire(self, lora: LoRARequest, folder: Path) -> None:
        with self._lock:
            self._retired[lora.lora_int_id] = (lora, folder)

    def idle(self) -> list[tuple[LoRARequest, Path]]:
        """The retired versions no request uses any more; forgotten here, to be removed by the caller."""
        with self._lock:
            gone = [i for i in self._retired if self._in_use[i] <= 0]
            for i in gone:
                self._in_use.pop(i, None)
            return [self._retired.pop(i) for i in gone]

    @property
    def retired(self) -> int:
        with self._lock:
            return len(self._retired)
