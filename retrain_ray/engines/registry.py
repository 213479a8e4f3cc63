"""The one engine registry: each built-in `[inference] engine`'s spec, one line per engine folder.

A spec (engines/types.py `EngineSpec`) says what an engine is (HTTP or in-process, entropies, placement,
description) and holds its policy factory, a function in the engine's folder that imports its heavy
libraries only when called, so importing this registry stays light. Code asks a spec instead of
comparing names (tests/backends/test_registry_dispatch.py). A name not here (a dotted plugin path) gets the
plugin spec. To add an engine: a folder under engines/ whose `__init__.py` holds its `SPEC` (and
factory), and one line below.
"""

from __future__ import annotations

from retrain_ray.engines import openai, pytorch, vllm
from retrain_ray.engines.types import EngineSpec

ENGINE_SPECS: dict[str, EngineSpec] = {spec.name: spec for spec in (
    pytorch.SPEC,
    vllm.SPEC,
    *openai.SPECS,
)}
"""Built-in engines."""

PLUGIN_ENGINE = EngineSpec("plugin", is_http=False, factory=None, is_plugin=True,
                           describe=lambda inference, backend: f"{inference.engine}: plugin engine in the run's "
                                                               "process, for the local backend")
"""A dotted `[inference] engine`: its factory samples in the run's process for the local backend; its
entropies are what its capability hook declares (preflight checks it)."""


def engine_spec(name: str) -> EngineSpec:
    """The spec of an `[inference] engine` name (the plugin spec for a dotted path)."""
    return ENGINE_SPECS.get(name, PLUGIN_ENGINE)
