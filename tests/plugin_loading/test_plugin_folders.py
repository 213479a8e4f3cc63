"""Plugins by folder (issue 34.5): a folder path in `[plugins] search_paths`, absolute or relative, is a folder
whose modules import as plugins (a dotted mode, a `custom` reward's module), `retrain-ray plugins FILE` and the
run give the same answer, and a folder that does not exist is named with `plugins.search_paths`."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from retrain_ray.cli import main
from retrain_ray.config import RetrainConfig
from retrain_ray.logs import read_stream
from retrain_ray.plugins import LOADER, is_dotted_path, missing_folders
from retrain_ray.run.train import train_run

MODE = '''
CALLS = []


def half_grpo(rewards):
    CALLS.append(len(rewards))
    mean = sum(rewards) / len(rewards)
    return [0.5 * (r - mean) for r in rewards]
'''

REWARD = '''
def score(response, reference):
    return float(len(response) % 2)
'''


@pytest.fixture
def folder_plugins(tmp_path, monkeypatch):
    folder = tmp_path / "my plugins" / "lib"
    folder.mkdir(parents=True)
    for name in ("absolute", "relative"):  # a mode is resolved once per process: one module per test
        (folder / f"folder_modes_{name}.py").write_text(textwrap.dedent(MODE))
    (folder / "folder_reward.py").write_text(textwrap.dedent(REWARD))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "folder_reward", raising=False)
    yield folder
    LOADER.use_search_paths(["plugins"])


def _data(search_path: str, log_dir: Path, modes: str = "folder_modes_absolute") -> dict[str, object]:
    return {
        "model": {"model": "builtin:tiny", "lora_rank": 2},
        "backend": {"devices": "cpu"},
        "plugins": {"search_paths": [search_path]},
        "data": {"source": "builtin", "task": "first_digit"},
        "reward": {"type": "custom", "custom_module": "folder_reward"},
        "algorithm": {"advantage_mode": f"{modes}.half_grpo", "transform_mode": "none"},
        "training": {"seed": 1, "max_steps": 2, "batch_size": 2, "group_size": 2, "max_tokens": 4,
                     "max_examples": 3, "save_every": 0, "batch_advantage_norm": True},
        "logging": {"log_dir": str(log_dir)},
    }


def _toml(path: Path, search_path: str, modes: str = "folder_modes_absolute") -> Path:
    path.write_text(textwrap.dedent(f'''
        [plugins]
        search_paths = [{json.dumps(search_path)}]
        [reward]
        type = "custom"
        custom_module = "folder_reward"
        [algorithm]
        advantage_mode = "{modes}.half_grpo"
    '''))
    return path


@pytest.mark.parametrize("relative", [False, True], ids=["absolute", "relative"])
def test_a_folder_in_search_paths_loads_its_modes_and_custom_reward(folder_plugins, tmp_path, capsys, relative):
    search_path = "./my plugins/lib" if relative else str(folder_plugins)
    modes = f"folder_modes_{'relative' if relative else 'absolute'}"
    assert main(["plugins", str(_toml(tmp_path / "c.toml", search_path, modes)), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["references"] == {"algorithm.advantage_mode": {"path": f"{modes}.half_grpo", "error": ""}}
    assert {m["module"] for m in report["discovered"]} == {
        "folder_modes_absolute", "folder_modes_relative", "folder_reward"}

    cfg = RetrainConfig.model_validate(_data(search_path, tmp_path / "run", modes))
    outcome = train_run(cfg, run_name="folder", run_dir=tmp_path / "run")
    assert outcome.status == "completed", outcome
    assert sys.modules[modes].CALLS  # the plugin mode computed the advantages
    assert Path(sys.modules["folder_reward"].__file__).parent == folder_plugins
    assert len(read_stream(tmp_path / "run", "metrics").to_pylist()) == 2


def test_a_missing_folder_is_named_with_plugins_search_paths(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert missing_folders(["plugins", "./nowhere"]) == [
        f"plugins.search_paths: folder './nowhere' ({tmp_path / 'nowhere'}) does not exist or is not a folder; "
        "fix the path or remove it"]
    assert main(["plugins", str(_toml(tmp_path / "c.toml", "./nowhere", "nowhere_modes")), "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["references"]["algorithm.advantage_mode"]["error"]
    assert "plugins.search_paths: folder './nowhere'" in error
    cfg = RetrainConfig.model_validate(_data("./nowhere", tmp_path / "run", "nowhere_modes"))
    with pytest.raises(Exception, match=r"plugins\.search_paths: folder './nowhere'"):
        train_run(cfg, run_name="missing", run_dir=tmp_path / "run")
    LOADER.use_search_paths(["plugins"])


def test_is_dotted_path_takes_identifiers_joined_by_dots():
    assert is_dotted_path("my_pkg.transforms:scaled") and is_dotted_path("my_pkg.transforms.scaled")
    assert not any(map(is_dotted_path, ["grpo", "0.5", "a..b", "my-pkg.x", "pkg.mod:", ".rel.mod"]))
