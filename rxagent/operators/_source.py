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

from collections.abc import Callable
from typing import Any, TypeAlias, TypeVar

from reactivex import Observable, abc
from reactivex.disposable import Disposable

__all__ = ["Source", "deferred", "subscribe_to"]

_T = TypeVar("_T")

Subscribe: TypeAlias = Callable[[abc.ObserverBase[_T], abc.SchedulerBase | None], abc.DisposableBase]
"""A subscribe function, as ``Observable(subscribe)`` takes it."""


class Source(Observable[_T]):
    """An observable made by rxagent whose subscribe function keeps the promises of this module."""

    def __init__(self, subscribe: Subscribe[_T]) -> None:
        super().__init__(subscribe)
        self.direct = subscribe
        """The subscribe function, for :func:`subscribe_to`."""


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
            return Disposable()
    return source.subscribe(on_next, on_error, on_completed, scheduler=scheduler)


def deferred(factory: Callable[[], Observable[_T]]) -> Source[_T]:
    """``reactivex.defer`` as a :class:`Source`: ``factory()`` per subscription, subscribed directly.

    For per-subscription state on rxagent's hot paths (a tool batch's plan, say); ``factory`` raising is
    an error signal.
    """

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return subscribe_to(factory(), observer.on_next, observer.on_error, observer.on_completed, scheduler)

    return Source(subscribe)
