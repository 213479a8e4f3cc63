"""LeasedSemaphore, event by event with a fake clock (no Ray), plus hypothesis properties."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from retrain_ray.throttle.semaphore import LeasedSemaphore
from retrain_ray.throttle.types import ThrottleTimeout, UnknownLease


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def test_grants_up_to_capacity_then_refuses(clock):
    sem = LeasedSemaphore(2, lease_ttl_s=10.0, clock=clock)
    a = sem.try_acquire("run-a")
    b = sem.try_acquire("run-b")
    assert a is not None and b is not None and a.lease_id != b.lease_id
    assert (a.holder, a.granted_at, a.expires_at) == ("run-a", 100.0, 110.0)
    assert sem.try_acquire("run-c") is None
    assert sem.in_flight == 2


def test_waiters_are_granted_in_arrival_order(clock):
    sem = LeasedSemaphore(1, lease_ttl_s=10.0, clock=clock)
    first = sem.try_acquire("h0")
    tickets = [sem.enqueue(f"w{i}") for i in range(3)]
    assert sem.pop_grants() == [] and sem.waiting == 3
    # A newcomer may not overtake the queue even when a slot is momentarily free.
    clock.now = 102.0
    sem.release(first.lease_id)
    (ticket, lease), = sem.pop_grants()
    assert ticket == tickets[0] and lease.holder == "w0" and lease.granted_at == 102.0
    assert sem.try_acquire("newcomer") is None
    order = []
    for _ in range(2):
        sem.release(lease.lease_id)
        (ticket, lease), = sem.pop_grants()
        order.append(lease.holder)
    assert order == ["w1", "w2"]


def test_wait_percentiles_count_immediate_grants_as_zero(clock):
    sem = LeasedSemaphore(1, lease_ttl_s=10.0, clock=clock)
    held = sem.try_acquire("h")
    sem.enqueue("w")
    clock.now += 4.0
    sem.release(held.lease_id)
    stats = sem.stats()
    assert (stats.granted, stats.released, stats.wait_p50_s, stats.wait_p99_s) == (2, 1, 0.0, 4.0)


def test_renew_extends_and_reclaim_takes_back_stale_leases(clock):
    sem = LeasedSemaphore(2, lease_ttl_s=10.0, clock=clock)
    a = sem.try_acquire("alive")
    b = sem.try_acquire("dead")
    sem.enqueue("waiter")
    clock.now = 108.0
    assert sem.renew(a.lease_id).expires_at == 118.0
    assert sem.reclaim_expired(109.9) == []
    clock.now = 110.0
    assert sem.reclaim_expired() == [b]
    (_, granted), = sem.pop_grants()
    assert granted.holder == "waiter" and granted.expires_at == 120.0
    with pytest.raises(UnknownLease, match="renew more often"):
        sem.renew(b.lease_id)
    stats = sem.stats()
    assert (stats.in_flight, stats.expired, stats.waiting) == (2, 1, 0)


def test_reclaim_takes_back_named_leases_before_expiry_and_grants_waiters(clock):
    sem = LeasedSemaphore(2, lease_ttl_s=10.0, clock=clock)
    dead = sem.try_acquire("dead")
    alive = sem.try_acquire("alive")
    sem.enqueue("waiter")
    clock.now = 103.0
    assert sem.reclaim({dead.lease_id, "gone"}) == [dead]
    (_, granted), = sem.pop_grants()
    assert granted.holder == "waiter" and sem.holds(alive.lease_id) and not sem.holds(dead.lease_id)
    (record,) = sem.reclaims()
    assert (record.lease, record.reclaimed_at) == (dead, 103.0)
    assert (sem.stats().expired, sem.stats().in_flight) == (1, 2)


def test_every_renewal_extends_by_the_granted_ttl_not_the_lease_age(clock):
    # Issue 15: renew used expires_at - granted_at as the TTL, which grows with every renewal, so a dead
    # holder's long-held lease outlived its last renewal by its age + TTL.
    sem = LeasedSemaphore(1, lease_ttl_s=1.0, clock=clock)
    lease = sem.try_acquire("h")
    for _ in range(5):
        clock.now += 0.4
        renewed = sem.renew(lease.lease_id)
        assert (renewed.expires_at, renewed.ttl_s) == (clock.now + 1.0, 1.0)
    last_heard = clock.now
    assert sem.reclaim_expired(last_heard + 0.999) == []
    (reclaimed,) = sem.reclaim_expired(last_heard + 1.0)
    assert reclaimed.lease_id == lease.lease_id
    (record,) = sem.reclaims()
    assert (record.lease.expires_at - record.lease.ttl_s, record.reclaimed_at) == (last_heard, last_heard + 1.0)


def test_release_twice_is_an_error(clock):
    sem = LeasedSemaphore(1, clock=clock)
    lease = sem.try_acquire("h")
    sem.release(lease.lease_id)
    with pytest.raises(UnknownLease, match=lease.lease_id):
        sem.release(lease.lease_id)


def test_grow_grants_at_once_and_shrink_waits_for_releases(clock):
    sem = LeasedSemaphore(2, clock=clock)
    held = [sem.try_acquire(f"h{i}") for i in range(2)]
    for i in range(3):
        sem.enqueue(f"w{i}")
    sem.resize(4)
    assert [lease.holder for _, lease in sem.pop_grants()] == ["w0", "w1"]
    sem.resize(1)
    assert sem.in_flight == 4 and sem.stats().capacity == 1  # nothing revoked
    for lease in held:
        sem.release(lease.lease_id)
    assert sem.pop_grants() == []  # still 2 holders >= capacity 1
    assert sem.stats().peak_in_flight == 4


def test_cancel_leaves_queue_or_hands_back_an_unpopped_grant(clock):
    sem = LeasedSemaphore(1, clock=clock)
    held = sem.try_acquire("h")
    t0 = sem.enqueue("w0")
    t1 = sem.enqueue("w1")
    assert sem.cancel(t0) == [] and sem.waiting == 1
    sem.release(held.lease_id)
    (lease,) = sem.cancel(t1)
    assert lease.holder == "w1" and sem.pop_grants() == []
    assert sem.in_flight == 1


def test_batch_is_all_or_nothing_and_keeps_its_fifo_place(clock):
    sem = LeasedSemaphore(3, lease_ttl_s=10.0, clock=clock)
    a = sem.try_acquire("a")
    assert sem.try_acquire_many("engine", 3) is None  # only 2 free: nothing is granted
    batch = sem.enqueue("engine", 3)
    single = sem.enqueue("single")
    assert sem.pop_grants() == [] and sem.in_flight == 1  # the single waits behind the batch
    clock.now = 101.0
    sem.release(a.lease_id)
    grants = sem.pop_grants()
    assert [ticket for ticket, _ in grants] == [batch] * 3 and sem.in_flight == 3
    assert {lease.holder for _, lease in grants} == {"engine"} and sem.waiting == 1
    assert sem.release_many([lease.lease_id for _, lease in grants] + ["nope"]) == ["nope"]
    ((ticket, lease),) = sem.pop_grants()
    assert ticket == single and lease.holder == "single"
    assert sem.renew_many([lease.lease_id, "gone"]) == ["gone"]
    assert len(sem.try_acquire_many("e2", 2)) == 2 and sem.in_flight == 3


def test_cancelling_a_blocked_batch_lets_the_queue_move(clock):
    sem = LeasedSemaphore(2, clock=clock)
    sem.try_acquire("h")
    batch = sem.enqueue("engine", 2)
    single = sem.enqueue("single")
    assert sem.cancel(batch) == []
    assert [ticket for ticket, _ in sem.pop_grants()] == [single]


@pytest.mark.parametrize("count", [0, -2, 1.0, True, 4])
def test_bad_batch_size_names_the_fix(count):
    sem = LeasedSemaphore(3)
    with pytest.raises(ValueError, match="slots"):
        sem.try_acquire_many("h", count)
    with pytest.raises(ValueError, match="slots"):
        sem.enqueue("h", count)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4"])
def test_bad_capacity_names_the_key(bad):
    with pytest.raises(ValueError, match=r"\[backend\].max_concurrent"):
        LeasedSemaphore(bad)


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "30"])
def test_bad_ttl_is_refused(bad):
    with pytest.raises(ValueError, match="lease_ttl_s"):
        LeasedSemaphore(1, lease_ttl_s=bad)


def test_errors_pickle_with_their_fields():
    err = pickle.loads(pickle.dumps(ThrottleTimeout("tinker", 4, 12.5)))
    assert (err.endpoint, err.capacity, err.waited_s) == ("tinker", 4, 12.5)
    assert "'tinker'" in str(err) and "max_concurrent" in str(err) and "acquire_timeout_s" in str(err)
    assert pickle.loads(pickle.dumps(UnknownLease("7:x"))).lease_id == "7:x"


def _events(arg: st.SearchStrategy, capacity: st.SearchStrategy, *more: st.SearchStrategy) -> st.SearchStrategy:
    """Lists of (op, arg): acquire/enqueue with `arg`, release/cancel of a held/queued index, resize to
    `capacity`, and the `more` events."""
    return st.lists(st.one_of(
        st.tuples(st.just("acquire"), arg),
        st.tuples(st.just("enqueue"), arg),
        st.tuples(st.just("release"), st.integers(0, 20)),
        st.tuples(st.just("resize"), capacity),
        st.tuples(st.just("cancel"), st.integers(0, 20)),
        *more,
    ), max_size=60)


# single slots (arg: the holder's number), with lease renewals and clock ticks
ops = _events(st.integers(0, 5), st.integers(1, 5), st.tuples(st.just("renew"), st.integers(0, 20)),
              st.tuples(st.just("tick"), st.floats(0.0, 6.0)))
# batches (arg: how many slots at once) on a semaphore that never shrinks below 4
batch_ops = _events(st.integers(1, 4), st.integers(4, 6))


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(1, 4), events=ops)
def test_invariants_under_random_events(capacity, events):
    """Grants never push holders past capacity; grants are FIFO; counters are conserved."""
    clock = FakeClock()
    sem = LeasedSemaphore(capacity, lease_ttl_s=5.0, clock=clock)
    held: list[str] = []
    queued: list[int] = []
    for op, arg in events:
        before = sem.in_flight
        if op == "acquire":
            lease = sem.try_acquire(f"h{arg}")
            assert (lease is None) == (bool(queued) or before >= sem.capacity)
            held += [lease.lease_id] if lease else []
        elif op == "enqueue":
            queued.append(sem.enqueue(f"h{arg}"))
        elif op == "release" and held:
            lease_id = held.pop(arg % len(held))
            if lease_id in {lease.lease_id for lease in _live(sem)}:
                sem.release(lease_id)
        elif op == "renew" and held:
            lease_id = held[arg % len(held)]
            if lease_id in {lease.lease_id for lease in _live(sem)}:
                sem.renew(lease_id)
        elif op == "tick":
            clock.now += arg
            sem.reclaim_expired()
        elif op == "resize":
            sem.resize(arg)
        elif op == "cancel" and queued:
            ticket = queued.pop(arg % len(queued))
            held += [lease.lease_id for lease in sem.cancel(ticket)]
        grants = sem.pop_grants()
        granted_tickets = [ticket for ticket, _ in grants]
        assert granted_tickets == queued[: len(granted_tickets)]  # FIFO
        del queued[: len(granted_tickets)]
        held += [lease.lease_id for _, lease in grants]
        if grants:
            assert sem.in_flight <= sem.capacity
        assert sem.in_flight <= max(before, sem.capacity)
        assert sem.waiting == len(queued)
        assert sem.waiting == 0 or sem.in_flight >= sem.capacity  # no idle slot while anyone waits
        stats = sem.stats()
        assert stats.granted == stats.in_flight + stats.released + stats.expired


def _live(sem: LeasedSemaphore):
    return sem.leases()


@settings(max_examples=300, deadline=None)
@given(events=batch_ops)
def test_batches_never_exceed_capacity_and_are_served_whole_in_fifo_order(events):
    sem = LeasedSemaphore(4, lease_ttl_s=5.0, clock=FakeClock())
    held: list[str] = []
    queued: list[tuple[int, int]] = []  # (ticket, count)
    for op, arg in events:
        before = sem.in_flight
        if op == "acquire":
            fits = not queued and sem.in_flight + arg <= sem.capacity
            leases = sem.try_acquire_many("h", arg)
            assert (leases is not None) == fits
            held += [lease.lease_id for lease in leases or ()]
        elif op == "enqueue":
            queued.append((sem.enqueue("w", arg), arg))
        elif op == "release" and held:
            assert sem.release_many([held.pop(arg % len(held))]) == []
        elif op == "resize":
            sem.resize(arg)
        elif op == "cancel" and queued:
            ticket, _ = queued.pop(arg % len(queued))
            held += [lease.lease_id for lease in sem.cancel(ticket)]
        grants = sem.pop_grants()
        tickets = [ticket for ticket, _ in grants]
        expected = []
        while queued and len(expected) < len(tickets):
            ticket, count = queued.pop(0)
            expected += [ticket] * count
        assert tickets == expected  # whole batches, in arrival order
        held += [lease.lease_id for _, lease in grants]
        assert sem.in_flight <= (sem.capacity if grants else max(before, sem.capacity))  # shrinks revoke nothing
        assert not queued or sem.in_flight + queued[0][1] > sem.capacity  # the head cannot fit


def test_after_a_restart_renewals_are_re_adopted_and_nothing_new_is_granted_for_one_ttl(clock):
    """The throttle actor restarted without its table: for one TTL it grants nothing new, re-adopts the leases
    its holders renew (they count against capacity), then serves the waiters FIFO from what is really free."""
    sem = LeasedSemaphore(2, lease_ttl_s=10.0, clock=clock)
    sem.start_grace(id_prefix="r1.")
    assert sem.try_acquire("new") is None  # no new lease during the grace period
    waiter = sem.enqueue("waiter")
    renewed = sem.renew("0:holder-a")  # a lease the dead actor granted
    assert renewed.holder == "holder-a" and sem.in_flight == 1 and sem.adopted == 1
    sem.release_many(["1:holder-b"])  # released before it was renewed here: answered as known
    assert sem.pop_grants() == []
    clock.now += 10.0
    assert sem.end_grace_if_due() and not sem.in_grace
    ((ticket, lease),) = sem.pop_grants()
    assert ticket == waiter and lease.lease_id.startswith("r1.") and sem.in_flight == 2
    assert sem.try_acquire("third") is None  # the re-adopted lease still counts: capacity 2 is full
    with pytest.raises(UnknownLease):
        sem.renew("5:holder-late")  # after the grace period an unknown lease is lost, not adopted
    stats = sem.stats()
    assert stats.granted == stats.in_flight + stats.released + stats.expired
