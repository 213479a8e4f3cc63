"""Which layers a full-weight sync into vLLM leaves alone on purpose, and a check that no other one is.

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

import logging
from collections import Counter
from collections.abc import Generator
from contextlib import contextmanager

import torch

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
