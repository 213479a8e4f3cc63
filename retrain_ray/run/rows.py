"""The metrics rows a run writes: identity columns, the RL step row and the eval row (spec 8); `timed`, the
context manager that times a step's phases into its row.

Every RL step writes a row (DESIGN.md decision 13; the original wrote none for a step that trained
nothing). `trained` says whether an optimizer update happened; on a row where none did, the columns
only an update produces (`loss`, the backend's train metrics such as `grad_norm` and `clip_fraction`,
`staleness`, `optimizer/logical_batch_sha256`) are null, never 0, while rewards, tie statistics and
timings are logged as on any step (`train_time_s` is then 0: no time went to training).
"""

from __future__ import annotations

import resource
import sys
import time
from collections.abc import Generator, Mapping, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

from retrain_ray.backends.types import BackendCapabilities, TrainStepResult
from retrain_ray.run.rollout import CORRECT_THRESHOLD, Group

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import AlgorithmSection


@dataclass(frozen=True)
class RowIdentity:
    """The columns every row of a run starts with, fixed for the run."""

    run_name: str
    condition: str
    algorithm: AlgorithmSection
    policy_loss_mode: str
    capabilities: BackendCapabilities

    def columns(self, step: int, *, phase: str) -> dict[str, object]:
        alg, caps = self.algorithm, self.capabilities
        return {
            "run": self.run_name,
            "step": step,
            "phase": phase,
            "condition": self.condition,
            "algorithm_mode": alg.algorithm_mode,
            "advantage_mode": alg.advantage_mode,
            "transform_mode": alg.transform_mode,
            "uncertainty_kind": alg.uncertainty_kind,
            "policy_loss_mode": self.policy_loss_mode,
            "backend_reports_sync_loss": caps.reports_sync_loss,
            "backend_preserves_token_advantages": caps.preserves_token_advantages,
            "loss_is_placeholder": not caps.reports_sync_loss,
            "wall_time": time.time(),
        }


@dataclass(frozen=True)
class StepRecord:
    """Everything an RL step's row is built from, named (the row adds identity and process columns)."""

    step: int
    metrics: Mapping[str, float]  # timings, rollout and credit metrics of the step
    train: TrainStepResult | None  # the update's loss and metrics; None: the step trained nothing
    sepa_lambda: float
    sepa_gate_open: bool
    running_correct_rate: float  # including this step's completions
    batch_size: int  # the sizes this step ran with
    group_size: int
    weights_version: int  # the sampler's, and the trainer's after this update
    trainer_version: int
    batch_sha256: str | None = None  # the logical batch's fingerprint (None: no update)


def build_row(identity: RowIdentity, record: StepRecord) -> dict[str, object]:
    metrics = record.metrics
    step_time = max(metrics["step_time_s"], 1e-9)
    tokens = metrics.get("tokens_per_step", 0.0)
    train = record.train
    row: dict[str, object] = {
        **identity.columns(record.step, phase="rl"),
        **metrics,
        "trained": train is not None,
        "loss": None if train is None else float(train.loss),
        "running_correct_rate": record.running_correct_rate,
        "sepa_lambda": record.sepa_lambda,
        "sepa_gate_open": record.sepa_gate_open,
        "batch_size": record.batch_size,
        "group_size": record.group_size,
        "tokens_per_second": tokens / step_time,
        "sample_share": metrics["sample_time_s"] / step_time,
        "train_share": metrics["train_time_s"] / step_time,
        "train_time_semantics": "synchronous_optimizer_update",
        "rl/train_time_s": metrics["train_time_s"],
        "process_max_rss_mb": max_rss_mb(),
        "weights_version": record.weights_version,
        "staleness": None if train is None else float(record.trainer_version - 1 - record.weights_version),
        "optimizer/logical_batch_sha256": record.batch_sha256,
    }
    if train is not None:
        row.update({k: float(v) for k, v in train.metrics.items()})
    return row


def eval_row(run_name: str, step: int, groups: Sequence[Group]) -> dict[str, object]:
    """The eval row of greedy single completions: mean reward and correct rate over the examples."""
    rewards = [g.rewards_G[0] for g in groups]
    return {
        "run": run_name,
        "step": step,
        "eval_mean_reward": sum(rewards) / len(rewards),
        "eval_correct_rate": sum(r > CORRECT_THRESHOLD for r in rewards) / len(rewards),
        "num_examples": len(rewards),
    }


def max_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


# ----------------------------------------------------------------------------------------------------
# timing: a context manager instead of time.time() pairs in the loop
@contextmanager
def timed(metrics: MutableMapping[str, float], key: str) -> Generator[None, None, None]:
    """Adds the wall time of the block, in seconds, to `metrics[key]`."""
    start = time.perf_counter()
    try:
        yield
    finally:
        metrics[key] = metrics.get(key, 0.0) + (time.perf_counter() - start)
