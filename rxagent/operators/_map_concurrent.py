"""Map each item to an observable and run at most ``limit`` of them at once, in input order or as they end."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Generic, TypeVar

from reactivex import Observable, abc

from rxagent.operators._progress import ProgressOption, Tally, progress_factory
from rxagent.operators._source import Source, subscribe_to
from rxagent.operators._typing import Operator

__all__ = ["map_concurrent"]

_T = TypeVar("_T")
_R = TypeVar("_R")


def map_concurrent(
    project: Callable[[_T], Observable[_R]],
    max_concurrent: int,
    *,
    ordered: bool = True,
    progress: ProgressOption = False,
    is_failure: Callable[[_R], bool] | None = None,
    unit: str = "it",
) -> Operator[_T, _R]:
    """See the facade (``rxagent.operators.map_concurrent``) for the documentation."""
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")
    make_display = progress_factory(progress, unit=unit)

    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            tally = Tally(make_display()) if make_display is not None else None
            merge = _Merge(observer, scheduler, project, max_concurrent, ordered, tally, is_failure)
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
        "_failing",
        "_head",
        "_is_failure",
        "_limit",
        "_observer",
        "_ordered",
        "_project",
        "_pumping",
        "_scheduler",
        "_showing",
        "_source",
        "_source_done",
        "_started",
        "_stopped",
        "_tally",
        "_waiting",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_R],
        scheduler: abc.SchedulerBase | None,
        project: Callable[[_T], Observable[_R]],
        limit: int,
        ordered: bool,
        tally: Tally | None = None,
        is_failure: Callable[[_R], bool] | None = None,
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
        self._tally = tally
        """Progress counts, when asked for (``None``: the paths below skip every count)."""
        self._is_failure = is_failure
        self._failing: set[int] = set()
        self._showing: asyncio.Handle | None = None
        """The progress display's first drawing, scheduled for the next loop turn."""
        """Inner streams that emitted an item ``is_failure`` flags (they count as failed when they end)."""

    # ---- the source ----------------------------------------------------------------------------------

    def listen(self, source: Observable[_T]) -> None:
        subscription = subscribe_to(source, self.on_next, self.on_error, self.on_completed, self._scheduler)
        if self._stopped or self._source_done:  # it ended during subscribe: nothing more to hold
            subscription.dispose()
        else:
            self._source = subscription
        if self._tally is not None and not self._stopped:
            # Drawn from the next loop turn: a source that emits at subscription (a list, through the
            # trampoline after this returns) has given the bar its length by then.
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop (a synchronous pipeline): draw now
                self._show_progress()
            else:
                self._showing = loop.call_soon(self._show_progress)

    def _show_progress(self) -> None:
        self._showing = None
        tally = self._tally
        if tally is not None and not self._stopped:
            tally.show()
            self._check(tally)

    def on_next(self, item: _T) -> None:
        if self._stopped:
            return
        self._waiting.append(item)
        tally = self._tally
        if tally is not None:
            tally.arrived()
            if self._check(tally):
                return
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
        tally = self._tally
        if tally is not None:
            tally.inputs_completed()
            if self._check(tally):
                return
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
            tally = self._tally
            if tally is not None:
                self._cancel_showing()
                tally.close()
                if tally.failure is not None:
                    self._observer.on_error(tally.failure)
                    return
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
        tally = self._tally
        if tally is not None:
            tally.started()
            if self._check(tally):
                return
        subscription = subscribe_to(
            inner,
            lambda value: self._inner_next(index, value),
            lambda error: self._inner_error(index, error),
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
        if self._is_failure is not None and self._tally is not None:
            try:
                if self._is_failure(value):
                    self._failing.add(index)
            except Exception as error:  # the predicate's failure is the stream's failure
                self._fail(error)
                return
        if not self._ordered or index == self._head:
            self._observer.on_next(value)
        else:
            self._buffered.setdefault(index, []).append(value)

    def _inner_error(self, index: int, error: Exception) -> None:
        tally = self._tally
        if tally is not None and not self._stopped and index in self._active:
            del self._active[index]  # so that the failure's release does not count it as cancelled
            tally.ended(failed=True)
        self._fail(error)

    def _inner_completed(self, index: int) -> None:
        subscription = self._active.pop(index, None)
        if subscription is not None:
            subscription.dispose()
        if self._stopped:
            return
        tally = self._tally
        if tally is not None:
            failed = index in self._failing
            self._failing.discard(index)
            tally.ended(failed)
            if self._check(tally):
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

    def _check(self, tally: Tally) -> bool:
        """Fail the stream if the progress display broke; ``True`` when it did."""
        if tally.failure is None:
            return False
        self._fail(tally.failure)
        return True

    def _fail(self, error: Exception) -> None:
        if self._stopped:
            return
        self._release()
        self._observer.on_error(error)

    def _release(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self._waiting.clear()
        self._buffered.clear()
        source, self._source = self._source, None
        active = [s for s in self._active.values() if s is not None]
        cut_short = bool(self._active)
        self._active.clear()
        if source is not None:
            source.dispose()
        for subscription in active:
            subscription.dispose()
        if self._tally is not None:
            self._cancel_showing()
            self._tally.close(cancelled=cut_short)

    def _cancel_showing(self) -> None:
        showing, self._showing = self._showing, None
        if showing is not None:
            showing.cancel()

    def dispose(self) -> None:
        """Cancel every inner stream running and the source; nothing more is emitted."""
        self._release()
