"""The semantic planning detector (spec 2.10): 12-word windows every 6 words, a window marked when it is
closer to the planning centroid than to the execution centroid by `threshold` and above 0.25.

Windowing and marking are tested exactly with embeddings the test controls; the transformers embedder runs
on a tiny BERT with random weights built offline; one HICRA run trains with the detector."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from helpers import write_config
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.algorithms.planning_semantic import (
    SemanticPlanningDetector,
    Window,
    build_windows,
    mark_windows,
    words_with_tokens,
)
from retrain_ray.checks.preflight import model_problems
from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.models.sentence_embedder import MeanPoolEmbedder, load_embedder
from retrain_ray.run.build import build_planning
from retrain_ray.run.train import train_run

WORDS = ["let", "me", "think", "x", "=", "4", "so", "the", "sum", "is", "7", "PLAN", "EXEC"]


def test_words_join_sub_word_tokens() -> None:
    tokens = ["▁let", "▁me", "▁th", "ink", "Ġso", "Ċ", "x", "=4"]
    assert words_with_tokens(tokens) == [("let", 0, 0), ("me", 1, 1), ("think", 2, 3), ("so", 4, 4),
                                         ("x=4", 6, 7)]


@given(st.lists(st.sampled_from(["▁a", "b", " ", "▁", "Ġc", "dd", "Ċ"]), max_size=80))
def test_windows_cover_every_word_in_strides(tokens: list[str]) -> None:
    words = words_with_tokens(tokens)
    windows = build_windows(tokens)
    if len(words) < 3:
        assert windows == []
        return
    starts = list(range(0, len(words), 6))
    spans = [(s, min(s + 12, len(words))) for s in starts]
    spans = spans[: next(i for i, (_, e) in enumerate(spans) if e == len(words)) + 1]
    assert [(w.start, w.end) for w in windows] == [(words[s][1], words[e - 1][2] + 1) for s, e in spans]
    assert [w.text for w in windows] == [" ".join(x for x, _, _ in words[s:e]) for s, e in spans]
    covered = set().union(*(range(s, e) for s, e in spans))
    assert covered == set(range(len(words)))  # every word is in a window, the last window ends the text


def test_mark_windows_threshold_and_floor() -> None:
    windows = [Window("a", 0, 2), Window("b", 1, 4), Window("c", 4, 6), Window("d", 6, 8)]
    mask = mark_windows(9, windows, [0.80, 0.30, 0.24, 0.5], [0.60, 0.29, -0.9, 0.48], threshold=0.02)
    # a: 0.80 > 0.62 and > 0.25 -> marked; b: 0.30 > 0.31? no; c: below the 0.25 floor; d: 0.5 > 0.5? no
    assert mask == [1, 1, 0, 0, 0, 0, 0, 0, 0]
    assert mark_windows(9, windows, [0.80, 0.30, 0.24, 0.5], [0.60, 0.29, -0.9, 0.48], threshold=0.0) \
        == [1, 1, 1, 1, 0, 0, 1, 1, 0]


def _controlled(text: str) -> list[float]:
    if "PLAN" in text:
        return [1.0, 0.0]
    if "EXEC" in text:
        return [0.0, 1.0]
    return [0.6, 0.8]


def _embed(texts: list[str]) -> torch.Tensor:
    return torch.tensor([_controlled(t) for t in texts])


def test_detector_marks_the_windows_holding_a_planning_phrase() -> None:
    detector = SemanticPlanningDetector(_embed, plan_phrases=["PLAN one", "PLAN two"], exec_phrases=["EXEC"])
    tokens = [f"▁w{i}" for i in range(20)]
    tokens[14] = "▁PLAN"
    # windows over words [0,12), [6,18), [12,20): the last two hold word 14
    assert detector(tokens) == [0] * 6 + [1] * 14
    tokens[14] = "▁EXEC"
    assert detector(tokens) == [0] * 20
    assert detector(["▁PLAN", "▁x"]) == [0, 0]  # under 3 words: no window


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory) -> Path:
    """A BERT-shaped sentence encoder with random weights and a character WordPiece vocabulary."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder = tmp_path_factory.mktemp("tiny_bert")
    chars = [chr(c) for c in range(33, 127)]
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *chars, *[f"##{c}" for c in chars]]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(folder / "vocab.txt")).save_pretrained(str(folder))
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=48, max_position_embeddings=128)
    BertModel(config).save_pretrained(str(folder))
    return folder


def test_mean_pool_embedder_is_normalised_and_ignores_padding(tiny_bert: Path) -> None:
    embed = MeanPoolEmbedder(tiny_bert)
    alone = embed(["let me think"])
    batched = embed(["let me think", "a much longer sentence that pads the first one out"])
    assert alone.shape == (1, 32) and batched.shape == (2, 32)
    assert torch.allclose(batched.norm(dim=-1), torch.ones(2), atol=1e-5)
    assert torch.allclose(alone[0], batched[0], atol=1e-5)  # the padding of a batch does not leak in


def test_missing_model_offline_names_the_key_and_the_fix(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    with pytest.raises(ValueError, match=r"\[planning\] model = 'no-such-embedder'.*Fix: set \[planning\] model"):
        load_embedder("no-such-embedder")
    with pytest.raises(ValueError, match="no config.json"):
        load_embedder(str(tmp_path))
    cfg = load_config(write_config(tmp_path / "c.toml", algorithm={"advantage_mode": "grpo", "transform_mode": "gtpo_hicra"},
                                   planning={"detector": "semantic", "model": "no-such-embedder"}))
    problems = model_problems([cfg])
    assert len(problems) == 1 and "planning.model = 'no-such-embedder'" in problems[0]
    assert "sentence-transformers/no-such-embedder" in problems[0]


def test_hicra_trains_with_the_semantic_detector(tmp_path, tiny_bert: Path) -> None:
    run_dir = tmp_path / "run"
    cfg = load_config(write_config(
        tmp_path / "c.toml", algorithm={"advantage_mode": "grpo", "transform_mode": "gtpo_hicra"},
        planning={"detector": "semantic", "model": str(tiny_bert), "threshold": -2.0},
        reward={"type": "custom", "custom_module": "operator:lt"}, logging={"log_dir": str(run_dir)},
        training={"batch_size": 2, "group_size": 4, "max_tokens": 24, "max_steps": 2, "save_every": 0,
                  "temperature": 1.5}))
    assert model_problems([cfg]) == []
    detect = build_planning(cfg, needs_planning=True)
    assert isinstance(detect, SemanticPlanningDetector)
    words = "let me think about it , then we add the numbers and check the sum again".split()
    mask = detect(["▁" + w for w in words])
    # threshold -2 marks every window above the 0.25 floor: this seeded random encoder's windows all are
    assert mask == [1] * len(words)
    assert train_run(cfg, run_name="sem", run_dir=run_dir).status == "completed"
    rows = read_stream(run_dir).to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    assert all(math.isfinite(r["mean_reward"]) for r in rows)
    assert max(r["plan_surprisal_mean"] for r in rows) > 0  # the detector's tokens reached the credit step
