"""Multi-turn rollout: episodes of an `[environment]` -> frozen, scored groups (spec 1.5, multi-turn); the pool of
worker threads for the environment's calls is at the end.

Every active episode of the step samples its next turn in one engine call per turn (one completion
per episode); the environment scores each turn as it comes. A finished group asks the environment for
per-turn advantages (MT-GRPO) and, with TL-GRPO, replays each turn's alternatives from the same state
to get its branch rewards. An episode still running after `max_turns` turns is truncated: it counts in
the rewards but gets no datum.
"""

from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TypeVar

from retrain_ray.algorithms.turns import (
    Alternatives,
    TurnAction,
    action_space_alternatives,
    branch_rewards,
)
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult, SamplingEngine, SamplingParams
from retrain_ray.environments.types import Branchable, Environment, Episode
from retrain_ray.run.rollout import EpisodeRecord, Group, Rollout, TurnRecord, joined_sample
from retrain_ray.util.finite import check_rewards

Encode = Callable[[str], list[int]]
Decode = Callable[[list[list[int]]], list[str]]
MarkPlanning = Callable[[list[SampleResult]], list[list[int]]]


@dataclass(frozen=True)
class Branching:
    """TL-GRPO's branch settings (`[training] tl_grpo_*`)."""

    mode: str  # "action_space" | "llm"
    size: int
    lookahead_steps: int
    rng: random.Random


@dataclass
class _Live:
    """An episode being rolled out."""

    example: Example
    episode: Episode
    prompt: str
    turns: list[TurnRecord]
    cumulative: float = 0.0
    done: bool = False


def multiturn_rollout(
    engine: SamplingEngine,
    environment: Environment,
    examples_P: Sequence[Example],
    *,
    group_size: int,
    params: SamplingParams,
    encode: Encode,
    decode: Decode,
    max_turns: int,
    branching: Branching | None = None,
    mark_planning: MarkPlanning | None = None,
    workers: int = 1,
    buffer: int = 0,
) -> Rollout:
    """`group_size` episodes per example, played to the end (or `max_turns` > 0), scored per turn; the
    environment's resets and steps run on `workers` threads (`rollout_env_workers`, run/multiturn.py)."""
    start = time.perf_counter()
    with EnvPool(environment.name, workers=workers, buffer=buffer) as pool:
        starts = pool.map(lambda ex: _start(environment, ex), [ex for ex in examples_P for _ in range(group_size)],
                          lambda ex: f"the reset of {ex.prompt[:40]!r}")
        live_P_G = [starts[p * group_size:(p + 1) * group_size] for p in range(len(examples_P))]
        turn = 0
        while active := [e for row in live_P_G for e in row if not e.done]:
            if 0 < max_turns <= turn:
                break
            _play_turn(engine, active, params, encode, decode, pool)
            turn += 1
    sampled = time.perf_counter()
    groups = [_group(engine, environment, ex, row, params, encode, decode, branching, mark_planning)
              for ex, row in zip(examples_P, live_P_G, strict=True)]
    return Rollout(groups, sample_time_s=sampled - start, score_time_s=time.perf_counter() - sampled)


def _start(environment: Environment, example: Example) -> _Live:
    episode = environment.reset(example)
    return _Live(example, episode, episode.prompt(), [])


def _play_turn(engine: SamplingEngine, active: list[_Live], params: SamplingParams, encode: Encode,
               decode: Decode, pool: EnvPool) -> None:
    prompt_ids = [encode(e.prompt) for e in active]
    samples = [res_G[0] for res_G in engine.generate(prompt_ids, 1, params)]
    texts = decode([list(s.token_ids) for s in samples])
    results = pool.map(lambda pair: pair[0].episode.step(pair[1]), list(zip(active, texts, strict=True)),
                       lambda pair: f"turn {len(pair[0].turns) + 1} of {pair[0].example.prompt[:40]!r}")
    for live, ids, sample, text, result in zip(active, prompt_ids, samples, texts, results, strict=True):
        if not math.isfinite(float(result.reward)):
            raise ValueError(f"environment: turn {len(live.turns) + 1} of {live.example.prompt[:40]!r} has reward "
                             f"{result.reward!r}; every turn reward must be a finite number")
        live.cumulative += result.reward
        live.turns.append(TurnRecord(ids, sample, text, TurnAction(result.action, result.reward, live.cumulative)))
        if result.done or result.observation is None:
            live.done = True
        else:
            live.prompt = result.observation


