"""benchmarks/shared_trainer.py's RL step and `make gpu-check`'s shared-trainer part run (here on the CPU,
tiny sizes) and report figures that add up."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from shared_trainer import Shape, SharedRuns, SoloRun, device_figures  # noqa: E402


def _shape(tiny_cache, mode: str = "rl") -> Shape:
    return Shape(mode, steps=1, prompts=2, group=2, completion=3, rank=4, model="builtin:tiny", cache=str(tiny_cache))


def test_an_rl_step_samples_then_trains_each_run(tiny_cache):
    shape = _shape(tiny_cache)
    shared, solo = SharedRuns(3, shape), SoloRun(0, shape)
    tokens = shared.step(1)
    assert 3 * 4 * 3 < tokens <= 3 * 4 * (8 + 3)  # 3 runs x 4 rows of an 8-token prompt and 1-3 sampled tokens
    assert shared.sample_s > 0 and all(shared.trainer.version(f"run{i}") == 1 for i in range(3))
    assert 4 < solo.step(1) <= 4 * (8 + 3) and solo.backend.version == 1


def test_the_device_check_figures(tiny_cache):
    figures = device_figures(_shape(tiny_cache), runs=2)
    assert figures["runs"] == 2 and figures["rows_per_run"] == 4
    assert figures["shared_steps_per_s"] > 0 and figures["turns_steps_per_s"] > 0
    assert 0 < figures["shared_sampling_share"] < 1
    ratio = figures["turns_steps_per_s"] / figures["shared_steps_per_s"]
    assert abs(figures["shared_vs_turns"] * ratio - 1) < 0.05
