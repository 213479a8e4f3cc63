"""Dotted-path plugins: `package.module:attribute` or `package.module.attribute`.

A mode name that is not a built-in and contains a dot or colon is imported once (the registry caches
the result). Import problems become a `ValueError` that names the path and how to fix it.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any


def is_dotted_path(name: str) -> bool:
    return ":" in name or "." in name


def _split(path: str) -> tuple[str, str]:
    if ":" in path:
        module, _, attr = path.partition(":")
    else:
        module, _, attr = path.rpartition(".")
    if not module or not attr:
        raise ValueError(f"plugin path {path!r} is malformed; write it as 'package.module:function'.")
    return module, attr


def load_object(path: str, kind: str) -> Any:
    """Import the object named by `path`; `kind` (e.g. 'transform_mode') is used in error messages."""
    module_name, attr = _split(path)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(
            f"{kind}={path!r}: cannot import module {module_name!r} ({exc}). Check the spelling, and that the "
            "module is importable (installed, or on PYTHONPATH)."
        ) from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise ValueError(f"{kind}={path!r}: module {module_name!r} has no attribute {attr!r}.") from exc


def load_callable(path: str, kind: str) -> Callable[..., Any]:
    obj = load_object(path, kind)
    if not callable(obj):
        raise ValueError(f"{kind}={path!r} is not callable (got {type(obj).__name__}).")
    return obj


def positional_arity(fn: Callable[..., Any]) -> tuple[int, str]:
    """Number of positional parameters and the first one's name (for calling-convention detection)."""
    try:
        params = [
            p
            for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return 1, ""
    return len(params), (params[0].name if params else "")
