"""Configs written back as TOML: `dump_toml(cfg)` writes every section and every key.

Writing the whole config (all tables, params and options included) is what lets a per-run file
reproduce its run; the original wrote only scalar keys that differ from defaults and so dropped
`[backend.options]` and the `*_params` tables of parallel campaign runs (spec hazard 13.1).
The TOML itself is tomli-w's; this module only leaves out None values (TOML has no null).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from retrain_ray.config.schema import RetrainConfig


def _without_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_without_none(v) for v in value if v is not None]
    return value


def toml_value(value: Any) -> str:
    """One TOML value as text: `toml_value(0.7) == "0.7"`; strings escaped, tables inline."""
    line = tomli_w.dumps({"x": _without_none(value)}, multiline_strings=False)
    if not line.startswith("x = "):  # a table or an array of tables: tomli-w wrote it as a section
        raise TypeError(f"cannot write {type(value).__name__} value {value!r} as one TOML value")
    return line.removeprefix("x = ").rstrip("\n")


def dumps(document: dict[str, Any]) -> str:
    """TOML text of a nested dict whose top level holds tables."""
    return tomli_w.dumps(_without_none(document))


def dump_toml(cfg: RetrainConfig) -> str:
    """The whole config as TOML text that `load_config` reads back to an equal config."""
    return dumps(cfg.model_dump(by_alias=True))


def save_toml(cfg: RetrainConfig, path: str | Path) -> Path:
    """Write `dump_toml(cfg)` to `path` (parents created) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dump_toml(cfg), encoding="utf-8")
    return path