def _group(engine: SamplingEngine, environment: Environment, example: Example, live_G: list[_Live],
           params: SamplingParams, encode: Encode, decode: Decode, branching: Branching | None,
           mark_planning: MarkPlanning | None) -> Group:
    rewards = [float(e.episode.reward()) for e in live_G]
    texts = ["\n".join(t.text for t in e.turns) for e in live_G]
    check_rewards(rewards, texts, f"environment {environment.name}")
    given = environment.turn_advantages([e.episode for e in live_G])
    records = [
        EpisodeRecord(turns=list(e.turns), reward=r, truncated=not e.done, turn_advantages=[float(a) for a in adv],
                      branch_rewards=_branches(engine, environment, e, params, decode, branching))
        for e, r, adv in zip(live_G, rewards, given, strict=True)
    ]
    samples = [joined_sample(e.turns) for e in live_G]
    masks = mark_planning(samples) if mark_planning else [[0] * len(s.token_ids) for s in samples]
    first_ids = records[0].turns[0].prompt_ids if records and records[0].turns else encode(example.prompt)
    return Group(example=example, prompt_ids=first_ids, samples_G=samples, texts_G=texts, rewards_G=rewards,
                 planning_masks_G=masks, episodes_G=records)


def _branches(engine: SamplingEngine, environment: Environment, live: _Live, params: SamplingParams,
              decode: Decode, branching: Branching | None) -> list[list[float]]:
    if branching is None or not live.done:
        return []
    if not isinstance(environment, Branchable):
        raise TypeError(f"environment {environment.name} cannot replay actions; TL-GRPO needs one that can")
    env: Branchable = environment
    example = live.example
    turns = [t.action for t in live.turns]
    if branching.mode == "action_space":
        pick = action_space_alternatives(lambda before: env.legal_actions(example, before),
                                         [t.action for t in turns], branching.size, branching.rng)
    else:
        pick = _sampled_alternatives(engine, env, live.turns, params, decode, branching.size)
    return branch_rewards(turns, lambda actions: env.replay(example, actions), pick,
                          lookahead_steps=branching.lookahead_steps)


def _sampled_alternatives(engine: SamplingEngine, env: Branchable, turns: list[TurnRecord], params: SamplingParams,
                          decode: Decode, size: int) -> Alternatives:
    """`branch_mode = "llm"`: `size - 1` completions sampled for the turn's own prompt."""

    def pick(turn: int, before: Sequence[str]) -> list[str | None]:
        (samples,) = engine.generate([turns[turn].prompt_ids], size - 1, params)
        return [env.parse_action(text) for text in decode([list(s.token_ids) for s in samples])]

    return pick


# ----------------------------------------------------------------------------------------------------
# Environment calls of a multi-turn step on a pool of worker threads (`[environment] rollout_env_workers`).
#
# An environment may block on I/O (an OpenEnv server over a socket, a verifiers environment calling a tool),
# so the episodes of one turn are reset and stepped by `workers` threads instead of one after another.
# Results come back in the episodes' order whatever order the workers finish in, so a run is the same with
# 1 worker or many (each episode's calls stay on one episode; episodes share nothing the run relies on).
# `rollout_buffer_size` bounds how far the workers may run ahead of the loop that collects their results in
# order: at most `workers + buffer` calls are submitted and not yet collected (0: the whole turn at once).
# A worker's exception stops the step: it is raised again in the run's thread, as itself (so the CLI reports an
# environment's own errors as it always does), with a note naming the environment and the episode.
T = TypeVar("T")
R = TypeVar("R")


class EnvPool:
    """Maps an environment call over a turn's episodes, in order, on `workers` threads (1: in the caller)."""

    def __init__(self, name: str, *, workers: int = 1, buffer: int = 0) -> None:
        if workers < 1 or buffer < 0:
            raise ValueError(f"rollout_env_workers must be >= 1 and rollout_buffer_size >= 0 (got {workers}, {buffer})")
        self.name = name
        self.workers = workers
        self.window = workers + buffer if buffer > 0 else 0  # 0: no bound
        self._executor = ThreadPoolExecutor(workers, thread_name_prefix=f"env-{name}") if workers > 1 else None

    def map(self, call: Callable[[T], R], items: Sequence[T], describe: Callable[[T], str]) -> list[R]:
        """`[call(item) for item in items]`, the calls spread over the workers; raises the exception of the first
        item (in order) whose call raised, noting `describe(item)`."""
        if self._executor is None:
            return [call(item) for item in items]  # one worker: the calls in the caller's thread, as before
        return list(self._ordered(call, items, describe, self._executor))

    def _ordered(self, call: Callable[[T], R], items: Sequence[T], describe: Callable[[T], str],
                 executor: ThreadPoolExecutor) -> Iterator[R]:
        window = self.window or len(items)
        pending: deque[tuple[T, Future[R]]] = deque()
        upcoming = iter(items)
        try:
            for item in upcoming:
                pending.append((item, executor.submit(call, item)))
                if len(pending) >= window:
                    yield self._collect(*pending.popleft(), describe)
            while pending:
                yield self._collect(*pending.popleft(), describe)
        finally:
            for _, future in pending:  # a failed episode stops the step: calls not yet started are dropped
                future.cancel()

    def _collect(self, item: T, future: Future[R], describe: Callable[[T], str]) -> R:
        try:
            return future.result()
        except Exception as exc:  # the worker's own error, raised in the run's thread, noting its episode
            exc.add_note(f"(in an environment worker of {self.name}: {describe(item)})")
            raise

    def close(self) -> None:
        """Stops the workers (waiting for calls already running: an environment call is not interrupted)."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> EnvPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
