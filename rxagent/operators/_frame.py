"""One subscription that frames a stream: events before it, a mapping of each item, events after it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from reactivex import Observable, abc

from rxagent.operators._slot import Slot
from rxagent.operators._source import Source, subscribe_to
from rxagent.operators._typing import Operator

__all__ = ["frame", "frame_pushing"]

_T = TypeVar("_T")
_R = TypeVar("_R")


Push = Callable[[_T, Callable[[_R], None]], None]
"""``push(item, emit)``: calls ``emit`` with each result of ``item`` (none, one or several)."""


def frame(
    each: Callable[[_T], Iterable[_R]],
    *,
    before: Callable[[], Iterable[_R]] | None = None,
    after: Callable[[], Iterable[_R]] | None = None,
    recover: Callable[[Exception], Observable[_R] | None] | None = None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None = None,
) -> Operator[_T, _R]:
    """Frame a stream in one subscription (see the facade for the full contract)."""
    return _frame(each, None, before, after, recover, until, inject)


def frame_pushing(
    push: Push[_T, _R],
    *,
    before: Callable[[], Iterable[_R]] | None = None,
    after: Callable[[], Iterable[_R]] | None = None,
    recover: Callable[[Exception], Observable[_R] | None] | None = None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None = None,
) -> Operator[_T, _R]:
    """Frame a stream, the mapper emitting its results itself (see the facade for the full contract)."""
    return _frame(None, push, before, after, recover, until, inject)


def _frame(
    each: Callable[[_T], Iterable[_R]] | None,
    push: Push[_T, _R] | None,
    before: Callable[[], Iterable[_R]] | None,
    after: Callable[[], Iterable[_R]] | None,
    recover: Callable[[Exception], Observable[_R] | None] | None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None,
) -> Operator[_T, _R]:
    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            ended = False

            def emit(values: Iterable[_R]) -> None:
                for value in values:
                    observer.on_next(value)

            # `slot.is_disposed`: a source subscribed directly may still be emitting synchronously when
            # a downstream `take` disposes this subscription; nothing passes after that.
            if push is not None:
                pushing = push
                forward = observer.on_next  # bound once: `push` gets it with every item

                def on_next(item: _T) -> None:
                    if ended or slot.is_disposed:
                        return
                    try:
                        pushing(item, forward)
                    except Exception as error:  # the mapper's failure is the stream's failure
                        on_error(error)

            elif each is not None:
                mapping = each

                def on_next(item: _T) -> None:
                    if ended or slot.is_disposed:
                        return
                    try:
                        produced = mapping(item)
                    except Exception as error:  # the mapper's failure is the stream's failure
                        on_error(error)
                        return
                    for value in produced:
                        observer.on_next(value)

            else:
                raise TypeError("frame needs `each` or `push`")

            def on_completed() -> None:
                nonlocal ended
                if ended or slot.is_disposed:
                    return
                ended = True
                slot.release()
                try:
                    if after is not None:
                        emit(after())
                except Exception as error:
                    observer.on_error(error)
                    return
                observer.on_completed()

            def on_error(error: Exception) -> None:
                nonlocal ended
                if ended or slot.is_disposed:
                    return
                ended = True
                replacement = None
                if recover is not None:
                    try:
                        replacement = recover(error)
                    except Exception as failure:
                        error = failure
                slot.release()
                if replacement is None:
                    observer.on_error(error)
                    return
                slot.current = subscribe_to(
                    replacement, observer.on_next, observer.on_error, observer.on_completed, scheduler
                )

            stop: Callable[[], None] | None = None
            unhook: Callable[[], None] | None = None

            def release() -> None:
                if stop is not None:
                    stop()
                if unhook is not None:
                    unhook()

            slot = Slot(release)
            try:
                if before is not None:
                    emit(before())
            except Exception as error:
                observer.on_error(error)
                return slot
            if until is not None:
                stop = until(on_completed)
            if inject is not None:
                unhook = inject(on_next)
            if not ended:
                upstream = subscribe_to(source, on_next, on_error, on_completed, scheduler)
                if ended:  # it ended during subscribe: a recovery stream may hold the slot now
                    upstream.dispose()
                else:
                    slot.current = upstream
            return slot

        return Source(subscribe)

    return operator
