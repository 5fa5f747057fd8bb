"""How the keeper makes its store calls: at once when the store answers at once, else in a task of their
own that a cancel of the run does not stop.

Bad inputs tried: a store whose calls wait twice before they answer, one that fails after a wait, a
cancel of the run while the store's call waits (the lease it grants is released, the ticket dropped).
"""

from __future__ import annotations

import asyncio

import pytest

from rxagent.session import DelegatingStore, Lease, MemoryStore, SessionKeeper, Waiting
from rxagent.state import SessionKey
from tests.task_census import counting_tasks

KEY: SessionKey = ("ada", "s1")


class Slow(DelegatingStore):
    """A memory store whose enqueue and release wait for ``go`` twice (two loop turns at least), and
    whose enqueue fails after the wait when ``fail`` is set."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.go = asyncio.Event()
        self.fail = False
        self.released = 0

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        await self.go.wait()
        await asyncio.sleep(0)
        if self.fail:
            raise ConnectionError("the store went away")
        return await super().enqueue(key, owner, ttl)

    async def release(self, lease: Lease) -> None:
        await self.go.wait()
        await asyncio.sleep(0)
        self.released += 1
        await super().release(lease)


async def test_a_store_that_answers_at_once_is_called_without_a_task() -> None:
    store = MemoryStore()
    keeper = SessionKeeper(store)
    made = counting_tasks(asyncio.get_running_loop())
    try:
        claim = await keeper.claim(keeper.place(KEY), KEY, wait=None)
        assert await store.lease(KEY) == claim.lease
        await keeper.release(claim)
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert made == []
    assert await store.lease(KEY) is None
    await keeper.aclose()


async def test_a_store_that_waits_is_called_in_a_task_and_answers_through_it() -> None:
    store = Slow()
    keeper = SessionKeeper(store)
    made = counting_tasks(asyncio.get_running_loop())
    try:
        claiming = asyncio.ensure_future(keeper.claim(keeper.place(KEY), KEY, wait=None))
        await asyncio.sleep(0)
        assert not claiming.done()
        store.go.set()
        claim = await claiming
        assert await store.lease(KEY) == claim.lease
        await keeper.release(claim)
    finally:
        asyncio.get_running_loop().set_task_factory(None)
    assert made.count("Resumed") == 2  # the enqueue and the release
    assert store.released == 1
    assert await store.lease(KEY) is None
    await keeper.aclose()


async def test_a_store_call_that_fails_after_a_wait_raises_to_the_run() -> None:
    store = Slow()
    store.fail = True
    store.go.set()
    keeper = SessionKeeper(store)
    with pytest.raises(ConnectionError, match="went away"):
        await keeper.claim(keeper.place(KEY), KEY, wait=None)
    assert not keeper.in_use(KEY)
    await keeper.aclose()


async def test_a_cancel_while_the_store_grants_the_lease_releases_it() -> None:
    store = Slow()
    keeper = SessionKeeper(store)
    claiming = asyncio.ensure_future(keeper.claim(keeper.place(KEY), KEY, wait=None))
    await asyncio.sleep(0)
    claiming.cancel()
    with pytest.raises(asyncio.CancelledError):
        await claiming
    store.go.set()  # the enqueue goes on, grants the lease, which is then released in the background
    await keeper.aclose()
    assert store.released == 1
    assert await store.lease(KEY) is None
    assert not keeper.in_use(KEY)
