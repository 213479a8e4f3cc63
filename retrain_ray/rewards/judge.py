"""`[reward] type = "judge"`: an LLM judge on any OpenAI-compatible endpoint scores each completion.

Each completion is one request: `judge_prompt` with `{question}`, `{answer}` (the reference) and
`{response}` filled in, sent to `judge_url` as a chat request (`judge_api = "chat"`, the default:
`/v1/chat/completions`) or a text completion (`"completions"`: `/v1/completions`), model `judge_model`
(the original's default `gpt-4o-mini` when empty), temperature 0. The original asked the verifiers
package's `JudgeRubric` with an empty question and scored 1.0 when "yes" appeared in the reply; the
default prompt is that rubric's, and the question stays empty here as well (a reward sees completions
and references only).

The reply becomes a score by `parse_verdict`: the first word "yes"/"no" (1/0), else a number in
[0, 1] (a number above 1 out of 10 or 100 is read as such). A reply with neither scores 0 and counts as
a parse failure (`judge_parse_failures`; with `judge_calls` and `judge_retries`, cumulative, in each
row). Departure: "yes" must be a word ("yesterday" is not a verdict).

Every request holds a slot of the run's throttle for exactly its own duration (as the OpenAI engine's
requests do), so a judge on the run's own endpoint shares that endpoint's capacity; HTTP 502/503/504,
timeouts and dropped connections are retried with backoff. The API key, when the endpoint needs one,
comes from the environment variable `OPENAI_API_KEY`, never from the config file.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from retrain_ray.rewards.types import check_batch
from retrain_ray.util.judge_prompt import DEFAULT_JUDGE_PROMPT, JUDGE_APIS, check_prompt
from retrain_ray.util.retry import RetryCounters, RetryPolicy, call_with_retry
from retrain_ray.util.secrets import scrub

DEFAULT_JUDGE_MODEL = "gpt-4o-mini"
DEFAULT_JUDGE_URL = "https://api.openai.com/v1"
API_KEY_ENV = "OPENAI_API_KEY"

_WORD = re.compile(r"[a-z]+|\d+(?:\.\d+)?")


def parse_verdict(reply: str) -> float | None:
    """The judge's score in [0, 1], or None when the reply gives none (see the module docstring)."""
    words = _WORD.findall(reply.lower())
    for word in words:
        if word == "yes":
            return 1.0
        if word == "no":
            return 0.0
    for word in words:
        if word[0].isdigit():
            value = float(word)
            for scale in (1.0, 10.0, 100.0):
                if value <= scale:
                    return value / scale
            return None
    return None


@dataclass(frozen=True)
class JudgeSettings:
    """The `[reward] judge_*` keys."""

    url: str = DEFAULT_JUDGE_URL
    model: str = ""
    prompt: str = DEFAULT_JUDGE_PROMPT
    api: str = "chat"
    max_tokens: int = 16


class _NoThrottle:
    @contextlib.contextmanager
    def hold(self) -> Generator[None, None, None]:
        yield None


def _base(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class JudgeReward:
    """Scores completions by asking an LLM judge (see the module docstring)."""

    name = "judge"

    def __init__(
        self,
        url: str = DEFAULT_JUDGE_URL,
        *,
        model: str = "",
        prompt: str = DEFAULT_JUDGE_PROMPT,
        api: str = "chat",
        max_tokens: int = 16,
        throttle: Any = None,
        timeout_s: float = 120.0,
        max_attempts: int = 4,
        backoff_s: float = 0.5,
        max_parallel_requests: int = 4,
    ) -> None:
        if api not in JUDGE_APIS:
            raise ValueError(f"[reward] judge_api={api!r}; use one of {list(JUDGE_APIS)}")
        check_prompt(prompt)
        self.url, self.shown_url = _base(url), scrub(_base(url))
        self.model, self.prompt, self.api, self.max_tokens = model or DEFAULT_JUDGE_MODEL, prompt, api, max_tokens
        self.throttle = throttle if throttle is not None else _NoThrottle()
        self.policy, self.counters = RetryPolicy(max_attempts, backoff_s), RetryCounters()
        self.max_parallel_requests = max_parallel_requests
        key = os.environ.get(API_KEY_ENV, "")
        self._client = httpx.Client(timeout=timeout_s, headers={"Authorization": f"Bearer {key}"} if key else {})
        self.calls = self.parse_failures = 0

    def __getstate__(self) -> dict[str, Any]:  # the HTTP client stays behind; a copy opens its own
        state = dict(self.__dict__)
        state.pop("_client")
        state["_timeout"] = self._client.timeout
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        timeout = state.pop("_timeout")
        self.__dict__.update(state)
        key = os.environ.get(API_KEY_ENV, "")
        self._client = httpx.Client(timeout=timeout, headers={"Authorization": f"Bearer {key}"} if key else {})

    def runtime_metrics(self) -> dict[str, float]:
        return {"judge_calls": float(self.calls), "judge_parse_failures": float(self.parse_failures),
                "judge_retries": float(self.counters.retries)}

    def _body(self, text: str) -> tuple[str, dict[str, Any]]:
        common = {"model": self.model, "max_tokens": self.max_tokens, "temperature": 0.0, "n": 1}
        if self.api == "chat":
            return "/v1/chat/completions", {**common, "messages": [{"role": "user", "content": text}]}
        return "/v1/completions", {**common, "prompt": text}

    def ask(self, response: str, reference: str, question: str = "") -> str:
        """The judge's reply about one completion."""
        route, body = self._body(self.prompt.format(question=question, answer=reference, response=response))
        what = f"judge {self.model!r} at {self.shown_url}"

        def attempt() -> dict[str, Any]:
            with self.throttle.hold():
                reply = self._client.post(f"{self.url}{route}", json=body)
            if reply.status_code >= 400:
                raise httpx.HTTPStatusError(f"{what}: HTTP {reply.status_code}: {reply.text[:300]}",
                                            request=reply.request, response=reply)
            return reply.json()

        out = call_with_retry(attempt, what=what, policy=self.policy, counters=self.counters)
        choice = (out.get("choices") or [{}])[0]
        text = (choice.get("message") or {}).get("content") if self.api == "chat" else choice.get("text")
        return str(text or "")

    def score_batch(self, completions: list[str], references: list[str]) -> list[float]:
        check_batch(completions, references)
        if not completions:
            return []
        with ThreadPoolExecutor(max_workers=min(self.max_parallel_requests, len(completions))) as pool:
            replies = list(pool.map(self.ask, completions, references))
        self.calls += len(replies)
        scores = [parse_verdict(r) for r in replies]
        self.parse_failures += sum(s is None for s in scores)
        return [0.0 if s is None else s for s in scores]
