"""FairQueue (a process's local waiters, least-served holder first), exactly and with hypothesis (no Ray)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.throttle.pool import FairQueue


def _serve(queue: FairQueue[str]) -> str:
    holder, item = queue.pop()
    queue.charge(holder)
    return item


def test_a_holder_behind_is_served_before_earlier_arrivals():
    queue: FairQueue[str] = FairQueue(catch_up=8)
    for _ in range(3):
        queue.charge("a")  # three holds of a (e.g. from an idle slot) while b was busy elsewhere
    queue.push("a", "a1")
    queue.push("b", "b1")
    queue.push("b", "b2")
    queue.push("a", "a2")
    assert [_serve(queue) for _ in range(4)] == ["b1", "b2", "a1", "a2"]  # b has 0 and 1 holds < a's 3


def test_ties_are_served_in_arrival_order_and_one_holders_items_fifo():
    queue: FairQueue[str] = FairQueue(catch_up=8)
    for item in ("c1", "a1", "b1", "a2", "c2"):
        queue.push(item[0], item)
    assert list(queue) == ["c1", "a1", "b1", "a2", "c2"]
    assert [_serve(queue) for _ in range(5)] == ["c1", "a1", "b1", "a2", "c2"]  # then 1 hold each: a2 came first


def test_catch_up_is_bounded_for_a_holder_that_was_away():
    """b sat out 100 of a's holds; it comes back with `catch_up` holds of priority, not 100."""
    queue: FairQueue[str] = FairQueue(catch_up=4)
    for _ in range(100):
        queue.charge("a")
    queue.push("a", "a")
    queue.push("b", "b")
    assert (queue.served("a"), queue.served("b")) == (100, 99 - 4)  # lifted: level (a's 99) - catch_up
    order = []
    for _ in range(12):  # a closed loop: whoever is served waits again
        order.append(_serve(queue))
        queue.push(order[-1], order[-1])
    assert order == ["b"] * 5 + ["a", "b"] * 3 + ["a"]


def test_remove_and_clear_return_the_items():
    queue: FairQueue[int] = FairQueue(catch_up=2)
    for i in range(5):
        queue.push(f"h{i % 2}", i)
    assert queue.remove(lambda item: item % 2 == 1) == [1, 3]
    assert queue.clear() == [0, 2, 4] and len(queue) == 0
    with pytest.raises(IndexError):
        queue.pop()
    with pytest.raises(ValueError, match="catch_up"):
        FairQueue(catch_up=-1)


def test_holders_at_the_floor_are_forgotten_with_no_change_of_rank():
    queue: FairQueue[str] = FairQueue(catch_up=1)
    for i in range(300):
        queue.charge(f"old-{i}")  # each served once at level 0, then left
    for _ in range(10):
        queue.charge("busy")
    queue.charge("last")
    assert len(queue._served) < 300  # pruned
    queue.push("old-0", "x")
    assert queue.served("old-0") == 9 - 1  # as if it was never seen: the floor


@settings(max_examples=300, deadline=None)
@given(catch_up=st.integers(0, 6), events=st.lists(st.one_of(
    st.tuples(st.just("push"), st.integers(0, 4)),
    st.tuples(st.just("pop"), st.just(0)),
    st.tuples(st.just("idle"), st.integers(0, 4)),  # a hold served from an idle slot, not the queue
), max_size=120))
def test_least_served_first_and_bounded_overtaking(catch_up, events):
    """Every pop serves a least-served waiting holder (earliest arrival among them), and no waiter is
    overtaken more than `catch_up + 2` times by any other holder."""
    queue: FairQueue[tuple[int, str]] = FairQueue(catch_up)
    waiting: list[tuple[int, str]] = []  # (arrival, holder)
    overtaken: dict[tuple[int, str], int] = {}  # (waiter's arrival, other holder) -> times served first
    for n, (op, arg) in enumerate(events):
        if op == "push":
            queue.push(f"h{arg}", (n, f"h{arg}"))
            waiting.append((n, f"h{arg}"))
        elif op == "idle" and not waiting:  # the channel uses an idle slot only when nobody waits
            queue.charge(f"h{arg}")
        elif op == "pop" and waiting:
            ranks = {item: (queue.served(item[1]), item[0]) for item in waiting}
            holder, item = queue.pop()
            queue.charge(holder)
            assert ranks[item] == min(ranks.values())
            waiting.remove(item)
            for arrival, other in waiting:
                if other != holder:
                    overtaken[arrival, holder] = overtaken.get((arrival, holder), 0) + 1
                    assert overtaken[arrival, holder] <= catch_up + 2
        assert len(queue) == len(waiting)


@settings(max_examples=200, deadline=None)
@given(holders=st.integers(2, 6), catch_up=st.integers(2, 8),
       absences=st.lists(st.tuples(st.integers(0, 5), st.integers(1, 8)), max_size=12),
       steps=st.integers(0, 60))
def test_holders_that_sit_out_rounds_catch_up_to_equal_counts(holders, catch_up, absences, steps):
    """A closed loop (one thread per holder, each served holder waits again), in which holders sit out
    fewer than `catch_up` pops once after being served (a thread that did not get the CPU in time): once
    all wait again, the counts are within 1 of each other. A FIFO would keep every round lost. (A holder
    that keeps sitting out gets no more than `catch_up` of priority at a time: by design.)"""
    queue: FairQueue[str] = FairQueue(catch_up)
    names = [f"h{i}" for i in range(holders)]
    for name in names:
        queue.push(name, name)
    counts = dict.fromkeys(names, 0)
    plan = {names[who % holders]: min(pops, catch_up - 1) for who, pops in reversed(absences)}
    away: dict[str, int] = {}  # holder -> pops it still sits out

    def step() -> None:
        if not queue:  # everybody away: they all come back
            for name in away:
                queue.push(name, name)
            away.clear()
        served = _serve(queue)
        counts[served] += 1
        for name in [name for name in away if away[name] == 1]:
            del away[name]
            queue.push(name, name)
        away.update({name: left - 1 for name, left in away.items()})
        if plan.get(served):
            away[served] = plan.pop(served)
        else:
            queue.push(served, served)

    for _ in range(steps):
        step()
    plan.clear()
    for _ in range(catch_up + holders * (catch_up + 2) * 2):  # nobody leaves any more
        step()
    assert not away and max(counts.values()) - min(counts.values()) <= 1, counts
