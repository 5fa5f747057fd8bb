"""One subscription that frames a stream: events before it, a mapping of each item, events after it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Generic, Never, TypeVar

from reactivex import Observable, abc

from rxagent.operators._source import Sink, Source, subscribe_sink, subscribe_to
from rxagent.operators._typing import Operator

__all__ = ["Frame", "Push", "frame", "frame_pushing"]

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
    return _framing(
        lambda observer, scheduler: _Framed(observer, scheduler, each, after, recover), before, until, inject
    )


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
    return _framing(
        lambda observer, scheduler: _Pushing(observer, scheduler, push, after, recover), before, until, inject
    )


def _framing(
    make: Callable[[abc.ObserverBase[_R], abc.SchedulerBase | None], Frame[_T, _R]],
    before: Callable[[], Iterable[_R]] | None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None,
) -> Operator[_T, _R]:
    """The operator whose each subscription is one frame ``make`` builds, attached with the hooks."""

    def operator(source: Observable[_T]) -> Observable[_R]:
        def subscribe(
            observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return make(observer, scheduler).attach(source, before=before, until=until, inject=inject)

        return Source(subscribe)

    return operator


class Frame(Sink[_T], abc.DisposableBase, Generic[_T, _R]):
    """One subscription of a framed stream (:func:`~rxagent.operators.frame`): the observer of its source,
    and the disposable its subscriber holds.

    :func:`frame` takes its mapping as callbacks. A subclass takes it as methods instead — :meth:`each`,
    and :meth:`after` and :meth:`recover` when it needs them — with its own per-subscription state in its
    slots: a stream framed that way costs this one object per subscription (the hot steps of an agent
    run do this). Build one in a subscribe function and return :meth:`attach`'s result::

        Source(lambda observer, scheduler: Counted(observer, scheduler).attach(source))

    The contract is :func:`frame`'s: ``each``'s and ``after``'s failures are the stream's, ``recover`` may
    replace a failing source, nothing passes after a terminal signal or a dispose. Calling the frame
    ends it as its source completing would: it is the callback an ``until`` hook is given.

    Lifecycle: as :func:`frame`'s. Use it on one thread at a time, the one its source signals on (the
    event loop's, for rxagent's sources).
    """

    __slots__ = ("_observer", "_scheduler", "is_disposed", "stop", "unhook", "upstream")

    def __init__(self, observer: abc.ObserverBase[_R], scheduler: abc.SchedulerBase | None) -> None:
        super().__init__()
        self._observer = observer
        self._scheduler = scheduler
        self.is_disposed = False
        self.upstream: abc.DisposableBase | None = None
        """The source's subscription, or the recovery stream's once one took over."""
        self.stop: Callable[[], None] | None = None
        """Unregisters the ``until`` hook."""
        self.unhook: Callable[[], None] | None = None
        """Unregisters the ``inject`` hook."""

    def each(self, value: _T) -> Iterable[_R]:
        """What an item of the source becomes (none, one or several items)."""
        raise NotImplementedError

    def after(self) -> Iterable[_R]:
        """What follows the source's items when it completes (default: nothing)."""
        return ()

    def recover(self, error: Exception) -> Observable[_R] | None:
        """The stream that replaces a failing source (default ``None``: the error stands)."""
        del error
        return None

    def attach(
        self,
        source: Observable[_T],
        *,
        before: Callable[[], Iterable[_R]] | None = None,
        until: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
        inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None = None,
    ) -> Frame[_T, _R]:
        """Emit ``before()``, register the hooks, subscribe to ``source``; returns this frame (the
        subscriber's disposable). ``until``, ``before`` and ``inject`` are :func:`frame`'s."""
        try:
            if before is not None:
                for value in before():
                    self._observer.on_next(value)
        except Exception as error:
            self._observer.on_error(error)
            return self
        if until is not None:
            self.stop = until(self)
        if inject is not None:
            self.unhook = inject(self.on_next)
        if not self.stopped:
            upstream = subscribe_sink(source, self, self._scheduler)
            if self.stopped or self.is_disposed:
                # It ended (or was disposed) during subscribe: its subscription goes; a recovery stream,
                # if one took over, holds `upstream` now.
                upstream.dispose()
            else:
                self.upstream = upstream
        return self

    def __call__(self) -> None:
        """End the stream as if the source had completed (what an ``until`` hook calls)."""
        self.on_completed()

    # `is_disposed`: a source subscribed directly may still be emitting synchronously when a downstream
    # `take` disposes this subscription; nothing passes after that.
    def on_next(self, value: _T) -> None:
        if self.stopped or self.is_disposed:
            return
        try:
            produced = self.each(value)
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
        try:
            for value in self.after():
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
        try:
            replacement = self.recover(error)
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
        if self.stop is not None or self.unhook is not None:
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
        self._let_go()


class _Framed(Frame[_T, _R]):
    """One subscription of :func:`frame`: a :class:`Frame` whose mapping is the callbacks it was given.

    One object with slots, not closures: closures over a subscription's state cost a function, a tuple
    and a cell per variable, each tracked by the garbage collector, and every step of every run in flight
    holds a frame (see ``_source.py``).
    """

    __slots__ = ("_after", "_each", "_recover")

    def __init__(
        self,
        observer: abc.ObserverBase[_R],
        scheduler: abc.SchedulerBase | None,
        each: Callable[[_T], Iterable[_R]],
        after: Callable[[], Iterable[_R]] | None,
        recover: Callable[[Exception], Observable[_R] | None] | None,
    ) -> None:
        super().__init__(observer, scheduler)
        self._each = each
        self._after = after
        self._recover = recover

    def each(self, value: _T) -> Iterable[_R]:
        return self._each(value)

    def after(self) -> Iterable[_R]:
        return () if self._after is None else self._after()

    def recover(self, error: Exception) -> Observable[_R] | None:
        return None if self._recover is None else self._recover(error)

    def on_next(self, value: _T) -> None:
        # Frame.on_next with the callback called directly: one call less per item on per-token paths.
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


class _Pushing(_Framed[_T, _R]):
    """One subscription of :func:`frame_pushing`: the mapping emits its results itself, so an item that
    becomes one event costs no container on the way (a model call's deltas pass here once per token)."""

    __slots__ = ("_push",)

    def __init__(
        self,
        observer: abc.ObserverBase[_R],
        scheduler: abc.SchedulerBase | None,
        push: Push[_T, _R],
        after: Callable[[], Iterable[_R]] | None,
        recover: Callable[[Exception], Observable[_R] | None] | None,
    ) -> None:
        super().__init__(observer, scheduler, _unused_each, after, recover)
        self._push = push

    def each(self, value: _T) -> Iterable[_R]:
        produced: list[_R] = []
        self._push(value, produced.append)
        return produced

    def on_next(self, value: _T) -> None:
        if self.stopped or self.is_disposed:
            return
        try:
            self._push(value, self._observer.on_next)
        except Exception as error:  # the mapper's failure is the stream's failure
            self.on_error(error)


def _unused_each(value: object) -> Iterable[Never]:
    raise AssertionError("frame_pushing maps through its push function")
