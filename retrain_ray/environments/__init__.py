"""Multi-turn environments (`[environment]`): the `Environment` protocol, the ones shipped with
retrain-ray (`provider = "builtin"`) and the adapters to other packages' environments (`"openenv"`: a
server speaking OpenEnv's WebSocket protocol, openenv.py)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from retrain_ray.environments.digit_chain import DigitChain
from retrain_ray.environments.types import Branchable, Environment, Episode, TurnResult

if TYPE_CHECKING:
    from retrain_ray.config.sections_runtime import EnvironmentSection

__all__ = ["BUILTIN", "Branchable", "Environment", "Episode", "TurnResult", "environment_args", "load_environment"]


BUILTIN: dict[str, Callable[[Mapping[str, object]], Environment]] = {"digit_chain": DigitChain}
PROVIDERS = ("builtin", "verifiers", "openenv")
"""`[environment] provider` values `load_environment` knows ("" is no environment)."""


def environment_args(section: EnvironmentSection) -> dict[str, object]:
    """`[environment] args` as a mapping (the section keeps it as JSON text, as the original)."""
    if not section.args.strip():
        return {}
    parsed: object = json.loads(section.args)
    if not isinstance(parsed, dict):
        raise ValueError("environment.args must be a JSON object (a TOML table)")
    return {str(k): v for k, v in parsed.items()}  # pyright: ignore[reportUnknownVariableType]


def load_environment(section: EnvironmentSection) -> Environment:
    """The environment `[environment]` names; an unknown id is an error naming the key and the choices."""
    args = environment_args(section)
    if section.provider == "builtin":
        factory = BUILTIN.get(section.id)
        if factory is None:
            raise ValueError(f"environment.id: no built-in environment {section.id!r}; choose one of "
                             f"{', '.join(sorted(BUILTIN))}")
        return factory(args)
    if section.provider == "verifiers":
        # deferred: verifiers (an optional extra) loads only for runs that use it
        from retrain_ray.environments.verifiers_env import VerifiersEnvironment

        return VerifiersEnvironment(section.id, args, auto_install=section.auto_install)
    if section.provider == "openenv":
        # deferred: the websockets client loads only for runs with an OpenEnv environment
        from retrain_ray.environments.openenv import OpenEnv

        return OpenEnv(section.id, args)
    raise ValueError(f"environment.provider: {section.provider!r} has no adapter here; use \"builtin\", \"verifiers\" or \"openenv\"")
