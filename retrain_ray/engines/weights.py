"""Installing trainer weights into a sampler's model, with strict name and shape checks.

Names are the trainer's parameter names (`named_parameters()` of the same kind of model: PEFT-wrapped
for LoRA, plain for full fine-tuning). The update must name exactly the model's trainable parameters
(`requires_grad`), no more and no fewer, with matching shapes; anything else is a wiring bug between
trainer and sampler and fails loudly instead of sampling from half-updated weights.

Switching a model between train and eval mode without walking its module tree each time.

`model.train(mode)` recurses through every submodule (a few hundred for a small LoRA Llama) through
`Module.__setattr__`; one RL step switches three times (the sampler to eval and back, the trainer to
train), which on the tiny model cost about as much as a decode step. `ModeSwitch` lists the modules
once and sets their `training` flag directly: the same end state as `train(mode)` for every module
whose class does not override `train` (torch's own, and transformers' unless it recasts kernels). A
model with any other override falls back to `model.train(mode)`.
"""

from __future__ import annotations

import torch

from retrain_ray.engines.types import WeightUpdate


def trainable_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """name -> parameter for every parameter with requires_grad (tied weights appear once)."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad}


def synced_parameters(model: torch.nn.Module) -> dict[str, torch.nn.Parameter]:
    """What a weight sync carries: the trainable parameters, and a LoRA adapter's frozen matrices too
    (`lora_freeze_a`): an engine holding its own copy, vLLM's above all, loads adapters whole."""
    return {name: p for name, p in model.named_parameters() if p.requires_grad or ".lora_" in name}


def _name_error(kind: str, names: list[str], model: torch.nn.Module) -> KeyError:
    expected = sorted(synced_parameters(model))[:3]
    return KeyError(
        f"weight update has {len(names)} {kind} parameter name(s), e.g. {sorted(names)[:3]}; this model "
        f"expects e.g. {expected}: trainer and sampler must be built with the same finetune mode and LoRA "
        "settings"
    )


def install_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Copies `tensors` into the model's synced parameters in place (after checking all of them)."""
    params = synced_parameters(model)
    unknown = [n for n in tensors if n not in params]
    missing = [n for n in params if n not in tensors]
    if unknown:
        raise _name_error("unknown", unknown, model)
    if missing:
        raise _name_error("missing", missing, model)
    for name, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(params[name].shape):
            raise ValueError(
                f"weight update {name!r} has shape {tuple(tensor.shape)}, the model's is "
                f"{tuple(params[name].shape)}"
            )
    with torch.no_grad():
        for name, tensor in tensors.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))


def install_update(model: torch.nn.Module, update: WeightUpdate) -> int:
    """Installs `update`'s tensors (none: only its version, the model is the trainer's); returns its version."""
    if update.tensors:
        install_weights(model, update.tensors)
    return update.version


def export_trainable(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """CPU copies of the synced parameters (the trainable ones and any frozen LoRA matrix), keyed as
    `install_weights` expects."""
    return {name: p.detach().to("cpu", copy=True) for name, p in synced_parameters(model).items()}


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
