"""The back-pressure log: one Arrow IPC stream row per observation and its decision.

A record batch of one row is written and flushed per observation, so the file is readable while it
is written and a crash loses at most a partial last batch (DESIGN decision 5). An existing file is
never overwritten: a second writer (e.g. a resumed campaign) picks `backpressure.1.arrows`, ...
"""

from __future__ import annotations

import time
from pathlib import Path

import pyarrow as pa

from retrain_ray.backpressure.pooled import PooledDecision
from retrain_ray.backpressure.types import Decision, StepObservation

BP_SCHEMA = pa.schema([
    ("time", pa.float64()), ("run", pa.string()), ("step", pa.int64()), ("resource", pa.string()),
    ("p", pa.float64()), ("tokens", pa.int64()), ("step_time_s", pa.float64()),
    ("sample_time_s", pa.float64()), ("skipped", pa.bool_()), ("endpoint_errors", pa.int64()),
    ("throughput", pa.float64()), ("ema_throughput", pa.float64()), ("sigma", pa.float64()),
    ("kappa", pa.float64()), ("lambda", pa.float64()), ("p_star", pa.float64()),
    ("regime", pa.string()), ("action", pa.string()), ("recommended_batch_size", pa.int64()),
    ("pooled_p_star", pa.float64()), ("pooled_sigma", pa.float64()), ("pooled_kappa", pa.float64()),
    ("capacity", pa.int64()), ("pooled_phase", pa.string()),
])


def free_log_path(directory: Path, stem: str = "backpressure") -> Path:
    """`<stem>.arrows`, or the first `<stem>.<n>.arrows` that does not exist yet."""
    path, n = directory / f"{stem}.arrows", 0
    while path.exists():
        n += 1
        path = directory / f"{stem}.{n}.arrows"
    return path


def _row(obs: StepObservation, d: Decision, pooled: PooledDecision | None) -> dict[str, list]:
    p = float(max(1, obs.batch_size) * max(1, obs.group_size))
    x = obs.total_tokens / obs.step_time_s if obs.step_time_s > 0 else 0.0
    values = {
        "time": time.time(), "run": obs.run_id, "step": obs.step, "resource": obs.resource, "p": p,
        "tokens": int(obs.total_tokens), "step_time_s": obs.step_time_s,
        "sample_time_s": obs.sample_time_s, "skipped": obs.skipped,
        "endpoint_errors": obs.endpoint_errors, "throughput": x, "ema_throughput": d.throughput,
        "sigma": d.sigma, "kappa": d.kappa, "lambda": d.lam, "p_star": d.p_star, "regime": d.regime,
        "action": d.action, "recommended_batch_size": d.recommended_batch_size,
        "pooled_p_star": pooled.p_star if pooled else None, "pooled_sigma": pooled.sigma if pooled else None,
        "pooled_kappa": pooled.kappa if pooled else None, "capacity": pooled.capacity if pooled else None,
        "pooled_phase": pooled.phase if pooled else None,
    }
    return {k: [v] for k, v in values.items()}


class DecisionLog:
    """Append-only Arrow stream of observations and decisions."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._sink = pa.OSFile(str(self.path), "wb")
        self._writer = pa.ipc.new_stream(self._sink, BP_SCHEMA)

    def write(self, obs: StepObservation, d: Decision, pooled: PooledDecision | None) -> None:
        self._writer.write_batch(pa.record_batch(_row(obs, d, pooled), schema=BP_SCHEMA))
        self._sink.flush()

    def close(self) -> None:
        self._writer.close()
        self._sink.close()


def read_decision_log(path: Path) -> pa.Table:
    """Read a (possibly still open) back-pressure log; a partial last batch is dropped."""
    batches = []
    with pa.OSFile(str(path), "rb") as f:
        reader = pa.ipc.open_stream(f)
        try:
            for batch in reader:
                batches.append(batch)
        except (pa.ArrowInvalid, OSError):
            pass
    return pa.Table.from_batches(batches, schema=BP_SCHEMA)
