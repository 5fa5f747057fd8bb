"""A loop of observables at constant depth: each step is subscribed at the top, never inside the previous."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc
from reactivex.disposable import SerialDisposable, SingleAssignmentDisposable

__all__ = ["run_steps"]

_T = TypeVar("_T")


def run_steps(
    next_step: Callable[[], Observable[_T] | None],
    recover: Callable[[Exception], Observable[_T] | None] | None = None,
) -> Observable[_T]:
    """Emit the items of ``next_step()``, then of the next ``next_step()``, … until it returns ``None``.

    Unlike ``concat(step, defer(rest))`` recursion, whose observers nest one level per step (so an item
    of step 300 travels through 300 observers, and a long loop dies of ``RecursionError``), every step is
    subscribed by this one operator: delivery depth and stack depth stay constant however many steps
    run. Steps that complete synchronously are trampolined.

    ``recover(error)`` may turn a failing step into one final step (``None``: the error stands).

    Lifecycle:
        complete: when ``next_step()`` returns ``None`` (or the recovery step completes).
        error: a step's error (unless recovered), or ``next_step`` raising, ends the stream.
        cancel: disposes the current step; no further step is started.
        re-subscribe: calls ``next_step`` afresh (make it per-subscription to stay cold).
    """

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        current = SerialDisposable()
        running = False
        again = False
        recovering = False
        recovery: Observable[_T] | None = None

        def on_error(error: Exception) -> None:
            nonlocal recovering, recovery
            if recover is not None and not recovering:
                try:
                    replacement = recover(error)
                except Exception as failure:
                    observer.on_error(failure)
                    return
                if replacement is not None:
                    recovering, recovery = True, replacement
                    advance()
                    return
            observer.on_error(error)

        def advance() -> None:
            nonlocal running, again, recovery
            again = True
            if running:  # a step completed during its own subscription: the loop below picks it up
                return
            running = True
            try:
                while again and not current.is_disposed:
                    again = False
                    if recovering:
                        step, recovery = recovery, None
                    else:
                        try:
                            step = next_step()
                        except Exception as error:
                            on_error(error)
                            return
                    if step is None:
                        observer.on_completed()
                        return
                    holder = SingleAssignmentDisposable()
                    current.disposable = holder
                    holder.disposable = step.subscribe(
                        observer.on_next, on_error, advance, scheduler=scheduler
                    )
            finally:
                running = False

        advance()
        return current

    return Observable(subscribe)
