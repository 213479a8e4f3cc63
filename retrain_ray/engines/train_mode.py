"""Switching a model between train and eval mode without walking its module tree each time.

`model.train(mode)` recurses through every submodule (a few hundred for a small LoRA Llama) through
`Module.__setattr__`; one RL step switches three times (the sampler to eval and back, the trainer to
train), which on the tiny model cost about as much as a decode step. `ModeSwitch` lists the modules
once and sets their `training` flag directly: the same end state as `train(mode)` for every module
whose class does not override `train` (torch's own, and transformers' unless it recasts kernels). A
model with any other override falls back to `model.train(mode)`.
"""

from __future__ import annotations

import torch


def _plain_train(module: torch.nn.Module) -> bool:
    """True when `module.train(mode)` only sets `training` on itself and its children."""
    train = type(module).train
    if train is torch.nn.Module.train:
        return True
    transformers_default = (getattr(train, "__module__", "") == "transformers.modeling_utils"
                            and train.__qualname__ == "PreTrainedModel.train")
    return transformers_default and not getattr(module, "use_kernels", False)


class ModeSwitch:
    """`set(mode)`: `model.train(mode)` for a model whose module tree does not change afterwards."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        modules = list(model.modules())
        self._flat = modules if all(_plain_train(m) for m in modules) else None

    def set(self, training: bool) -> None:
        if self._flat is None:
            self.model.train(training)
            return
        for module in self._flat:
            module.__dict__["training"] = training
