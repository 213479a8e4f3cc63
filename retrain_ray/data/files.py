"""Examples from local JSONL or Parquet files (`[data] source = "file"`).

Each row gives a prompt and a reference from two named columns. References are used as given
(not passed through `extract_boxed`): store the final answer, e.g. "42", not a full solution.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from retrain_ray.data.types import Example

SUFFIXES = {".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet", ".pq": "parquet"}


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{line_no}: not valid JSON ({exc.msg}); one JSON object per line") from exc
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{line_no}: expected a JSON object per line, got {type(row).__name__}")
            rows.append(row)
    return rows


def _read_parquet(path: Path) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    return pq.read_table(path).to_pylist()


def _columns(path: Path, rows: list[dict[str, Any]]) -> list[str]:
    if path.suffix in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return list(pq.read_schema(path).names)
    return sorted({key for row in rows for key in row})


def load_file_examples(
    path: str | Path, prompt_column: str = "prompt", reference_column: str = "reference", max_examples: int = 0
) -> list[Example]:
    """Read examples from a .jsonl or .parquet file; `max_examples > 0` keeps the first N rows."""
    path = Path(path)
    kind = SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise ValueError(f"data file {path}: unsupported suffix {path.suffix!r}; use one of {sorted(SUFFIXES)}")
    if not path.is_file():
        raise FileNotFoundError(f"data file {path} does not exist; check [data] path / eval_path")
    rows = _read_jsonl(path) if kind == "jsonl" else _read_parquet(path)
    available = _columns(path, rows)
    for role, column in (("prompt_column", prompt_column), ("reference_column", reference_column)):
        if column not in available:
            raise KeyError(
                f"data file {path} has no column {column!r} ([data] {role}); available columns: {available}"
            )
    if max_examples > 0:
        rows = rows[:max_examples]
    return [_example(path, i, row, prompt_column, reference_column) for i, row in enumerate(rows)]


def _example(path: Path, index: int, row: dict[str, Any], prompt_column: str, reference_column: str) -> Example:
    prompt, reference = row.get(prompt_column), row.get(reference_column)
    if prompt is None or reference is None:
        raise ValueError(
            f"data file {path}, row {index}: empty {prompt_column!r} or {reference_column!r}; every row needs both"
        )
    return Example(prompt=str(prompt), reference=str(reference))
