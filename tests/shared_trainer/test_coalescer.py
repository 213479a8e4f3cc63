"""Members' concurrent steps are coalesced into one batched step; a lone member goes after the window."""

from __future__ import annotations

import threading

import pytest
from batches import credited_batch, in_threads
from test_equivalence import VOCAB, _member

from retrain_ray.shared_trainer import SharedTrainerError, StepRequest
from retrain_ray.shared_trainer.coalescer import CoalescingTrainer


def _call_all(front: CoalescingTrainer, names: list[str], step: int) -> dict[str, object]:
    results: dict[str, object] = {}

    def call(name: str) -> None:
        try:
            results[name] = front.train_step(name, StepRequest(credited_batch(step * 10 + len(name), vocab=VOCAB), lr=1e-3),
                                             timeout_s=120)
        except Exception as exc:  # noqa: BLE001 - the test reads what each caller got
            results[name] = exc

    in_threads(names, call)
    return results


def test_concurrent_members_go_in_one_step(shared):
    front = CoalescingTrainer(shared(), window_s=30.0)  # a long window: only "everyone is here" releases it
    for i, name in enumerate(("a", "bb", "ccc")):
        front.add_run(name, _member(i, "grpo", "none")[0])
    for step in range(2):
        results = _call_all(front, ["a", "bb", "ccc"], step)
        assert all(r.metrics["grad_norm"] > 0 for r in results.values())
    assert front.batch_sizes == [3, 3]
    assert all(front.trainer.version(n) == 2 for n in ("a", "bb", "ccc"))


def test_a_lone_member_goes_after_the_window_and_a_leaver_releases_the_batch(shared):
    front = CoalescingTrainer(shared(), window_s=0.2)
    for i, name in enumerate(("a", "bb")):
        front.add_run(name, _member(i, "grpo", "none")[0])
    results = _call_all(front, ["a"], 0)  # bb never calls: a goes alone once the window has passed
    assert front.batch_sizes == [1] and front.trainer.version("a") == 1
    front.window_s = 60.0
    front.remove_run("bb")  # with bb gone, a alone is everyone: no window to wait
    results = _call_all(front, ["a"], 1)
    assert front.batch_sizes == [1, 1] and front.trainer.version("a") == 2
    assert not isinstance(results["a"], Exception)


def test_a_caller_that_is_not_a_member_gets_the_error(shared):
    front = CoalescingTrainer(shared(), window_s=0.05)
    results = _call_all(front, ["ghost"], 0)
    assert isinstance(results["ghost"], SharedTrainerError)
    with pytest.raises(SharedTrainerError, match="not a member"):
        raise results["ghost"]


def test_every_batch_runs_on_one_worker_thread_whoever_calls(shared):
    """Batches run on the coalescer's own thread, not the callers': per-thread malloc arenas grew a trainer
    actor with many caller threads to 10 GB."""
    front = CoalescingTrainer(shared(), window_s=0.05)
    front.add_run("a", _member(0, "grpo", "none")[0])
    threads: list[str] = []
    step = front.trainer.train_step

    def recording_step(batch):  # the real step, noting which thread ran it
        threads.append(threading.current_thread().name)
        return step(batch)

    front.trainer.train_step = recording_step  # type: ignore[method-assign]
    for k in range(3):  # each call from a fresh thread
        _call_all(front, ["a"], k)
    assert len(threads) == 3 and len(set(threads)) == 1
    assert threads[0].startswith("shared-trainer-batch") and front.trainer.version("a") == 3
