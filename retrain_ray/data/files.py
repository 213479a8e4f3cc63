"""Examples from local JSONL or Parquet files (`[data] source = "file"`).

Each row gives a prompt and a reference from two named columns. References are used as given
(not passed through `extract_boxed`): store the final answer, e.g. "42", not a full solution.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retrain_ray.data.types import Example
from retrain_ray.util.file_kinds import special_file_problem

SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}
MAX_FIELD_CHARS = 200_000
"""A prompt or reference longer than this is refused with the file and row (a 50 MB row used to hang
the run in tokenization and sampling); longer prompts than any model's context are a data error."""
MAX_ESCAPE_CHARS = 6
"""The most characters JSON writes for one character of text (`\\u00e9`): a JSONL line's length bound
allows for it, so a field is refused by its decoded text (`_text`), never by how it was escaped."""
MAX_LINE_CHARS = 2 * MAX_FIELD_CHARS * MAX_ESCAPE_CHARS + 1024


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open("rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid UTF-8 (byte {exc.start}); save the file as UTF-8") from None
            if not line.strip():
                continue
            if len(line) > MAX_LINE_CHARS:  # before parsing: a 50 MB line is refused without decoding it
                raise ValueError(f"{path}:{line_no}: a row of {len(line):,} characters as written; rows are limited "
                                 f"to a prompt and a reference of {MAX_FIELD_CHARS:,} characters each "
                                 f"({MAX_LINE_CHARS:,} as written, JSON escapes included)")
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({exc.msg}); one JSON object per line") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    # deferred: loads pyarrow, which importing this module does not need
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except (pa.ArrowException, OSError) as exc:
        raise ValueError(f"data file {path} is not a readable Parquet file ({exc}); is it complete?") from None


def _columns(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    if path.suffix in (".parquet", ".pq"):
        # deferred: loads pyarrow, which importing this module does not need
        import pyarrow.parquet as pq

        try:
            return list(pq.read_schema(path).names)
        except Exception as exc:  # pyarrow raises several types for damaged footers
            raise ValueError(f"data file {path} is not a readable Parquet file ({exc})") from None
    return sorted({key for row in rows for key in row})


def load_file_examples(
    path: str | Path, prompt_column: str = "prompt", reference_column: str = "reference", max_examples: int = 0
) -> list[Example]:
    """Read examples from a .jsonl or .parquet file; `max_examples > 0` keeps the first N rows."""
    path = Path(path)
    problem = special_file_problem(path)
    if problem is not None:
        raise ValueError(f"data file {path} {problem}: [data] path / eval_path name one .jsonl or .parquet file")
    if path.is_dir():
        raise IsADirectoryError(f"data file {path} is a directory; [data] path / eval_path name one "
                                ".jsonl or .parquet file")
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"data file {path}: unsupported suffix {path.suffix!r}; use one of {sorted(SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist; check [data] path / eval_path")
    rows = _read_jsonl(path) if kind == "jsonl" else _read_parquet(path)
    if not rows and kind == "jsonl":  # no row, so no column either: say so, not "no column 'prompt'"
        what = "is empty (0 bytes)" if path.stat().st_size == 0 else "holds only blank lines"
        raise ValueError(f"data file {path} {what}: write one JSON object per line with {prompt_column!r} and "
                         f"{reference_column!r}")
    available = _columns(path, rows)
    for role, column in (("prompt_column", prompt_column), ("reference_column", reference_column)):
        if column not in available:
            raise KeyError(
                f"data file {path} has no column {column!r} ([data] {role}); available columns: {available}"
            )
    if not rows:
        raise ValueError(f"data file {path} has no rows; every row needs {prompt_column!r} and {reference_column!r}")
    if max_examples > 0:
        rows = rows[:max_examples]
    return [_example(path, i, row, prompt_column, reference_column) for i, row in enumerate(rows)]


def row_origin(path: str | Path, index: int) -> str:
    """Where example `index` of a data file is, for messages: a JSONL file's line (blank lines are
    skipped when loading, so rows and lines differ), a Parquet file's row."""
    path = Path(path)
    if SUFFIXES.get(path.suffix.lower()) == "jsonl":
        seen = -1
        with path.open("rb") as handle:
            for line_no, raw in enumerate(handle, start=1):
                seen += bool(raw.strip())
                if seen == index:
                    return f"data file {path}, line {line_no} (row {index})"
    return f"data file {path}, row {index}"


def _text(path: Path, index: int, column: str, value: Any, *, numbers_ok: bool) -> str:
    """A cell as text: strings as they are, UTF-8 bytes decoded, numbers for references only."""
    where = f"data file {path}, row {index}, column {column!r}"
    if isinstance(value, bytes):
        try:
            value = value.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{where}: binary data that is not UTF-8 text; store text") from None
    if numbers_ok and isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        kind = "missing (null)" if value is None else f"a {type(value).__name__}"
        raise ValueError(f"{where}: {kind}, expected text")
    if not value.strip():
        raise ValueError(f"{where}: empty; every row needs a prompt and a reference")
    if len(value) > MAX_FIELD_CHARS:
        raise ValueError(f"{where}: {len(value):,} characters, more than the {MAX_FIELD_CHARS:,} allowed")
    return value


def _example(path: Path, index: int, row: dict[str, Any], prompt_column: str, reference_column: str) -> Example:
    prompt = _text(path, index, prompt_column, row.get(prompt_column), numbers_ok=False)
    reference = _text(path, index, reference_column, row.get(reference_column), numbers_ok=True)
    return Example(prompt=prompt, reference=reference)
