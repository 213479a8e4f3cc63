"""Setting the grouped LoRA's routing (grouped_lora.py) for one forward: which run's adapter each row uses.

`route(routing, keys, adapters, rows_B)`: row b goes under `adapters[rows_B[b]]`. Only the runs that have
rows get a group; groups are as tall as the run with the most rows. When `rows_B` already runs group by
group in equal counts (0,0,1,1,2,2: the usual case, every member with the same micro-batch or request
size) the batch is the grid as it is and no gather is made; otherwise a gather index puts each row in its
run's group and a placement index reads its delta back.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import torch

from retrain_ray.shared_trainer.adapters import RunAdapter
from retrain_ray.shared_trainer.grouped_lora import AdapterRouting


def route(routing: AdapterRouting, keys: Sequence[str], adapters: Sequence[RunAdapter], rows_B: torch.Tensor) -> None:
    """Sets `routing` so that row b of the next forwards is under `adapters[rows_B[b]]`'s adapter."""
    present, group_B = cast("tuple[torch.Tensor, torch.Tensor]", torch.unique(rows_B, return_inverse=True))  # pyright: ignore[reportUnknownMemberType]
    used = [adapters[i] for i in _ints(present)]
    counts_N = torch.bincount(group_B, minlength=len(used))
    per_group = int(counts_N.max())
    rank = max(a.rank for a in used)
    routing.groups, routing.rows_per_group = len(used), per_group
    routing.gather_G, routing.place_B = _grid(group_B, counts_N, per_group)
    routing.stacks = {key: _stack(used, key, rank) for key in keys}


def _stack(adapters: Sequence[RunAdapter], key: str, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(A_N_I_R, B_N_R_O * scaling_N) of module `key`, each adapter padded to `rank` (differentiable in its
    real part)."""
    pairs = [adapter.padded(key, rank) for adapter in adapters]
    return (torch.stack([a.t() for a, _ in pairs]),
            torch.stack([b.t() * adapter.scaling for (_, b), adapter in zip(pairs, adapters, strict=True)]))


def _grid(group_B: torch.Tensor, counts_N: torch.Tensor, per_group: int
          ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(gather_G, place_B): None, None when the rows are the grid already (grouped in order, equal counts)."""
    rows = group_B.shape[0]
    in_order = bool((group_B[1:] >= group_B[:-1]).all()) if rows > 1 else True
    if in_order and bool((counts_N == per_group).all()):
        return None, None
    order_B = torch.argsort(group_B, stable=True)
    starts_N = torch.cumsum(counts_N, 0) - counts_N
    sorted_group_B = group_B[order_B]
    slot_B = torch.arange(rows, device=group_B.device) - starts_N[sorted_group_B]
    cell_of_sorted_B = sorted_group_B * per_group + slot_B
    gather_G = torch.zeros(int(counts_N.shape[0]) * per_group, dtype=torch.long, device=group_B.device)
    gather_G[cell_of_sorted_B] = order_B
    place_B = torch.empty_like(order_B)
    place_B[order_B] = cell_of_sorted_B
    return gather_G, place_B


def _ints(t: torch.Tensor) -> list[int]:
    return [int(v) for v in t]
