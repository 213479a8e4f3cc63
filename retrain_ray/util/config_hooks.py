"""The one hook through which the check pass (`retrain_ray.checks`) reaches every `RetrainConfig` built.

`config/` is the schema and sits below the components it names, so it cannot import the rules that ask
the registries (engines, backends, trainers, trackers) about a config: that would be an upward import.
Instead `RetrainConfig`'s validator calls the checks registered here, and `retrain_ray/__init__.py`
registers the check pass once, when the package is first imported, so no config is ever built without
it. The hook lives in `util/` rather than in `config/` because `import retrain_ray` must stay cheap
(tests/project/test_startup_imports.py: the CLI front loads no pydantic), and importing anything under
`config/` loads pydantic through the package's `__init__`.

The alternatives were worse: a config that checks nothing until a caller remembers to (every test and
user of `RetrainConfig.model_validate` would change), or a deferred import of `retrain_ray.checks` inside
the schema (an upward import the layer test could not see).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ConfigCheck:
    """`issues(cfg)` lists the config's problems (ConfigIssue), `warnings(cfg)` its warnings (text)."""

    issues: Callable[[Any], list[Any]]
    warnings: Callable[[Any], list[str]]


_CHECKS: list[ConfigCheck] = []


def register_config_check(check: ConfigCheck) -> None:
    """Run `check` on every RetrainConfig built from now on (registering the same check twice is a no-op)."""
    if check not in _CHECKS:
        _CHECKS.append(check)


def config_checks() -> tuple[ConfigCheck, ...]:
    return tuple(_CHECKS)
