"""Run progress: a rich progress bar in a terminal (step, reward, correct rate, tokens/s, ETA); off a
terminal (job logs, CI, pipes) one plain line every `training.log_every` steps instead."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from retrain_ray.logs.types import RunObserver


class ProgressObserver(RunObserver):
    """RunObserver that drives a progress bar and keeps the reward history for the summary."""

    def __init__(self, total_steps: int, first_step: int = 0, *, log_every: int = 1,
                 console: Console | None = None) -> None:
        # deferred: loads pyarrow, which importing this module does not need
        from retrain_ray.logs import ConsoleObserver

        self.console = console or Console(stderr=True)
        self.rewards: list[tuple[int, float, float]] = []
        self.sft_steps = 0
        self.evals: list[dict[str, Any]] = []
        self._lines = None if self.console.is_terminal else ConsoleObserver(log_every, console=self.console)
        self._progress: Progress | None = None
        if self._lines is None:
            self._start_bar(total_steps, first_step)

    def _start_bar(self, total_steps: int, first_step: int) -> None:
        self._progress = Progress(
            TextColumn("[bold]step"),
            MofNCompleteColumn(),
            BarColumn(),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._task = self._progress.add_task("run", total=total_steps, completed=first_step, status="starting")
        self._progress.start()

    def on_step(self, row, **info: Any) -> None:
        step = int(row["step"])
        if row.get("phase") == "sft":
            self.sft_steps += 1
            status = f"warm start  loss {_shown(row, 'loss', '.3f')}"
        else:
            reward, correct = row.get("mean_reward"), row.get("correct_rate")
            if isinstance(reward, (int, float)) and isinstance(correct, (int, float)):
                self.rewards.append((step, float(reward), float(correct)))
            # an external runner's rows (run/trainers/external.py) may lack any of these
            status = (f"reward {_shown(row, 'mean_reward', '.3f')}  correct {_shown(row, 'correct_rate', '.2f')}  "
                      f"{_shown(row, 'tokens_per_second', '.0f')} tok/s")
        if self._lines is not None:
            self._lines.on_step(row)
        elif self._progress is not None:
            self._progress.update(self._task, completed=step + 1, status=status)

    def on_eval(self, row, **info: Any) -> None:
        self.evals.append(dict(row))
        self.console.log(
            f"eval {_eval_when(row['step'])}: reward {row['eval_mean_reward']:.3f}, "
            f"correct {row['eval_correct_rate']:.2f}"
        )

    def close(self, **info: Any) -> None:
        if self._progress is not None:
            self._progress.stop()

    def reward_trend(self, window: int = 5) -> tuple[float, float] | None:
        """Mean reward over the first and the last `window` RL steps."""
        if not self.rewards:
            return None
        first = [r for _, r, _ in self.rewards[:window]]
        last = [r for _, r, _ in self.rewards[-window:]]
        return sum(first) / len(first), sum(last) / len(last)


def _shown(row: Any, key: str, spec: str) -> str:
    value = row.get(key)
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def _eval_when(step: object) -> str:
    """An eval row's step as read: step -1 is `eval_at_start`'s evaluation of the untrained model."""
    return "before training" if isinstance(step, int) and step < 0 else f"@ step {step}"

