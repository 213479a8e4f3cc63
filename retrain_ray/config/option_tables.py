"""A backend's `[backend.options]` table read into its frozen options dataclass, one way for every backend."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, TypeVar

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
