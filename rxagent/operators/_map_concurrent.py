"""Map each item to an observable and run at most ``limit`` of them at once, in input order or as they end."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from reactivex import Observable, abc

from rxagent.operators._source import Source, subscribe_to
from rxagent.operators._typing import Operator

__all__ = ["map_concurrent"]

_T = TypeVar("_T")
_R = TypeVar("_R")


def map_concurrent(
    project: Callable[[_T], Observable[_R]], max_concurrent: int, *, ordered: bool = True
) -> Operator[_T, _R]:
    """See the facade (``rxagent.operators.map_concurrent``) for the documentation."""
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")

    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            merge = _Merge(observer, scheduler, project, max_concurrent, ordered)
            merge.listen(source)
            return merge

        return Source(subscribe)

    return operator


class _Merge(abc.DisposableBase, Generic[_T, _R]):
    """One subscription of :func:`map_concurrent`, and its disposable.

    A class, like ``run_steps``' loop, so that a finished subscription holds no reference cycle: the
    inner subscriptions (whose observers are bound methods of this object) are dropped as they end.
    """

    __slots__ = (
        "_active",
        "_again",
        "_buffered",
        "_ended_early",
        "_head",
        "_limit",
        "_observer",
        "_ordered",
        "_project",
        "_pumping",
        "_scheduler",
        "_source",
        "_source_done",
        "_started",
        "_stopped",
        "_waiting",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_R],
        scheduler: abc.SchedulerBase | None,
        project: Callable[[_T], Observable[_R]],
        limit: int,
        ordered: bool,
    ) -> None:
        self._observer = observer
        self._scheduler = scheduler
        self._project = project
        self._limit = limit
        self._ordered = ordered
        self._waiting: deque[_T] = deque()
        """Items that arrived and wait for a free place."""
        self._started = 0
        """Index of the next item to start (items are numbered as they arrive)."""
        self._active: dict[int, abc.DisposableBase | None] = {}
        """Inner subscriptions running, by item index (``None`` while one is being subscribed)."""
        self._head = 0
        """Ordered: the index whose items pass at once; later ones are buffered until it ends."""
        self._buffered: dict[int, list[_R]] = {}
        self._ended_early: set[int] = set()
        """Ordered: inner streams after the head that have ended (their items wait in the buffer)."""
        self._source: abc.DisposableBase | None = None
        self._source_done = False
        self._stopped = False
        self._pumping = False
        self._again = False

    # ---- the source ----------------------------------------------------------------------------------

    def listen(self, source: Observable[_T]) -> None:
        subscription = subscribe_to(source, self.on_next, self.on_error, self.on_completed, self._scheduler)
        if self._stopped or self._source_done:  # it ended during subscribe: nothing more to hold
            subscription.dispose()
        else:
            self._source = subscription

    def on_next(self, item: _T) -> None:
        if self._stopped:
            return
        self._waiting.append(item)
        self._pump()

    def on_error(self, error: Exception) -> None:
        self._fail(error)

    def on_completed(self) -> None:
        if self._stopped:
            return
        self._source_done = True
        source, self._source = self._source, None
        if source is not None:
            source.dispose()
        self._pump()

    # ---- starting and ending inner streams --------------------------------------------------------------

    def _pump(self) -> None:
        # Inner streams that end during their own subscription call back in here: the loop below picks
        # their places up instead of recursing (constant stack depth over any number of items).
        if self._pumping:
            self._again = True
            return
        self._pumping = True
        try:
            self._again = True
            while self._again and not self._stopped:
                self._again = False
                while self._waiting and not self._stopped and self._has_room():
                    index = self._started
                    self._started += 1
                    self._start(index, self._waiting.popleft())
        finally:
            self._pumping = False
        if (
            not self._stopped
            and self._source_done
            and not self._waiting
            and not self._active
            and (not self._ordered or self._head == self._started)
        ):
            self._stopped = True
            self._observer.on_completed()

    def _has_room(self) -> bool:
        if len(self._active) >= self._limit:
            return False
        # Ordered: finished items wait for the head, so the buffer holds fewer than `limit` streams.
        return not self._ordered or self._started < self._head + self._limit

    def _start(self, index: int, item: _T) -> None:
        try:
            inner = self._project(item)
        except Exception as error:  # the projection's failure is the stream's failure
            self._fail(error)
            return
        self._active[index] = None
        subscription = subscribe_to(
            inner,
            lambda value: self._inner_next(index, value),
            self._fail,
            lambda: self._inner_completed(index),
            self._scheduler,
        )
        if index in self._active and not self._stopped:
            self._active[index] = subscription
        else:  # it ended (or everything stopped) during subscribe
            subscription.dispose()

    def _inner_next(self, index: int, value: _R) -> None:
        if self._stopped:
            return
        if not self._ordered or index == self._head:
            self._observer.on_next(value)
        else:
            self._buffered.setdefault(index, []).append(value)

    def _inner_completed(self, index: int) -> None:
        subscription = self._active.pop(index, None)
        if subscription is not None:
            subscription.dispose()
        if self._stopped:
            return
        if self._ordered:
            if index != self._head:
                self._ended_early.add(index)
                return  # no room opens: the window only moves when the head ends
            self._head += 1
            self._flush()
        self._pump()

    def _flush(self) -> None:
        """Ordered: pass on the buffered items of the new head, and of every stream after it that ended."""
        while not self._stopped:
            for value in self._buffered.pop(self._head, ()):
                if self._stopped:
                    return
                self._observer.on_next(value)
            if self._head not in self._ended_early:
                return
            self._ended_early.discard(self._head)
            self._head += 1

    # ---- stopping ---------------------------------------------------------------------------------------

    def _fail(self, error: Exception) -> None:
        if self._stopped:
            return
        self._release()
        self._observer.on_error(error)

    def _release(self) -> None:
        self._stopped = True
        self._waiting.clear()
        self._buffered.clear()
        source, self._source = self._source, None
        active = [s for s in self._active.values() if s is not None]
        self._active.clear()
        if source is not None:
            source.dispose()
        for subscription in active:
            subscription.dispose()

    def dispose(self) -> None:
        """Cancel every inner stream running and the source; nothing more is emitted."""
        self._release()
