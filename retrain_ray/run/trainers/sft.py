"""Supervised steps: the SFT warm start of an RL run, every step of `trainer = "sft"`, and the SFT files.

SFT warm start: the first `sft_warmup_steps` steps of a run train on the task's own answers.

Targets are built from the task (prompt + formatted answer + EOS) when no SFT file is given, and come
from the file's demonstrations when `sft_data_path` names one (pinned and checked: the SFT files section below); with
`sft_target_correct_rate` set, a probe samples held-out prompts as RL would and ends the warm start
once their correct rate reaches the target. The step returns its row and the probe's verdict; the
RunLoop applies the verdict to the run state.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

from retrain_ray.backends.types import SFTLoss, TrainBatch
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SamplingParams
from retrain_ray.run.rollout import rollout, rollout_metrics
from retrain_ray.run.rows import RowIdentity, timed

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_training import TrainingSection
    from retrain_ray.models import Tokenizer
    from retrain_ray.run.loop import RunComponents


def sft_loss(name: str) -> SFTLoss:
    """`[training] sft_loss_fn`: "auto" (the default) is cross-entropy here; the original's 0.3.0 release,
    which had no "auto", defaulted to importance_sampling."""
    return "importance_sampling" if name == "importance_sampling" else "cross_entropy"


@dataclass(frozen=True)
class WarmStartStep:
    """One warm-start step's row, and whether the probe ended the warm start (None: no probe)."""

    row: dict[str, object]
    finished: bool | None


