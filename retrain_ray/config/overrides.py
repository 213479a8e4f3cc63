"""Command-line overrides and campaign conditions, both keyed by the original's field names.

`parse_overrides(["--max-steps", "40", "--bp-enabled=true", "--transform-param", "eta=0.5"])` gives
`{"training": {"max_steps": "40"}, "backpressure": {"enabled": "true"},
"algorithm": {"transform_params": {"eta": 0.5}}}`; values stay text and the section models coerce
them (so the same rules apply as in a TOML file). `--section.key=value` also works, for every key
including [campaign] and [squeeze]. Repeatable `--*-param k=v` / `--backend-opt k=v` values are
parsed as bool, JSON, float, int or string, in that order, and merge into their table. `merge_overrides`
lays an override dict over a raw (TOML-shaped) dict.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from retrain_ray.config.build import build_config, section_keys
from retrain_ray.config.campaign_schema import CampaignCondition
from retrain_ray.config.errors import ConfigError, ConfigIssue, did_you_mean, no_value
from retrain_ray.config.key_names import FIELD_INDEX, TRAIN_SECTIONS
from retrain_ray.config.schema import RetrainConfig

TABLE_FLAGS: dict[str, tuple[str, str]] = {
    "backend_opt": ("backend", "options"),
    "algorithm_param": ("algorithm", "params"),
    "advantage_param": ("algorithm", "advantage_params"),
    "transform_param": ("algorithm", "transform_params"),
}
ALIASES: dict[str, tuple[str, str]] = {"resume": ("resume", "from")}


def parse_param_value(text: str) -> Any:
    """bool, then JSON (numbers, arrays, objects), then float, then int, else the string."""
    low = text.strip().lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    try:
        return json.loads(text)
    except (json.JSONDecodeError, ValueError):
        pass
    for cast in (float, int):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _flag_names() -> list[str]:
    names = [*FIELD_INDEX, *TABLE_FLAGS, *ALIASES]
    return [n.replace("_", "-") for n in names]


def _resolve(flag: str) -> tuple[str, str] | ConfigIssue:
    """(section, key) of a flag name, or the issue to report."""
    if "." in flag:
        section, _, key = flag.partition(".")
        key = key.replace("-", "_")
        if section not in RetrainConfig.model_fields:
            hint = did_you_mean(section, RetrainConfig.model_fields) or "use --section.key=value"
            return ConfigIssue(f"--{flag}", no_value(), f"unknown section [{section}]", hint)
        if key not in section_keys(section):
            hint = did_you_mean(key, section_keys(section)) or f"keys: {', '.join(section_keys(section))}"
            return ConfigIssue(f"--{flag}", no_value(), f"unknown key in [{section}]", hint)
        return section, key
    name = flag.replace("-", "_")
    if name in ALIASES:
        return ALIASES[name]
    if name in FIELD_INDEX:
        return FIELD_INDEX[name]
    close = did_you_mean(flag, _flag_names()).replace("`", "`--", 1)
    return ConfigIssue(f"--{flag}", no_value(), "unknown flag", close or "see `retrain-ray explain` docs for flags")


def _is_bool_key(section: str, key: str) -> bool:
    model = TRAIN_SECTIONS.get(section)
    info = model.model_fields.get(key) if model else None
    return info is not None and isinstance(info.default, bool)


def _take_value(argv: list[str], i: int, flag: str, target: Any) -> tuple[str | None, int]:
    if "=" in flag:
        return flag.partition("=")[2], i + 1
    if i + 1 < len(argv) and not argv[i + 1].startswith("--"):
        return argv[i + 1], i + 2
    if isinstance(target, tuple) and _is_bool_key(*target):
        return "true", i + 1
    return None, i + 1


def _put(out: dict[str, Any], name: str, target: tuple[str, str], value: str) -> str | None:
    section, key = target
    if name in TABLE_FLAGS:
        k, sep, v = value.partition("=")
        if not sep or not k:
            return "expects key=value"
        out.setdefault(section, {}).setdefault(key, {})[k.strip()] = parse_param_value(v)
    else:
        out.setdefault(section, {})[key] = value
    return None


def parse_overrides(argv: list[str]) -> dict[str, Any]:
    """Nested {section: {key: value}} from CLI flags; raises ConfigError listing every bad flag."""
    out: dict[str, Any] = {}
    issues: list[ConfigIssue] = []
    i = 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            issues.append(ConfigIssue(token, no_value(), "unexpected argument", "flags look like --max-steps 40"))
            i += 1
            continue
        flag = token[2:]
        name = flag.partition("=")[0]
        target = TABLE_FLAGS.get(name.replace("-", "_")) or _resolve(name)
        value, i = _take_value(argv, i, flag, target)
        if isinstance(target, ConfigIssue):
            issues.append(target)
        elif value is None:
            issues.append(ConfigIssue(f"--{name}", no_value(), "needs a value", f"write --{name} VALUE"))
        elif err := _put(out, name.replace("-", "_"), target, value):
            issues.append(ConfigIssue(f"--{name}", value, err, f"write --{name} key=value"))
    if issues:
        raise ConfigError(issues, "command line")
    return out


def apply_overrides(cfg: RetrainConfig, overrides: dict[str, Any]) -> RetrainConfig:
    """A new validated config with `parse_overrides` output laid over `cfg`."""
    return build_config(merge_overrides(cfg.to_raw(), overrides), "overrides")[0]


def apply_condition(base_cfg: RetrainConfig, condition: Any) -> RetrainConfig:
    """The base config under one campaign condition (spec 5.1).

    Field-name overrides replace the field's value (a `transform_params` table replaces the base's
    table, as the original's deep-copy-and-set does); a section-name table (`training = {lr = ..}`)
    sets each of its keys. Raises ConfigError naming the condition's bad keys.
    """
    cond = condition if isinstance(condition, CampaignCondition) else CampaignCondition.model_validate(condition)
    raw = base_cfg.to_raw()
    raw.setdefault("algorithm", {}).update(advantage_mode=cond.advantage_mode, transform_mode=cond.transform_mode)
    for key, value in cond.overrides.items():
        if key in FIELD_INDEX:
            section, toml_key = FIELD_INDEX[key]
            raw.setdefault(section, {})[toml_key] = copy.deepcopy(value)
        else:
            raw.setdefault(key, {}).update(copy.deepcopy(value))
    return build_config(raw, f"condition {cond.label}")[0]


def merge_overrides(raw: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """A copy of `raw` with overrides laid over it; table values (params, options) merge key-wise."""
    merged = copy.deepcopy(raw)
    for section, table in overrides.items():
        target = merged.setdefault(section, {})
        if not isinstance(table, dict) or not isinstance(target, dict):
            merged[section] = copy.deepcopy(table)
            continue
        for key, value in table.items():
            if isinstance(value, dict) and isinstance(target.get(key), dict):
                target[key] = {**target[key], **value}
            else:
                target[key] = copy.deepcopy(value)
    return merged
