"""Direct subscription between rxagent's own observables, without reactivex's per-subscribe machinery.

``Observable.subscribe`` wraps every observer in an ``AutoDetachObserver`` (with its own disposables and
locks), checks the current-thread trampoline (and sets one up when none is running, as it never is in
an asyncio callback), and wraps the result once more: about 6 µs nested and 14 µs at the top, a dozen
times per agent step. rxagent's operators subscribe to one another constantly (each step of the loop,
each tool call, each model call), and their subscribe functions already do what that wrapping is for.

A :class:`Source` is an ordinary ``Observable`` to everyone else. Its subscribe function promises that
it sends nothing after a terminal signal or after being disposed, and that it reports failures as
``on_error``. :func:`subscribe_to` calls such a function directly; for any other observable it is plain
``subscribe``. The caller of :func:`subscribe_to` promises in turn to dispose what it got back once the
source has ended (what ``AutoDetachObserver`` would have done): ``frame`` and ``run_steps`` do, through
their :class:`~rxagent.operators._slot.Slot`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from reactivex import Observable, abc

from rxagent.operators._slot import NO_SUBSCRIPTION

__all__ = ["Relay", "Sink", "Source", "deferred", "subscribe_sink", "subscribe_through", "subscribe_to"]

_T = TypeVar("_T")

Subscribe: TypeAlias = Callable[[abc.ObserverBase[_T], abc.SchedulerBase | None], abc.DisposableBase]
"""A subscribe function, as ``Observable(subscribe)`` takes it."""


class Source(Observable[_T]):
    """An observable made by rxagent whose subscribe function keeps the promises of this module."""

    def __init__(self, subscribe: Subscribe[_T]) -> None:
        # Not Observable.__init__: it makes an RLock per observable (and rxagent makes several per agent
        # step); the few reactivex operators that lock their source (take_while, delay, …) get one from
        # `lock` when they first ask.
        self._subscribe = subscribe
        self._lock: threading.RLock | None = None
        self.direct = subscribe
        """The subscribe function, for :func:`subscribe_to`."""

    @property
    def lock(self) -> threading.RLock:  # pyright: ignore[reportIncompatibleVariableOverride]
        """The observable's lock, for reactivex operators that synchronise on their source; made on first
        use (once, whichever thread asks first)."""
        lock = self._lock
        if lock is None:
            with _MAKING_LOCKS:
                lock = self._lock
                if lock is None:
                    lock = self._lock = threading.RLock()
        return lock


_MAKING_LOCKS = threading.Lock()
"""Makes a :class:`Source`'s lock once when two threads ask for it at the same moment."""


class _Callbacks(abc.ObserverBase[_T]):
    """Three callbacks as an observer, with nothing in between."""

    # `on_next` is a slot holding the callback itself, not a method calling it: an item costs one call
    # per link of a chain of rxagent's operators, not two.
    __slots__ = ("_on_completed", "_on_error", "on_next", "stopped")

    def __init__(
        self,
        on_next: Callable[[_T], None],
        on_error: Callable[[Exception], None],
        on_completed: Callable[[], None],
    ) -> None:
        self.on_next = on_next  # pyright: ignore[reportAttributeAccessIssue]  # the slot shadows the method
        self._on_error = on_error
        self._on_completed = on_completed
        self.stopped = False
        """A terminal signal has been delivered."""

    def on_error(self, error: Exception) -> None:
        self.stopped = True
        self._on_error(error)

    def on_completed(self) -> None:
        self.stopped = True
        self._on_completed()


def subscribe_to(
    source: Observable[_T],
    on_next: Callable[[_T], None],
    on_error: Callable[[Exception], None],
    on_completed: Callable[[], None],
    scheduler: abc.SchedulerBase | None = None,
) -> abc.DisposableBase:
    """Subscribe to ``source``: directly when it is a :class:`Source`, else through ``subscribe``.

    Dispose the result once the source has ended. A direct subscribe function that raises is reported as
    ``on_error``, as ``subscribe`` would; after a terminal signal there is no one to report it to, so it
    propagates (a consumer's own failure in ``on_completed``, say), as with ``subscribe``.
    """
    if isinstance(source, Source):
        direct: Any = source.direct  # Source[_T]; the isinstance check cannot carry the type argument
        observer = _Callbacks(on_next, on_error, on_completed)
        try:
            return direct(observer, scheduler)
        except Exception as error:
            if observer.stopped:
                raise
            observer.on_error(error)
            return NO_SUBSCRIPTION
    return source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)


