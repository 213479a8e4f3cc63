"""Plugins written to the original's signatures run from dotted paths (issue 12, spec 9): a data source
`factory(config).load()` of objects with `prompt` and `reference`, and a reward `factory(config)` with
`score(response, reference)`, found under `[plugins] search_paths` (default ./plugins)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import write_config

from retrain_ray.checks.preflight import PreflightError, check_run
from retrain_ray.config import RetrainConfig
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

DATA_PLUGIN = '''
from dataclasses import dataclass


@dataclass
class Example:  # the original's retrain.data.source.Example, minus its import
    prompt: str
    reference: str
    task: str = "default"


class DigitSource:
    def __init__(self, config):
        self.n = config.max_examples or 4
        self.seed = config.seed

    def load(self):
        return [Example(f"first digit of {40 + i}?", "4") for i in range(self.n)]
'''

REWARD_PLUGIN = '''
CALLS = []


class HasFour:
    def __init__(self, config):
        self.marker = config.reward_custom_function  # reads the original's flat field names

    def score(self, response: str, reference: str) -> float:
        CALLS.append((response, reference))
        return 1.0 if reference in response else 0.0


def make(config):
    return HasFour(config)
'''


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "orig_data.py").write_text(textwrap.dedent(DATA_PLUGIN))
    (tmp_path / "plugins" / "orig_reward.py").write_text(textwrap.dedent(REWARD_PLUGIN))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _cfg(tmp_path: Path, **data) -> RetrainConfig:
    return RetrainConfig.model_validate({
        "model": {"model": "builtin:tiny", "lora_rank": 2},
        "backend": {"devices": "cpu"},
        "data": {"source": "orig_data.DigitSource", **data},
        "reward": {"type": "orig_reward.make"},
        "algorithm": {"advantage_mode": "grpo", "transform_mode": "none"},
        "training": {"seed": 1, "max_steps": 2, "batch_size": 2, "group_size": 2, "max_tokens": 4,
                     "max_examples": 3, "save_every": 0, "batch_advantage_norm": True},
        "logging": {"log_dir": str(tmp_path / "run")},
    })


def test_original_data_source_and_reward_run_from_dotted_paths(plugin_dir):
    import sys

    cfg = _cfg(plugin_dir)
    check_run(cfg)
    outcome = train_run(cfg, run_name="plugins", run_dir=plugin_dir / "run")
    assert outcome.status == "completed"
    calls = sys.modules["plugins.orig_reward"].CALLS
    assert len(calls) == 2 * 2 * 2 and {ref for _, ref in calls} == {"4"}  # steps x prompts x completions
    rows = read_stream(plugin_dir / "run", "metrics").to_pylist()
    assert [r["step"] for r in rows] == [0, 1] or all("mean_reward" in r for r in rows)


def test_a_plugin_that_does_not_import_fails_preflight_naming_it(plugin_dir):
    cfg = _cfg(plugin_dir).replace_section("data", source="orig_data.Missing")
    cfg = cfg.replace_section("reward", type="no_such_module.make")
    with pytest.raises(PreflightError) as info:
        check_run(cfg)
    text = str(info.value)
    assert "orig_data.Missing" in text and "no_such_module" in text and "plugins.no_such_module" in text


BACKEND_PLUGIN = '''
RETRAIN_BACKEND_OPTION_SCHEMA = {"transport": {"type": "str", "default": "fs"}}


class Declared:
    retrain_backend_capabilities = {"preserves_token_advantages": True, "reports_sync_loss": False}


def silent(config):  # declares nothing: the conservative default applies
    raise AssertionError("preflight must not construct the backend")
'''


def test_plugin_backend_capabilities_come_from_its_hooks_for_explain_and_preflight(plugin_dir):
    from retrain_ray.backends.registry import capabilities_for
    from retrain_ray.cli.explain import capabilities

    (plugin_dir / "plugins" / "orig_backend.py").write_text(textwrap.dedent(BACKEND_PLUGIN))
    base = _cfg(plugin_dir).replace_section("algorithm", transform_mode="gtpo")
    declared = base.replace_section("backend", backend="orig_backend.Declared")
    silent = base.replace_section("backend", backend="orig_backend.silent")
    flags, source = capabilities_for("orig_backend.Declared")
    assert (flags.preserves_token_advantages, flags.reports_sync_loss, source) == (True, False, "plugin/hook")
    assert capabilities(declared)["source"] == "plugin/hook"
    assert capabilities(silent)["preserves_token_advantages"] is False  # undeclared: conservative default
    assert capabilities(silent)["source"] == "plugin/default"
    with pytest.raises(PreflightError) as info:
        check_run(silent)
    assert "one advantage per sequence" in str(info.value)  # token-varying flow refused for it
    check_run(declared)  # its hook says it keeps token advantages: the token-varying flow may train on it
    bad_option = declared.replace_section("backend", options={"tranport": "zmq"})
    with pytest.raises(PreflightError, match="backend.options.tranport"):
        check_run(bad_option)



@pytest.mark.parametrize(("backend", "gpus"), [("local", 1), ("tinker", 0), ("orig_backend.Declared", 1)])
def test_explain_and_the_campaign_plan_place_a_run_alike(plugin_dir, backend, gpus):
    """One registry (backends/registry.placement_devices): a remote backend holds no local GPU, a built-in
    local or plugin backend holds what backend.devices asks, in `explain` and in the campaign's placement."""
    from retrain_ray.campaign.capacity.placement import placement_for
    from retrain_ray.campaign.plan import build_plan
    from retrain_ray.cli.explain import resources_per_run

    (plugin_dir / "plugins" / "orig_backend.py").write_text(textwrap.dedent(BACKEND_PLUGIN))
    cfg = RetrainConfig.model_validate({
        **_cfg(plugin_dir).model_dump(), "backend": {"backend": backend, "devices": "gpu:0"},
        "campaign": {"seeds": [1], "conditions": [{"advantage_mode": "grpo", "transform_mode": "none"}]}})
    explained = resources_per_run(cfg)
    run = build_plan(cfg, root=plugin_dir).runs[0]
    placement, _ = placement_for(run.devices, cpus_per_run=1.0, cluster_gpus=1.0)
    assert explained["gpus"] == placement.num_gpus == gpus
    assert explained["placement"] == placement.mode


