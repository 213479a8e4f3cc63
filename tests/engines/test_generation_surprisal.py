"""`[logging] generation_top_surprisal_limit` (spec 1.5): generation-log rows carry the completion's most
surprising tokens, exactly: -logprob rounded to 4 places, highest first, ties to the earlier position."""

from __future__ import annotations

import math

import pyarrow as pa
from helpers import GRPO, write_config

from retrain_ray.config import load_config
from retrain_ray.logs import GENERATIONS_SCHEMA, read_stream, row_to_record, select_generation_samples
from retrain_ray.logs.observers import top_surprisal_tokens
from retrain_ray.run.train import train_run


def test_top_surprisal_tokens_exact() -> None:
    logprobs = [-0.5, -2.25, -0.123456, -2.25, -7.0]
    tokens = ["a", "b", "c", "d", "e"]
    assert top_surprisal_tokens(logprobs, tokens, 3) == [
        {"pos": 4, "surprisal": 7.0, "token": "e"},
        {"pos": 1, "surprisal": 2.25, "token": "b"},  # equal surprisal: the earlier position first
        {"pos": 3, "surprisal": 2.25, "token": "d"},
    ]
    assert top_surprisal_tokens(logprobs, tokens, 9)[-1] == {"pos": 2, "surprisal": 0.1235, "token": "c"}
    assert len(top_surprisal_tokens(logprobs, tokens, 9)) == 5
    assert top_surprisal_tokens([], [], 3) == []


def test_rows_carry_the_entries_of_the_logged_sample_and_fit_the_schema() -> None:
    logprobs_P_G = [[[-1.0, -3.0], [-0.1, -0.2]]]
    rows = select_generation_samples(
        step=0, prompts_P=["p"], completions_P_G=[["xy", "zw"]], rewards_P_G=[[0.0, 1.0]],
        num_tokens_P_G=[[2, 2]], samples_per_prompt=1,
        top_surprisal=lambda p, g: top_surprisal_tokens(logprobs_P_G[p][g], ["t0", "t1"], 1),
    )
    assert rows[0]["completion"] == "zw"  # the best reward is sample 1; its entries, not sample 0's
    assert rows[0]["top_surprisal_tokens"] == [{"pos": 1, "surprisal": 0.2, "token": "t1"}]
    plain = select_generation_samples(step=0, prompts_P=["p"], completions_P_G=[["xy"]], rewards_P_G=[[0.0]],
                                      num_tokens_P_G=[[2]], samples_per_prompt=1)
    assert "top_surprisal_tokens" not in plain[0]
    table = pa.Table.from_pylist([row_to_record(r, GENERATIONS_SCHEMA) for r in rows + plain], schema=GENERATIONS_SCHEMA)
    assert table.column("top_surprisal_tokens").to_pylist() == [rows[0]["top_surprisal_tokens"], None]


def test_a_run_logs_top_surprisal_tokens(tmp_path) -> None:
    run_dir = tmp_path / "run"
    cfg = load_config(write_config(
        tmp_path / "c.toml", algorithm=GRPO, reward={"type": "custom", "custom_module": "operator:lt"},
        logging={"log_dir": str(run_dir), "generation_top_surprisal_limit": 3},
        training={"batch_size": 2, "group_size": 4, "max_tokens": 5, "max_steps": 2, "save_every": 0}))
    assert train_run(cfg, run_name="s", run_dir=run_dir).status == "completed"
    rows = read_stream(run_dir, "generations", key=None).to_pylist()
    assert rows
    for row in rows:
        entries = row["top_surprisal_tokens"]
        assert len(entries) == min(3, row["num_tokens"])
        assert len({e["pos"] for e in entries}) == len(entries)
        assert all(0 <= e["pos"] < row["num_tokens"] and e["surprisal"] >= 0 and math.isfinite(e["surprisal"])
                   for e in entries)
        keys = [(-e["surprisal"], e["pos"]) for e in entries]
        assert keys == sorted(keys)
        for e in entries:  # the character tokenizer: a plain token is the completion's character at pos
            if len(e["token"]) == 1 and len(row["completion"]) == row["num_tokens"]:
                assert row["completion"][e["pos"]] == e["token"]
