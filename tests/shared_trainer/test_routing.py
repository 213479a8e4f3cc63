"""The grouped LoRA's routing: rows of several runs in any order and any counts each get their own run's
adapter (the gather path), as when that run's rows go alone (the plain grid path)."""

from __future__ import annotations

import torch
from test_sampling import _settings, _trained


def test_rows_in_any_order_and_count_get_their_own_runs_adapter(shared):
    trainer = _trained(shared(), [0, 1, 2])
    ids_B_T = torch.randint(3, 100, (7, 5), generator=torch.Generator().manual_seed(0))
    rows_B = torch.tensor([2, 0, 0, 1, 2, 2, 0])  # out of order, counts 3, 1, 3: gathered into a 3 x 3 grid
    runs = ["r0", "r1", "r2"]
    with torch.no_grad(), trainer.serving(runs, rows_B) as model:
        mixed_B_T_V = model(input_ids=ids_B_T, use_cache=False).logits
    assert trainer.routing.groups == 0  # cleared after the block: the bare base again
    for b, run in enumerate(rows_B.tolist()):
        with torch.no_grad(), trainer.serving([runs[run]], torch.zeros(1, dtype=torch.long)) as model:
            alone_T_V = model(input_ids=ids_B_T[b:b + 1], use_cache=False).logits[0]
        torch.testing.assert_close(mixed_B_T_V[b], alone_T_V, rtol=0, atol=1e-5)
    with torch.no_grad():
        bare_T_V = trainer.model(input_ids=ids_B_T[:1], use_cache=False).logits[0]
    assert float((bare_T_V - mixed_B_T_V[0]).abs().max()) > 1e-3  # the adapters do change the logits
    assert _settings(0).lora.rank != _settings(1).lora.rank  # ranks differ: padded blocks in one grid
