"""`[training] eval_at_start`: one greedy evaluation of the untrained model before the first step, as step -1."""

from __future__ import annotations

from pathlib import Path

import retrain_ray
from retrain_ray.config import apply_overrides, load_config, parse_overrides
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

SMOKE = Path(retrain_ray.__file__).parents[1] / "configs" / "smoke.toml"


def _run(tmp_path: Path, **flags: object) -> list[dict[str, object]]:
    flags = {"log_dir": tmp_path, "max_steps": 2, "batch_size": 2, "group_size": 2, "eval_every": 2,
             "eval_examples": 4, **flags}
    cfg = apply_overrides(load_config(SMOKE), parse_overrides(
        [a for k, v in flags.items() for a in (f"--{k.replace('_', '-')}", str(v))]))
    assert train_run(cfg, run_name="evals", run_dir=tmp_path).status == "completed"
    return read_stream(tmp_path, "eval").to_pylist()


def test_the_base_model_is_evaluated_first_as_step_minus_one(tmp_path):
    # at lr 1e-12 the weights stay as they were to float precision: the greedy evaluation after step 1 is the
    # base model's again
    rows = _run(tmp_path / "on", eval_at_start="true", lr=1e-12)
    assert [r["step"] for r in rows] == [-1, 1]
    assert rows[0]["num_examples"] == 4
    assert (rows[0]["eval_mean_reward"], rows[0]["eval_correct_rate"]) == \
        (rows[1]["eval_mean_reward"], rows[1]["eval_correct_rate"])
    assert [r["step"] for r in _run(tmp_path / "off")] == [1]
