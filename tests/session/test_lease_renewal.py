"""The keeper renews the leases of the sessions its runs hold, with one timer for all of them.

A run's lease is renewed every third of ``lease_ttl`` while it holds the session (at most a sixth of it
early, with another's), whoever else holds one;
a lease lost (taken over) is not renewed again while the others are; and once the last session is given
back, no timer is left. On a :class:`~rxagent.clock.VirtualClock`, so nothing waits for real time.
"""

from __future__ import annotations

import asyncio

import pytest

from rxagent.clock import VirtualClock
from rxagent.session import DelegatingStore, Lease, LeaseLostError, MemoryStore, SessionKeeper
from rxagent.state import SessionKey

TTL = 30.0


class CountingStore(DelegatingStore):
    """Counts the renewals of each session's lease; refuses to renew the sessions in ``lost``."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.renewals: dict[str, list[float]] = {}
        self.lost: set[str] = set()
        self.clock: VirtualClock | None = None

    async def renew(self, lease: Lease, ttl: float) -> Lease:
        assert self.clock is not None
        self.renewals.setdefault(lease.key[1], []).append(self.clock.now())
        if lease.key[1] in self.lost:
            raise LeaseLostError("taken over")
        return await super().renew(lease, ttl)


def key(name: str) -> SessionKey:
    return ("user", name)


@pytest.fixture
def store() -> CountingStore:
    return CountingStore()


async def test_held_sessions_are_renewed_every_third_of_the_ttl_by_one_timer(store: CountingStore) -> None:
    store.clock = clock = VirtualClock()
    keeper = SessionKeeper(store, lease_ttl=TTL, clock=clock)
    first = await keeper.claim(keeper.place(key("a")), key("a"), wait=None)
    await clock.advance(4)
    second = await keeper.claim(keeper.place(key("b")), key("b"), wait=None)
    assert len(clock.pending()) == 1  # one timer for both claims

    await clock.advance(40)  # to 44: a is due at 10, 20, 30, 40; b at 14 (renewed early, with a), ...
    assert store.renewals["a"] == [10.0, 20.0, 30.0, 40.0]
    assert store.renewals["b"] == [10.0, 20.0, 30.0, 40.0]
    assert len(clock.pending()) == 1

    await keeper.release(first)
    await clock.advance(10)
    assert store.renewals["a"] == [10.0, 20.0, 30.0, 40.0]  # given back: no more
    assert store.renewals["b"][-1] == 50.0
    assert (await store.lease(key("b"))) == second.lease  # the renewed lease is the claim's

    await keeper.release(second)
    assert clock.pending() == ()  # nothing held: no timer left
    await keeper.aclose()


async def test_a_claim_due_later_than_a_sixth_of_the_ttl_is_renewed_on_its_own_time(
    store: CountingStore,
) -> None:
    store.clock = clock = VirtualClock()
    keeper = SessionKeeper(store, lease_ttl=TTL, clock=clock)
    first = await keeper.claim(keeper.place(key("a")), key("a"), wait=None)
    await clock.advance(6)
    late = await keeper.claim(keeper.place(key("b")), key("b"), wait=None)  # due at 16, not with a's at 10
    await clock.advance(12)  # to 18
    # At 16, a (due at 20) is renewed with b: a lease is renewed at most a sixth of the ttl early.
    assert store.renewals == {"a": [10.0, 16.0], "b": [16.0]}
    await keeper.release(first)
    await keeper.release(late)
    assert clock.pending() == ()
    await keeper.aclose()


async def test_a_lost_lease_is_not_renewed_again_and_the_others_are(store: CountingStore) -> None:
    store.clock = clock = VirtualClock()
    keeper = SessionKeeper(store, lease_ttl=TTL, clock=clock)
    lost = await keeper.claim(keeper.place(key("a")), key("a"), wait=None)
    kept = await keeper.claim(keeper.place(key("b")), key("b"), wait=None)
    store.lost.add("a")
    await clock.advance(35)
    assert store.renewals == {"a": [10.0], "b": [10.0, 20.0, 30.0]}
    await keeper.release(kept)
    await clock.advance(10)  # the timer armed for b fires, and finds nothing due: the lost lease is not
    assert store.renewals["a"] == [10.0]
    assert clock.pending() == ()
    await keeper.release(lost)
    await keeper.aclose()


async def test_giving_a_session_back_during_its_renewal_cancels_the_renewal(store: CountingStore) -> None:
    store.clock = clock = VirtualClock()
    started = asyncio.Event()
    never = asyncio.Event()

    class Stuck(CountingStore):
        async def renew(self, lease: Lease, ttl: float) -> Lease:
            started.set()
            await never.wait()
            raise AssertionError("never renewed")

    stuck = Stuck()
    keeper = SessionKeeper(stuck, lease_ttl=TTL, clock=clock)
    claim = await keeper.claim(keeper.place(key("a")), key("a"), wait=None)
    await clock.advance(10)
    assert started.is_set()
    renewal = claim.renewal
    assert renewal is not None
    await clock.advance(20)  # due again meanwhile: the renewal under way is the one, no second task
    assert claim.renewal is renewal
    await keeper.release(claim)
    await asyncio.sleep(0)
    assert renewal.cancelled()
    assert clock.pending() == ()
    assert await stuck.lease(key("a")) is None  # released
    await keeper.aclose()
