"""RunObserver and its implementations here: Arrow files, console, fan-out, null.

`RunObserver` (defined in the leaf module retrain_ray/logs/types.py, re-exported here) is the base
every observer inherits: no-op hooks that take `**info` keyword extras.

`ArrowRunObserver` writes `metrics.arrows`, `generations.arrows` and `eval.arrows` in the run
directory (new segments on resume) and compacts each to Parquet on `close()`; with `jsonl` (`[logging]
jsonl`, on by default) it also mirrors every metrics row to `metrics.jsonl` (retrain_ray/logs/observers.py). `MultiObserver`
calls every observer even when one raises, then re-raises the first error.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import pyarrow as pa

from retrain_ray.logs.schemas import EVAL_SCHEMA, EXTRAS, GENERATIONS_SCHEMA, METRICS_SCHEMA, row_to_record
from retrain_ray.logs.stream import (
    ArrowStreamWriter,
    compact_to_parquet,
    read_stream,
    segment_paths,
    write_atomically,
)
from retrain_ray.logs.types import MetricsRow, RunObserver

__all__ = ["ArrowRunObserver", "ConsoleObserver", "MultiObserver", "NullObserver", "RunObserver"]

STREAMS: dict[str, pa.Schema] = {"metrics": METRICS_SCHEMA, "generations": GENERATIONS_SCHEMA, "eval": EVAL_SCHEMA}


class NullObserver(RunObserver):
    """Discards everything (every hook is the base's no-op)."""


class ArrowRunObserver(RunObserver):
    """Writes a run's metrics, generations and eval rows to Arrow streams; Parquet on close."""

    def __init__(self, run_dir: str | Path, run_name: str, *, fsync: bool = False, jsonl: bool = True) -> None:
        self.run_dir = Path(run_dir)
        self.run_name = run_name
        self.writers = {name: ArrowStreamWriter(self.run_dir / f"{name}.arrows", schema, fsync=fsync)
                        for name, schema in STREAMS.items()}
        self.jsonl = JsonlMirror(self.run_dir) if jsonl else None

    def _record(self, row: MetricsRow, name: str) -> dict[str, Any]:
        return row_to_record({"run": self.run_name, **row}, STREAMS[name])

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        stamped = {"wall_time": dt.datetime.now(dt.timezone.utc), **row}
        records = [self._record(stamped, "metrics")]
        self.writers["metrics"].write_rows(records)
        if self.jsonl is not None:
            self.jsonl.write_records(records)

    def on_generations(self, rows: list[MetricsRow], **info: Any) -> None:
        self.writers["generations"].write_rows([self._record(row, "generations") for row in rows])

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self.writers["eval"].write_rows([self._record(row, "eval")])

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        """Nothing to do: every row is already on disk when its call returns."""

    def close(self, **info: Any) -> None:
        if self.jsonl is not None:
            self.jsonl.close()
        for name, writer in self.writers.items():
            writer.close()
            if segment_paths(self.run_dir, name):
                compact_to_parquet(self.run_dir, name)


class ConsoleObserver(RunObserver):
    """Prints one compact line every `log_every` steps (and every eval) with rich."""

    def __init__(self, log_every: int = 1, console: Any = None, run_name: str = "") -> None:
        # deferred: loads rich, which importing this module does not need
        from rich.console import Console

        if log_every < 1:
            raise ValueError(f"ConsoleObserver log_every must be >= 1, got {log_every}")
        self.log_every = log_every
        self.console = console or Console()
        self.prefix = f"[bold]{run_name}[/bold] " if run_name else ""

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        step = int(row.get("step", 0))
        if step % self.log_every:
            return
        phase = row.get("phase", "rl")
        self.console.print(
            f"{self.prefix}{phase} step {step:>5} | reward {_fmt(row.get('mean_reward'), '.3f')} | "
            f"correct {_fmt(row.get('correct_rate'), '.2f')} | {_fmt(row.get('tokens_per_second'), ',.0f')} tok/s | "
            f"loss {_fmt(row.get('loss'), '.4f')}"
        )

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self.console.print(
            f"{self.prefix}eval step {int(row.get('step', 0)):>5} | reward {_fmt(row.get('eval_mean_reward'), '.3f')} | "
            f"correct {_fmt(row.get('eval_correct_rate'), '.2f')} | n={row.get('num_examples', '-')}"
        )


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


class MultiObserver(RunObserver):
    """Fans every call out to all observers; one failing does not stop the others."""

    def __init__(self, *observers: RunObserver) -> None:
        self.observers = list(observers)

    def _each(self, call: Callable[[RunObserver], None]) -> None:
        errors = []
        for observer in self.observers:
            try:
                call(observer)
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def on_step(self, row: MetricsRow, **info: Any) -> None:
        self._each(lambda o: o.on_step(row, **info))

    def on_generations(self, rows: list[MetricsRow], **info: Any) -> None:
        self._each(lambda o: o.on_generations(rows, **info))

    def on_eval(self, row: MetricsRow, **info: Any) -> None:
        self._each(lambda o: o.on_eval(row, **info))

    def on_checkpoint(self, step: int, directory: Path, **info: Any) -> None:
        self._each(lambda o: o.on_checkpoint(step, directory, **info))

    def close(self, **info: Any) -> None:
        self._each(lambda o: o.close(**info))


# Which completions go into the generation log (spec 1.5).
#
# Per prompt, the `samples_per_prompt` completions with the highest reward, ties going to the
# earlier sample index; prompts are cut to 200 characters and completions to 500, as the original.
# With `[logging] generation_top_surprisal_limit` = N > 0 each row also carries `top_surprisal_tokens`: the N
# tokens of the completion with the highest surprisal (-logprob of the sampled token, rounded to 4 places),
# highest first, ties to the earlier position, each as {pos, surprisal, token} with the tokenizer's own token
# string (`convert_ids_to_tokens`), as the original's rows (which always kept 10).
PROMPT_PREVIEW_CHARS = 200
COMPLETION_PREVIEW_CHARS = 500


def top_indices_by_reward(rewards_G: Sequence[float], n: int) -> list[int]:
    """Indices of the `n` highest rewards, best first; equal rewards keep index order."""
    order = sorted(range(len(rewards_G)), key=lambda i: (-rewards_G[i], i))
    return order[: max(n, 0)]


TopSurprisal = Callable[[int, int], list[dict[str, object]]]
"""(prompt index, sample index) -> the sample's `top_surprisal_tokens` entries."""


def top_surprisal_tokens(logprobs_T: Sequence[float], tokens_T: Sequence[str], limit: int) -> list[dict[str, object]]:
    """The `limit` highest-surprisal tokens of one completion, highest first, equal ones by position."""
    n = min(len(logprobs_T), len(tokens_T))
    order = sorted(range(n), key=lambda t: (logprobs_T[t], t))  # lowest logprob = highest surprisal
    return [{"pos": t, "surprisal": round(-logprobs_T[t], 4), "token": tokens_T[t]} for t in order[: max(limit, 0)]]


def select_generation_samples(
    *,
    step: int,
    prompts_P: Sequence[str],
    completions_P_G: Sequence[Sequence[str]],
    rewards_P_G: Sequence[Sequence[float]],
    num_tokens_P_G: Sequence[Sequence[int]],
    samples_per_prompt: int,
    run: str = "",
    top_surprisal: TopSurprisal | None = None,
) -> list[MetricsRow]:
    """Rows for GENERATIONS_SCHEMA: the best `samples_per_prompt` completions of each prompt (with
    `top_surprisal_tokens` from `top_surprisal` when given)."""
    if not (len(prompts_P) == len(completions_P_G) == len(rewards_P_G) == len(num_tokens_P_G)):
        raise ValueError(
            "select_generation_samples: prompts, completions, rewards and num_tokens need one entry per prompt; "
            f"got {len(prompts_P)}, {len(completions_P_G)}, {len(rewards_P_G)}, {len(num_tokens_P_G)}"
        )
    rows: list[MetricsRow] = []
    for p, prompt in enumerate(prompts_P):
        for g in top_indices_by_reward(rewards_P_G[p], samples_per_prompt):
            rows.append({
                "run": run,
                "step": step,
                "prompt": prompt[:PROMPT_PREVIEW_CHARS],
                "completion": completions_P_G[p][g][:COMPLETION_PREVIEW_CHARS],
                "reward": float(rewards_P_G[p][g]),
                "num_tokens": int(num_tokens_P_G[p][g]),
                **({"top_surprisal_tokens": top_surprisal(p, g)} if top_surprisal is not None else {}),
            })
    return rows


# `metrics.jsonl`: a JSON-lines copy of a run's metrics stream, for `tail -f` and `jq` (as the original's).
#
# The Arrow stream stays the record; this file mirrors it, one JSON object per logged step, appended and
# flushed when the step's row is written, by the writer of the Arrow stream (the run's `ArrowRunObserver`,
# or in a campaign the recorder actor). A line holds the row's non-null columns with the `extras` map
# flattened into top-level keys (the original's flat metric names, e.g. `echo/...`) and `wall_time` as an
# ISO 8601 string. JSON has no NaN or infinity: a non-finite float is written as null.
#
# Resume: a resumed run logs again the steps after its checkpoint, and the Arrow readers keep the last
# write of each step. This file does the same on the spot: at a writer's first rows, and whenever a row's
# step is not after the last step it wrote, the file is rewritten atomically (temporary file + rename) from
# the de-duplicated Arrow log, keeping the steps before that row, and the new rows are appended; a resumed
# run leaves one line per step. `[logging] jsonl = false` writes no file.
JSONL = "metrics.jsonl"


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dt.datetime):
        return value.isoformat()
    return value


