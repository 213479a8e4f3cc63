"""What a server serves: the base model's name there (`/v1/models`), and a run's adapter loaded by
versioned names, old versions unloaded.

Versioned names (`<adapter>-v<version>`): each sync loads the new version under a name no request has
used, makes requests name it, then unloads every older version. A server that caches by name (vLLM's
prefix cache is keyed by adapter) thus never serves a step from an older version's weights, and the
server's own `/v1/models` says which version a run samples from.
"""

from __future__ import annotations

import contextlib
import logging
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, cast

from retrain_ray.engines.openai.protocol import EngineCallError, LoraRoutes

log = logging.getLogger(__name__)


class _Requests(Protocol):
    engine_name: str
    shown_url: str

    def request(self, method: str, route: str, call: str, *, json: object = None) -> dict[str, object]: ...


def served_models(client: _Requests) -> list[dict[str, object]]:
    """The entries of the server's `/v1/models` (empty when it has no such route)."""
    try:
        listing = client.request("GET", "/v1/models", "model list")
    except EngineCallError as err:
        if err.status == 404:
            return []
        raise
    return [cast("dict[str, object]", d) for d in cast("list[object]", listing.get("data") or [])
            if isinstance(d, dict)]


def base_model_name(client: _Requests, model_name: str) -> str:
    """`model_name` when the server serves it; else the one base model it serves (vLLM names it by its
    path unless started with `--served-model-name`); else an error naming that flag."""
    models = served_models(client)
    ids = [str(m.get("id")) for m in models]
    if not models or model_name in ids:
        return model_name
    bases = [i for m, i in zip(models, ids, strict=True) if not m.get("parent")]
    if len(bases) == 1:
        log.info("%s serves its base model as %r, not [model] model %r: requests name %r (start the server "
                 "with --served-model-name %s to use the same name)", client.shown_url, bases[0], model_name,
                 bases[0], model_name)
        return bases[0]
    raise EngineCallError(
        f'[inference] engine = "{client.engine_name}": the server at {client.shown_url} does not serve '
        f"[model] model {model_name!r} (it serves {ids}); fix: start it with --served-model-name {model_name}, "
        "or set [model] model to the name it serves")


class VersionedAdapters:
    """A run's adapter on a server that loads adapters by path: one loaded version at a time."""

    def __init__(self, client: _Requests, routes: LoraRoutes, adapter: str) -> None:
        self.client, self.routes, self.adapter = client, routes, adapter
        self.loaded: list[str] = []
        self._listed = False
        self._folders: dict[str, Path] = {}

    def name(self, version: int) -> str:
        return f"{self.adapter}-v{version}"

    def load(self, version: int, write_folder: Callable[[str], Path]) -> str:
        """Loads `version` (its folder written by `write_folder(name)`) and unloads every older one;
        returns the loaded name."""
        if not self._listed:  # versions an earlier attempt of this run left loaded
            pattern = re.compile(rf"{re.escape(self.adapter)}-v\d+")
            self.loaded += [str(m.get("id")) for m in served_models(self.client) if pattern.fullmatch(str(m.get("id")))]
            self._listed = True
        name = self.name(version)
        if name in self.loaded:  # a resumed run syncs the version it had: load its weights afresh
            self._unload(name)
        folder = write_folder(name)
        self.client.request("POST", self.routes.load, "adapter load",
                            json={"lora_name": name, "lora_path": str(folder)})
        self._folders[name] = folder
        for old in [n for n in self.loaded if n != name]:
            self._unload(old)
        self.loaded = [name]
        return name

    def _unload(self, name: str) -> None:
        try:
            self.client.request("POST", self.routes.unload, "adapter unload", json={"lora_name": name})
        except EngineCallError as err:
            if err.status != 404:  # 404: already gone, nothing to do
                raise
        if name in self.loaded:
            self.loaded.remove(name)
        folder = self._folders.pop(name, None)
        if folder is not None:  # the server read it when it loaded; nothing reads it again
            with contextlib.suppress(OSError):
                shutil.rmtree(folder)
