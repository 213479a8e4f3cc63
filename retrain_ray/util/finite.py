"""Non-finite numbers stop a run with a clear error instead of poisoning it (issue 15).

A reward of `inf` made the loss NaN and a checkpoint was saved with NaN weights and valid checksums
(resume accepted it); a reward of NaN ended "completed" having trained nothing. Three guards:

* `check_rewards`: every reward of a step is finite, else `NonFiniteError` naming the reward
  function, the value and the completion;
* the backend refuses an optimizer step whose loss or gradient norm is not finite (weights unchanged);
* `nonfinite_tensors`: a checkpoint's weight files hold only finite values; checked when saving
  (the checkpoint is not written) and when verifying one for resume (it is skipped).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path


class NonFiniteError(ValueError):
    """A reward, loss, gradient or weight is inf or NaN."""


def check_rewards(rewards: Sequence[float], completions: Sequence[str], reward_name: str) -> None:
    for i, value in enumerate(rewards):
        if not math.isfinite(value):
            text = completions[i][:80] if i < len(completions) else ""
            raise NonFiniteError(
                f"reward {reward_name!r} returned {value!r} for completion {i} ({text!r}); rewards must be "
                "finite numbers: fix the reward function (e.g. map failures to 0.0)"
            )


def nonfinite_tensors(directory: Path, limit: int = 3) -> list[str]:
    """Names (file:tensor) of up to `limit` weight tensors under `directory` holding inf or NaN."""
    # deferred: loads torch, which importing this module does not need
    import torch
    from safetensors import safe_open

    bad: list[str] = []
    for path in sorted(Path(directory).rglob("*.safetensors")):
        with safe_open(str(path), framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118  (safe_open has no __iter__)
                tensor = fh.get_tensor(key)
                if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                    bad.append(f"{path.relative_to(directory)}:{key}")
                    if len(bad) >= limit:
                        return bad
    return bad
