"""`[environment] provider = "verifiers"` (issue 28): a verifiers environment package (the test one in
tests/fixtures/vf_envs, `vf-digit-pair`) trains on the tiny model on CPU, multi-turn with TL-GRPO and
single-turn; a bad id, bad args and a missing verifiers package are clear errors."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import pytest
from helpers import environment_run, stream_rows

from retrain_ray.checks.machine import environment_problems
from retrain_ray.config import ConfigError
from retrain_ray.environments import load_environment
from retrain_ray.run.train import train_run

pytest.importorskip("verifiers", reason="the verifiers extra is not installed: pip install 'retrain-ray[environments]'")

FIXTURES = Path(__file__).parents[1] / "fixtures" / "vf_envs"
ENV = {"provider": "verifiers", "id": "vf-digit-pair", "max_turns": 2, "args": {"num_examples": 16, "num_eval": 4}}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 3, "lr": 3e-3, "save_every": 2, "sft_warmup_steps": 0,
            "seed": 7}
TL_GRPO = {"tl_grpo": True, "tl_grpo_branch_mode": "llm", "tl_grpo_branch_size": 3, "tl_grpo_lookahead_steps": 1}


@pytest.fixture(autouse=True)
def _env_package(monkeypatch):
    """The test environment package importable, as an installed one would be."""
    monkeypatch.syspath_prepend(str(FIXTURES))


def _config(tmp_path: Path, name: str, max_steps: int, *, training=None, environment=None):
    return environment_run(tmp_path, name, max_steps, environment=environment or ENV,
                           training={**TRAINING, **(training or {})})


def _rows(run_dir: Path) -> list[dict]:
    return stream_rows(run_dir)


def test_the_adapter_plays_turns_scores_them_with_the_rubric_and_replays(tmp_path):
    cfg, _ = _config(tmp_path, "unit", 1)
    env = load_environment(cfg.environment)
    train, held_out = env.examples()
    assert (len(train), len(held_out)) == (16, 4)
    example = train[0]
    episode = env.reset(example)
    assert episode.prompt() == example.prompt  # one user message: its text
    first = episode.step(f"\\boxed{{{example.reference}}}")
    assert (first.reward, first.done) == (0.5, False)
    assert first.observation == f"{example.prompt}\n\\boxed{{{example.reference}}}\nNow the digit after your answer."
    second = episode.step(str((int(example.reference) + 1) % 10))
    assert (second.reward, second.done, second.observation) == (0.5, True, None)
    assert episode.reward() == 1.0
    with pytest.raises(RuntimeError, match="after the episode is done"):
        episode.step("1")
    # replays start from a fresh state: the primary episode is untouched
    assert env.replay(example, ["x", "0"]) == 0.0 and env.replay(example, [example.reference]) == 0.5
    assert episode.reward() == 1.0


def test_multiturn_verifiers_run_with_tl_grpo_trains(tmp_path):
    cfg, run_dir = _config(tmp_path, "tl", 2, training=TL_GRPO)
    train_run(cfg, run_name="r", run_dir=run_dir)
    rows = _rows(run_dir)
    assert len(rows) == 2 and all(r["trained"] for r in rows)
    assert all(r["num_datums"] == 16 for r in rows)  # 2 examples x 4 episodes x 2 turns
    assert all(0.0 <= r["extras"]["tl_grpo_ema"] <= 1.0 for r in rows)
    assert (run_dir / "checkpoints" / "final").is_dir()


def test_single_turn_verifiers_run_trains(tmp_path):
    env = {**ENV, "max_turns": 0, "args": {**ENV["args"], "turns": 1}}
    cfg, run_dir = _config(tmp_path, "single", 2, environment=env, training={"group_size": 8})
    train_run(cfg, run_name="r", run_dir=run_dir)
    rows = _rows(run_dir)
    assert len(rows) == 2 and all(r["num_datums"] <= 16 for r in rows)  # one turn per episode
    assert any(r["trained"] for r in rows)


def test_a_bad_id_or_args_names_the_key_and_the_fix(tmp_path):
    cfg, _ = _config(tmp_path, "bad", 1, environment={**ENV, "id": "owner/vf-nope"})
    with pytest.raises(ValueError, match=r"environment\.id: no installed verifiers environment 'owner/vf-nope' "
                                         r"\(no module 'vf_nope'\).*pip install vf-nope"):
        load_environment(cfg.environment)
    assert any("environment.id" in p and "vf-nope" in p for p in environment_problems(cfg))
    cfg, _ = _config(tmp_path, "args", 1, environment={**ENV, "args": {"colour": 1}})
    with pytest.raises(ValueError, match=r"environment\.id: verifiers environment 'vf-digit-pair' did not load "
                                         r"with args \{'colour': 1\}.*colour"):
        load_environment(cfg.environment)
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "space", 1, training={**TL_GRPO, "tl_grpo_branch_mode": "action_space"})
    assert info.value.locations == ["training.tl_grpo_branch_mode"]


def test_without_the_verifiers_package_the_error_names_the_extra(tmp_path, monkeypatch):
    cfg, _ = _config(tmp_path, "none", 1)
    monkeypatch.setitem(sys.modules, "verifiers", None)  # as if it were not installed: import fails
    with pytest.raises(ValueError, match=r"environment\.provider: .*retrain-ray\[environments\]"):
        load_environment(cfg.environment)
    assert any("retrain-ray[environments]" in p for p in environment_problems(cfg))


def test_loading_keeps_the_process_signal_handlers_and_works_off_the_main_thread(tmp_path):
    """verifiers' Environment installs SIGINT/SIGTERM handlers when built; a Ray actor loads it off the
    main thread, where installing one fails."""
    cfg, _ = _config(tmp_path, "thread", 1)
    before = signal.getsignal(signal.SIGTERM)
    loaded: list[object] = []
    worker = threading.Thread(target=lambda: loaded.append(load_environment(cfg.environment).examples()))
    worker.start()
    worker.join(timeout=120)
    assert len(loaded) == 1 and len(loaded[0][0]) == 16
    load_environment(cfg.environment)
    assert signal.getsignal(signal.SIGTERM) is before


def test_auto_install_leaves_an_installed_hub_environment_alone_and_loads_it_by_name(tmp_path):
    """A hub id (owner/name@version) whose package imports here: no install, and verifiers loads `name`."""
    cfg, _ = _config(tmp_path, "hub", 1, environment={**ENV, "id": "someone/vf-digit-pair@0.1", "auto_install": True})
    env = load_environment(cfg.environment)
    assert len(env.examples()[0]) == 16
    assert environment_problems(cfg) == []


def test_auto_install_of_a_hub_environment_that_cannot_be_fetched_names_the_key_and_the_fix(tmp_path):
    """verifiers' real installer asks the hub for an id that does not exist (offline here, it cannot reach the
    hub at all: both fail), and the run stops with the reason. The missing package is no preflight problem:
    the run installs it when it starts."""
    cfg, _ = _config(tmp_path, "offline", 1, environment={**ENV, "id": "nobody-here/vf-absent", "auto_install": True})
    assert environment_problems(cfg) == []
    with pytest.raises(ValueError, match=r"environment\.auto_install: could not install 'nobody-here/vf-absent' "
                                         r"from the Environments Hub.*prime env install nobody-here/vf-absent"):
        load_environment(cfg.environment)
    with pytest.raises(ConfigError) as info:
        _config(tmp_path, "builtin", 1, environment={"provider": "builtin", "id": "digit_chain", "auto_install": True})
    assert info.value.locations == ["environment.auto_install"]
