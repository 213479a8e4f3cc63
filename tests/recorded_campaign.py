"""A small campaign directory written by our own recorder (RecorderCore), for results/plot/status tests.

Two conditions x three seeds, 12 steps each. Reward rises with the step (faster for "fast"), with a
per-seed offset, so curves, bands and the best run are known. Steps 8..9 of every run are written
twice, the second time by a "resumed" recorder (a new stream segment) with different values, as a
resumed campaign re-logs the steps after its last checkpoint; readers must keep the second write.
"""

from __future__ import annotations

from pathlib import Path

from retrain_ray.campaign.recorder import RecorderCore
from retrain_ray.logs.manifest import Manifest

CONDITIONS = ("slow", "fast")
SEEDS = (1, 2, 3)
STEPS = 12
RESUME_AT = 8


def run_name(condition: str, seed: int) -> str:
    return f"{condition}_s{seed}"


def reward(condition: str, seed: int, step: int, resumed: bool = False) -> float:
    rate = 0.06 if condition == "fast" else 0.02
    return 0.1 + rate * step + 0.01 * seed + (0.001 if resumed else 0.0)


T0 = 1_700_000_000.0
SECONDS_PER_STEP = 2.0


def metrics_row(condition: str, seed: int, step: int, resumed: bool = False) -> dict:
    r = reward(condition, seed, step, resumed)
    return {"step": step, "wall_time": T0 + SECONDS_PER_STEP * step, "condition": condition, "phase": "rl", "mean_reward": r, "correct_rate": r / 2,
            "loss": 1.0 - r, "policy/abs_kl": 0.001 * step, "tokens_per_second": 100.0 + seed,
            "step_time_s": 0.5, "echo/custom": 1.5}


def write_campaign(campaign_dir: Path, *, close: bool = True, parquet_every_s: float = 0.0,
                   steps: int = STEPS, max_steps: int = STEPS, failed: str | None = None,
                   pending: str | None = None) -> RecorderCore:
    """Writes manifest + logs; with `close=False` the second recorder's writers stay open (a live run)."""
    runs = [{"run_name": run_name(c, s), "condition": c, "seed": s, "max_steps": max_steps}
            for c in CONDITIONS for s in SEEDS]
    manifest = Manifest.create(campaign_dir, {"name": campaign_dir.name, "conditions": list(CONDITIONS),
                                              "seeds": list(SEEDS), "max_steps": max_steps,
                                              "max_concurrent": 2}, runs)
    first = RecorderCore(campaign_dir, parquet_every_s=parquet_every_s)
    written = [(c, s) for c in CONDITIONS for s in SEEDS if run_name(c, s) != pending]
    for c, s in written:
        name = run_name(c, s)
        first.append(name, "metrics", [metrics_row(c, s, t) for t in range(min(RESUME_AT + 2, steps))])
        first.append(name, "generations", [{"step": 0, "prompt": "p", "completion": "x", "reward": 0.0,
                                            "num_tokens": 3}])
    first.close()
    second = RecorderCore(campaign_dir, parquet_every_s=parquet_every_s)
    for c, s in written:
        name = run_name(c, s)
        second.append(name, "metrics", [metrics_row(c, s, t, resumed=True) for t in range(RESUME_AT, steps)])
        second.append(name, "eval", [{"step": steps - 1, "eval_mean_reward": reward(c, s, steps),
                                      "eval_correct_rate": 0.5, "num_examples": 8}])
        manifest.update_run(name, status="running", attempts=2)
    for c, s in written:
        status = "failed" if run_name(c, s) == failed else "completed" if close else "running"
        manifest.update_run(run_name(c, s), status=status, error="boom" if status == "failed" else "")
    if close:
        second.close()
    return second


def recorded_campaign_dir(tmp_path_factory, name: str) -> Path:
    """A fresh directory holding the recorded campaign, closed, with no Parquet rewrite during the write."""
    directory = tmp_path_factory.mktemp(name) / "recorded"
    directory.mkdir()
    write_campaign(directory, parquet_every_s=3600.0)
    return directory
