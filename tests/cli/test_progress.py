"""Run progress off a terminal: one plain line every `log_every` steps, and the reward trend kept."""

from __future__ import annotations

import io

from rich.console import Console

from retrain_ray.cli.progress import ProgressObserver


def _row(step: int, reward: float) -> dict:
    return {"step": step, "phase": "rl", "mean_reward": reward, "correct_rate": reward,
            "tokens_per_second": 100.0, "loss": 0.1}


def test_off_a_terminal_prints_a_line_every_log_every_steps():
    out = io.StringIO()
    progress = ProgressObserver(10, log_every=3, console=Console(file=out, force_terminal=False, width=200))
    for step in range(7):
        progress.on_step(_row(step, step / 10))
    progress.close()
    lines = [line for line in out.getvalue().splitlines() if "step" in line]
    assert [line.split("step")[1].split("|")[0].strip() for line in lines] == ["0", "3", "6"]
    assert progress.reward_trend(window=2) == (0.05, 0.55)
