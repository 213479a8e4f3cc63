"""SFT data files for the warm start (`[training] sft_data_path` and its pins), checked before any step.

The file is JSONL, one demonstration per line: `{"messages": [{"role", "content"}, ...]}` (the original's
format: the last message is the assistant's target, the ones before it the prompt) or
`{"prompt": ..., "completion": ...}`. Pins, each checked when set:
  * `sft_data_sha256`: the file's SHA-256 (hex);
  * `sft_data_rows`: its number of rows;
  * `sft_audit_path` + `sft_audit_sha256`, `sft_token_audit_path` + `sft_token_audit_sha256`: the audit
    files made with the data (a human-readable and a token-level audit); each must exist and match its
    checksum, so a run never trains on data whose audit was made for other data.
A mismatch is a ValueError naming the key, the file, what was expected and what was found.

Tokens: messages go through the tokenizer's chat template when it has one (the prompt with the generation
prompt, the whole conversation without), otherwise the contents one per line; prompt tokens get weight 0,
the target's weight 1, and the whole sequence is cut to `sft_max_tokens` (0: not cut).

Order (`sft_length_bucket_size` = N > 0): the rows sorted by token length are cut into buckets of N; with
`sft_batch_order = "shuffle"` each pass shuffles the rows inside each bucket and the order of the buckets
(seeded by the run's seed and the pass), so a batch holds rows of similar length and padding stays small.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

if TYPE_CHECKING:
    from retrain_ray.config.sections_training import TrainingSection
    from retrain_ray.models.types import Tokenizer

CHUNK = 1 << 20


@dataclass(frozen=True)
class SFTRow:
    """One demonstration as token ids, with the number of prompt tokens at its start."""

    tokens: list[int]
    prompt_len: int


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _check_sha(key: str, path: Path, expected: str) -> None:
    if not expected:
        return
    found = sha256_of(path)
    if found != expected.strip().lower():
        raise ValueError(f"[training] {key} = {expected!r} but {path} has SHA-256 {found}: the file changed since it "
                         f"was pinned; use the file that was pinned, or pin this one with {key} = \"{found}\"")


def _existing(key: str, value: str) -> Path:
    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(f"[training] {key} = {value!r}: no such file; fix the path or remove the key")
    return path


def check_audits(t: TrainingSection) -> None:
    """The audit files: each named one must exist and match its checksum; a checksum needs its file."""
    for path_key, sha_key in (("sft_audit_path", "sft_audit_sha256"), ("sft_token_audit_path", "sft_token_audit_sha256")):
        value, sha = getattr(t, path_key), getattr(t, sha_key)
        if sha and not value:
            raise ValueError(f"[training] {sha_key} is set but {path_key} is not: name the audit file it pins")
        if value:
            _check_sha(sha_key, _existing(path_key, value), sha)


def _messages_text(messages: Messages, tokenizer: Tokenizer, *, prompt: bool) -> str:
    if getattr(tokenizer, "chat_template", None):
        return str(tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=prompt))
    return "".join(f"{m.get('content', '')}\n" for m in messages)


Messages = list[dict[str, str]]


def _is_message(m: object) -> bool:
    return isinstance(m, dict) and isinstance(cast("dict[str, object]", m).get("content"), str)


def _texts(row: object, where: str) -> tuple[str | Messages, str | Messages]:
    if isinstance(row, dict):
        data = cast("dict[str, object]", row)
        messages: object = data.get("messages")
        if isinstance(messages, list) and len(cast("list[object]", messages)) >= 2:
            listed = cast("list[object]", messages)
            if all(_is_message(m) for m in listed):
                typed = cast("Messages", listed)
                return typed[:-1], typed
        prompt: object = data.get("prompt")
        completion: object = data.get("completion")
        if isinstance(prompt, str) and isinstance(completion, str):
            return prompt, prompt + completion
    raise ValueError(f"{where}: a row needs \"messages\" (at least a prompt and the assistant's reply, each with a "
                     "string \"content\") or string \"prompt\" and \"completion\"")


def tokenize_row(row: object, tokenizer: Tokenizer, limit: int, where: str) -> SFTRow:
    prompt, full = _texts(row, where)
    if isinstance(prompt, list) and isinstance(full, list):
        prompt_text = _messages_text(prompt, tokenizer, prompt=True)
        tokens = [int(t) for t in tokenizer.encode(_messages_text(full, tokenizer, prompt=False), add_special_tokens=False)]
    else:
        prompt_text = str(prompt)
        tokens = [int(t) for t in tokenizer.encode(str(full), add_special_tokens=False)] + [int(cast("int", tokenizer.eos_token_id))]
    prompt_len = min(len(tokenizer.encode(prompt_text, add_special_tokens=False)), len(tokens))
    if limit > 0:
        tokens, prompt_len = tokens[:limit], min(prompt_len, limit)
    return SFTRow(tokens, prompt_len)


def load_sft_file(t: TrainingSection, tokenizer: Tokenizer) -> list[SFTRow]:
    """The pinned, checked rows of `t.sft_data_path` (the `[training]` section), tokenized."""
    path = _existing("sft_data_path", t.sft_data_path)
    _check_sha("sft_data_sha256", path, t.sft_data_sha256)
    check_audits(t)
    rows: list[SFTRow] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                parsed = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not JSON ({exc.msg}); the SFT file holds one JSON object per line") from None
            rows.append(tokenize_row(parsed, tokenizer, t.sft_max_tokens, where))
    if t.sft_data_rows and len(rows) != t.sft_data_rows:
        raise ValueError(f"[training] sft_data_rows = {t.sft_data_rows} but {path} has {len(rows)} rows: "
                         f"use the pinned file, or pin this one with sft_data_rows = {len(rows)}")
    if not rows:
        raise ValueError(f"[training] sft_data_path = {str(path)!r} holds no rows")
    return rows


def bucketed_order(lengths: list[int], bucket_size: int, seed: int, shuffle: bool) -> list[int]:
    """Row indices by length, in buckets of `bucket_size`; shuffled within and across buckets by `seed`."""
    by_length = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    buckets = [by_length[i:i + bucket_size] for i in range(0, len(by_length), bucket_size)]
    if shuffle:
        rng = random.Random(seed)
        for bucket in buckets:
            rng.shuffle(bucket)
        rng.shuffle(buckets)
    return [i for bucket in buckets for i in bucket]
