"""Grouped LoRA: one forward over rows of many runs, each row under its own run's adapter.

Every adapted Linear of the one base model becomes a `GroupedLoraLinear`, which computes
`base(x) + (x A_i^T) B_i^T * scaling_i` for row b under adapter `i = row_adapter_B[b]`: the members'
A and B of that module are stacked once per forward (`AdapterRouting.stacks`, padded with zeros to the
largest rank among the members), gathered per row and multiplied with two batched matmuls
(`torch.bmm`). No Python loop over runs runs around the base layers: the base GEMM sees every row at
once. Zero padding keeps the real part exact (padded rows of A meet padded columns of B, both zero, and
get no gradient: they are constants, not parameters). The op is the lean LoRA's (models/lean_lora.py):
the input cast to the adapter's dtype and the sum cast back to the base output's. No LoRA dropout: the
shared trainer refuses a dropout above zero (trainer.py).

With no routing set (`row_adapter_B is None`) the module is the bare base layer, so the same model
scores or samples without adapters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import nn

from retrain_ray.models.lean_lora import is_lora_target


@dataclass
class AdapterRouting:
    """What the grouped modules read during one forward: each row's adapter index and, per target module,
    the members' stacked `(A_N_R_I, B_N_O_R)`, with `scaling_N` per member. Mutable: the trainer sets it
    before a forward and clears it after."""

    row_adapter_B: torch.Tensor | None = None
    scaling_N: torch.Tensor | None = None
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)

    def clear(self) -> None:
        self.row_adapter_B, self.scaling_N, self.stacks = None, None, {}


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
        if routing.row_adapter_B is None or routing.scaling_N is None:
            return result
        a_N_R_I, b_N_O_R = routing.stacks[self.name]
        rows = routing.row_adapter_B
        x_B_T_I = x if x.dtype == a_N_R_I.dtype else x.to(a_N_R_I.dtype)
        x_B_T_I = x_B_T_I.reshape(x.shape[0], -1, x.shape[-1])
        a_B_R_I = a_N_R_I.index_select(0, rows)
        b_B_O_R = b_N_O_R.index_select(0, rows)
        h_B_T_R = torch.bmm(x_B_T_I, a_B_R_I.transpose(1, 2))
        delta_B_T_O = torch.bmm(h_B_T_R, b_B_O_R.transpose(1, 2)) * routing.scaling_N.index_select(0, rows)[:, None, None]
        out = result + delta_B_T_O.reshape(result.shape)
        return out if out.dtype == result.dtype else out.to(result.dtype)


@dataclass(frozen=True)
class ModuleLayout:
    """The base model's module names and bias-free-or-not Linear leaf names, read before any wrapping."""

    module_names: tuple[str, ...]
    linear_names: frozenset[str]

    @classmethod
    def of(cls, model: nn.Module) -> ModuleLayout:
        modules = list(model.named_modules())
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
        if not isinstance(base, nn.Linear) or base.bias is not None:
            raise ValueError(f"LoRA target {key!r} is a {type(base).__name__}: the shared trainer adapts bias-free "
                             "Linear layers only; set backend option lora_target_modules to Linear names")
        setattr(parent, child, GroupedLoraLinear(base, key, routing))
        bases[key] = base
    return bases
