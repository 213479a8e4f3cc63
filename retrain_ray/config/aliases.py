"""Seed 001's `[training]` names for the product's keys: read as aliases before validation.

A GRPO trainer's training-config reference (seed 001) names the step count `num_batches`, the save,
eval and log intervals `save_interval_steps` / `eval_interval_steps` / `log_interval_steps` and the
device `device`. A file may use either name; `resolve_aliases` rewrites each alias to its canonical
key (so dumps, run metadata and resume checks see one spelling), and an alias given together with its
canonical key is an issue naming both. `device` is seed 001's `cuda` / `cpu` and becomes `[backend]
devices` (`gpu:0` / `cpu`); any value `[backend] devices` accepts passes through.
"""

from __future__ import annotations

from typing import Any

from retrain_ray.config.errors import ConfigIssue

ALIASES: dict[tuple[str, str], tuple[str, str]] = {
    ("training", "num_batches"): ("training", "max_steps"),
    ("training", "save_interval_steps"): ("training", "save_every"),
    ("training", "eval_interval_steps"): ("training", "eval_every"),
    ("training", "log_interval_steps"): ("training", "log_every"),
    ("training", "device"): ("backend", "devices"),
}


def _device(value: Any) -> Any:
    """Seed 001's `cuda` (also `cuda:N`) / `cpu` as a `[backend] devices` value."""
    if not isinstance(value, str):
        return value
    text = value.strip().lower()
    if text == "cuda":
        return "gpu:0"
    if text.startswith("cuda:"):
        return "gpu:" + text.removeprefix("cuda:")
    return value


def resolve_aliases(raw: dict[str, Any], issues: list[ConfigIssue]) -> dict[str, Any]:
    """`raw` with every alias moved to its canonical key; a pair given twice is reported in `issues`
    (the canonical value is kept, so validation goes on)."""
    out = {name: dict(table) if isinstance(table, dict) else table for name, table in raw.items()}
    for (section, alias), (home, key) in ALIASES.items():
        table = out.get(section)
        if not isinstance(table, dict) or alias not in table:
            continue
        value = table.pop(alias)
        target = out.setdefault(home, {})
        if not isinstance(target, dict):
            continue  # a malformed [home] is reported by the structure check
        if key in target:
            issues.append(ConfigIssue(f"{section}.{alias}", value,
                                      f"is seed 001's name for [{home}] {key}, which is also given ({target[key]!r})",
                                      f"keep one of [{section}] {alias} and [{home}] {key}"))
            continue
        target[key] = _device(value) if alias == "device" else value
    return out

