"""benchmarks/smollm2_train.py's arithmetic (issue 35 item 5): the per-step CPU split from the reward's clock,
the previous figures read back from docs/benchmarks.md, and the comparison that flags a slower product. The
5-step SmolLM2 run itself is a benchmark (minutes of CPU), not a test."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "smollm2_train.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("smollm2_train", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cpu_is_split_between_the_first_scorings_of_consecutive_steps(bench):
    per_step = bench.SAMPLES_PER_STEP
    firsts = [10.0, 30.0, 45.0, 65.0]  # CPU clock at each step's first scoring
    clock = [(first + 0.01 * i, 0.0) for first in firsts for i in range(per_step)]
    split = bench.split_cpu(clock)
    assert split["cpu_to_first_scoring_s"] == 10.0
    assert split["step_cpu_s"] == pytest.approx([20.0, 15.0, 20.0])
    assert split["median_step_cpu_s"] == pytest.approx(20.0)


def test_the_docs_record_the_previous_figures_it_compares_against(bench):
    previous = bench.previous_figures()
    assert set(bench.COMPARED) <= set(previous)
    assert all(value > 0 for value in previous.values())


def test_a_cpu_figure_past_the_threshold_is_flagged_and_wall_figures_are_not(bench, tmp_path):
    docs = tmp_path / "benchmarks.md"
    docs.write_text('text\n<!-- smollm2-train previous: {"cpu_s": 80.0, "wall_s": 100.0} -->\n')
    previous = bench.previous_figures(docs)
    assert previous == {"cpu_s": 80.0, "wall_s": 100.0}
    lines = bench.comparison_lines({"cpu_s": 120.0, "wall_s": 300.0}, previous)
    cpu_line = next(line for line in lines if line.startswith(bench.COMPARED["cpu_s"]))
    wall_line = next(line for line in lines if line.startswith(bench.COMPARED["wall_s"]))
    assert "1.50x" in cpu_line and cpu_line.endswith("SLOWER")
    assert "3.00x" in wall_line and not wall_line.endswith("SLOWER")
    assert not bench.comparison_lines({"cpu_s": 90.0}, previous)[1].endswith("SLOWER")  # 1.125x: within noise
