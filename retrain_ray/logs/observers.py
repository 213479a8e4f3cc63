"""RunObserver and its implementations here: Arrow files, console, fan-out, null.

`RunObserver` (defined in the leaf module retrain_ray/logs/types.py, re-exported here) is the base
every observer inherits: no-op hooks that take `**info` keyword extras.

`ArrowRunObserver` writes `metrics.arrows`, `generations.arrows` and `eval.arrows` in the run
directory (new segments on resume) and compacts each to Parquet on `close()`; with `jsonl` (`[logging]
jsonl`, on by default) it also mirrors every metrics row to `metrics.jsonl` (retrain_ray/logs/jsonl.py). `MultiObserver`
calls every observer even when one raises, then re-raises the first error.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from retrain_ray.logs.jsonl import JsonlMirror
from retrain_ray.logs.schemas import EVAL_SCHEMA, GENERATIONS_SCHEMA, METRICS_SCHEMA, row_to_record
from retrain_ray.logs.stream import ArrowStreamWriter, compact_to_parquet, segment_paths
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
