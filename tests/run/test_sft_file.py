"""SFT data files for the warm start (issue 28): pinned by checksum, row count and audit files, checked
before any step; a run with a file trains on its demonstrations; length-bucketed order."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import TINY_RUN, write_config

from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run
from retrain_ray.run.trainers.sft import bucketed_order, load_sft_file, tokenize_row

ROWS = [
    {"prompt": "12+3=", "completion": "1"},
    {"messages": [{"role": "user", "content": "7*8="}, {"role": "assistant", "content": "5"}]},
    {"prompt": "99-9=", "completion": "9"},
]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _files(tmp_path: Path) -> dict[str, str]:
    data, audit = tmp_path / "sft.jsonl", tmp_path / "audit.md"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    audit.write_text("3 rows, reviewed\n")
    return {"sft_data_path": str(data), "sft_data_sha256": _sha(data), "sft_data_rows": 3,
            "sft_audit_path": str(audit), "sft_audit_sha256": _sha(audit)}


def _training(**keys):
    base = {"sft_data_path": "", "sft_data_sha256": "", "sft_data_rows": 0, "sft_audit_path": "",
            "sft_audit_sha256": "", "sft_token_audit_path": "", "sft_token_audit_sha256": "", "sft_max_tokens": 0}
    return SimpleNamespace(**{**base, **keys})


def test_rows_tokenize_as_prompt_then_target(tiny):
    _, tok = tiny
    row = tokenize_row(ROWS[0], tok, 0, "x:1")
    prompt = tok.encode("12+3=", add_special_tokens=False)
    assert row.tokens == tok.encode("12+3=1", add_special_tokens=False) + [tok.eos_token_id]
    assert row.prompt_len == len(prompt) and row.prompt_len < len(row.tokens)
    cut = tokenize_row(ROWS[0], tok, 2, "x:1")
    assert len(cut.tokens) == 2 and cut.prompt_len <= 2
    with pytest.raises(ValueError, match="x:9: a row needs"):
        tokenize_row({"text": "hi"}, tok, 0, "x:9")


def test_pins_are_checked_and_a_mismatch_names_the_key(tmp_path, tiny):
    _, tok = tiny
    files = _files(tmp_path)
    assert len(load_sft_file(_training(**files), tok)) == 3
    cases = [
        ({"sft_data_sha256": "0" * 64}, "sft_data_sha256 = '0000"),
        ({"sft_data_rows": 4}, "sft_data_rows = 4 but .* has 3 rows"),
        ({"sft_audit_sha256": "ab"}, "sft_audit_sha256 = 'ab'"),
        ({"sft_audit_path": ""}, "sft_audit_sha256 is set but sft_audit_path is not"),
        ({"sft_token_audit_path": str(tmp_path / "missing.json")}, "sft_token_audit_path = .*missing.json.*no such file"),
        ({"sft_data_path": str(tmp_path / "nope.jsonl"), "sft_data_sha256": ""}, "sft_data_path = .*no such file"),
    ]
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            load_sft_file(_training(**{**files, **change}), tok)
    (tmp_path / "bad.jsonl").write_text('{"prompt": "a", "completion": "b"}\nnot json\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not JSON"):
        load_sft_file(_training(sft_data_path=str(tmp_path / "bad.jsonl")), tok)


def test_length_buckets_keep_similar_lengths_together():
    lengths = [9, 1, 5, 2, 8, 6, 3, 7]
    order = bucketed_order(lengths, 2, seed=3, shuffle=True)
    assert sorted(order) == list(range(8)) and order == bucketed_order(lengths, 2, seed=3, shuffle=True)
    pairs = [sorted(lengths[i] for i in order[k:k + 2]) for k in range(0, 8, 2)]
    assert sorted(pairs) == [[1, 2], [3, 5], [6, 7], [8, 9]]
    assert bucketed_order(lengths, 3, seed=0, shuffle=False) == [1, 3, 6, 2, 5, 7, 4, 0]


def _run(tmp_path: Path, **training):
    run_dir = tmp_path / "run"
    write_config(tmp_path / "sft.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)},
                 training={"max_steps": 3, "sft_warmup_steps": 2, "sft_batch_size": 2, **training})
    return load_config(tmp_path / "sft.toml"), run_dir


def test_a_run_with_a_pinned_sft_file_trains_on_it(tmp_path):
    cfg, run_dir = _run(tmp_path, **_files(tmp_path), sft_length_bucket_size=2)
    assert train_run(cfg, run_name="r", run_dir=run_dir).status == "completed"
    rows = read_stream(run_dir).to_pylist()
    assert [r["phase"] for r in rows] == ["sft", "sft", "rl"]
    assert all(r["trained"] and r["loss"] > 0 and r["num_datums"] == 2 for r in rows[:2])


def test_a_run_whose_sft_file_changed_stops_before_training(tmp_path):
    files = _files(tmp_path)
    Path(files["sft_data_path"]).write_text(json.dumps(ROWS[0]) + "\n")  # edited after it was pinned
    cfg, run_dir = _run(tmp_path, **files)
    with pytest.raises(ValueError, match="sft_data_sha256"):
        train_run(cfg, run_name="r", run_dir=run_dir)
    assert not (run_dir / "checkpoints").exists()