class Sink(abc.ObserverBase[_T]):
    """One subscription of an operator as one object: the observer of its source (see the module).

    A subclass sets :attr:`stopped` once its source has sent a terminal signal, and ignores whatever
    comes after it or after its own dispose. Subclasses declare ``__slots__`` too: an instance is then one
    object with no ``__dict__``.
    """

    __slots__ = ("stopped",)

    def __init__(self) -> None:
        self.stopped = False
        """The source has sent its terminal signal (what :func:`subscribe_sink` asks of a failing
        subscribe)."""


def subscribe_sink(
    source: Observable[_T], sink: Sink[_T], scheduler: abc.SchedulerBase | None = None
) -> abc.DisposableBase:
    """Subscribe ``sink`` to ``source``: as the observer itself when it is a :class:`Source`, else through
    ``subscribe``.

    The promises are :func:`subscribe_to`'s: dispose the result once the source has ended; a direct
    subscribe function that raises is the sink's ``on_error``, unless the sink had stopped already (then it
    is its consumer's own failure, and propagates).
    """
    if isinstance(source, Source):
        direct: Any = source.direct  # Source[_T]; the isinstance check cannot carry the type argument
        try:
            return direct(sink, scheduler)
        except Exception as error:
            if sink.stopped:
                raise
            sink.on_error(error)
            return NO_SUBSCRIPTION
    return source.subscribe(sink, scheduler=scheduler)


def subscribe_through(
    source: Observable[_T], observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
) -> abc.DisposableBase:
    """Subscribe the subscriber's own ``observer`` to ``source``, from inside a subscribe function that adds
    no link of its own (a deferred stream, a context set while subscribing): no object in between.

    What a direct subscribe function raises propagates to the caller of the subscribe function this is
    called from, who reports it (see :func:`subscribe_to`).
    """
    if isinstance(source, Source):
        direct: Any = source.direct  # Source[_T]; the isinstance check cannot carry the type argument
        subscription: abc.DisposableBase = direct(observer, scheduler)
        return subscription
    return source.subscribe(observer, scheduler=scheduler)


class Relay(Sink[_T], abc.DisposableBase):
    """A :class:`Sink` that passes its source's signals to one observer: subclasses change :meth:`on_next`.

    Use :meth:`attach` inside a subscribe function: ``Source(lambda observer, scheduler:
    Stamp(observer).attach(events, scheduler))``. Nothing passes after a terminal signal or a dispose.
    """

    __slots__ = ("_observer", "is_disposed", "upstream")

    def __init__(self, observer: abc.ObserverBase[_T]) -> None:
        super().__init__()
        self._observer = observer
        self.is_disposed = False
        self.upstream: abc.DisposableBase | None = None
        """The source's subscription."""

    def attach(self, source: Observable[_T], scheduler: abc.SchedulerBase | None) -> Relay[_T]:
        """Subscribe to ``source``; returns this relay, the subscriber's disposable."""
        upstream = subscribe_sink(source, self, scheduler)
        if self.stopped or self.is_disposed:  # it ended (or was let go of) while it subscribed
            upstream.dispose()
        else:
            self.upstream = upstream
        return self

    def on_next(self, value: _T) -> None:
        if not (self.stopped or self.is_disposed):
            self._observer.on_next(value)

    def on_error(self, error: Exception) -> None:
        if not (self.stopped or self.is_disposed):
            self.stopped = True
            self._let_go()
            self._observer.on_error(error)

    def on_completed(self) -> None:
        if not (self.stopped or self.is_disposed):
            self.stopped = True
            self._let_go()
            self._observer.on_completed()

    def _let_go(self) -> None:
        upstream, self.upstream = self.upstream, None
        if upstream is not None:
            upstream.dispose()

    def dispose(self) -> None:
        """Dispose the source's subscription; idempotent."""
        if not self.is_disposed:
            self.is_disposed = True
            self._let_go()


def deferred(factory: Callable[[], Observable[_T]]) -> Source[_T]:
    """``reactivex.defer`` as a :class:`Source`: ``factory()`` per subscription, subscribed directly.

    For per-subscription state on rxagent's hot paths (a tool batch's plan, say); ``factory`` raising is
    an error signal. The stream ``factory()`` makes is subscribed with the subscriber's own observer: a
    deferred stream adds no link of its own.
    """

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return subscribe_through(factory(), observer, scheduler)

    return Source(subscribe)
