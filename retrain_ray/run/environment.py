"""What this machine lacks for a config to run here, as opposed to what is wrong with the config.

`explain` is a dry run, often made on a laptop for a campaign that will run on a cluster: a model not in
the local Hugging Face cache, a data file that lives on the cluster's volume, an inference server or an
OpenEnv environment server that is not up yet are facts about this machine, not errors in the file.
`environment_problems` lists each with its fix (the download command, the key to set); `explain` prints
them as warnings and still shows the plan (`--strict` makes them errors). The runs themselves still
refuse to start without them (`campaign_problems` in run/preflight.py checks the model before Ray starts;
the data loader, the engine and the OpenEnv client name the missing file or server).
"""

from __future__ import annotations

import socket
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from retrain_ray.backends.registry import backend_spec, engine_spec
from retrain_ray.run.preflight import model_problems

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig

CONNECT_TIMEOUT_S = 2.0


def data_problems(configs: Iterable[RetrainConfig]) -> list[str]:
    """`[data] source = "file"` whose path or eval_path does not exist here."""
    missing: dict[tuple[str, str], None] = {}
    for cfg in configs:
        if cfg.data.source != "file":
            continue
        for key in ("path", "eval_path"):
            value = str(getattr(cfg.data, key))
            if value and not Path(value).expanduser().exists():
                missing[(key, value)] = None
    return [f"data.{key}: data file {value!r} does not exist here; copy it to that path on the machine that runs "
            f"the campaign, or set [data] {key} to where it is" for key, value in missing]


def endpoint_url(cfg: RetrainConfig) -> str | None:
    """The server an HTTP sampling engine calls (its default when `[inference] url` is empty), else None."""
    if not engine_spec(cfg.inference.engine).shared_server or not backend_spec(cfg.backend.backend).trains_locally:
        return None
    # deferred: loads httpx, which importing this module does not need
    from retrain_ray.engines.openai.engine import DEFAULT_URLS

    return cfg.inference.url or DEFAULT_URLS.get(cfg.inference.engine, DEFAULT_URLS["openai"])


def unreachable(url: str, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to `url`'s host and port fails (None: it connects)."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme in ("https", "wss") else 80)
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", port), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def endpoint_problems(configs: Iterable[RetrainConfig]) -> list[str]:
    """HTTP sampling servers (`[inference] engine = "openai" | "vllm" | "sglang"`) that do not answer."""
    urls = dict.fromkeys(url for url in map(endpoint_url, configs) if url)
    problems: list[str] = []
    for url in urls:
        why = unreachable(url)
        if why:
            problems.append(f"inference.url: the server at {url} does not answer ({why}); start it (e.g. "
                            f"`vllm serve MODEL --enable-lora`) before the campaign, or set [inference] url "
                            "to where it runs")
    return problems


def openenv_problems(configs: Iterable[RetrainConfig]) -> list[str]:
    """OpenEnv servers (`[environment] provider = "openenv"`) that do not answer."""
    urls = dict.fromkeys(c.environment.id for c in configs if c.environment.provider == "openenv" and c.environment.id)
    problems: list[str] = []
    for url in urls:
        why = unreachable(url)
        if why:
            problems.append(f"environment.id: the OpenEnv server at {url} does not answer ({why}); start it before "
                            "the run (the local stand-in: `python -m retrain_ray.environments.openenv_standin`), or "
                            "set [environment] id to where it runs")
    return problems


def package_problems(configs: Iterable[RetrainConfig]) -> list[str]:
    """`[environment] provider = "verifiers"` whose package (or verifiers itself) is not installed here."""
    # deferred: the adapter module, which importing this module does not need (it imports no verifiers)
    from retrain_ray.environments.verifiers_env import is_hub_id, missing_package

    ids = dict.fromkeys(c.environment.id for c in configs if c.environment.provider == "verifiers" and c.environment.id
                        and not (c.environment.auto_install and is_hub_id(c.environment.id)))
    return [p for p in map(missing_package, ids) if p]


def environment_problems(cfg: RetrainConfig) -> list[str]:
    """What this machine lacks for the runs of `cfg` (a campaign's conditions, or one run), each with its fix."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import expand_runs

    configs = [r.config for r in expand_runs(cfg)]
    return (model_problems(configs) + data_problems(configs) + endpoint_problems(configs) + openenv_problems(configs)
            + package_problems(configs))
