"""Arrow logs: live reads from another process, torn files, segments + dedupe, Parquet compaction,
schemas, generation sample selection, observers and run_meta.json."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from retrain_ray.logs import (
    GENERATIONS_SCHEMA,
    METRICS_SCHEMA,
    ArrowRunObserver,
    ArrowStreamWriter,
    ConsoleObserver,
    MultiObserver,
    NullObserver,
    compact_to_parquet,
    read_stream,
    row_to_record,
    segment_paths,
    select_generation_samples,
    top_indices_by_reward,
    write_run_meta,
)
from retrain_ray.logs.types import RunObserver

SCHEMA = pa.schema([("step", pa.int64()), ("loss", pa.float64())])


def _write_steps(path, steps, loss=1.0) -> ArrowStreamWriter:
    writer = ArrowStreamWriter(path, SCHEMA)
    for step in steps:
        writer.write_rows([{"step": step, "loss": loss + step}])
    return writer


def test_rows_readable_from_another_process_while_writer_open(tmp_path) -> None:
    writer = _write_steps(tmp_path / "metrics.arrows", range(3))
    code = (
        "import sys; from retrain_ray.logs import read_stream; "
        "print(read_stream(sys.argv[1])['step'].to_pylist())"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[0, 1, 2]"
    writer.close()


def test_torn_last_batch_keeps_complete_batches(tmp_path) -> None:
    path = tmp_path / "metrics.arrows"
    _write_steps(path, range(4))  # left open: no end-of-stream marker, as after a crash
    data = path.read_bytes()
    path.write_bytes(data[:-7])
    with pytest.warns(RuntimeWarning, match="torn or incomplete"):
        table = read_stream(tmp_path)
    assert table["step"].to_pylist() == [0, 1, 2]


def test_resume_writes_new_segment_and_reads_deduplicated(tmp_path) -> None:
    _write_steps(tmp_path / "metrics.arrows", range(6), loss=0.0).close()
    _write_steps(tmp_path / "metrics.arrows", range(4, 8), loss=100.0).close()
    assert [p.name for p in segment_paths(tmp_path, "metrics")] == ["metrics.arrows", "metrics.1.arrows"]
    table = read_stream(tmp_path)
    assert table["step"].to_pylist() == list(range(8))
    assert table["loss"].to_pylist() == [0, 1, 2, 3, 104, 105, 106, 107]
    assert read_stream(tmp_path / "metrics.1.arrows").num_rows == 8
    assert read_stream(tmp_path, key=None).num_rows == 10


def test_segments_sort_numerically(tmp_path) -> None:
    for i in range(12):
        _write_steps(tmp_path / "metrics.arrows", [i], loss=float(i)).close()
    assert segment_paths(tmp_path, "metrics")[-1].name == "metrics.11.arrows"
    assert read_stream(tmp_path)["step"].to_pylist() == list(range(12))


def test_missing_stream_names_directory(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="no eval.arrows stream in"):
        read_stream(tmp_path, "eval")


def test_compaction_equals_stream(tmp_path) -> None:
    _write_steps(tmp_path / "metrics.arrows", range(5)).close()
    _write_steps(tmp_path / "metrics.arrows", [3, 9]).close()
    path = compact_to_parquet(tmp_path, "metrics")
    assert path == tmp_path / "metrics.parquet"
    assert pq.read_table(path).equals(read_stream(tmp_path))
    assert not list(tmp_path.glob("*.tmp"))


def test_row_to_record_moves_numeric_unknowns_to_extras() -> None:
    record = row_to_record({"step": 2, "loss": 1, "bp_action": "hold", "bp_warmup": 1, "echo/kept_tokens": 3,
                            "custom_flag": True, "maybe": None, "extras": {"x": 0.5}})
    assert record["loss"] == 1.0 and isinstance(record["loss"], float)
    assert record["bp_warmup"] is True
    assert record["extras"] == {"x": 0.5, "echo/kept_tokens": 3.0, "custom_flag": 1.0}
    assert "maybe" not in record
    assert pa.RecordBatch.from_pylist([record], schema=METRICS_SCHEMA).num_rows == 1


def test_row_to_record_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match="'note' = 'hi' is not in METRICS_SCHEMA"):
        row_to_record({"step": 1, "note": "hi"})
    with pytest.raises(TypeError, match="'step' = 1.5"):
        row_to_record({"step": 1.5})
    with pytest.raises(TypeError, match="'loss' = 'x'"):
        row_to_record({"loss": "x"})
    with pytest.raises(ValueError, match="'phase' = 'warmup'"):
        row_to_record({"phase": "warmup"})


def test_metrics_schema_keeps_original_names() -> None:
    for name in ("mean_reward", "correct_rate", "running_correct_rate", "reward_tie_pair_rate", "sepa_lambda",
                 "max_token_hit_rate", "train_share", "policy/abs_kl", "bp_p_star", "batch_adv_std",
                 "post_plan_surprisal_var", "exec_entropy_mean", "rl/action_token_datumization_ratio",
                 "transform_mode", "weights_version", "staleness", "score_time_s", "phase", "wall_time"):
        assert name in METRICS_SCHEMA.names, name
    # ours (issue 26): whether the step updated the weights, and what the divergence watch reads
    assert METRICS_SCHEMA.field("trained").type == pa.bool_()
    for name in ("grad_norm", "weight_norm", "weight_max_abs", "weight_norm_growth"):
        assert METRICS_SCHEMA.field(name).type == pa.float64(), name
    assert METRICS_SCHEMA.field("extras").type == pa.map_(pa.string(), pa.float64())


def test_select_generation_samples_best_reward_ties_to_earlier() -> None:
    rows = select_generation_samples(
        step=4, prompts_P=["p" * 300, "q"], completions_P_G=[["a", "b" * 600, "c"], ["d", "e", "f"]],
        rewards_P_G=[[0.0, 1.0, 1.0], [0.5, 0.5, 0.5]], num_tokens_P_G=[[1, 2, 3], [4, 5, 6]],
        samples_per_prompt=2, run="r",
    )
    assert [(r["completion"][:1], r["num_tokens"]) for r in rows] == [("b", 2), ("c", 3), ("d", 4), ("e", 5)]
    assert len(rows[0]["prompt"]) == 200 and len(rows[0]["completion"]) == 500
    assert pa.RecordBatch.from_pylist(rows, schema=GENERATIONS_SCHEMA).num_rows == 4


@given(st.lists(st.sampled_from([0.0, 0.5, 1.0]), min_size=1, max_size=12), st.integers(0, 14))
def test_top_indices_property(rewards: list[float], n: int) -> None:
    chosen = top_indices_by_reward(rewards, n)
    assert len(chosen) == min(n, len(rewards)) and len(set(chosen)) == len(chosen)
    rest = [i for i in range(len(rewards)) if i not in chosen]
    for c in chosen:
        for r in rest:
            assert rewards[c] > rewards[r] or (rewards[c] == rewards[r] and c < r)


def test_arrow_run_observer_writes_streams_and_parquet(tmp_path) -> None:
    observer = ArrowRunObserver(tmp_path, "run-a")
    assert isinstance(observer, RunObserver)
    for step in range(3):
        observer.on_step({"step": step, "mean_reward": step / 2, "phase": "rl", "echo/x": 1})
    observer.on_generations([{"step": 1, "prompt": "p", "completion": "c", "reward": 1.0, "num_tokens": 3}])
    observer.on_eval({"step": 2, "eval_mean_reward": 0.5, "eval_correct_rate": 0.25, "num_examples": 8})
    observer.on_checkpoint(2, tmp_path)
    assert read_stream(tmp_path)["mean_reward"].to_pylist() == [0.0, 0.5, 1.0]
    observer.close()
    metrics = pq.read_table(tmp_path / "metrics.parquet")
    assert metrics["run"].to_pylist() == ["run-a"] * 3
    assert metrics["extras"].to_pylist()[0] == [("echo/x", 1.0)]
    assert metrics["wall_time"].null_count == 0
    assert pq.read_table(tmp_path / "generations.parquet")["completion"].to_pylist() == ["c"]
    assert pq.read_table(tmp_path / "eval.parquet")["eval_correct_rate"].to_pylist() == [0.25]

    resumed = ArrowRunObserver(tmp_path, "run-a")
    resumed.on_step({"step": 2, "mean_reward": 9.0})
    resumed.on_step({"step": 3, "mean_reward": 9.5})
    resumed.close()
    assert pq.read_table(tmp_path / "metrics.parquet")["mean_reward"].to_pylist() == [0.0, 0.5, 9.0, 9.5]
    assert not (tmp_path / "eval.1.arrows").exists()


class _Failing(NullObserver):
    def close(self, **info: Any) -> None:
        raise RuntimeError("boom")


class _Recording(NullObserver):
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.closed = False

    def on_step(self, row, **info: Any) -> None:
        self.steps.append(row["step"])

    def close(self, **info: Any) -> None:
        self.closed = True


def test_multi_observer_closes_all_even_if_one_raises() -> None:
    first, last = _Recording(), _Recording()
    multi = MultiObserver(first, _Failing(), last)
    multi.on_step({"step": 7})
    with pytest.raises(RuntimeError, match="boom"):
        multi.close()
    assert first.steps == last.steps == [7] and first.closed and last.closed


def test_console_observer_prints_every_log_every_steps() -> None:
    buffer = io.StringIO()
    observer = ConsoleObserver(log_every=2, console=Console(file=buffer, width=200, color_system=None))
    for step in range(4):
        observer.on_step({"step": step, "mean_reward": 0.25, "correct_rate": 0.5, "tokens_per_second": 1234.0})
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 2 and "step     0" in lines[0] and "reward 0.250" in lines[0] and "1,234 tok/s" in lines[0]


def test_write_run_meta_atomic_json(tmp_path) -> None:
    path = write_run_meta(tmp_path / "run", {"seed": 3, "dir": tmp_path})
    assert json.loads(path.read_text()) == {"dir": str(tmp_path), "seed": 3}
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["run_meta.json"]


def test_segments_with_a_widened_schema_read_as_one_table(tmp_path) -> None:
    _write_steps(tmp_path / "metrics.arrows", [0, 1]).close()
    wider = SCHEMA.append(pa.field("kl", pa.float64()))
    with ArrowStreamWriter(tmp_path / "metrics.arrows", wider) as writer:
        writer.write_rows([{"step": 1, "loss": 5.0, "kl": 0.1}, {"step": 2, "loss": 6.0, "kl": 0.2}])
    table = read_stream(tmp_path)
    assert table.to_pylist() == [{"step": 0, "loss": 1.0, "kl": None}, {"step": 1, "loss": 5.0, "kl": 0.1},
                                 {"step": 2, "loss": 6.0, "kl": 0.2}]