def json_object(record: Mapping[str, Any]) -> dict[str, Any]:
    """One metrics record (as written to, or read back from, the Arrow stream) as its JSON object."""
    out = {name: _json_value(value) for name, value in record.items() if name != EXTRAS and value is not None}
    extras = record.get(EXTRAS) or {}
    pairs: Iterable[tuple[str, Any]] = extras.items() if isinstance(extras, Mapping) else extras
    out.update((name, _json_value(value)) for name, value in pairs if name not in out)
    return out


def json_line(record: Mapping[str, Any]) -> str:
    return json.dumps(json_object(record), allow_nan=False, separators=(",", ":")) + "\n"


def logged_records(run_dir: Path, before_step: int | None = None) -> list[dict[str, Any]]:
    """The de-duplicated metrics rows of the run's Arrow log (steps before `before_step` if given)."""
    if not segment_paths(run_dir, "metrics"):
        return []
    rows = read_stream(run_dir, "metrics").to_pylist()
    return [r for r in rows if before_step is None or r["step"] < before_step]


def rewrite_jsonl(run_dir: str | Path, before_step: int | None = None) -> int:
    """Rewrites `<run_dir>/metrics.jsonl` atomically from the Arrow log; returns the last step kept (-1: none)."""
    run_dir = Path(run_dir)
    records = logged_records(run_dir, before_step)
    text = "".join(json_line(r) for r in records)
    write_atomically(run_dir / JSONL, lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return max((int(r["step"]) for r in records), default=-1)


class JsonlMirror:
    """Appends a run's metrics records to `<run_dir>/metrics.jsonl`, after the Arrow stream has them."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        self._handle: IO[str] | None = None
        self._last_step = -1

    def write_records(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Call after the same records reached the Arrow stream (the rewind reads them back from it)."""
        if not records:
            return
        first = int(records[0]["step"])
        if self._handle is None or first <= self._last_step:
            self._rewind(first)
        handle = self._handle
        assert handle is not None
        handle.write("".join(json_line(r) for r in records))
        handle.flush()
        self._last_step = max(self._last_step, *(int(r["step"]) for r in records))

    def _rewind(self, before_step: int) -> None:
        self.close()
        self._last_step = rewrite_jsonl(self.run_dir, before_step)
        self._handle = open(self.run_dir / JSONL, "a", encoding="utf-8")  # noqa: SIM115  (closed in close())

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