class WarmStart:
    """The supervised steps of a run: example order, SFT batches, the target-accuracy probe."""

    def __init__(self, cfg: RetrainConfig, parts: RunComponents, *, encode: Callable[[str], list[int]], sampling: SamplingParams) -> None:
        self.cfg = cfg
        self.parts = parts
        self.encode = encode
        self.sampling = sampling
        self._orders: dict[int, list[int]] = {}
        self._by_length: list[int] | None = None
        t = cfg.training
        self.rows: list[SFTRow] | None = (
            load_sft_file(t, parts.tokenizer) if t.sft_data_path and t.sft_warmup_steps > 0 else None
        )

    def active(self, step: int, *, finished: bool) -> bool:
        """The first `sft_warmup_steps` steps are supervised, unless the target accuracy came first."""
        has_targets = self.rows is not None or self.parts.format_answer is not None
        return step < self.cfg.training.sft_warmup_steps and has_targets and not finished

    def step(self, step: int, identity: RowIdentity, *, sync_weights: Callable[[], None]) -> WarmStartStep:
        t = self.cfg.training
        size = t.sft_batch_size or t.batch_size * t.group_size
        if self.rows is not None:
            batch = self.file_batch([self.rows[i] for i in self.indices(step, size, len(self.rows))])
        else:
            batch = self.batch(self.examples(step, size))
        batch = dataclasses.replace(batch, sft_loss=sft_loss(t.sft_loss_fn))
        metrics: dict[str, float] = {}
        with timed(metrics, "step_time_s"):
            result = self.parts.backend.sft_step(batch, lr=t.sft_lr or t.lr, weight_decay=t.weight_decay)
        probe = self.probe(sync_weights)
        row = {
            **identity.columns(step, phase="sft"),
            **({"sft_probe_correct_rate": probe} if probe is not None else {}),
            "trained": True,  # a warm-start step always updates the weights
            "loss": result.loss,
            "lr": t.sft_lr or t.lr,
            "num_datums": float(len(batch.tokens_D)),
            "tokens_per_step": float(batch.num_tokens),
            "step_time_s": metrics["step_time_s"],
            "tokens_per_second": batch.num_tokens / max(metrics["step_time_s"], 1e-9),
            **{k: float(v) for k, v in result.metrics.items()},
        }
        return WarmStartStep(row, None if probe is None else probe >= t.sft_target_correct_rate)

    def probe(self, sync_weights: Callable[[], None]) -> float | None:
        """With `sft_target_correct_rate` set: the correct rate of `batch_size` held-out prompts sampled
        as RL would (run temperature, group_size each); None when there is no target or no eval split."""
        t = self.cfg.training
        examples = self.parts.eval_examples[: t.batch_size]
        if t.sft_target_correct_rate <= 0 or not examples:
            return None
        sync_weights()
        out = rollout(self.parts.engine, examples, [self.encode(e.prompt) for e in examples],
                      group_size=t.group_size, params=self.sampling, tokenizer=self.parts.tokenizer,
                      reward=self.parts.reward)
        return rollout_metrics(out.groups, t.max_tokens)["correct_rate"]

    def examples(self, step: int, size: int) -> list[Example]:
        """Examples of warm-start step `step` (see `indices`)."""
        train = self.parts.train_examples
        return [train[i] for i in self.indices(step, size, len(train))]

    def indices(self, step: int, size: int, n: int) -> list[int]:
        """Rows of warm-start step `step`: `sft_batch_order` "shuffle" walks a permutation seeded by the
        run's seed (a new one each pass when `sft_reshuffle_each_epoch`), "sequential" the file order,
        "length_asc" the rows shortest first (token length; equal lengths in file order) every pass; an
        SFT file with `sft_length_bucket_size` walks its length buckets (`run.trainers.sft`)."""
        t = self.cfg.training
        bucketed = self.rows is not None and t.sft_length_bucket_size > 0
        positions = range(step * size, (step + 1) * size)
        if t.sft_batch_order == "length_asc":
            order = self._length_order(n)
            return [order[p % n] for p in positions]
        if t.sft_batch_order == "sequential" and not bucketed:
            return [p % n for p in positions]
        picked: list[int] = []
        for p in positions:
            epoch, index = divmod(p, n)
            picked.append(self._order(epoch if t.sft_reshuffle_each_epoch else 0, n)[index])
        return picked

    def _length_order(self, n: int) -> list[int]:
        """Row indices by token length, shortest first (the SFT file's rows, or prompt + answer + EOS)."""
        if self._by_length is None:
            if self.rows is not None:
                lengths = [len(r.tokens) for r in self.rows]
            else:
                lengths = [len(self._sequence(ex)[0]) for ex in self.parts.train_examples]
            self._by_length = sorted(range(n), key=lambda i: (lengths[i], i))
        return self._by_length

    def _order(self, epoch: int, n: int) -> list[int]:
        if epoch not in self._orders:
            t = self.cfg.training
            seed = max(t.seed, 0) + epoch
            if self.rows is not None and t.sft_length_bucket_size > 0:
                order = bucketed_order([len(r.tokens) for r in self.rows], t.sft_length_bucket_size, seed,
                                       shuffle=t.sft_batch_order != "sequential")
            else:
                order = list(range(n))
                random.Random(seed).shuffle(order)
            self._orders[epoch] = order
        return self._orders[epoch]

    @staticmethod
    def file_batch(rows: Sequence[SFTRow]) -> TrainBatch:
        """The file's demonstrations: weight 0 on prompt tokens, 1 on the target's."""
        return TrainBatch([list(r.tokens) for r in rows], [[0.0] * len(r.tokens) for r in rows],
                          [[0.0] * r.prompt_len + [1.0] * (len(r.tokens) - r.prompt_len) for r in rows],
                          [r.prompt_len for r in rows])

    def batch(self, examples: Sequence[Example]) -> TrainBatch:
        """Prompt + formatted answer + EOS per example, cut to `sft_max_tokens` tokens (0: not cut).
        `max_tokens` is the sampling budget of a completion, not a bound on a whole SFT sequence: used
        as one, it cut every target off and the warm start trained on nothing (loss 0)."""
        limit = self.cfg.training.sft_max_tokens or sys.maxsize
        tokens_D: list[list[int]] = []
        adv_D: list[list[float]] = []
        lens: list[int] = []
        for ex in examples:
            tokens, prompt_len = self._sequence(ex)
            tokens_D.append(tokens[:limit])
            adv_D.append(([0.0] * prompt_len + [1.0] * (len(tokens) - prompt_len))[:limit])
            lens.append(min(prompt_len, limit))
        return TrainBatch(tokens_D, [[0.0] * len(t) for t in tokens_D], adv_D, lens)

    def _sequence(self, ex: Example) -> tuple[list[int], int]:
        """Prompt + formatted answer + EOS of one example (uncut), and its number of prompt tokens."""
        tok = self.parts.tokenizer
        prompt = self.encode(ex.prompt)
        format_answer = cast("Callable[[str], str]", self.parts.format_answer)  # set when a warm start runs
        target = tok.encode(format_answer(ex.reference), add_special_tokens=False) + [cast("int", tok.eos_token_id)]
        return prompt + target, len(prompt)


# ----------------------------------------------------------------------------------------------------
# SFT data files for the warm start (`[training] sft_data_path` and its pins), checked before any step.
#
# The file is JSONL, one demonstration per line: `{"messages": [{"role", "content"}, ...]}` (the original's
# format: the last message is the assistant's target, the ones before it the prompt) or
# `{"prompt": ..., "completion": ...}`. Pins, each checked when set:
#   * `sft_data_sha256`: the file's SHA-256 (hex);
#   * `sft_data_rows`: its number of rows;
#   * `sft_audit_path` + `sft_audit_sha256`, `sft_token_audit_path` + `sft_token_audit_sha256`: the audit
#     files made with the data (a human-readable and a token-level audit); each must exist and match its
#     checksum, so a run never trains on data whose audit was made for other data.
# A mismatch is a ValueError naming the key, the file, what was expected and what was found.
#
# Tokens: messages go through the tokenizer's chat template when it has one (the prompt with the generation
# prompt, the whole conversation without), otherwise the contents one per line; prompt tokens get weight 0,
# the target's weight 1, and the whole sequence is cut to `sft_max_tokens` (0: not cut).
#
# Order (`sft_length_bucket_size` = N > 0): the rows sorted by token length are cut into buckets of N; with
# `sft_batch_order = "shuffle"` each pass shuffles the rows inside each bucket and the order of the buckets
# (seeded by the run's seed and the pass), so a batch holds rows of similar length and padding stays small.
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
