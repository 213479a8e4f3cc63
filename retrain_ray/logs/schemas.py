"""Fixed Arrow schemas of a run's logs, and the row -> record conversion that enforces them.

`METRICS_SCHEMA` keeps the original's metric names (spec section 8) that a local run produces,
plus ours (sync/score/advantage timings, weights version, staleness, phase, wall time, `trained`,
and the update's gradient and weight norms that the divergence watch reads). Any other
numeric metric (echo/*, transform extras, backend counters) goes into the `extras` map, so the
schema never changes between runs and every segment of a run reads back as one table.
"""

from __future__ import annotations

import datetime as dt
import numbers
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

F64, I64, STR, BOOL = pa.float64(), pa.int64(), pa.string(), pa.bool_()
WALL_TIME = pa.timestamp("us", tz="UTC")

_IDENTITY = [("run", STR), ("step", I64), ("condition", STR), ("phase", STR), ("wall_time", WALL_TIME)]
_MODES = ["algorithm_mode", "advantage_mode", "transform_mode", "uncertainty_kind", "policy_loss_mode",
          "train_time_semantics", "bp_action", "bp_regime", "optimizer/logical_batch_sha256", "sampled_adapter"]
_FLAGS = ["backend_reports_sync_loss", "backend_preserves_token_advantages", "loss_is_placeholder",
          "sepa_gate_open", "bp_warmup", "trained"]
_COUNTS = ["num_datums", "batch_size", "group_size", "tokens_per_step", "weights_version", "staleness",
           "reward_tie_eligible_groups", "reward_tie_groups", "reward_uniform_groups", "batch_adv_count",
           "rl/completion_tokens", "rl/sampled_action_tokens", "rl/eligible_action_tokens",
           "rl/pre_optimizer_nonzero_advantage_action_tokens", "rl/optimizer_nonzero_advantage_action_tokens",
           "rl/nonzero_advantage_action_tokens"]
_SURPRISAL = [f"{prefix}_{stat}" for prefix in ("exec_surprisal", "plan_surprisal", "post_exec_surprisal",
              "post_plan_surprisal", "exec_entropy", "plan_entropy") for stat in ("mean", "var")]
_FLOATS = ["loss", "mean_reward", "correct_rate", "running_correct_rate",
           "reward_tie_group_rate", "reward_uniform_group_rate", "reward_tie_pair_rate",
           "reward_unique_fraction_mean", "sepa_lambda", "max_token_hit_rate",
           "step_time_s", "sample_time_s", "train_time_s", "train_share", "sample_share",
           "tokens_per_second", "process_max_rss_mb",
           "sync_time_s", "score_time_s", "advantage_time_s", "shared_batch_runs", "engine_wait_s",
           "bp_p_star", "bp_sigma", "bp_kappa", "bp_utilization", "bp_throughput",
           "clip_fraction", "policy/cov_fraction", "policy/abs_kl", "adv_cap_fraction", "adv_cap_magnitude",
           "batch_adv_mean", "batch_adv_std", *_SURPRISAL,
           "rl/action_token_datumization_ratio", "rl/completion_surprisal_mean", "rl/train_time_s",
           "grad_norm", "weight_norm", "weight_max_abs", "weight_norm_growth", "lr",
           "bp_intensity", "bp_ridge", "bp_achieved_gflops", "bp_achieved_gb_s",
           "sft_probe_correct_rate"]  # a column, not an extra: explain --calibrate reads it by name

EXTRAS = "extras"
METRICS_SCHEMA = pa.schema(
    _IDENTITY
    + [(name, STR) for name in _MODES]
    + [(name, BOOL) for name in _FLAGS]
    + [(name, I64) for name in _COUNTS]
    + [(name, F64) for name in _FLOATS]
    + [(EXTRAS, pa.map_(STR, F64))]
)
SURPRISAL_TOKENS = pa.list_(pa.struct([("pos", I64), ("surprisal", F64), ("token", STR)]))
GENERATIONS_SCHEMA = pa.schema(
    [("run", STR), ("step", I64), ("prompt", STR), ("completion", STR), ("reward", F64), ("num_tokens", I64),
     ("top_surprisal_tokens", SURPRISAL_TOKENS)]  # null unless [logging] generation_top_surprisal_limit > 0
)
EVAL_SCHEMA = pa.schema(
    [("run", STR), ("step", I64), ("eval_mean_reward", F64), ("eval_correct_rate", F64), ("num_examples", I64)]
)
PHASES = ("rl", "sft")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real)


def _coerce(name: str, value: Any, kind: pa.DataType) -> Any:
    """Convert one value to what `kind` stores, or raise naming the key, the value and the type."""
    if value is None:
        return None
    if kind == STR and isinstance(value, str):
        return value
    if kind == BOOL and (isinstance(value, bool) or value in (0, 1)):
        return bool(value)
    if kind == I64 and _is_number(value) and not isinstance(value, bool) and float(value).is_integer():
        return int(value)
    if kind == F64 and _is_number(value):
        return float(value)
    if kind == SURPRISAL_TOKENS and isinstance(value, list):
        return value
    if kind == WALL_TIME and isinstance(value, dt.datetime | float | int) and not isinstance(value, bool):
        return value if isinstance(value, dt.datetime) else dt.datetime.fromtimestamp(value, dt.timezone.utc)
    raise TypeError(f"metric {name!r} = {value!r} does not fit the log schema type {kind}; pass a {kind} value")


def _extras_value(name: str, value: Any) -> float:
    if not _is_number(value):
        raise ValueError(
            f"metric {name!r} = {value!r} is not in METRICS_SCHEMA and is not numeric; only numeric extra "
            "metrics are logged (they go into `extras`): make it a number or add it to METRICS_SCHEMA"
        )
    return float(value)


def row_to_record(row: Mapping[str, Any], schema: pa.Schema = METRICS_SCHEMA) -> dict[str, Any]:
    """Fit a metrics row to `schema`: coerce known keys, move unknown numeric keys into `extras`.

    Unknown keys whose value is None are dropped; unknown non-numeric keys are an error.
    """
    record: dict[str, Any] = {}
    extras: dict[str, float] = dict(row.get(EXTRAS) or {})
    has_extras = EXTRAS in schema.names
    for name, value in row.items():
        if name == EXTRAS:
            continue
        index = schema.get_field_index(name)
        if index >= 0:
            record[name] = _coerce(name, value, schema.field(index).type)
        elif value is not None and has_extras:
            extras[name] = _extras_value(name, value)
        elif value is not None:
            raise ValueError(f"key {name!r} is not a column of this log (columns: {schema.names})")
    if record.get("phase") not in (None, *PHASES):
        raise ValueError(f"metric 'phase' = {record['phase']!r}; use one of {PHASES}")
    if has_extras:
        record[EXTRAS] = extras
    return record
