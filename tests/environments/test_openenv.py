"""`[environment] provider = "openenv"` (issues 28, 37) against openenv-core's own server: digit_chain
written on openenv-core's API (retrain_ray/environments/openenv_digit_chain.py) served by its `create_app`
under uvicorn, in a process of its own on loopback (tests/fixtures/openenv_server.py, stopped by pid):
episodes, multi-turn training with TL-GRPO and MT-GRPO, a server that crashes and restarts mid-episode,
one that is gone, one at capacity, its validation errors, and the config checks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures.openenv_server import OpenEnvServer
from helpers import TINY_CPU, free_port, write_config

from retrain_ray.checks.machine import environment_problems
from retrain_ray.config import ConfigError, load_config
from retrain_ray.environments import load_environment
from retrain_ray.environments.openenv import OpenEnv
from retrain_ray.environments.openenv_client import Link, OpenEnvError, Reply, _reply, ws_url
from retrain_ray.logs import read_stream
from retrain_ray.run.train import train_run

ROOT = Path(__file__).resolve().parents[2]
ARGS = {"num_examples": 16, "num_eval": 4}
TRAINING = {"batch_size": 2, "group_size": 4, "max_tokens": 3, "lr": 3e-3, "save_every": 0, "seed": 7}


@pytest.fixture(scope="module")
def server() -> Iterator[OpenEnvServer]:
    """openenv-core's server, shared by this module's tests that leave it running."""
    with OpenEnvServer(free_port()) as running:
        yield running


def _config(tmp_path: Path, name: str, url: str, *, args=None, training=None, max_steps: int = 2):
    path = write_config(tmp_path / f"{name}.toml", base={k: v for k, v in TINY_CPU.items() if k != "data"},
                        environment={"provider": "openenv", "id": url, "max_turns": 2, "args": args or ARGS},
                        logging={"log_dir": str(tmp_path / name)},
                        training={**TRAINING, **(training or {}), "max_steps": max_steps})
    return path


def _right_then_next(example) -> tuple[str, str]:
    """The right first answer of an example's episode, and the right second answer after it."""
    first = example.prompt[0]
    return f"\\boxed{{{first}}}", str((int(first) + 1) % 10)


def test_episodes_are_played_over_the_websocket_and_replay_exactly(server):
    assert ws_url("https://h:1/env/") == "wss://h:1/env/ws" and ws_url("ws://h:1/ws") == "ws://h:1/ws"
    env = OpenEnv(server.url, {**ARGS, "turn_advantages": True})
    train, held_out = env.examples()
    assert len(train) == 16 and len(held_out) == 4 and env.examples() == (train, held_out)  # seeds 0..19
    example = train[0]
    first = example.prompt[0]
    episode = env.reset(example)
    right = episode.step(f"\\boxed{{{first}}}")
    assert (right.reward, right.done, right.observation) == (0.5, False, f"{example.prompt}\\boxed{{{first}}}|{first}>")
    assert episode.step("x").done and episode.reward() == 0.5  # the server halves digit_chain's turn rewards
    nxt = str((int(first) + 1) % 10)
    assert env.replay(example, [first, nxt]) == 1.0 and env.replay(example, [nxt, first]) == 0.0
    wrong = env.reset(example)
    wrong.step(nxt)
    wrong.step("0")
    # MT-GRPO: each turn's reward minus the group's mean on that turn
    assert env.turn_advantages([episode, wrong]) == [[0.25, 0.0], [-0.25, 0.0]]


def test_tl_grpo_run_trains_against_the_server(tmp_path, server):
    tl = {"tl_grpo": True, "tl_grpo_branch_mode": "llm", "tl_grpo_branch_size": 3, "tl_grpo_lookahead_steps": 1}
    cfg = load_config(_config(tmp_path, "tl", server.url, training=tl))
    before = server.played()
    train_run(cfg, run_name="r", run_dir=tmp_path / "tl")
    rows = [{**r, "extras": dict(r["extras"])} for r in read_stream(tmp_path / "tl").to_pylist()]
    assert len(rows) == 2 and all(r["trained"] for r in rows)
    assert all(r["num_datums"] == 16 for r in rows)  # 2 examples x 4 episodes x 2 turns, each a datum
    assert all("tl_grpo_ema" in r["extras"] for r in rows)
    # every episode a session, every llm branch a replay on a session of its own
    assert server.played() - before > 1 + 2 * 2 * 4


