"""Data: built-in tasks (determinism, disjoint splits, correct boxed references), file loader,
MATH offline error, source dispatch and round-robin batching."""

from __future__ import annotations

import json
import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from retrain_ray.data import (
    TASKS,
    DataUnavailableError,
    Example,
    load_examples,
    load_examples_from_config,
    load_file_examples,
    load_task,
    next_batch,
)
from retrain_ray.rewards import build_reward, extract_boxed


def _recompute(name: str, prompt: str) -> str:
    """Independent recomputation of a built-in task's answer from its prompt text."""
    if name in ("first_digit", "last_digit", "copy_digit"):
        digits = re.search(r"(\d+)(\n|$)", prompt).group(1)
        return {"first_digit": digits[0], "last_digit": digits[-1], "copy_digit": digits}[name]
    if name in ("add", "multiply"):
        a, op, b = re.fullmatch(r"(\d+)([+*])(\d+)=", prompt).groups()
        return str(int(a) + int(b) if op == "+" else int(a) * int(b))
    numbers = [int(n) for n in re.findall(r"\d+", prompt)]
    if "gives" in prompt and "buys" in prompt:
        return str(numbers[0] + numbers[1] - numbers[2])
    if "gives away" in prompt:
        return str(numbers[0] - numbers[1])
    return str(numbers[0] + numbers[1])


@pytest.mark.parametrize("name", sorted(TASKS))
@pytest.mark.parametrize("level", [1, 2, 3])
def test_builtin_task_references_are_correct_and_splits_disjoint(name: str, level: int) -> None:
    data = load_task(name, level=level, seed=3, num_train=128, num_eval=16)
    assert len(data.train) == 128 and len(data.eval) == 16
    assert not {e.prompt for e in data.train} & {e.prompt for e in data.eval}
    sentence_task = name == "addition"  # answers in a sentence, scored by final_number (test_addition.py)
    reward = build_reward("final_number" if sentence_task else "match")
    for example in data.train + data.eval:
        assert example.reference == _recompute(name, example.prompt), example
    answers = [data.format_answer(e.reference) for e in data.eval]
    if not sentence_task:
        assert [extract_boxed(a) for a in answers] == [e.reference for e in data.eval]
    assert reward.score_batch(answers, [e.reference for e in data.eval]) == [1.0] * 16


def test_first_digit_prompt_format_is_short() -> None:
    data = load_task("first_digit", seed=0, num_train=512, num_eval=64)
    assert all(len(e.prompt) <= 24 for e in data.train + data.eval)
    assert re.fullmatch(r"\d{3}", data.train[0].prompt)
    harder = load_task("first_digit", level=2, seed=0, num_train=8, num_eval=8)
    assert re.fullmatch(r"Digits: \d{5}\nFirst digit:", harder.train[0].prompt)
    assert data.format_answer("4") == "\\boxed{4}"
    assert len({e.prompt for e in data.train}) == 512


def test_builtin_tasks_are_deterministic_per_seed() -> None:
    first, again = load_task("add", level=2, seed=7), load_task("add", level=2, seed=7)
    other = load_task("add", level=2, seed=8)
    assert first.train == again.train and first.eval == again.eval
    assert first.train != other.train


def test_small_prompt_space_cycles_train_without_leaking_eval() -> None:
    data = load_task("add", level=1, seed=0, num_train=512, num_eval=64)
    eval_prompts = {e.prompt for e in data.eval}
    assert len(data.train) == 512 and not eval_prompts & {e.prompt for e in data.train}
    assert len({e.prompt for e in data.train}) == 400 - 64


def test_bad_task_name_and_level() -> None:
    with pytest.raises(ValueError, match="unknown built-in task 'first'.*first_digit"):
        load_task("first")
    with pytest.raises(ValueError, match="levels \\[1, 2, 3\\]; got \\[data\\] level = 4"):
        load_task("add", level=4)


def test_file_loader_jsonl_and_parquet(tmp_path) -> None:
    rows = [{"question": f"q{i}", "answer": i, "other": "x"} for i in range(5)]
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n\n")
    parquet = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), parquet)
    for path in (jsonl, parquet):
        examples = load_file_examples(path, "question", "answer")
        assert examples == [Example(f"q{i}", str(i)) for i in range(5)]
        assert len(load_file_examples(path, "question", "answer", max_examples=2)) == 2


