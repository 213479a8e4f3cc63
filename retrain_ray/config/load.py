"""TOML in and out. Strict loading: read the file, lay overrides over it, build (`config/build.py`), and
check every campaign condition validates (`config/matrix.py`). Writing: `dumps` / `dump_toml` /
`save_toml` turn a config back into TOML that loads to the same config.

The build pipeline: unknown sections/keys and legacy `prime_rl_*` keys become issues with a
hint; empty strings keep the default of string keys (as the original); each section is validated on
its own, keys that fail are dropped and reported, and the cross-key rules then run on what is left,
so one file with several mistakes reports all of them. Warnings (spec 7) come back separately.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib
import tomli_w

from retrain_ray.config.build import build_config
from retrain_ray.config.errors import ConfigError, ConfigIssue, no_value
from retrain_ray.config.key_names import resolve_aliases
from retrain_ray.config.matrix import conditioned_configs
from retrain_ray.config.overrides import merge_overrides
from retrain_ray.config.schema import RetrainConfig
from retrain_ray.util.file_kinds import special_file_problem

DEFAULT_PATH = Path("retrain.toml")


def read_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; a missing file or a syntax error is a ConfigError naming the file."""
    path = Path(path)
    problem = special_file_problem(path)
    if problem is not None:  # reading a device or a pipe would never end or wait forever
        raise ConfigError([ConfigIssue(str(path), no_value(), problem, "name the TOML config file itself")],
                          str(path))
    try:
        with path.open("rb") as fh:
            data = fh.read()
        raw = tomllib.loads(data.decode("utf-8"))
    except IsADirectoryError:
        raise ConfigError([ConfigIssue(str(path), no_value(), "is a directory, not a TOML file",
                                       "name the config file itself, e.g. configs/smoke.toml")], str(path)) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([ConfigIssue(str(path), no_value(), f"not UTF-8 text (byte {exc.start}): a binary file?",
                                       "save the config as UTF-8 TOML")], str(path)) from None
    except FileNotFoundError:
        raise ConfigError([ConfigIssue(str(path), no_value(), "file not found",
                                       "check the path (relative paths start at the current directory)")],
                          str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([ConfigIssue(str(path), no_value(), f"not valid TOML ({exc})",
                                       "fix the syntax at the line shown")], str(path)) from None
    if not raw:
        raise ConfigError([ConfigIssue(str(path), no_value(), "holds no settings (empty file)",
                                       "start from configs/smoke.toml, or leave out the file to use the defaults")],
                          str(path))
    return raw


def load_config_with_warnings(
    path: str | Path | None = None, overrides: dict[str, Any] | None = None
) -> tuple[RetrainConfig, list[str]]:
    """Load a TOML file (default ./retrain.toml, else pure defaults), apply overrides (the nested
    dict of `parse_overrides`), validate; return the config and the spec-7 warnings."""
    if path is None:
        raw = read_toml(DEFAULT_PATH) if DEFAULT_PATH.exists() else {}
        source = str(DEFAULT_PATH) if DEFAULT_PATH.exists() else "<defaults>"
    else:
        raw, source = read_toml(path), str(path)
    issues: list[ConfigIssue] = []
    raw = resolve_aliases(raw, issues)  # the file's own names first: an override of max_steps replaces num_batches
    if issues:
        raise ConfigError(issues, source)
    if overrides:
        raw = merge_overrides(raw, overrides)
    cfg, warnings = build_config(raw, source)
    if cfg.campaign is not None:
        try:
            conditioned_configs(cfg)
        except ConfigError as exc:
            raise ConfigError(exc.issues, source) from None
    return cfg, warnings


def load_config(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> RetrainConfig:
    """Load and validate a config; raises ConfigError listing every problem."""
    return load_config_with_warnings(path, overrides)[0]


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