def test_mt_grpo_run_trains_and_evaluates_against_the_server(tmp_path, server):
    args = {**ARGS, "turn_advantages": True}
    cfg = load_config(_config(tmp_path, "mt", server.url, args=args,
                              training={"group_size": 8, "eval_every": 2, "eval_examples": 3}))
    train_run(cfg, run_name="r", run_dir=tmp_path / "mt")
    rows = read_stream(tmp_path / "mt").to_pylist()
    assert [r["step"] for r in rows] == [0, 1]  # an untrained tiny model scores 0 on every turn: nothing to update
    (evaluated,) = read_stream(tmp_path / "mt", "eval").to_pylist()
    assert evaluated["num_examples"] == 3


def test_a_server_that_crashes_and_restarts_mid_episode_is_reconnected_and_the_episode_replayed():
    crashing = OpenEnvServer(free_port()).start()
    try:
        env = OpenEnv(crashing.url, {"num_examples": 3, "num_eval": 0, "retries": 4})
        example = env.examples()[0][1]
        right, after = _right_then_next(example)
        episode = env.reset(example)
        assert episode.step(right).reward == 0.5
        crashing.kill()  # SIGKILL: the connection is cut, the episode's environment is gone with the process
        crashing.start()  # the same port, a fresh server that knows nothing of the episode
        last = episode.step(after)  # reconnects, replays the reset and the first step, then plays this one
        assert (last.reward, last.done) == (0.5, True) and episode.reward() == 1.0
        assert crashing.played() == 1  # the replay: one session on the new server
    finally:
        crashing.stop()


def test_a_server_that_is_gone_is_reported_with_its_url():
    gone = OpenEnvServer(free_port()).start()
    try:
        env = OpenEnv(gone.url, {**ARGS, "retries": 1, "connect_timeout_s": 2})
        episode = env.reset(env.examples()[0][0])
        gone.kill()
        with pytest.raises(OpenEnvError) as info:
            episode.step("1")
    finally:
        gone.stop()
    message = str(info.value)
    assert gone.url in message and "environment.id" in message and "failed 2 times" in message
    assert "connecting failed" in message and "retries" in message


def test_a_server_at_capacity_is_retried_then_named_with_its_setting():
    with OpenEnvServer(free_port(), max_sessions=1) as small:
        env = OpenEnv(small.url, {"num_examples": 2, "num_eval": 0, "retries": 2})
        train, _ = env.examples()  # one session, closed at once: the next one may open right after
        held = env.reset(train[0])
        with pytest.raises(OpenEnvError) as info:
            env.reset(train[1])
        message = str(info.value)
        assert "at capacity" in message and "max_concurrent_envs" in message and "3 times in a row" in message
        held.reward()  # closes its session: the server has room again
        again = env.reset(train[1])
        assert again.step(_right_then_next(train[1])[0]).reward == 0.5
        again.reward()


def test_a_boolean_reward_counts_as_a_number():
    """openenv-core's Observation.reward is `bool | int | float | None`: a boolean reward is 1 or 0."""
    link = Link("http://127.0.0.1:1")
    sent = '{"type": "observation", "data": {"observation": {"prompt": "p"}, "reward": true, "done": false}}'
    assert _reply(link, "step", sent) == Reply({"prompt": "p"}, 1.0, False)
    with pytest.raises(OpenEnvError, match="reward 'x', not a number"):
        _reply(link, "step", sent.replace("true", '"x"'))


