"""using_resource: acquire, stream, release exactly once with the outcome."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Generic, Literal, TypeAlias, TypeVar, cast

import reactivex
from reactivex import Observable, abc

from rxagent.operators._from_async_iterable import running_loop, start_task
from rxagent.operators._outcome import Outcome
from rxagent.operators._source import Sink, Source, subscribe_sink

__all__ = ["using_resource"]

_T = TypeVar("_T")
_R = TypeVar("_R")

_log = logging.getLogger("rxagent")

_Phase: TypeAlias = Literal["acquiring", "using", "releasing", "done"]


def using_resource(
    acquire: Callable[[], Awaitable[_R]],
    use: Callable[[_R], Observable[_T]],
    release: Callable[[_R, Outcome], Awaitable[None] | None],
) -> Observable[_T]:
    """Acquire a resource per subscription, stream ``use(resource)``, release it once with the outcome.

    ::

        acquire() ──r──▶ use(r): ─ a ─ b ─|   release(r, completed)  ─▶ ─ a ─ b ─|
                         use(r): ─ a ─ X      release(r, failed(X))  ─▶ ─ a ─ X
                         dispose             release(r, cancelled)   (nothing more emitted)

    ``release`` may be a plain function or return an awaitable (an ``async def``). A subscription moves
    through four phases — acquiring, using, releasing, done — and the phase decides what dispose does,
    which is what makes release happen exactly once whatever the order of terminal signal and dispose.

    Args:
        acquire: called on subscription, inside a task on the running loop; returns the resource.
        use: builds the stream from the resource; if it raises, the resource is released as failed.
        release: told the resource and why the stream ended.

    Returns:
        The stream of ``use(resource)``, whose terminal signal comes after the release has finished.

    Lifecycle:
        complete: ``release(r, completed)`` runs (awaited if async), then ``on_completed``; if release
        fails, its error is emitted instead.
        error: ``release(r, failed(e))`` runs, then ``on_error(e)``; a failing release is attached to
        ``e`` (a note, and ``__context__`` unless ``e`` already has one), never replacing it.
        ``acquire`` failing: ``on_error``, nothing to release.
        cancel: while acquiring, the acquire task is cancelled, and a resource it returns anyway is
        released with ``cancelled``; while using, the inner stream is disposed and
        ``release(r, cancelled)`` runs on the loop's next turn (never inside ``dispose()``, which may be
        called mid-callback), as a strongly referenced task when it is async; its errors are logged as
        warnings on the ``rxagent`` logger. While a completed/failed release is running, it finishes
        and the terminal signal is dropped. Nothing is emitted after dispose.
        re-subscribe: acquires a new resource; nothing is shared between subscriptions.
        threads: the event loop's only.

    Example:
        >>> import asyncio, reactivex
        >>> from rxagent.operators import to_list
        >>> released = []
        >>> async def connect() -> str:
        ...     return "db"
        >>> def close(connection: str, outcome: Outcome) -> None:
        ...     released.append((connection, outcome.kind))
        >>> rows = using_resource(connect, lambda db: reactivex.of(f"{db} row 1", f"{db} row 2"), close)
        >>> asyncio.run(to_list(rows))
        ['db row 1', 'db row 2']
        >>> released
        [('db', 'completed')]
    """

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        using = _Using(observer, scheduler, running_loop("using_resource"), release)
        using.task = start_task(using.loop, using.open(acquire, use), name="rxagent.using_resource.acquire")
        return using

    return Source(subscribe)


class _Using(Sink[_T], abc.DisposableBase, Generic[_T, _R]):
    """One subscription of :func:`using_resource`: the observer of ``use(resource)``, and the disposable its
    subscriber holds (one object with slots, not closures: see ``_source.py``).

    It moves through four phases — acquiring, using, releasing, done — and the phase decides what
    dispose does, which is what makes release happen exactly once whatever the order of terminal signal
    and dispose.
    """

    __slots__ = (
        "_disposed",
        "_inner",
        "_observer",
        "_phase",
        "_release",
        "_resource",
        "_scheduler",
        "loop",
        "task",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_T],
        scheduler: abc.SchedulerBase | None,
        loop: asyncio.AbstractEventLoop,
        release: Callable[[_R, Outcome], Awaitable[None] | None],
    ) -> None:
        super().__init__()
        self._observer = observer
        self._scheduler = scheduler
        self.loop = loop
        self._release = release
        self._phase: _Phase = "acquiring"
        self._disposed = False
        self._resource: _R | None = None
        self._inner: abc.DisposableBase | None = None
        self.task: asyncio.Task[None] | None = None
        """The acquiring task, until it has acquired."""

    async def open(self, acquire: Callable[[], Awaitable[_R]], use: Callable[[_R], Observable[_T]]) -> None:
        """Acquire the resource and subscribe to ``use(resource)`` (the acquiring task's body; ``acquire`` and
        ``use`` are let go of when it returns, not kept for the whole stream)."""
        try:
            resource = await acquire()
        except Exception as error:
            self._phase = "done"
            self.task = None
            if not self._disposed:
                self._observer.on_error(error)
            return
        self.task = None
        if self._disposed:  # acquire outlived its cancellation and returned anyway
            self._phase = "done"
            self._release_cancelled(resource)
            return
        self._resource = resource
        self._phase = "using"
        try:
            stream = use(resource)
        except Exception as error:  # released as failed through the same path as a stream error
            stream = reactivex.throw(error)
        inner = subscribe_sink(stream, self, self._scheduler)
        if self._phase == "using" and not self._disposed:
            self._inner = inner
        else:  # it ended (or was disposed) while it subscribed
            inner.dispose()

    def on_next(self, value: _T) -> None:
        if self._phase == "using":
            self._observer.on_next(value)

    def on_error(self, error: Exception) -> None:
        if self._phase == "using":
            self.stopped = True
            self._release_then_forward(error)

    def on_completed(self) -> None:
        if self._phase == "using":
            self.stopped = True
            self._release_then_forward(None)

    def _release_then_forward(self, error: Exception | None) -> None:
        self._phase = "releasing"
        inner, self._inner = self._inner, None
        if inner is not None:  # the stream has ended: let go of it (a Source is subscribed directly)
            inner.dispose()
        resource, self._resource = self._resource, None
        outcome = Outcome.completed() if error is None else Outcome.failed(error)
        try:
            pending = self._release(cast("_R", resource), outcome)  # held while using
        except Exception as release_error:
            self._forward(error, release_error)
            return
        if pending is None:
            self._forward(error, None)
            return
        start_task(self.loop, self._await_release(pending, error), name="rxagent.using_resource.release")

    async def _await_release(self, pending: Awaitable[None], error: Exception | None) -> None:
        try:
            await pending
        except Exception as release_error:
            self._forward(error, release_error)
        else:
            self._forward(error, None)

    def _forward(self, error: Exception | None, release_error: Exception | None) -> None:
        self._phase = "done"
        observer = self._observer
        if self._disposed:
            if release_error is not None:
                _log.warning("using_resource: release failed after dispose", exc_info=release_error)
        elif error is not None:
            if release_error is not None:
                _attach(error, release_error)
            observer.on_error(error)
        elif release_error is not None:
            observer.on_error(release_error)
        else:
            observer.on_completed()

    def _release_cancelled(self, resource: _R) -> None:
        try:
            pending = self._release(resource, Outcome.cancelled())
        except Exception:
            _log.warning("using_resource: release(%r, cancelled) failed", resource, exc_info=True)
            return
        if pending is not None:
            start_task(self.loop, _await_logged(pending, resource), name="rxagent.using_resource.release")

    def dispose(self) -> None:
        """Cancel the acquire, or dispose the stream and release with ``cancelled``; idempotent."""
        if self._disposed:
            return
        self._disposed = True
        if self._phase == "acquiring":
            if self.task is not None:
                self.task.cancel()
        elif self._phase == "using":
            self._phase = "done"
            inner, self._inner = self._inner, None
            if inner is not None:
                inner.dispose()
            resource, self._resource = self._resource, None
            self.loop.call_soon(self._release_cancelled, cast("_R", resource))
        # "releasing": the completed/failed release is already running and stays the only one.


async def _await_logged(pending: Awaitable[None], resource: object) -> None:
    try:
        await pending
    except Exception:
        _log.warning("using_resource: release(%r, cancelled) failed", resource, exc_info=True)


def _attach(error: Exception, release_error: Exception) -> None:
    """Record on ``error`` that releasing after it failed too, without replacing it."""
    if release_error is error:
        return
    error.add_note(f"releasing the resource after this error failed too: {release_error!r}")
    if error.__context__ is None and not _chains_to(release_error, error):
        error.__context__ = release_error


def _chains_to(error: BaseException, target: BaseException) -> bool:
    """Whether ``target`` is in ``error``'s cause/context chain (linking back would make a cycle)."""
    seen: set[int] = set()
    pending: list[BaseException] = [error]
    while pending:
        current = pending.pop()
        if current is target:
            return True
        if id(current) in seen:
            continue
        seen.add(id(current))
        pending.extend(link for link in (current.__cause__, current.__context__) if link is not None)
    return False
