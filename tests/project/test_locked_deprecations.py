"""The product's calls into the locked transformers and PEFT raise no deprecation: one RL step (sampling,
update) of the built-in model, on the lean path and on transformers' Llama with PEFT LoRA and activation
checkpointing, with every `FutureWarning` an error and no "deprecated" line in transformers' log. A `make lock` that brings a release deprecating one of
our calls (transformers 5.24 renames `past_key_values` and `is_gradient_checkpointing`) fails here, so the
call is fixed before users see the warning."""

from __future__ import annotations

import importlib.util
import logging
import warnings
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "step_throughput.py"


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def step_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("step_throughput", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(("finetune", "transformers_model", "checkpointing"),
                         [("full", False, False), ("lora", False, True), ("lora", True, True)])
def test_an_rl_step_raises_no_future_warning(step_bench, tmp_path, finetune, transformers_model, checkpointing):
    logged = _Records()
    logging.getLogger("transformers").addHandler(logged)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        loop, state = step_bench.issue_step_loop(tmp_path, legacy=False, checkpointing=checkpointing,
                                                 finetune=finetune, transformers_model=transformers_model)
        rows = [step_bench.step_once(loop, state, step) for step in range(2)]
    logging.getLogger("transformers").removeHandler(logged)
    assert not [m for m in logged.messages if "deprecated" in m], logged.messages
    assert any(row["trained"] for row in rows)  # an update ran, not only sampling
