"""TrainBatch rows -> the SDK's `Datum`s (real `tinker.types` objects, so a schema change shows up).

A row of T tokens becomes a next-token datum: `model_input` = tokens[:-1] and, per target position,
`target_tokens` = tokens[1:], `logprobs` = logprobs[1:], `advantages` = advantages[1:] (the batch holds
per-token values aligned with the token they score; prompt positions carry 0 advantage, so they are
not in the loss). The original passed all tokens as model_input (spec 1.8); the shift is what the
service's next-token losses expect.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from retrain_ray.backends.types import TrainBatch

if TYPE_CHECKING:
    from tinker.types import Datum, TensorData


def _types() -> ModuleType:
    # deferred: tinker is an optional extra, imported only when used
    from tinker import types

    return types


def tensor(values: list[float] | list[int], dtype: str) -> TensorData:
    return _types().TensorData.from_numpy(np.asarray(values, dtype=np.int64 if dtype == "int64" else np.float32))


def rl_datum(tokens: list[int], logprobs: list[float], advantages: list[float]) -> Datum:
    types = _types()
    return types.Datum(
        model_input=types.ModelInput.from_ints(list(tokens[:-1])),
        loss_fn_inputs={
            "target_tokens": tensor(list(tokens[1:]), "int64"),
            "logprobs": tensor(list(logprobs[1:]), "float32"),
            "advantages": tensor(list(advantages[1:]), "float32"),
        },
    )


def rl_datums(batch: TrainBatch) -> list[Datum]:
    """One datum per row; rows need at least two tokens (one prompt token and one completion token)."""
    for i, row in enumerate(batch.tokens_D):
        if len(row) < 2:
            raise ValueError(f"TrainBatch row {i} has {len(row)} token(s); a datum needs at least 2")
    return [rl_datum(t, lp, a) for t, lp, a in zip(batch.tokens_D, batch.logprobs_D, batch.advantages_D, strict=True)]


def with_inputs(datum: Datum, **inputs: list[float]) -> Datum:
    """A copy of an RL datum with some float loss inputs replaced (e.g. logprobs, advantages)."""
    types = _types()
    new_inputs = dict(datum.loss_fn_inputs)
    for key, values in inputs.items():
        new_inputs[key] = tensor(values, "float32")
    return types.Datum(model_input=datum.model_input, loss_fn_inputs=new_inputs)


def sft_datums(batch: TrainBatch) -> tuple[list[Datum], int]:
    """Warm-start datums whose weights average over the tokens with nonzero advantage: cross-entropy
    weights, or for `sft_loss = "importance_sampling"` RL datums with zero logprobs (the original's)."""
    types = _types()
    count = sum(1 for row in batch.advantages_D for a in row[1:] if a != 0)
    scale = 1.0 / max(count, 1)
    if batch.sft_loss == "importance_sampling":
        return [rl_datum(t, [0.0] * len(t), [scale if a != 0 else 0.0 for a in adv])
                for t, adv in zip(batch.tokens_D, batch.advantages_D, strict=True)], count
    datums = [
        types.Datum(
            model_input=types.ModelInput.from_ints(list(t[:-1])),
            loss_fn_inputs={
                "target_tokens": tensor(list(t[1:]), "int64"),
                "weights": tensor([scale if a != 0 else 0.0 for a in adv[1:]], "float32"),
            },
        )
        for t, adv in zip(batch.tokens_D, batch.advantages_D, strict=True)
    ]
    return datums, count
