"""Client load on a served endpoint (tests/serve/test_serve_endpoint.py, tests/campaign/test_campaign_endpoint.py)."""

from __future__ import annotations

import threading
from typing import Any

import httpx

from retrain_ray.engines.openai.engine import OpenAIEngine
from retrain_ray.engines.types import SamplingParams


def endpoint_stats(url: str, reset: bool = False) -> dict[str, Any]:
    response = httpx.get(f"{url}/v1/stats", params={"reset": "true"} if reset else None, timeout=30)
    response.raise_for_status()
    return response.json()


def hammer(url: str, model: str, throttle: Any = None, clients: int = 6, rounds: int = 1) -> dict[str, Any]:
    """`clients` threads, each an OpenAIEngine (2 parallel requests) generating 2 prompts x 2 samples
    `rounds` times through `throttle` (None: no throttle); returns the endpoint's stats of that load."""
    endpoint_stats(url, reset=True)
    errors: list[BaseException] = []

    def one_run(k: int) -> None:
        try:
            engine = OpenAIEngine(url, model_name=model, throttle=throttle, seed=k, max_parallel_requests=2)
            for _ in range(rounds):
                engine.generate([[1, 10 + k], [1, 20 + k]], 2, SamplingParams(max_tokens=3))
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=one_run, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    return endpoint_stats(url)
