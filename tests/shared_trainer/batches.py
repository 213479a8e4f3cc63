"""Synthetic RL batches for the shared-trainer tests: groups of random completions with random rewards,
credited by the product's own `assign_credit` under a given advantage and transform mode (so each family's
advantages are what a run would train on), plus an optional ECHO mask."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Iterable

from retrain_ray.backends.types import TrainBatch
from retrain_ray.data.types import Example
from retrain_ray.engines.types import SampleResult
from retrain_ray.run.credit import CreditSettings, assign_credit
from retrain_ray.run.rollout import Group

TEMPERATURE = 0.8


def _group(rng: random.Random, vocab: int, group_size: int) -> Group:
    prompt = [rng.randrange(3, vocab) for _ in range(rng.randint(2, 5))]
    samples, rewards, masks = [], [], []
    for _ in range(group_size):
        n = rng.randint(2, 9)
        samples.append(SampleResult(tuple(rng.randrange(3, vocab) for _ in range(n)),
                                    tuple(-rng.uniform(0.5, 4.0) for _ in range(n)), "stop",
                                    tuple(rng.uniform(0.1, 2.0) for _ in range(n))))
        rewards.append(float(rng.random() < 0.5))
        masks.append([int(rng.random() < 0.3) for _ in range(n)])
    if len(set(rewards)) == 1:
        rewards[0] = 1.0 - rewards[0]
    return Group(Example("p", "r"), prompt, samples, ["t"] * group_size, rewards, masks)


def credited_batch(seed: int, *, vocab: int, advantage_mode: str = "grpo", transform_mode: str = "none",
                   prompts: int = 3, group_size: int = 4, echo: bool = False) -> TrainBatch:
    """A batch as `assign_credit` makes it for these modes (with ECHO targets on a third of the completion
    tokens when `echo`)."""
    rng = random.Random(seed)
    groups = [_group(rng, vocab, group_size) for _ in range(prompts)]
    settings = CreditSettings(advantage_mode=advantage_mode, transform_mode=transform_mode)
    credit = assign_credit(groups, settings, sepa_lambda=0.5, temperature=TEMPERATURE)
    assert credit.batch is not None
    batch = credit.batch
    if not echo:
        return batch
    masks = [[0.0] * n + [float(rng.random() < 0.33) for _ in range(len(t) - n)]
             for t, n in zip(batch.tokens_D, batch.prompt_lens_D, strict=True)]
    return TrainBatch(batch.tokens_D, batch.logprobs_D, batch.advantages_D, batch.prompt_lens_D,
                      temperature=batch.temperature, echo_mask_D=masks, echo_weight=0.05, echo_entropy_floor=0.0)


def in_threads(names: Iterable[str], member: Callable[[str], None], *, timeout_s: float = 150.0) -> None:
    """Runs `member(name)` for every name in its own thread, as the trainer actor's callers do; fails if any is
    still running after `timeout_s`."""
    threads = [threading.Thread(target=member, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=timeout_s)
    assert not any(t.is_alive() for t in threads), "a member's call did not return in time"
