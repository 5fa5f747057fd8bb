"""Map each item to zero or more items, without an observable per item."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from reactivex import Observable, abc

from rxagent.operators._typing import Operator

__all__ = ["map_many"]

_T = TypeVar("_T")
_R = TypeVar("_R")


def map_many(mapper: Callable[[_T], Iterable[_R]]) -> Operator[_T, _R]:
    """Emit every item of ``mapper(item)`` for each upstream item (see the facade for details)."""

    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            def on_next(item: _T) -> None:
                try:
                    produced = mapper(item)
                except Exception as error:  # the mapper's failure is the stream's failure
                    observer.on_error(error)
                    return
                for value in produced:
                    observer.on_next(value)

            return source.subscribe(on_next, observer.on_error, observer.on_completed, scheduler=scheduler)

        return Observable(subscribe)

    return operator
