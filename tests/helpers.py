"""Test helpers shared by every kind of test: a free port, a bounded wait, and the one builder of
run and campaign TOML files (`write_config`, `write_campaign`) on top of the tiny CPU sections."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from retrain_ray.config.load import dumps

T = TypeVar("T")

# The model, backend and data sections every tiny CPU test config starts with.
TINY_CPU: dict[str, dict[str, Any]] = {
    "model": {"model": "builtin:tiny", "finetune": "full"},
    "backend": {"devices": "cpu"},
    "data": {"source": "builtin", "task": "first_digit"},
}
GRPO = {"advantage_mode": "grpo", "transform_mode": "none"}
# A tiny CPU run that logs a row at every step (group_size 16: every group splits, so no step goes
# without an update) and checkpoints every two steps: `write_config(path, base=TINY_RUN, ...)`.
TINY_RUN: dict[str, dict[str, Any]] = {
    **TINY_CPU,
    "reward": {"type": "custom", "custom_module": "operator:lt"},
    "training": {"batch_size": 2, "group_size": 16, "max_tokens": 4, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 2},
    "logging": {"log_dir": "logs/x"},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate: Callable[[], T], *, timeout_s: float, what: str, poll_s: float = 0.2) -> T:
    """Calls `predicate` every `poll_s` until it returns something truthy, and returns that; raises
    TimeoutError naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(poll_s)
    raise TimeoutError(f"timed out after {timeout_s} s waiting for {what}")


def config_toml(*, base: Mapping[str, Mapping[str, Any]] = TINY_CPU, **sections: Mapping[str, Any] | None) -> str:
    """TOML text of `base` with each keyword section merged over base's section of that name.

    A key set to None is left out (`model={"finetune": None}`), a section set to None is dropped
    (`data=None`); nested dicts become sub-tables, lists of dicts arrays of tables."""
    document: dict[str, Any] = {name: dict(table) for name, table in base.items()}
    for name, table in sections.items():
        if table is None:
            document.pop(name, None)
        else:
            document[name] = {**document.get(name, {}), **table}
    return dumps(document)


def write_config(path: Path, *, base: Mapping[str, Mapping[str, Any]] = TINY_CPU,
                 **sections: Mapping[str, Any] | None) -> Path:
    """Writes `config_toml(base=base, **sections)` to `path` and returns the path."""
    path.write_text(config_toml(base=base, **sections))
    return path


def write_campaign(path: Path, *, campaign: Mapping[str, Any], conditions: Sequence[Mapping[str, Any]] = (GRPO,),
                   base: Mapping[str, Mapping[str, Any]] = TINY_CPU, **sections: Mapping[str, Any] | None) -> Path:
    """Writes a campaign TOML: `write_config`'s sections, then `[campaign]` with `campaign`'s keys and
    one `[[campaign.conditions]]` per entry of `conditions` (none: the default conditions)."""
    table = {**campaign, "conditions": [dict(c) for c in conditions] or None}
    return write_config(path, base=base, **sections, campaign=table)


# Source of a reward plugin written to the original's signature whose scores (1000 + a fraction) no built-in reward gives,
# and which appends its module's file to REPORT when imported.
SHIPPED_REWARD = '''
with open({report!r}, "a") as out:
    out.write(__file__ + "\\n")


class Shipped:
    def __init__(self, config):
        pass

    def score(self, response, reference):
        return 1000.0 + (sum(map(ord, response)) % 97) / 97


def make(config):
    return Shipped(config)
'''


TEST_PLUGINS = Path(__file__).parent / "fixtures" / "plugins"


def install_test_plugins(workdir: Path, monkeypatch: Any) -> Path:
    """Copies tests/fixtures/plugins/*.py into `workdir/plugins` (the default `[plugins] search_paths`), makes
    `workdir` the working directory, and forgets plugin modules earlier tests imported. Returns workdir."""
    import shutil
    import sys

    (workdir / "plugins").mkdir(parents=True, exist_ok=True)
    for source in TEST_PLUGINS.glob("*.py"):
        shutil.copy(source, workdir / "plugins" / source.name)
    for name in [m for m in sys.modules if m == "plugins" or m.startswith("plugins.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.chdir(workdir)
    return workdir


def final_weights(run_dir: Path) -> dict[str, Any]:
    """Every tensor of a run's `final` checkpoint, by name (asserts there is at least one)."""
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for f in sorted((run_dir / "checkpoints" / "final").glob("*.safetensors")):
        out.update(load_file(str(f)))
    assert out, f"no weights in {run_dir / 'checkpoints' / 'final'}"
    return out


def environment_run(tmp_path: Path, name: str, max_steps: int, *, environment: Mapping[str, Any],
                    training: Mapping[str, Any]) -> tuple[Any, Path]:
    """A tiny CPU multi-turn run (no `[data]`: its environment gives the examples): its loaded config and run dir."""
    from retrain_ray.config import load_config

    run_dir = tmp_path / name
    write_config(tmp_path / f"{name}.toml", base={k: v for k, v in TINY_CPU.items() if k != "data"},
                 environment=environment, logging={"log_dir": str(run_dir)},
                 training={**training, "max_steps": max_steps})
    return load_config(tmp_path / f"{name}.toml"), run_dir


def stream_rows(run_dir: Path) -> list[dict[str, Any]]:
    """A run's metrics rows, each row's extras map as a dict (Arrow reads a map as (key, value) pairs)."""
    from retrain_ray.logs import read_stream

    return [{**r, "extras": dict(r["extras"])} for r in read_stream(run_dir).to_pylist()]
