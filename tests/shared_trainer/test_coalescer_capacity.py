"""The coalescer's capacity (what the pooled back pressure sets through `resize`): a batched step takes at most
that many members, the others go in the next one; a resize wakes the waiting members; below 1 is clamped; and a
run's adapter does not depend on which batch it went in."""

from __future__ import annotations

import threading
import time

from batches import credited_batch, in_threads
from test_equivalence import VOCAB, _member

from retrain_ray.shared_trainer import StepRequest
from retrain_ray.shared_trainer.coalescer import CoalescingTrainer

NAMES = ("a", "bb", "ccc")


def _front(shared, *, window_s: float, capacity: int | None = None) -> CoalescingTrainer:
    front = CoalescingTrainer(shared(), window_s=window_s, capacity=capacity)
    for i, name in enumerate(NAMES):
        front.add_run(name, _member(i, "grpo", "none")[0])
    return front


def _steps(front: CoalescingTrainer, names: tuple[str, ...], steps: int) -> dict[str, BaseException]:
    """Each of `names` calls `steps` steps in its own thread, on batches fixed by its name and the step; the
    errors any caller got."""
    errors: dict[str, BaseException] = {}

    def member(name: str) -> None:
        try:
            for step in range(steps):
                batch = credited_batch(100 * step + len(name), vocab=VOCAB)
                front.train_step(name, StepRequest(batch, lr=1e-3), timeout_s=120)
        except Exception as exc:  # noqa: BLE001 - the test reads what each caller got
            errors[name] = exc

    in_threads(names, member)
    return errors


def test_a_batch_closes_at_capacity_and_the_rest_go_in_the_next(shared):
    front = _front(shared, window_s=3.0, capacity=2)  # the window never releases the first batch: "full" does
    assert _steps(front, NAMES, 1) == {}
    assert front.batch_sizes == [2, 1]
    assert all(front.trainer.version(n) == 1 for n in NAMES)


def test_at_capacity_one_every_member_still_gets_every_step(shared):
    front = _front(shared, window_s=30.0, capacity=1)  # no starvation: the earliest arrived goes first
    assert _steps(front, NAMES, 2) == {}
    assert front.batch_sizes == [1] * 6
    assert all(front.trainer.version(n) == 2 for n in NAMES)


def test_a_resize_releases_a_waiting_member_at_once(shared):
    front = _front(shared, window_s=60.0)  # unlimited: a alone waits for bb and ccc, who never call
    waiter = threading.Thread(target=_steps, args=(front, ("a",), 1))
    started = time.monotonic()
    waiter.start()
    time.sleep(0.3)
    assert front.batch_sizes == []  # still waiting for the others
    assert front.resize(1) == 1  # a batch of one is now full
    waiter.join(timeout=60)
    assert front.batch_sizes == [1] and front.trainer.version("a") == 1
    assert time.monotonic() - started < 30.0  # not the 60 s window


def test_a_capacity_below_one_is_clamped(shared):
    front = _front(shared, window_s=0.05, capacity=0)
    assert front.capacity == 1
    assert front.resize(-3) == 1 and front.resize(5) == 5 and front.capacity == 5
    assert front.resizes == [1, 1, 5]


def test_the_adapter_does_not_depend_on_the_batch_it_went_in(shared):
    together, apart = _front(shared, window_s=30.0), _front(shared, window_s=30.0, capacity=1)
    untrained = _front(shared, window_s=0.05)
    for front in (together, apart):
        assert _steps(front, NAMES, 2) == {}
    assert together.batch_sizes == [3, 3] and apart.batch_sizes == [1] * 6
    for name in NAMES:
        mine, theirs = together.trainer.export_weights(name).tensors, apart.trainer.export_weights(name).tensors
        assert max(float((mine[k] - theirs[k]).abs().max()) for k in mine) < 1e-5
        start = untrained.trainer.export_weights(name).tensors
        assert max(float((mine[k] - start[k]).abs().max()) for k in mine) > 1e-4  # trained, not two fresh adapters


def test_a_step_result_says_how_long_it_waited_for_its_batch(shared):
    front = _front(shared, window_s=0.5)  # a alone: its batch starts when the window ends

    def wait_of(name: str) -> float:
        batch = credited_batch(len(name), vocab=VOCAB)
        return front.train_step(name, StepRequest(batch, lr=1e-3), timeout_s=120).wait_s

    assert 0.5 <= wait_of("a") < 5.0
    front.resize(1)  # now a batch of one is full: it starts at once
    assert 0.0 <= wait_of("a") < 0.5
