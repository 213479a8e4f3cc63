"""Adding an engine or a backend is one folder plus one registry line (issue 33; docs/architecture.md
"Where to add"). This test writes a new engine folder (`engines/counting/`) and a new backend folder
(`backends/counting/`) into a temporary directory grafted onto the two packages, adds the one line each
registry needs, and runs a real short run of the tiny CPU model with both."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import install_test_plugins, write_config

import retrain_ray.backends
import retrain_ray.engines
from retrain_ray.backends.registry import (
    BACKEND_SPECS,
    ENGINE_SPECS,
    capabilities_for,
    check_options,
    describe_sampler,
)
from retrain_ray.config import load_config
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

ENGINE_FOLDER = {
    "__init__.py": '''
        """`[inference] engine = "counting"`: the PyTorch engine, counting the prompts it samples."""

        from __future__ import annotations

        from retrain_ray.engines.types import EngineSpec

        PROMPTS: list[int] = []


        def build_policy(request):
            # deferred: loads torch, which importing the engine registry does not need
            from retrain_ray.engines.counting.engine import CountingEngine

            model, tokenizer = request.trainable_model()
            trainer = request.local_trainer(model, shares_model_with_engine=True)
            return request.policy(CountingEngine(model, tokenizer, request.local_settings.seed, PROMPTS), trainer,
                                  tokenizer)


        SPEC = EngineSpec("counting", is_http=False, factory=build_policy, gives_entropies=True,
                          describe=lambda inference, backend: "counting: PyTorch engine that counts prompts")
    ''',
    "engine.py": '''
        """The counting engine: the PyTorch engine on the trainer's model, recording each call's prompts."""

        from __future__ import annotations

        from retrain_ray.engines.pytorch.engine import sampler_of


        class CountingEngine:
            def __init__(self, model, tokenizer, seed, prompts):
                self._engine = sampler_of(model, tokenizer, seed=seed, shares_model_with_trainer=True)
                self._prompts = prompts

            def __getattr__(self, name):
                return getattr(self._engine, name)

            def generate(self, prompt_ids_P, num_samples, params):
                self._prompts.append(len(prompt_ids_P))
                return self._engine.generate(prompt_ids_P, num_samples, params)
    ''',
}

BACKEND_FOLDER = {
    "__init__.py": '''
        """`[backend] backend = "counting"`: the run's engine with the local trainer, counting its updates."""

        from __future__ import annotations

        from retrain_ray.backends.types import OptionsTable
        from retrain_ray.backends.types import BackendCapabilities, BackendSpec

        STEPS: list[int] = []


        def build_policy(request):
            # deferred: the engine's factory loads torch, which importing the backend registry does not need
            from retrain_ray.backends.counting.trainer import CountingTrainer
            from retrain_ray.backends.registry import engine_spec

            policy = engine_spec(request.cfg.inference.engine).factory(request)
            return request.policy(policy.engine, CountingTrainer(policy.backend, STEPS), policy.tokenizer)


        SPEC = BackendSpec(
            "counting", description="the local trainer, counting its updates", factory=build_policy,
            capabilities=BackendCapabilities(), options=OptionsTable(lambda options: {"label": ""}))
    ''',
    "trainer.py": '''
        """The counting trainer: the local trainer, recording the version after each update."""

        from __future__ import annotations


        class CountingTrainer:
            def __init__(self, trainer, steps):
                self._trainer, self._steps = trainer, steps
                self.capabilities = trainer.capabilities

            def __getattr__(self, name):
                return getattr(self._trainer, name)

            @property
            def version(self):
                return self._trainer.version

            def train_step(self, batch, *, lr, weight_decay):
                result = self._trainer.train_step(batch, lr=lr, weight_decay=weight_decay)
                self._steps.append(self._trainer.version)
                return result
    ''',
}


def _write_folder(root: Path, name: str, files: dict[str, str]) -> None:
    folder = root / name
    folder.mkdir(parents=True)
    for file, text in files.items():
        (folder / file).write_text(textwrap.dedent(text).lstrip())


@pytest.fixture
def counting(tmp_path, monkeypatch):
    """Both folders grafted onto retrain_ray.engines / retrain_ray.backends, and the one registry line each."""
    import importlib
    import sys

    _write_folder(tmp_path / "engines", "counting", ENGINE_FOLDER)
    _write_folder(tmp_path / "backends", "counting", BACKEND_FOLDER)
    monkeypatch.setattr(retrain_ray.engines, "__path__", [*retrain_ray.engines.__path__, str(tmp_path / "engines")])
    monkeypatch.setattr(retrain_ray.backends, "__path__", [*retrain_ray.backends.__path__, str(tmp_path / "backends")])
    for name in [m for m in sys.modules if ".counting" in m]:
        monkeypatch.delitem(sys.modules, name)
    engine = importlib.import_module("retrain_ray.engines.counting")
    backend = importlib.import_module("retrain_ray.backends.counting")
    monkeypatch.setitem(ENGINE_SPECS, engine.SPEC.name, engine.SPEC)  # the one line in engines/registry.py
    monkeypatch.setitem(BACKEND_SPECS, backend.SPEC.name, backend.SPEC)  # the one line in backends/registry.py
    yield engine, backend
    for name in [m for m in sys.modules if ".counting" in m]:
        sys.modules.pop(name, None)


def test_a_new_engine_and_backend_folder_run_a_run(counting, tmp_path, monkeypatch):
    engine, backend = counting
    install_test_plugins(tmp_path, monkeypatch)  # a reward that varies, so every step updates
    path = write_config(
        tmp_path / "run.toml", reward={"type": "varied_reward.make"},
        algorithm={"advantage_mode": "grpo", "transform_mode": "none"},
        inference={"engine": "counting"}, backend={"devices": "cpu", "backend": "counting"},
        training={"seed": 5, "batch_size": 2, "group_size": 3, "max_tokens": 4, "max_steps": 2, "save_every": 2},
        logging={"log_dir": str(tmp_path / "logs" / "run")})
    cfg = load_config(path)  # validated as a user's file is: the names are checked against the registries
    assert (cfg.inference.engine, cfg.backend.backend) == ("counting", "counting")

    assert describe_sampler(cfg) == "counting: PyTorch engine that counts prompts"
    assert capabilities_for("counting") == (backend.SPEC.capabilities, "builtin")
    assert [i.location for i in check_options("counting", {"lable": "x"})] == ["backend.options.lable"]

    run_dir = tmp_path / "logs" / "run"
    outcome = train_run(cfg, run_name="counting", run_dir=run_dir)
    assert outcome.status == "completed"
    assert [r["step"] for r in read_stream(run_dir, "metrics").to_pylist()] == [0, 1]
    assert engine.PROMPTS == [2, 2]  # every rollout went through the new engine
    assert backend.STEPS == [1, 2]  # every update through the new backend
