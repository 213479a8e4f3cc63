"""Building a RetrainConfig from a raw nested dict: check the structure, coerce, validate, report
everything at once.

Pipeline (`build_config`): unknown sections/keys and legacy `prime_rl_*` keys become issues with a
hint; empty strings keep the default of string keys (as the original); each section is validated on
its own, keys that fail are dropped and reported, and the cross-key rules then run on what is left,
so one file with several mistakes reports all of them. Warnings (spec 7) come back separately.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from retrain_ray.config.errors import ConfigError, ConfigIssue, did_you_mean, no_value
from retrain_ray.config.key_names import FIELD_INDEX, resolve_aliases
from retrain_ray.config.schema import RetrainConfig
from retrain_ray.util.config_hooks import config_checks

OPTIONAL_SECTIONS = ("campaign", "squeeze")


def _model_of(section: str) -> Any:
    annotation = RetrainConfig.model_fields[section].annotation
    args = getattr(annotation, "__args__", None)
    return args[0] if args else annotation


def section_keys(section: str) -> list[str]:
    model = _model_of(section)
    return [info.alias or name for name, info in model.model_fields.items()]


def _unknown_key_hint(section: str, key: str) -> str:
    hint = did_you_mean(key, section_keys(section))
    if hint:
        return hint
    if key in FIELD_INDEX:
        home, toml_key = FIELD_INDEX[key]
        return f"`{key}` is a flag name; in TOML write `{toml_key} = ...` under [{home}]"
    homes = [s for s in RetrainConfig.model_fields if key in section_keys(s)]
    if homes:
        return f"`{key}` belongs in [{homes[0]}]"
    return f"known keys of [{section}]: {', '.join(section_keys(section))}"


def _check_section(name: str, table: Any, issues: list[ConfigIssue]) -> dict[str, Any]:
    if not isinstance(table, dict):
        issues.append(ConfigIssue(name, table, f"[{name}] must be a table", f"write it as a [{name}] section"))
        return {}
    known, kept = set(section_keys(name)), {}
    for key, value in table.items():
        if name == "backend" and key.startswith("prime_rl_"):
            new = key.removeprefix("prime_rl_")
            issues.append(ConfigIssue(f"backend.{key}", value, "legacy prime_rl_* key",
                                      f"move it to [backend.options] as `{new} = ...` (the original's "
                                      "`retrain migrate-config` does this rewrite)"))
        elif key not in known:
            issues.append(ConfigIssue(f"{name}.{key}", value, f"unknown key in [{name}]",
                                      _unknown_key_hint(name, key)))
        else:
            kept[key] = value
    return kept


def _check_structure(raw: dict[str, Any], issues: list[ConfigIssue]) -> dict[str, dict[str, Any]]:
    sections = list(RetrainConfig.model_fields)
    out = {}
    for name, table in raw.items():
        if name in sections:
            out[name] = _check_section(name, table, issues)
            continue
        homes = [s for s in sections if name in section_keys(s)]
        hint = did_you_mean(name, sections) or (f"`{name}` is a key of [{homes[0]}]" if homes else
                                                f"known sections: {', '.join(sections)}")
        issues.append(ConfigIssue(name, table if not isinstance(table, dict) else no_value(),
                                  f"unknown section [{name}]" if isinstance(table, dict) else
                                  f"unknown top-level key `{name}`", hint))
    return out


def _drop_empty_strings(section: str, table: dict[str, Any]) -> dict[str, Any]:
    """Empty string keeps the default for string keys, as the original does."""
    fields = {info.alias or n: info for n, info in _model_of(section).model_fields.items()}
    return {k: v for k, v in table.items() if not (v == "" and isinstance(fields[k].default, str))}


def _loc(section: str, loc: tuple[Any, ...]) -> str:
    text = section
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else f".{part}"
    return text


def _validate_section(name: str, table: dict[str, Any], issues: list[ConfigIssue]) -> tuple[Any, set[str]]:
    """The section model, with failing keys dropped (and reported) so validation can go on."""
    model, bad = _model_of(name), set()
    fields = {info.alias or n: info for n, info in model.model_fields.items()}
    for _ in range(3):
        try:
            return model.model_validate(table), bad
        except ValidationError as exc:
            for err in exc.errors():
                key = str(err["loc"][0]) if err["loc"] else ""
                default = fields[key].get_default(call_default_factory=True) if key in fields else None
                hint = f"edit [{name}] {key} (default: {default!r})" if key in fields else f"fix [{name}]"
                hint = "" if "Fix:" in err["msg"] else hint  # the validator's message says how already
                issues.append(ConfigIssue(_loc(name, err["loc"]), err.get("input"), err["msg"], hint))
                bad.add(f"{name}.{key}")
            table = {k: v for k, v in table.items() if f"{name}.{k}" not in bad}
    return model(), bad


def build_config(raw: dict[str, Any], source: str = "") -> tuple[RetrainConfig, list[str]]:
    """Validate a parsed TOML document (or any nested dict); raise ConfigError with every issue."""
    issues: list[ConfigIssue] = []
    tables = _check_structure(resolve_aliases(raw, issues), issues)
    sections: dict[str, Any] = {}
    bad: set[str] = set()
    for name, table in tables.items():
        sections[name], failed = _validate_section(name, _drop_empty_strings(name, table), issues)
        bad |= failed
    cfg = None
    try:
        cfg = RetrainConfig(**sections)
    except ConfigError as exc:
        issues += [i for i in exc.issues if not any(i.location.startswith(b) for b in bad)]
    if issues or cfg is None:
        raise ConfigError(issues, source)
    return cfg, [warning for check in config_checks() for warning in check.warnings(cfg)]
