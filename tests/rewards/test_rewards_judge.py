"""The `judge` reward (issue 28): verdict parsing, its config keys, its requests against a real
OpenAI-compatible HTTP server (both request kinds), and a judge-rewarded run that trains against the
product's own Serve endpoint, its judge calls held to the run's throttle."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers import TINY_RUN, free_port, write_config

from retrain_ray.config import ConfigError, load_config
from retrain_ray.config.build import build_config
from retrain_ray.logs import read_stream
from retrain_ray.rewards import build_reward
from retrain_ray.rewards.judge import JudgeReward, JudgeSettings, parse_verdict


@pytest.mark.parametrize(("reply", "score"), [
    ("yes", 1.0), ("Yes.", 1.0), ("  NO, it is not", 0.0), ("no", 0.0), ("Verdict: yes", 1.0),
    ("0.75", 0.75), ("7/10", 0.7), ("Score: 85", 0.85), ("1", 1.0),
    ("yesterday", None), ("I cannot tell", None), ("", None), ("1000", None),
])
def test_parse_verdict(reply, score):
    assert parse_verdict(reply) == score


def test_bad_judge_keys_are_config_errors_naming_the_key():
    with pytest.raises(ConfigError) as info:
        build_config({"reward": {"type": "judge", "judge_prompt": "Is {answer} right?"}})
    assert "reward.judge_prompt" in info.value.locations and "{response}" in str(info.value)
    with pytest.raises(ConfigError) as info:
        build_config({"reward": {"type": "judge", "judge_prompt": "{response} {unknown}"}})
    assert "reward.judge_prompt" in info.value.locations
    with pytest.raises(ConfigError) as info:
        build_config({"reward": {"type": "judge", "judge_api": "responses"}})
    assert "reward.judge_api" in info.value.locations
    build_config({"reward": {"type": "judge", "judge_model": "m", "judge_url": "http://127.0.0.1:1/v1"}})


class _Judge(BaseHTTPRequestHandler):
    """A stand-in for a hosted judge: "yes" when the response block equals the answer block, "no" when
    it differs, and no verdict for the reference "?"."""

    seen: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Judge.seen.append({"path": self.path, "body": body})
        chat = self.path.endswith("/v1/chat/completions")
        text = body["messages"][-1]["content"] if chat else body["prompt"]
        answer, response = re.findall(r"```\n(.*?)\n```", text, re.S)[1:3]
        reply = "hmm, hard to say" if answer == "?" else ("Yes." if answer == response else "no")
        choice = {"index": 0, "message": {"role": "assistant", "content": reply}} if chat else {"index": 0, "text": reply}
        data = json.dumps({"choices": [choice]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def judge_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), _Judge)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _Judge.seen.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    thread.join(timeout=10)


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_judge_scores_each_completion_and_counts_what_it_could_not_read(judge_server, api):
    reward = build_reward("judge", judge=JudgeSettings(judge_server, "judge-1", api=api, max_tokens=3))
    assert reward.score_batch(["42", "41", "7"], ["42", "42", "?"]) == [1.0, 0.0, 0.0]
    assert reward.runtime_metrics() == {"judge_calls": 3.0, "judge_parse_failures": 1.0, "judge_retries": 0.0}
    request = _Judge.seen[0]
    assert request["path"] == ("/v1/chat/completions" if api == "chat" else "/v1/completions")
    assert request["body"]["model"] == "judge-1" and request["body"]["max_tokens"] == 3
    assert request["body"]["temperature"] == 0.0


def test_default_judge_model_is_the_originals(judge_server):
    JudgeReward(judge_server).score_batch(["a"], ["a"])
    assert _Judge.seen[0]["body"]["model"] == "gpt-4o-mini"


@pytest.fixture(scope="module")
def serve_endpoint(ray_4cpu_4gpu):
    from retrain_ray.serve import start_inference_endpoint, stop_inference_endpoint

    url = start_inference_endpoint("builtin:tiny", port=free_port(), name="judge-endpoint", request_delay_s=0.05)
    yield url
    stop_inference_endpoint()


def test_a_judge_rewarded_run_trains_against_the_products_endpoint(tmp_path, serve_endpoint):
    from endpoint_load import endpoint_stats

    from retrain_ray.actors.throttle import start_throttle
    from retrain_ray.run.train import train_run
    from retrain_ray.throttle import ThrottleClient

    run_dir = tmp_path / "run"
    write_config(tmp_path / "judge.toml", base=TINY_RUN, logging={"log_dir": str(run_dir)},
                 reward={"type": "judge", "judge_url": serve_endpoint, "judge_model": "builtin:tiny",
                         "judge_max_tokens": 3},
                 training={"max_steps": 2, "sft_warmup_steps": 0, "batch_size": 2, "group_size": 4})
    cfg = load_config(tmp_path / "judge.toml")
    endpoint_stats(serve_endpoint, reset=True)
    actor = start_throttle("judge-test", "inference", 1, namespace="retrain-ray-tests", lease_ttl_s=30.0)
    outcome = train_run(cfg, run_name="judged", run_dir=run_dir, throttle=ThrottleClient(actor, "judged",
                                                                                        timeout_s=120.0))
    assert outcome.status == "completed"
    rows = read_stream(run_dir).to_pylist()
    assert [r["step"] for r in rows] == [0, 1]
    extras = [dict(r["extras"]) for r in rows]
    assert [e["judge_calls"] for e in extras] == [8.0, 16.0]  # one request per completion
    assert 0.0 <= extras[1]["judge_parse_failures"] <= 16.0
    stats = endpoint_stats(serve_endpoint)
    assert stats["requests_total"] == 16  # the product's endpoint answered every judge call
    assert stats["peak_in_flight"] == 1  # four parallel requests, held to the throttle's one slot
