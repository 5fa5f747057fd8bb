"""using_resource: acquire, stream, release exactly once with the outcome."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Literal, TypeAlias, TypeVar

import reactivex
from reactivex import Observable, abc
from reactivex.disposable import Disposable, SingleAssignmentDisposable

from rxagent.operators._from_async_iterable import running_loop, start_task
from rxagent.operators._outcome import Outcome
from rxagent.operators._source import Source, subscribe_to

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
        loop = running_loop("using_resource")
        inner = SingleAssignmentDisposable()
        phase: _Phase = "acquiring"
        disposed = False
        held: list[_R] = []  # the acquired resource, once there is one

        def release_cancelled(resource: _R) -> None:
            try:
                pending = release(resource, Outcome.cancelled())
            except Exception:
                _log.warning("using_resource: release(%r, cancelled) failed", resource, exc_info=True)
                return
            if pending is not None:
                start_task(loop, _await_logged(pending, resource), name="rxagent.using_resource.release")

        def release_then_forward(resource: _R, error: Exception | None) -> None:
            nonlocal phase
            phase = "releasing"
            inner.dispose()  # the stream has ended: let go of it (a Source is subscribed directly)
            outcome = Outcome.completed() if error is None else Outcome.failed(error)
            try:
                pending = release(resource, outcome)
            except Exception as release_error:
                forward(error, release_error)
                return
            if pending is None:
                forward(error, None)
                return

            async def await_release(pending: Awaitable[None]) -> None:
                try:
                    await pending
                except Exception as release_error:
                    forward(error, release_error)
                else:
                    forward(error, None)

            start_task(loop, await_release(pending), name="rxagent.using_resource.release")

        def forward(error: Exception | None, release_error: Exception | None) -> None:
            nonlocal phase
            phase = "done"
            if disposed:
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

        def on_next(item: _T) -> None:
            if phase == "using":
                observer.on_next(item)

        def on_error(error: Exception) -> None:
            if phase == "using":
                release_then_forward(held[0], error)

        def on_completed() -> None:
            if phase == "using":
                release_then_forward(held[0], None)

        async def open_resource() -> None:
            nonlocal phase
            try:
                resource = await acquire()
            except Exception as error:
                phase = "done"
                if not disposed:
                    observer.on_error(error)
                return
            if disposed:  # acquire outlived its cancellation and returned anyway
                phase = "done"
                release_cancelled(resource)
                return
            held.append(resource)
            phase = "using"
            try:
                stream = use(resource)
            except Exception as error:  # released as failed through the same path as a stream error
                stream = reactivex.throw(error)
            inner.disposable = subscribe_to(stream, on_next, on_error, on_completed, scheduler)

        task = start_task(loop, open_resource(), name="rxagent.using_resource.acquire")

        def dispose() -> None:
            nonlocal disposed, phase
            if disposed:
                return
            disposed = True
            if phase == "acquiring":
                task.cancel()
            elif phase == "using":
                phase = "done"
                inner.dispose()
                loop.call_soon(release_cancelled, held[0])
            # "releasing": the completed/failed release is already running and stays the only one.

        return Disposable(dispose)

    return Source(subscribe)


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
