"""How a built-in backend's `[backend.options]` are checked and read, one way for every backend: each
backend's spec holds its `OptionsTable` (its folder's options.py), and `table_issues` checks a table's
keys, types and values (unknown keys are an error with a did-you-mean hint). A dotted-path plugin
backend gets its options unchecked."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from retrain_ray.config.errors import ConfigIssue

T = TypeVar("T")


def parse_options(cls: type[T], options: Mapping[str, Any] | None, backend: str) -> T:
    """`options` -> `cls(**options)`; a key `cls` has no field for is an error with a did-you-mean hint."""
    options = dict(options or {})
    known = [f.name for f in fields(cls)]  # type: ignore[arg-type]  # cls is a dataclass
    for key in options:
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"known: {', '.join(known)}"
            raise ValueError(f"[backend.options] {key!r} is not an option of the {backend} backend; {hint}")
    return cls(**options)


def issue(location: str, value: object, message: str, hint: str = "") -> ConfigIssue:
    """One `[backend.options]` problem, as the config checks report it."""
    # deferred: config/ imports this registry while it loads (its checks ask the specs), so the registry
    # reaches config's errors module only when it reports an issue
    from retrain_ray.config.errors import ConfigIssue

    return ConfigIssue(location, value, message, hint)


def parsed_issues(parse: Callable[[dict[str, Any]], object], hint: str) -> Callable[[dict[str, Any]], list[ConfigIssue]]:
    """A table's `value_issues`: the backend's own parser of all its options, its error as one issue."""
    def issues(options: dict[str, Any]) -> list[ConfigIssue]:
        try:
            parse(options)
        except (ValueError, TypeError) as exc:
            return [issue("backend.options", options, str(exc), hint)]
        return []
    return issues


@dataclass(frozen=True)
class OptionsTable:
    """How one built-in backend's `[backend.options]` are checked (its spec's `options` names it)."""

    schema: Callable[[dict[str, Any]], dict[str, Any]]
    """Known keys and their defaults, given the options set."""
    bool_or_auto: frozenset[str] = frozenset()
    """Keys that take true, false or "auto"."""
    key_issues: Callable[[str, Any], list[ConfigIssue]] | None = None
    """A well-typed key's value check."""
    value_issues: Callable[[dict[str, Any]], list[ConfigIssue]] | None = None
    """The backend's own parser of all its options, once every key is known and well typed."""


def _type_ok(value: Any, default: Any, bool_or_auto: bool = False) -> bool:
    if bool_or_auto:
        return isinstance(value, bool) or value == "auto"
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def _close_match(key: str, schema: dict[str, Any]) -> str:
    # deferred: see `issue`
    from retrain_ray.config.errors import did_you_mean

    return did_you_mean(key, schema)


def table_issues(table: OptionsTable, backend: str, options: dict[str, Any]) -> list[ConfigIssue]:
    """Issues for unknown, mistyped or refused `[backend.options]` keys of a built-in backend."""
    schema = table.schema(options)
    issues: list[ConfigIssue] = []
    for key, value in options.items():
        loc = f"backend.options.{key}"
        if key not in schema:
            if not schema:
                hint = f"remove it: the {backend} backend takes no [backend.options]"
            else:
                hint = _close_match(key, schema) or f"known options: {', '.join(sorted(schema))}"
            issues.append(issue(loc, value, f"unknown option for backend {backend!r}", hint))
        elif not _type_ok(value, schema[key], key in table.bool_or_auto):
            kind = "bool or \"auto\"" if key in table.bool_or_auto else type(schema[key]).__name__
            issues.append(issue(loc, value, f"expected a {kind}", f"default is {schema[key]!r}"))
        elif table.key_issues is not None:
            issues += table.key_issues(key, value)
    if table.value_issues is not None and options and not issues:
        issues += table.value_issues(options)
    return issues


