"""Configuration problems, collected and reported together.

Every problem is a `ConfigIssue` naming the TOML location (`section.key`), the offending value, what
is wrong and how to fix it. `ConfigError` holds all of them, so a user fixes a file in one pass
instead of one error per run (the original reports its validation errors the same way).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from retrain_ray.util.secrets import REDACTED, is_secret_name, redact

_MISSING = object()


@dataclass(frozen=True)
class ConfigIssue:
    """One problem: `location` is `section.key` (or a flag, or a file), `hint` says how to fix it."""

    location: str
    value: Any
    message: str
    hint: str = ""

    def render(self, source: str = "") -> str:
        where = f"{source}: " if source else ""
        shown = "" if self.value is _MISSING else f" = {_shown(self.location, self.value)}"
        fix = f" Fix: {self.hint}" if self.hint else ""
        return f"{where}{self.location}{shown}: {self.message.rstrip('.')}.{fix}"


def _shown(location: str, value: Any) -> str:
    """The value as an error may print it: never a secret, never a URL's credentials."""
    if is_secret_name(location.rsplit(".", 1)[-1]) and isinstance(value, str):
        return REDACTED
    return repr(redact(value))


class ConfigError(Exception):
    """All problems found in one config (file, overrides or Python arguments). Not a ValueError on
    purpose: pydantic would wrap a ValueError raised inside a validator and lose the issue list."""

    def __init__(self, issues: Iterable[ConfigIssue], source: str = "") -> None:
        self.issues: list[ConfigIssue] = list(issues)
        self.source = source
        super().__init__(self.__str__())

    def __str__(self) -> str:
        n = len(self.issues)
        where = f" in {self.source}" if self.source else ""
        head = f"{n} configuration problem{'s' if n != 1 else ''}{where}:"
        return "\n".join([head, *(f"  - {i.render(self.source)}" for i in self.issues)])

    @property
    def locations(self) -> list[str]:
        return [i.location for i in self.issues]


def no_value() -> Any:
    """Sentinel for issues that have no value to show (e.g. a missing required key)."""
    return _MISSING


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """A difflib suggestion, e.g. "did you mean `batch_size`?", or "" when nothing is close."""
    close = difflib.get_close_matches(word, sorted(set(candidates)), n=1, cutoff=0.6)
    return f"did you mean `{close[0]}`?" if close else ""
