"""do_finally: a finally-style operator that says why the stream ended."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc

from rxagent.operators._outcome import Outcome
from rxagent.operators._source import Relay, Source
from rxagent.operators._typing import Operator

__all__ = ["do_finally"]

_T = TypeVar("_T")

_log = logging.getLogger("rxagent")


def do_finally(action: Callable[[Outcome], None]) -> Operator[_T, _T]:
    """Call ``action(outcome)`` exactly once per subscription, after the stream has ended.

    ::

        source:  ─ a ─ b ─|          ─ a ─ X            ─ a ─ (dispose)
        result:  ─ a ─ b ─|          ─ a ─ X            ─ a ─
        action:            completed         failed(X)          cancelled

    Each subscription is one object (a :class:`~rxagent.operators.Relay`) that passes the signals on
    and then runs ``action``: right after a terminal signal has been delivered downstream, or on the
    first dispose before one.

    Args:
        action: told why the stream ended. It runs during teardown, where nobody can receive an
            error, so an exception it raises is logged on the ``rxagent`` logger and swallowed.

    Returns:
        An operator that passes items and signals through unchanged.

    Lifecycle:
        complete/error: ``action(completed)`` / ``action(failed(e))`` after the signal was passed on.
        cancel: ``action(cancelled())`` after upstream is disposed; a dispose after a terminal signal
        does not call it again. re-subscribe: once per subscription, with that subscription's outcome.
        threads: any, one per subscription.

    Example:
        >>> import asyncio, reactivex
        >>> from rxagent.operators import to_list
        >>> why = []
        >>> numbers = reactivex.of(1, 2).pipe(do_finally(lambda outcome: why.append(outcome.kind)))
        >>> asyncio.run(to_list(numbers))
        [1, 2]
        >>> why
        ['completed']
    """

    def operator(source: Observable[_T]) -> Observable[_T]:
        def subscribe(
            observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return _Finally(observer, action).attach(source, scheduler)

        return Source(subscribe)

    return operator


class _Finally(Relay[_T]):
    """One subscription of :func:`do_finally` (one object with slots, not closures: see ``_source.py``)."""

    __slots__ = ("_action",)

    def __init__(self, observer: abc.ObserverBase[_T], action: Callable[[Outcome], None]) -> None:
        super().__init__(observer)
        self._action: Callable[[Outcome], None] | None = action

    def _run(self, outcome: Outcome) -> None:
        action, self._action = self._action, None  # once
        if action is None:
            return
        try:
            action(outcome)
        except Exception:
            _log.exception("do_finally: the action failed for outcome %s", outcome.kind)

    def on_error(self, error: Exception) -> None:
        if self.stopped or self.is_disposed:
            return
        try:
            super().on_error(error)
        finally:
            self._run(Outcome.failed(error))

    def on_completed(self) -> None:
        if self.stopped or self.is_disposed:
            return
        try:
            super().on_completed()
        finally:
            self._run(Outcome.completed())

    def dispose(self) -> None:
        if self.is_disposed:
            return
        super().dispose()
        # After a terminal signal its outcome is the one told: a consumer that disposes as it receives the
        # signal has not cancelled anything.
        if not self.stopped:
            self._run(Outcome.cancelled())