MARKER = '''
from pathlib import Path

Path(__file__).with_name("imported_" + Path(__file__).stem).write_text("x")
'''


def test_a_config_imports_only_the_plugin_modules_it_names(plugin_dir, monkeypatch):
    """Other modules in ./plugins, in the working directory, and ones named like stdlib modules stay
    unimported through loading, preflight and building the data source and reward."""
    import sys

    for name in [m for m in sys.modules if m.startswith(("plugins", "orig_"))]:  # earlier tests' imports
        monkeypatch.delitem(sys.modules, name)

    from retrain_ray.config import load_config
    from retrain_ray.run.plugins import create_reward, load_plugin_examples

    bystanders = {"plugins/other_plugin.py": "plugins.other_plugin", "bystander.py": "bystander",
                  "plugins/orig.py": "plugins.orig", "sched.py": "sched", "plugins/json.py": "plugins.json"}
    for path in bystanders:
        (plugin_dir / path).write_text(MARKER)
    before = set(sys.modules)
    toml = plugin_dir / "c.toml"
    write_config(toml, model={"finetune": None}, data={"source": "orig_data.DigitSource", "task": None},
                 reward={"type": "orig_reward.make"}, logging={"log_dir": str(plugin_dir / "run")})
    cfg = load_config(toml)
    assert not {m for m in set(sys.modules) - before if m.startswith(("plugins", "orig_"))}  # loading imports none
    check_run(cfg)
    assert len(load_plugin_examples(cfg)) > 0
    assert create_reward(cfg).score_batch(["4"], ["4"]) == [1.0]
    imported = set(sys.modules) - before
    assert {"plugins.orig_data", "plugins.orig_reward"} <= imported
    assert not set(bystanders.values()) & imported
    assert not list(plugin_dir.rglob("imported_*"))  # no module ran, under any name


ORIGINAL_IMPORTS_PLUGIN = '''
from retrain.backends import TrainHelper
from retrain.config import TrainConfig
from retrain.data import DataSource, Example
from retrain.inference_engine.base import InferenceEngine, SampleResult
from retrain.rewards import RewardFunction, extract_boxed


class DigitSource:
    def __init__(self, config: TrainConfig):
        self.n = config.max_examples or 4

    def load(self) -> list[Example]:
        return [Example(prompt=f"first digit of {40 + i}?", reference="4", example_id=i) for i in range(self.n)]


class Boxed:
    def score(self, response: str, reference: str) -> float:
        return 1.0 if extract_boxed(response) == reference or reference in response else 0.0


def make_source(config: TrainConfig) -> DataSource:
    return DigitSource(config)


def make_reward(config: TrainConfig) -> RewardFunction:
    return Boxed()
'''


def _forget_retrain(monkeypatch):
    import sys

    for name in [n for n in sys.modules if n == "retrain" or n.startswith("retrain.")]:
        monkeypatch.delitem(sys.modules, name)


def test_a_plugin_importing_the_originals_types_runs_unchanged(plugin_dir, monkeypatch):
    """`from retrain.data import Example` (and the reward, backend and engine types) load without the
    original installed; the run trains on the plugin's examples."""
    import importlib.util
    import sys

    assert importlib.util.find_spec("retrain_ray") is not None
    _forget_retrain(monkeypatch)
    (plugin_dir / "plugins" / "orig_typed.py").write_text(textwrap.dedent(ORIGINAL_IMPORTS_PLUGIN))
    cfg = _cfg(plugin_dir, source="orig_typed.make_source").replace_section("reward", type="orig_typed.make_reward")
    check_run(cfg)
    outcome = train_run(cfg, run_name="typed", run_dir=plugin_dir / "run")
    assert outcome.status == "completed"
    module = sys.modules["plugins.orig_typed"]
    from retrain_ray.compat.original import Example

    assert module.Example is Example
    assert isinstance(module.Boxed(), module.RewardFunction)
    assert [r["step"] for r in read_stream(plugin_dir / "run", "metrics").to_pylist()] == [0, 1]


def test_an_installed_original_is_imported_itself_not_shadowed(tmp_path, monkeypatch):
    """A real `retrain` on the path wins over the stand-in names, submodules included."""
    import sys

    from retrain_ray.compat import provide_original_names

    _forget_retrain(monkeypatch)
    real = tmp_path / "site" / "retrain"
    real.mkdir(parents=True)
    (real / "__init__.py").write_text("REAL = True\n")
    (real / "data.py").write_text("class Example:\n    real = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    provide_original_names()
    import retrain
    import retrain.data

    assert retrain.REAL and retrain.data.Example.real
    with pytest.raises(ModuleNotFoundError):
        import retrain.rewards  # noqa: F401  # not in the real package: never filled in from ours
    assert sys.modules["retrain"].__file__.startswith(str(tmp_path))