def test_file_loader_missing_column_names_file_and_columns(tmp_path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "q", "answer": "a"}]), path)
    with pytest.raises(KeyError) as info:
        load_file_examples(path)
    message = str(info.value)
    assert str(path) in message and "'prompt'" in message and "['question', 'answer']" in message
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_file_examples(tmp_path / "nope.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "a", "reference": "b"}\n{oops\n')
    with pytest.raises(ValueError, match="bad.jsonl:2: not valid JSON"):
        load_file_examples(bad)


def test_file_loader_counts_decoded_characters_not_json_escapes(tmp_path) -> None:
    """A 100,000-character prompt of non-ASCII text is 600,000 characters once JSON-escaped (`\\u00e9`);
    it used to be refused as a "599,978-character row". The limit is on the decoded text."""
    path = tmp_path / "escaped.jsonl"
    path.write_text(json.dumps({"prompt": "\u00e9" * 100_000, "reference": "1"}) + "\n")
    assert len(path.read_text()) > 600_000
    [example] = load_file_examples(path)
    assert example.prompt == "\u00e9" * 100_000
    path.write_text(json.dumps({"prompt": "\u00e9" * 200_001, "reference": "1"}) + "\n")
    with pytest.raises(ValueError, match=r"column 'prompt': 200,001 characters, more than the 200,000 allowed"):
        load_file_examples(path)


def test_math_loader_offline_points_at_local_files(monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(DataUnavailableError, match='source = \\"file\\" with path'):
        load_examples("math")


def test_load_examples_dispatch(tmp_path) -> None:
    train, evals = tmp_path / "train.jsonl", tmp_path / "eval.jsonl"
    train.write_text('{"prompt": "1+1=", "reference": "2"}\n')
    evals.write_text('{"prompt": "2+2=", "reference": "4"}\n{"prompt": "3+3=", "reference": "6"}\n')
    data = load_examples("file", path=str(train), eval_path=str(evals), num_eval_examples=1)
    assert data.train == [Example("1+1=", "2")] and data.eval == [Example("2+2=", "4")]
    builtin = load_examples("builtin", task="multiply", level=2, num_examples=10, num_eval_examples=2, seed=1)
    assert builtin == load_task("multiply", level=2, seed=1, num_train=10, num_eval=2)
    with pytest.raises(ValueError, match="unknown \\[data\\] source 'hub'"):
        load_examples("hub")
    with pytest.raises(ValueError, match="needs path"):
        load_examples("file")


def test_next_batch_round_robin() -> None:
    examples = [Example(str(i), str(i)) for i in range(5)]
    batch, idx = next_batch(examples, 3, 4)
    assert [e.prompt for e in batch] == ["3", "4", "0", "1"] and idx == 7
    batch, idx = next_batch(examples, idx, 2)
    assert [e.prompt for e in batch] == ["2", "3"] and idx == 9


@given(st.integers(1, 20), st.integers(0, 100), st.integers(1, 30))
def test_next_batch_covers_examples_evenly(n: int, start: int, batch_size: int) -> None:
    examples = [Example(str(i), "") for i in range(n)]
    batch, idx = next_batch(examples, start, batch_size)
    assert idx == start + batch_size
    counts = [sum(e.prompt == str(i) for e in batch) for i in range(n)]
    assert max(counts) - min(counts) <= 1


def test_load_examples_from_real_config(tmp_path) -> None:
    from retrain_ray.config import load_config

    toml = tmp_path / "retrain.toml"
    toml.write_text('[data]\nsource = "builtin"\ntask = "last_digit"\nlevel = 2\nnum_examples = 20\n'
                    'num_eval_examples = 4\n[training]\nseed = 5\n')
    loaded = load_config(toml)
    data = load_examples_from_config(loaded.data, loaded.training)
    assert data == load_task("last_digit", level=2, seed=5, num_train=20, num_eval=4)


def _tiny_codec():
    from retrain_ray.models.context import PromptCodec, context_length
    from retrain_ray.models.light_tokenizer import LightTokenizer
    from retrain_ray.models.loading import resolve_model_path

    folder = resolve_model_path("builtin:tiny")
    return PromptCodec(LightTokenizer.from_folder(folder)), context_length(folder)


def test_truncated_prompt_keeps_its_end_and_fits_exactly():
    from retrain_ray.data.fit import ContextLimit, fit_prompts
    from retrain_ray.data.types import Example

    codec, context = _tiny_codec()
    assert context == 2048
    limit = ContextLimit(context=context, max_tokens=48, model="builtin:tiny")
    long = Example(prompt="a" * 5000 + " What is 1+1?", reference="2")
    short = Example(prompt="What is 2+2?", reference="4")
    fitted = fit_prompts([short, long], limit=limit, codec=codec, truncate=True, origin=str)
    assert fitted[0] == short
    assert fitted[1].prompt.endswith(" What is 1+1?") and len(codec.prompt_ids(fitted[1].prompt)) == 2000


def test_pathological_prompt_is_refused_by_its_length_without_tokenising():
    from retrain_ray.data.fit import ContextLimit, PromptTooLongError, fit_prompts
    from retrain_ray.data.types import Example

    codec, context = _tiny_codec()
    encoded: list[int] = []
    original = codec.prompt_ids
    codec.prompt_ids = lambda text: encoded.append(len(text)) or original(text)  # type: ignore[method-assign]
    limit = ContextLimit(context=context, max_tokens=4, model="builtin:tiny")
    with pytest.raises(PromptTooLongError, match=r"row 7: the prompt is at least 40,000 tokens \(200,000 characters\)"):
        fit_prompts([Example(prompt="y" * 200_000, reference="1")], limit=limit, codec=codec, truncate=False,
                    origin=lambda i: f"row {i + 7}")
    assert max(encoded) == 0  # only the empty prompt (the template's own tokens) was encoded