def test_a_server_error_is_reported_at_once_and_a_missing_field_names_its_key(server):
    env = OpenEnv(server.url, {**ARGS, "action_key": "answer"})
    episode = env.reset(env.examples()[0][0])
    played = server.played()
    with pytest.raises(OpenEnvError) as info:
        episode.step("1")
    message = str(info.value)  # openenv-core's pydantic errors, quoted, and the key that fixes them
    assert "answered a step with error VALIDATION_ERROR: Invalid message" in message
    assert "message: Field required" in message and "answer: Extra inputs are not permitted" in message
    assert "args.action_key" in message
    assert server.played() == played  # an answer is no dropped connection: not retried (no replayed reset)
    episode.finish()
    with pytest.raises(OpenEnvError, match="observation_key"):
        OpenEnv(server.url, {**ARGS, "observation_key": "question"}).examples()


def test_a_url_nobody_listens_on_ends_the_run_with_a_clear_error(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"
    path = _config(tmp_path, "gone", url, args={**ARGS, "retries": 1, "connect_timeout_s": 2})
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-m", "retrain_ray.cli", "train", str(path), "--quiet"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    assert "environment.id" in out.stderr and f"{url.replace('http', 'ws')}/ws" in out.stderr
    assert "Connection refused" in out.stderr
    assert not list((tmp_path / "gone").glob("metrics*.arrows"))


def test_openenv_keys_are_checked(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, "bare", "localhost:8000"))
    assert info.value.locations == ["environment.id"]
    (tmp_path / "list.toml").write_text('[environment]\nprovider = "openenv"\nid = "http://h:1"\nargs = "[1]"\n')
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "list.toml")
    assert info.value.locations == ["environment.args"]
    with pytest.raises(ConfigError) as info:
        load_config(_config(tmp_path, "sft", "http://h:1", training={"sft_warmup_steps": 2}))
    assert info.value.locations == ["training.sft_warmup_steps"]
    cfg = load_config(_config(tmp_path, "ok", "ws://h:1"))  # the provider is no longer refused
    for bad, key in (({"retries": -1}, "retries"), ({"reset": [1]}, "reset"), ({"nope": 1}, "nope"),
                     ({"message_timeout_s": 0}, "message_timeout_s")):
        section = cfg.environment.model_copy(update={"args": json.dumps(bad)})
        with pytest.raises(ValueError, match=key):
            load_environment(section)


def test_explain_warns_of_a_server_that_does_not_answer(tmp_path, server):
    gone = f"http://127.0.0.1:{free_port()}"
    (problem,) = environment_problems(load_config(_config(tmp_path, "gone", gone)))
    assert problem.startswith(f"environment.id: the OpenEnv server at {gone} does not answer")
    assert environment_problems(load_config(_config(tmp_path, "up", server.url))) == []


@pytest.mark.extended
def test_the_shipped_openenv_config_trains_through_the_cli_against_openenv_core(tmp_path, server):
    """configs/openenv.toml (TL-GRPO over action_space branches) pointed at openenv-core's server: a few
    steps through `retrain-ray train`, with a checkpoint whose state says what a resume restores."""
    text = (ROOT / "configs" / "openenv.toml").read_text()
    assert 'id = "http://127.0.0.1:8000"' in text
    config = tmp_path / "openenv.toml"
    config.write_text(text.replace('id = "http://127.0.0.1:8000"', f'id = "{server.url}"')
                      .replace('log_dir = "logs/openenv"', f'log_dir = "{tmp_path / "logs"}"'))
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    before = server.played()
    out = subprocess.run([sys.executable, "-m", "retrain_ray.cli", "train", str(config), "--quiet", "--max-steps", "3",
                          "--batch-size", "2", "--group-size", "4", "--save-every", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_stream(tmp_path / "logs").to_pylist()
    assert [r["step"] for r in rows] == [0, 1, 2] and all(r["num_datums"] > 0 for r in rows)
    assert server.played() - before > 3 * 2 * 4  # every episode and every branch replay a session
    state = json.loads((tmp_path / "logs" / "trainer_state.json").read_text())
    assert (state["step"], state["resume_mode"]) == (2, "exact")  # the local backend restores it all
