"""One subscription that frames a stream: events before it, a mapping of each item, events after it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, TypeVar

from reactivex import Observable, abc

from rxagent.operators._source import Sink, Source, subscribe_sink, subscribe_to
from rxagent.operators._typing import Operator

__all__ = ["frame"]

_T = TypeVar("_T")
_R = TypeVar("_R")


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

    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            framed = _Framed(observer, scheduler, each, after, recover)
            try:
                if before is not None:
                    for value in before():
                        observer.on_next(value)
            except Exception as error:
                observer.on_error(error)
                return framed
            if until is not None:
                framed.stop = until(framed.on_completed)
            if inject is not None:
                framed.unhook = inject(framed.on_next)
            if not framed.stopped:
                upstream = subscribe_sink(source, framed, scheduler)
                if framed.stopped or framed.is_disposed:
                    # It ended (or was disposed) during subscribe: its subscription goes; a recovery
                    # stream, if one took over, holds `upstream` now.
                    upstream.dispose()
                else:
                    framed.upstream = upstream
            return framed

        return Source(subscribe)

    return operator


class _Framed(Sink[_T], abc.DisposableBase, Generic[_T, _R]):
    """One subscription of :func:`frame`: the observer of its source and the disposable its subscriber holds.

    One object with slots, not closures: closures over a subscription's state cost a function, a tuple
    and a cell per variable, each tracked by the garbage collector, and every step of every run in flight
    holds a frame (see ``_source.py``). ``until`` and ``inject`` get bound methods, made once.
    """

    __slots__ = (
        "_after",
        "_each",
        "_observer",
        "_recover",
        "_scheduler",
        "is_disposed",
        "stop",
        "unhook",
        "upstream",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_R],
        scheduler: abc.SchedulerBase | None,
        each: Callable[[_T], Iterable[_R]],
        after: Callable[[], Iterable[_R]] | None,
        recover: Callable[[Exception], Observable[_R] | None] | None,
    ) -> None:
        super().__init__()
        self._observer = observer
        self._scheduler = scheduler
        self._each = each
        self._after = after
        self._recover = recover
        self.is_disposed = False
        self.upstream: abc.DisposableBase | None = None
        """The source's subscription, or the recovery stream's once one took over."""
        self.stop: Callable[[], None] | None = None
        """Unregisters the ``until`` hook."""
        self.unhook: Callable[[], None] | None = None
        """Unregisters the ``inject`` hook."""

    # `is_disposed`: a source subscribed directly may still be emitting synchronously when a downstream
    # `take` disposes this subscription; nothing passes after that.
    def on_next(self, value: _T) -> None:
        if self.stopped or self.is_disposed:
            return
        try:
            produced = self._each(value)
        except Exception as error:  # the mapper's failure is the stream's failure
            self.on_error(error)
            return
        observer = self._observer
        for result in produced:
            observer.on_next(result)

    def on_completed(self) -> None:
        if self.stopped or self.is_disposed:
            return
        self.stopped = True
        self._let_go()
        after = self._after
        try:
            if after is not None:
                for value in after():
                    self._observer.on_next(value)
        except Exception as error:
            self._observer.on_error(error)
            return
        self._observer.on_completed()

    def on_error(self, error: Exception) -> None:
        if self.stopped or self.is_disposed:
            return
        self.stopped = True
        replacement = None
        recover = self._recover
        if recover is not None:
            try:
                replacement = recover(error)
            except Exception as failure:
                error = failure
        self._let_go()
        observer = self._observer
        if replacement is None:
            observer.on_error(error)
            return
        # Rare (a recovery): the replacement talks to the subscriber directly, through callbacks.
        upstream = subscribe_to(
            replacement, observer.on_next, observer.on_error, observer.on_completed, self._scheduler
        )
        if self.is_disposed:
            upstream.dispose()
        else:
            self.upstream = upstream

    def _let_go(self) -> None:
        """The source has ended: dispose its subscription and the hooks (nothing is heard from them now)."""
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.dispose()
        self._unhook()

    def _unhook(self) -> None:
        stop, unhook, self.stop, self.unhook = self.stop, self.unhook, None, None
        if stop is not None:
            stop()
        if unhook is not None:
            unhook()

    def dispose(self) -> None:
        """Dispose the source's (or the recovery stream's) subscription and the hooks; idempotent."""
        if self.is_disposed:
            return
        self.is_disposed = True
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.dispose()
        self._unhook()
