"""A small TOML writer for configs: `dump_toml(cfg)` writes every section and every key.

Writing the whole config (all tables, params and options included) is what lets a per-run file
reproduce its run; the original wrote only scalar keys that differ from defaults and so dropped
`[backend.options]` and the `*_params` tables of parallel campaign runs (spec hazard 13.1).
Supports what configs hold: str, bool, int, float (inf/nan too), lists, nested tables, and
arrays of tables (`[[campaign.conditions]]`). None values are left out (TOML has no null).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from retrain_ray.config.schema import RetrainConfig

_BARE = set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def _string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and every control character (incl. DEL) escaped."""
    out = []
    for ch in text:
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _key(k: str) -> str:
    return k if k and set(k) <= _BARE else _string(k)


def toml_value(value: Any) -> str:
    """One TOML value: `toml_value(0.7) == "0.7"`, strings are escaped, tables become inline."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items() if v is not None)
        return "{" + (f" {inner} " if inner else "") + "}"
    raise TypeError(f"cannot write {type(value).__name__} value {value!r} to TOML")


def _is_table_array(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _write_table(path: list[str], table: dict[str, Any], lines: list[str], header: str) -> None:
    if header:
        lines.append(header)
    nested = []
    for k, v in table.items():
        if v is None:
            continue
        if (isinstance(v, dict) and v) or _is_table_array(v):
            nested.append((k, v))
        else:
            lines.append(f"{_key(k)} = {toml_value(v)}")
    for k, v in nested:
        sub = [*path, _key(k)]
        if isinstance(v, dict):
            lines.append("")
            _write_table(sub, v, lines, f"[{'.'.join(sub)}]")
        else:
            for item in v:
                lines.append("")
                _write_table(sub, item, lines, f"[[{'.'.join(sub)}]]")


def dumps(document: dict[str, Any]) -> str:
    """TOML text of a nested dict whose top level holds tables."""
    lines: list[str] = []
    top = {k: v for k, v in document.items() if not isinstance(v, dict)}
    _write_table([], top, lines, "")
    for name, table in document.items():
        if isinstance(table, dict):
            if lines:
                lines.append("")
            _write_table([name], table, lines, f"[{_key(name)}]")
    return "\n".join(lines) + "\n"


def dump_toml(cfg: RetrainConfig) -> str:
    """The whole config as TOML text that `load_config` reads back to an equal config."""
    return dumps({k: v for k, v in cfg.model_dump(by_alias=True).items() if v is not None})


def save_toml(cfg: RetrainConfig, path: str | Path) -> Path:
    """Write `dump_toml(cfg)` to `path` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_toml(cfg), encoding="utf-8")
    return path
