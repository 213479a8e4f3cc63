"""Keys of the original that retrain-ray accepts in a file but does not carry out: refused at load time.

A key listed here may keep its default (so the original's files, which spell every key, still load);
any other value is a `ConfigIssue` naming the key and why, instead of a run that silently trains
something else than its file says. `REFUSED` maps (section, key) to the reason; a callable reason
decides per value (a key that is implemented for some values only).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from retrain_ray.config.errors import ConfigIssue

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

REFUSED: dict[tuple[str, str], str] = {}
"""None today: every key of the original has its effect here (a new refusal names its reason)."""

ValueRule = Callable[[Any], str]


BY_VALUE: dict[tuple[str, str], ValueRule] = {}
"""Keys implemented for some values only: none today (every value the original accepts works)."""


def _default(section: Any, key: str) -> Any:
    for name, info in type(section).model_fields.items():
        if (info.alias or name) == key:
            return info.get_default(call_default_factory=True), getattr(section, name)
    raise KeyError(key)


def refused_keys(cfg: RetrainConfig) -> list[ConfigIssue]:
    """An issue for every refused key set away from its default, and every refused value."""
    issues = []
    for (section_name, key), why in REFUSED.items():
        default, value = _default(getattr(cfg, section_name), key)
        if value != default:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      f"remove the key (default {default!r})"))
    for (section_name, key), rule in BY_VALUE.items():
        _, value = _default(getattr(cfg, section_name), key)
        why = rule(value)
        if why:
            issues.append(ConfigIssue(f"{section_name}.{key}", value, f"not implemented by retrain-ray: {why}",
                                      "choose a supported value"))
    return issues
