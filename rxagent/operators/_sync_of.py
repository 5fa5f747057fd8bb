"""Emit fixed items synchronously on subscribe: ``reactivex.of`` without the scheduler round trip."""

from __future__ import annotations

from typing import TypeVar

from reactivex import Observable, abc

from rxagent.operators._slot import NO_SUBSCRIPTION
from rxagent.operators._source import Source

__all__ = ["sync_of"]

_T = TypeVar("_T")


def sync_of(*items: _T) -> Observable[_T]:
    """Emit ``items`` then complete, synchronously within ``subscribe`` (see the facade)."""

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        for item in items:
            observer.on_next(item)
        observer.on_completed()
        return NO_SUBSCRIPTION

    return Source(subscribe)
