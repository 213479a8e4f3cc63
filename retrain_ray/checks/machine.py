"""What this machine lacks for a config to run here, as opposed to what is wrong with the config.

`explain` is a dry run, often made on a laptop for a campaign that will run on a cluster: a model not in
the local Hugging Face cache, a data file that lives on the cluster's volume, MATH data to download while
this machine is offline (HF_HUB_OFFLINE), an inference server or an
OpenEnv environment server that is not up yet are facts about this machine, not errors in the file.
`environment_problems` lists each with its fix (the download command, the key to set); `explain` prints
them as warnings and still shows the plan (`--strict` makes them errors). The runs themselves still
refuse to start without them (`campaign_problems` in checks/preflight.py checks the model before Ray starts;
the data loader, the engine and the OpenEnv client name the missing file or server).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from retrain_ray.checks.preflight import (
    data_download_problems,
    endpoint_problems,
    model_problems,
    unreachable,
)

if TYPE_CHECKING:
    from retrain_ray.config.schema import RetrainConfig
    from retrain_ray.config.sections_runtime import DataSection, EnvironmentSection

def data_problems(datas: Iterable[DataSection]) -> list[str]:
    """`[data] source = "file"` whose path or eval_path does not exist here."""
    missing: dict[tuple[str, str], None] = {}
    for data in datas:
        if data.source != "file":
            continue
        for key in ("path", "eval_path"):
            value = str(getattr(data, key))
            if value and not Path(value).expanduser().exists():
                missing[(key, value)] = None
    return [f"data.{key}: data file {value!r} does not exist here; copy it to that path on the machine that runs "
            f"the campaign, or set [data] {key} to where it is" for key, value in missing]


def openenv_problems(environments: Iterable[EnvironmentSection]) -> list[str]:
    """OpenEnv servers (`[environment] provider = "openenv"`) that do not answer."""
    urls = dict.fromkeys(e.id for e in environments if e.provider == "openenv" and e.id)
    problems: list[str] = []
    for url in urls:
        why = unreachable(url)
        if why:
            problems.append(f"environment.id: the OpenEnv server at {url} does not answer ({why}); start it before "
                            "the run (digit_chain on openenv-core: `python -m retrain_ray.environments.openenv_digit_chain`), or "
                            "set [environment] id to where it runs")
    return problems


def package_problems(environments: Iterable[EnvironmentSection]) -> list[str]:
    """`[environment] provider = "verifiers"` whose package (or verifiers itself) is not installed here."""
    # deferred: the adapter module, which importing this module does not need (it imports no verifiers)
    from retrain_ray.environments.verifiers_env import is_hub_id, missing_package

    ids = dict.fromkeys(e.id for e in environments if e.provider == "verifiers" and e.id
                        and not (e.auto_install and is_hub_id(e.id)))
    return [p for p in map(missing_package, ids) if p]


def environment_problems(cfg: RetrainConfig) -> list[str]:
    """What this machine lacks for the runs of `cfg` (a campaign's conditions, or one run), each with its fix."""
    # deferred: loads pydantic, which importing this module does not need
    from retrain_ray.config import expand_runs

    configs = [r.config for r in expand_runs(cfg)]
    environments = [c.environment for c in configs]
    downloads = dict.fromkeys(p for c in configs for p in data_download_problems(c.data, c.environment))
    return (model_problems(configs) + data_problems(c.data for c in configs) + list(downloads)
            + endpoint_problems((c.inference, c.backend) for c in configs) + openenv_problems(environments)
            + package_problems(environments))
