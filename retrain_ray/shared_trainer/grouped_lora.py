"""Grouped LoRA: one forward over rows of many runs, each row under its own run's adapter.

Every adapted Linear of the one base model becomes a `GroupedLoraLinear`, which computes
`base(x) + ((x A_i^T) * scaling_i) B_i^T` for row b under its run `i`. The base GEMM sees every row at once;
the deltas are a grouped matmul: the rows are laid out as a grid of N groups (one per run present in the
forward) of M rows each, and two batched matmuls (`bmm`, the second fused with the add) apply each group's
own A and B, stacked `A_N_I_R` and `B_N_R_O` (B times the run's scaling; each zero-padded to the largest rank among them: exact zeros, constants, not
parameters). So a row costs its own run's rank, not the sum of every run's ranks, and no Python loop over
runs runs around the layers. When the rows already come run by run in equal counts (a shared step's
members with the same micro-batch size, a decode of equal requests) the grid is a view of the batch;
otherwise `gather_G` picks the rows into the grid (unused cells repeat row 0 and are never read back) and
`place_B` reads each row's delta back from its cell, so gradients reach only the row's own adapter.
The op is the lean LoRA's (models/lean_lora.py): the input cast to the adapter's dtype and the sum cast
back to the base output's. No LoRA dropout: the shared trainer refuses a dropout above zero (trainer.py).

With no routing set (`groups == 0`) the module is the bare base layer, so the same model scores or samples
without adapters.
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
    """What the grouped modules read during one forward: per target module the present runs' adapters
    stacked, `(A_N_I_R, B_N_R_O)` (B already times its run's scaling), and the row grid (module docstring):
    `groups` x `rows_per_group`, with `gather_G` / `place_B` when the batch is not already that grid.
    Mutable: the trainer sets it before a forward (routing.py `route`) and clears it after."""

    groups: int = 0
    rows_per_group: int = 0
    gather_G: torch.Tensor | None = None
    place_B: torch.Tensor | None = None
    stacks: dict[str, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=lambda: {})

    def clear(self) -> None:
        self.groups, self.rows_per_group, self.stacks = 0, 0, {}
        self.gather_G = self.place_B = None

    def add_delta(self, result_B_T_O: torch.Tensor, x_B_T_I: torch.Tensor, a_N_I_R: torch.Tensor,
                  b_N_R_O: torch.Tensor) -> torch.Tensor:
        """`result` plus each row's own `((x A^T) * scaling) B^T`."""
        x_G_T_I = x_B_T_I if self.gather_G is None else x_B_T_I.index_select(0, self.gather_G)
        h_N_MT_R = torch.bmm(x_G_T_I.reshape(self.groups, -1, x_B_T_I.shape[-1]), a_N_I_R)
        if self.place_B is None and result_B_T_O.dtype == h_N_MT_R.dtype:  # the grid is the batch: one fused op
            grid_N_MT_O = result_B_T_O.reshape(self.groups, -1, result_B_T_O.shape[-1])
            # sampling: add in place (no copy); not under autocast, whose casts an in-place op does not get
            if not torch.is_grad_enabled() and result_B_T_O.is_contiguous() and b_N_R_O.dtype == h_N_MT_R.dtype:
                grid_N_MT_O.baddbmm_(h_N_MT_R, b_N_R_O)
                return result_B_T_O
            return torch.baddbmm(grid_N_MT_O, h_N_MT_R, b_N_R_O).view(result_B_T_O.shape)
        d_N_MT_O = torch.bmm(h_N_MT_R, b_N_R_O)
        d_G_T_O = d_N_MT_O.reshape(self.groups * self.rows_per_group, *result_B_T_O.shape[1:])
        d_B_T_O = d_G_T_O if self.place_B is None else d_G_T_O.index_select(0, self.place_B)
        return result_B_T_O + d_B_T_O


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
        if routing.groups == 0:
            return result
        a_N_I_R, b_N_R_O = routing.stacks[self.name]
        x_B_T_I = x if x.dtype == a_N_I_R.dtype else x.to(a_N_I_R.dtype)
        out = routing.add_delta(result, x_B_T_I, a_N_I_R, b_N_R_O)
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
