"""`retrain.data` for plugins: `Example` and the `DataSource` protocol (spec section 9).

A data-source plugin's factory returns an object whose `load()` gives examples; retrain-ray reads
each one's `prompt` and `reference` (run/plugins.py), so this `Example`, the original's own, or any
object with those attributes is accepted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from retrain_ray.compat.original.type_defs import ExampleInfoLike, PromptLike

__all__ = ["DataSource", "Example"]


@dataclass
class Example:
    """One training example: the prompt and the reference answer its completions are scored against."""

    prompt: PromptLike
    reference: str
    task: str = "default"
    info: ExampleInfoLike = None
    example_id: int | str = -1


@runtime_checkable
class DataSource(Protocol):
    """What a `[data] source` plugin's factory returns."""

    def load(self) -> list[Example]: ...
