"""Grouped LoRA: one forward over rows of many runs, each row under its own run's adapter.

Every adapted Linear of the one base model becomes a `GroupedLoraLinear`, which computes
`base(x) + ((x A_i^T) * scaling_i) B_i^T` for row b under its run `i`. The members' A and B of that
module sit side by side, `A_NR_I` and `B_O_NR` (each member's block zero-padded to the largest rank
among the members), rebuilt from the members' parameters at each forward; the row's index becomes a block
mask `row_mask_B_NR` (its member's scaling on its own rank block, zero elsewhere). So the whole delta is
two matmuls over every row at once, `((x A^T) * mask) B^T`: no Python loop over runs runs around the base
layers, and the base GEMM sees every row. The other members' blocks contribute exact zeros to a row and
receive exactly zero gradient from it; padded ranks are constants, not parameters. The op is the lean
LoRA's (models/lean_lora.py): the input cast to the adapter's dtype and the sum cast back to the base
output's. The masked product costs N*R columns where one adapter costs R: cheap while N*R stays below
the layer's width (8 runs of rank 32 on a 896-wide layer), a per-row gather (`bmm`) past that.
No LoRA dropout: the shared trainer refuses a dropout above zero (trainer.py).

With no routing set (`row_adapter_B is None`) the module is the bare base layer, so the same model
scores or samples without adapters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import torch
from torch import nn

from retrain_ray.models.lean_lora import is_lora_target


@dataclass
class AdapterRouting:
    """What the grouped modules read during one forward: per target module the members' adapters side by
    side, `(A_NR_I, B_O_NR)` (member n's rank block at columns n*R..(n+1)*R), and each row's block mask
    `row_mask_B_NR` (its own member's block holds that member's scaling, every other block zero). Mutable:
    the trainer sets it before a forward and clears it after."""

    row_mask_B_NR: torch.Tensor | None = None
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def clear(self) -> None:
        self.row_mask_B_NR, self.stacks = None, {}


class GroupedLoraLinear(nn.Module):
    """A frozen base Linear plus each row's own LoRA delta, per the shared `AdapterRouting`."""

    def __init__(self, base_layer: nn.Linear, name: str, routing: AdapterRouting) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.name = name
        self.routing = routing

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        routing = self.routing
        if routing.row_mask_B_NR is None:
            return result
        a_NR_I, b_O_NR = routing.stacks[self.name]
        x_B_T_I = x if x.dtype == a_NR_I.dtype else x.to(a_NR_I.dtype)
        h_B_T_NR = torch.matmul(x_B_T_I, a_NR_I.t()) * routing.row_mask_B_NR.unsqueeze(1)
        out = result + torch.matmul(h_B_T_NR, b_O_NR.t())
        return out if out.dtype == result.dtype else out.to(result.dtype)


@dataclass(frozen=True)
class ModuleLayout:
    """The base model's module names and bias-free-or-not Linear leaf names, read before any wrapping."""

    module_names: tuple[str, ...]
    linear_names: frozenset[str]

    @classmethod
    def of(cls, model: nn.Module) -> ModuleLayout:
        modules = cast("list[tuple[str, nn.Module]]", list(model.named_modules()))  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
        return cls(tuple(name for name, _ in modules),
                   frozenset(name.rsplit(".", 1)[-1] for name, m in modules if isinstance(m, nn.Linear)))

    def present(self, requested: Sequence[str]) -> tuple[str, ...]:
        """The requested target names the model has (the solo LoRA's filter), or an error naming them."""
        present = tuple(t for t in requested if t in self.linear_names)
        if not present:
            raise ValueError(f"LoRA target modules {list(requested)} match no Linear layer of the model (it has e.g. "
                             f"{sorted(self.linear_names)[:8]}): set backend option lora_target_modules to names that exist")
        return present

    def keys(self, requested: Sequence[str], layers: Sequence[int], layers_pattern: str) -> list[str]:
        """The module names the lean LoRA adapts for this layout, in `named_modules` order (its init order)."""
        present = self.present(requested)
        return [name for name in self.module_names if is_lora_target(name, present, layers, layers_pattern)]


def wrap_targets(model: nn.Module, keys: Sequence[str], routing: AdapterRouting) -> dict[str, nn.Linear]:
    """Replaces each named bias-free Linear with a `GroupedLoraLinear`; returns the base Linears by name."""
    bases: dict[str, nn.Linear] = {}
    for key in keys:
        parent_name, _, child = key.rpartition(".")
        parent = model.get_submodule(parent_name)
        base = getattr(parent, child)
        if not isinstance(base, nn.Linear) or cast("torch.Tensor | None", base.bias) is not None:
            raise ValueError(f"LoRA target {key!r} is a {type(base).__name__}: the shared trainer adapts bias-free "
                             "Linear layers only; set backend option lora_target_modules to Linear names")
        setattr(parent, child, GroupedLoraLinear(base, key, routing))
        bases[key] = base
    return bases
