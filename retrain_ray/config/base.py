"""Base model and value types shared by every TOML section model.

Sections are frozen and forbid unknown keys. Numbers are coerced from strings the way the original
coerces them (`int("40")`, `float("1e-5")`), but, unlike the original's `bool(v)`, a bool field
accepts only true/false spellings (`1|true|yes|on` / `0|false|no|off`), and a bool is never taken
for a number (`batch_size = true` is an error, not 1).
"""

from __future__ import annotations

import json
from collections.abc import Set as AbstractSet
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict

from retrain_ray.util.dotted import is_dotted_path


def _not_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("expected a number, got a boolean")
    return value


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _bool_from_text(value: Any) -> Any:
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise ValueError("expected true or false (1|true|yes|on, 0|false|no|off)")
    if isinstance(value, int) and not isinstance(value, bool) and value not in (0, 1):
        raise ValueError("expected true or false")
    return value


def _list_from_text(value: Any) -> Any:
    """CLI values arrive as text: accept a JSON array or a comma list."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("["):
            return json.loads(text)
        return [part.strip() for part in text.split(",") if part.strip()]
    return value


def _dict_from_text(value: Any) -> Any:
    if isinstance(value, str):
        parsed = json.loads(value) if value.strip() else {}
        if not isinstance(parsed, dict):
            raise ValueError("expected a table (a JSON object on the command line)")
        return parsed
    return value


Int = Annotated[int, BeforeValidator(_not_bool)]
Float = Annotated[float, BeforeValidator(_not_bool)]
Bool = Annotated[bool, BeforeValidator(_bool_from_text)]
StrList = Annotated[list[str], BeforeValidator(_list_from_text)]
IntList = Annotated[list[Int], BeforeValidator(_list_from_text)]
Table = Annotated[dict[str, Any], BeforeValidator(_dict_from_text)]


class Section(BaseModel):
    """One TOML section: frozen, unknown keys forbidden, defaults are the original's."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=False)


def check_choice(value: str, known: AbstractSet[str], what: str, dotted: bool = True) -> str:
    """`value` when it is one of `known` (or, with `dotted`, a plugin's dotted path); else the ValueError
    that names the key and every accepted name."""
    ok = value in known or (dotted and is_dotted_path(value))
    if not ok:
        names = ", ".join(sorted(n for n in known if n)) + (", or a dotted plugin path" if dotted else "")
        raise ValueError(f"unknown {what} {value!r}; use one of {names}")
    return value


def one_of(known: AbstractSet[str], what: str, dotted: bool = True) -> AfterValidator:
    """The validator of a key that takes one of `known` names: `Annotated[str, one_of(NAMES, "what")]`."""
    return AfterValidator(lambda value: check_choice(value, known, what, dotted))
