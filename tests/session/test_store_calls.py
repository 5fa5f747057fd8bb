"""How the keeper makes its store calls: the memory store's at once, any other store's in a task of their
own from their start, which a cancel of the run does not stop.

Bad inputs tried: a store whose calls wait twice before they answer, one that fails after a wait, a
cancel of the run while the store's call waits (the lease it grants is released, the ticket dropped), and
a store whose calls bind their task (an ``asyncio.timeout``) before they wait, then time out.
"""

from __future__ import annotations

import asyncio
from typing import Any

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
    # the enqueue and the release, each a task from its start (the claim is the test's own)
    assert made == ["SessionKeeper.claim", "Slow.enqueue", "Slow.release"]
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


class Bound(DelegatingStore):
    """A memory store whose enqueue and release enter an ``asyncio.timeout`` (which binds the running task)
    before their first wait, note the task they start and go on in, and, with ``expire`` set, make the
    timeout expire once waiting, as a server that never answers would."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.tasks: list[tuple[asyncio.Task[Any] | None, asyncio.Task[Any] | None]] = []
        self.expire = False

    async def _bound(self) -> None:
        async with asyncio.timeout(None) as deadline:
            started = asyncio.current_task()
            await asyncio.sleep(0)
            self.tasks.append((started, asyncio.current_task()))
            if self.expire:
                deadline.reschedule(asyncio.get_running_loop().time())
                await asyncio.Event().wait()  # the timeout's cancel ends it

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        await self._bound()
        return await super().enqueue(key, owner, ttl)

    async def release(self, lease: Lease) -> None:
        await self._bound()
        await super().release(lease)


async def test_a_store_call_that_binds_its_task_starts_and_goes_on_in_one_task_not_the_runs() -> None:
    store = Bound()
    keeper = SessionKeeper(store)
    claim = await keeper.claim(keeper.place(KEY), KEY, wait=None)
    await keeper.release(claim)
    run = asyncio.current_task()
    assert len(store.tasks) == 2  # the enqueue and the release
    for started, went_on in store.tasks:
        assert started is went_on is not None
        assert started is not run
    assert await store.lease(KEY) is None
    await keeper.aclose()


async def test_a_store_calls_own_timeout_fails_the_claim_and_cancels_nothing_else() -> None:
    store = Bound()
    store.expire = True
    keeper = SessionKeeper(store)
    with pytest.raises(TimeoutError):
        await keeper.claim(keeper.place(KEY), KEY, wait=None)
    assert asyncio.current_task().cancelling() == 0  # pyright: ignore[reportOptionalMemberAccess]
    assert not keeper.in_use(KEY)
    assert await store.lease(KEY) is None
    await keeper.aclose()
