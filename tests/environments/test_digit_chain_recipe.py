"""The digit_chain recipe that learns (issue 35 item 3): configs/digit-chain-campaign.toml and its shipped SFT file
(retrain_ray/data/digit_chain_sft.jsonl, written by retrain_ray/environments/digit_chain_sft.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retrain_ray.cli.explain import explain_main
from retrain_ray.config import load_config
from retrain_ray.data.types import Example
from retrain_ray.environments.digit_chain import DigitChain
from retrain_ray.environments.digit_chain_sft import SHIPPED, demonstrations, episode_rows, main
from retrain_ray.run.train import train_run
from retrain_ray.run.trainers.sft import load_sft_file

ROOT = Path(__file__).resolve().parents[2]
RECIPE = ROOT / "configs" / "digit-chain-campaign.toml"


def test_episode_rows_play_both_turns_with_the_right_answers():
    rows = episode_rows(DigitChain({}), Example("472", "4"))
    assert rows == [{"prompt": "472", "completion": "4"}, {"prompt": "4724|4>", "completion": "5"}]
    wraps = episode_rows(DigitChain({}), Example("905", "9"))
    assert wraps[1] == {"prompt": "9059|9>", "completion": "0"}  # 9 + 1 wraps to 0


def test_the_shipped_file_is_what_the_generator_writes(tmp_path, capsys):
    out = tmp_path / "sft.jsonl"
    assert main(["--out", str(out)]) == 0
    assert "1024 rows" in capsys.readouterr().out
    assert out.read_bytes() == SHIPPED.read_bytes()
    assert SHIPPED == ROOT / "retrain_ray" / "data" / "digit_chain_sft.jsonl"
    assert demonstrations(3)[:2] == [json.loads(line) for line in SHIPPED.read_text().splitlines()[:2]]


def test_the_recipe_pins_the_shipped_file_and_its_rows_parse(tiny, monkeypatch):
    _, tok = tiny
    monkeypatch.chdir(ROOT)  # sft_data_path is relative to the repository root, as the recipe says
    cfg = load_config(RECIPE)
    t = cfg.training
    assert cfg.environment.id == "digit_chain" and 0 < t.sft_warmup_steps < t.max_steps
    rows = load_sft_file(t, tok)  # checks the SHA-256 and row pins
    assert len(rows) == t.sft_data_rows == 1024
    eos = tok.eos_token_id
    for row in rows:
        target = row.tokens[row.prompt_len:]
        assert len(target) == 2 and target[-1] == eos  # one digit, then EOS
        assert tok.decode(target[:1]) in "0123456789"
    assert len(rows[0].tokens) - 2 == 3 and len(rows[1].tokens) - 2 == 7  # turn 1 "976", turn 2 "9769|9>"


def test_the_recipe_explains_as_a_three_seed_campaign(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    assert explain_main([str(RECIPE), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    text = json.dumps(info)
    for run in ("grpo+none_s1", "grpo+none_s2", "grpo+none_s3"):
        assert run in text


@pytest.mark.extended
def test_the_recipe_runs_its_warm_start_then_two_rl_steps(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    overrides = {"training": {"max_steps": 3, "sft_warmup_steps": 1, "eval_every": 0, "save_every": 0},
                 "logging": {"log_dir": str(tmp_path / "run")}}
    cfg = load_config(RECIPE, overrides)
    train_run(cfg, run_name="chain", run_dir=tmp_path / "run")
    import pandas as pd

    rows = pd.read_parquet(tmp_path / "run" / "metrics.parquet")
    assert list(rows["phase"]) == ["sft", "rl", "rl"]
    rl = rows[rows["phase"] == "rl"]
    assert rl["num_datums"].between(0, 128).all()  # at most 8 prompts x 8 episodes x 2 turns
    assert rl["mean_reward"].between(0.0, 1.0).all()
