"""One subscription at a time per key: the in-process serialisation of runs on the same session."""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Hashable
from typing import TypeVar

from reactivex import Observable

from rxagent.operators._outcome import Outcome
from rxagent.operators._typing import Operator
from rxagent.operators._using_resource import using_resource

__all__ = ["KeyedSerializer"]

_T = TypeVar("_T")


class KeyedSerializer:
    """Lets at most one subscription per key run at once; later ones wait their turn, first come first served.

    Different keys never wait for each other. Locks live only while someone holds or awaits them.

    Example:
        >>> sessions = KeyedSerializer()
        >>> run = some_stream.pipe(sessions.serialize(("user-1", "session-7")))  # doctest: +SKIP
    """

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[Hashable, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock_for(self, key: Hashable) -> asyncio.Lock:
        """The lock of ``key`` (created on first use)."""
        lock = self._locks.get(key)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[key] = lock
        return lock

    def serialize(self, key: Hashable) -> Operator[_T, _T]:
        """An operator that subscribes upstream only once the key's lock is held, and frees it at the end.

        Lifecycle:
            complete/error/cancel: the lock is released (exactly once). Disposed while waiting: the wait
            is cancelled and the queue moves on.
        """

        def operator(source: Observable[_T]) -> Observable[_T]:
            async def acquire() -> asyncio.Lock:
                lock = self.lock_for(key)
                await lock.acquire()
                return lock

            def release(lock: asyncio.Lock, _: Outcome) -> None:
                lock.release()

            return using_resource(acquire, lambda _lock: source, release)

        return operator
