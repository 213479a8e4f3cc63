"""Where a run's wall time goes, and what to turn (seed 004: model, verification or network).

Pure functions over metric rows (dicts, as the Arrow log holds them). Each row's `step_time_s` is
split into sampling, scoring, advantages, training, weight sync, waiting (any `*wait*_s` column: a
throttle or a shared engine; the wait happens while sampling, so it is taken out of sampling) and
the rest (logging, orchestration: the step time no part accounts for). A missing part counts 0, so
warm-start rows and rows of steps that did not train (`trained = false`) add what they have.
Shares are of the summed step times: a slow step weighs what it cost.

The verdict groups the parts: model = sampling + training + sync + advantages, verification =
scoring, network = waiting (plus sampling when the engine retried endpoint errors: a remote
sampler's time is the network's), orchestration = the rest. The largest group is the bottleneck.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from numbers import Real

PARTS = ("sample", "score", "advantage", "train", "sync", "wait", "other")
_COLUMNS = {"sample": "sample_time_s", "score": "score_time_s", "advantage": "advantage_time_s",
            "train": "train_time_s", "sync": "sync_time_s"}
PART_COLUMNS = _COLUMNS  # part -> the column that times it (results/bottleneck_frames.py reads them)

KNOBS = {
    "model": "sampling and training dominate: lower `max_tokens` (shorter completions cost less of both; "
             "check max_token_hit_rate), or run fewer runs per GPU (`max_workers`)",
    "verification": "scoring dominates: raise `[reward] workers` (up to the cores a run has, "
                    "campaign.cpus_per_run) or make the reward cheaper",
    "network": "throttle waits / the endpoint dominate: raise `max_concurrent` if the endpoint is healthy, "
               "lower it (or `max_workers`) if it returns errors (endpoint retries)",
    "orchestration": "the unaccounted rest (logging, checkpoints, orchestration) dominates: run fewer runs "
                     "at once (`max_workers`), log or checkpoint less often",
}


@dataclass(frozen=True)
class Breakdown:
    """Seconds per part over some steps, and what they add up to."""

    seconds: dict[str, float]
    step_time_s: float
    steps: int
    endpoint_retries: float

    @property
    def shares(self) -> dict[str, float]:
        total = self.step_time_s or 1.0
        return {part: self.seconds[part] / total for part in PARTS}

    @property
    def groups(self) -> dict[str, float]:
        s = self.shares
        remote = self.endpoint_retries > 0
        return {
            "model": s["train"] + s["sync"] + s["advantage"] + (0.0 if remote else s["sample"]),
            "verification": s["score"],
            "network": s["wait"] + (s["sample"] if remote else 0.0),
            "orchestration": s["other"],
        }

    @property
    def bottleneck(self) -> str:
        groups = self.groups
        return max(groups, key=lambda name: groups[name])

    @property
    def knob(self) -> str:
        return KNOBS[self.bottleneck]

    def to_dict(self) -> dict[str, object]:
        return {"steps": self.steps, "step_time_s": self.step_time_s, "seconds": self.seconds,
                "shares": self.shares, "groups": self.groups, "bottleneck": self.bottleneck, "knob": self.knob}


def _number(row: Mapping[str, object], key: str) -> float:
    value = row.get(key)
    if not isinstance(value, (Real, str)):  # numpy's numbers too
        return 0.0
    try:
        number = float(value)
    except ValueError:
        return 0.0
    return number if number == number else 0.0  # NaN (a column other rows have) counts 0


def split_row(row: Mapping[str, object]) -> dict[str, float]:
    """Seconds of one step per part; the parts add up to the row's `step_time_s` (the rest >= 0)."""
    parts = {part: _number(row, column) for part, column in _COLUMNS.items()}
    parts["wait"] = sum(_number(row, k) for k in row if "wait" in k and k.endswith("_s"))
    parts["sample"] = max(0.0, parts["sample"] - parts["wait"])
    accounted = sum(parts.values())
    parts["other"] = max(0.0, _number(row, "step_time_s") - accounted)
    return parts


def breakdown(rows: Iterable[Mapping[str, object]]) -> Breakdown:
    """The parts of every row, summed."""
    seconds: dict[str, float] = dict.fromkeys(PARTS, 0.0)
    steps, retries = 0, 0.0
    for row in rows:
        for part, value in split_row(row).items():
            seconds[part] += value
        steps += 1
        retries += _number(row, "endpoint_errors")
    return Breakdown(seconds=seconds, step_time_s=sum(seconds.values()), steps=steps, endpoint_retries=retries)


def by_condition(runs: Mapping[str, tuple[str, Sequence[Mapping[str, object]]]]) -> dict[str, Breakdown]:
    """`{run: (condition, rows)}` -> one breakdown per condition over all its runs' rows."""
    grouped: dict[str, list[Mapping[str, object]]] = {}
    for condition, rows in runs.values():
        grouped.setdefault(condition, []).extend(rows)
    return {condition: breakdown(rows) for condition, rows in sorted(grouped.items())}
