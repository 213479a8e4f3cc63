"""Contract between the RunLoop and the world around it.

The RunLoop knows nothing about Ray: the campaign layer passes in observers (Arrow files, Tune
reports, the Ray recorder actor; all subclasses of `RunObserver`), a back-pressure advisor and a
throttle (behind their Protocols). Rows are plain dicts of str -> (int | float | str | bool) so they pickle cheaply.

The outcome contract, one way each:

* A run that reaches `max_steps` RETURNS a `RunOutcome` with status "completed" (last step, last
  metrics row, final checkpoint directory).
* A run that cannot finish RAISES, and nothing is returned: `NonFiniteError` (a non-finite reward,
  loss or weight; its subclass `DivergenceError` when an update blew up and `[training]
  stop_on_divergence` is on: run/divergence.py), `RewardTimeoutError` (a custom reward past its timeout), `ConfigError` /
  `PreflightError` before the first step, or whatever the failing component raised (a reward
  plugin's exception, an engine or backend error). The last checkpoint written stays valid.

Callers build on that: `retrain-ray train` exits 2 on config/preflight errors, 1 on a failed run
(one clear message for NonFiniteError / RewardTimeoutError, the traceback otherwise); a campaign trial lets the exception reach Tune, which retries the run from its last
checkpoint up to `[campaign].max_failures` times, then the manifest records the run as "failed"
with the error and `CampaignResults.errors` holds a `RunError` naming it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from retrain_ray.logs.types import MetricsRow, RunObserver

__all__ = ["MetricsRow", "RunObserver", "RunOutcome", "RunStatus"]

RunStatus = Literal["completed"]  # failures raise (see the module docstring)


@dataclass(frozen=True)
class RunOutcome:
    """What a completed run returns to its caller. Picklable."""

    run_name: str
    status: RunStatus
    last_step: int
    metrics: dict[str, object] = field(default_factory=dict)
    checkpoint_dir: Path | None = None
    first_step_at: float | None = None  # time.time() when this process finished its first step (row or not)
