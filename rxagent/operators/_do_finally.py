"""do_finally: a finally-style operator that says why the stream ended."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import reactivex
from reactivex import Observable, abc
from reactivex import operators as ops

from rxagent.operators._outcome import Outcome
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

    Composed from reactivex's own operators: ``do_action`` records the terminal signal as it passes and
    ``finally_action`` runs ``action`` when the subscription is torn down — which reactivex does right
    after a terminal signal has been delivered downstream, and on dispose. ``defer`` gives each
    subscription its own record. The teardown is disposed once, so ``action`` runs once.

    Args:
        action: told why the stream ended. It runs during teardown, where nobody can receive an
            error, so an exception it raises is logged on the ``rxagent`` logger and swallowed.

    Returns:
        An operator that passes items and signals through unchanged.

    Lifecycle:
        complete/error: ``action(completed)`` / ``action(failed(e))`` after the signal was passed on.
        cancel: ``action(cancelled())`` after upstream is disposed; a dispose after a terminal signal
        does not call it again. re-subscribe: once per subscription, with that subscription's outcome.

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
        def with_outcome(_: abc.SchedulerBase) -> Observable[_T]:
            outcome = Outcome.cancelled()  # until a terminal signal says otherwise

            def on_error(error: Exception) -> None:
                nonlocal outcome
                outcome = Outcome.failed(error)

            def on_completed() -> None:
                nonlocal outcome
                outcome = Outcome.completed()

            def run_action() -> None:
                try:
                    action(outcome)
                except Exception:
                    _log.exception("do_finally: the action failed for outcome %s", outcome.kind)

            return source.pipe(
                ops.do_action(on_error=on_error, on_completed=on_completed),
                ops.finally_action(run_action),
            )

        return reactivex.defer(with_outcome)

    return operator
