"""A loop of observables at constant depth: each step is subscribed at the top, never inside the previous."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

from reactivex import Observable, abc

from rxagent.operators._slot import Slot
from rxagent.operators._source import Source, subscribe_to

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
        loop = _StepLoop(observer, scheduler, next_step, recover)
        loop.advance()
        return loop.current

    return Source(subscribe)


class _StepLoop(Generic[_T]):
    """One subscription of :func:`run_steps`.

    A class rather than closures that call each other: ``advance`` and ``on_error`` as closures would
    reference themselves through their cells, a cycle that leaves every finished loop (and the whole run
    it references) to the garbage collector. Here the only cycle runs through :attr:`current` (the
    step's subscription holds the bound methods) and is cut when the loop ends.
    """

    __slots__ = (
        "_again",
        "_ended",
        "_next_step",
        "_observer",
        "_recover",
        "_recovering",
        "_recovery",
        "_running",
        "_scheduler",
        "current",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[_T],
        scheduler: abc.SchedulerBase | None,
        next_step: Callable[[], Observable[_T] | None],
        recover: Callable[[Exception], Observable[_T] | None] | None,
    ) -> None:
        self._observer = observer
        self._scheduler = scheduler
        self._next_step = next_step
        self._recover = recover
        self._running = False
        self._again = False
        self._ended = False
        self._recovering = False
        self._recovery: Observable[_T] | None = None
        self.current = Slot()

    def on_next(self, item: _T) -> None:
        if not self.current.is_disposed:  # a step subscribed directly may outlive a downstream `take`
            self._observer.on_next(item)

    def on_error(self, error: Exception) -> None:
        if self._ended or self.current.is_disposed:
            return
        recover = self._recover
        if recover is not None and not self._recovering:
            try:
                replacement = recover(error)
            except Exception as failure:
                self._fail(failure)
                return
            if replacement is not None:
                self._recovering, self._recovery = True, replacement
                self.advance()
                return
        self._fail(error)

    def _fail(self, error: Exception) -> None:
        self._ended = True
        self.current.release()
        self._observer.on_error(error)

    def advance(self) -> None:
        if self._ended:
            return
        self._again = True
        if self._running:  # a step completed during its own subscription: the loop below picks it up
            return
        self._running = True
        current = self.current
        try:
            while self._again and not current.is_disposed:
                self._again = False
                if self._recovering:
                    step, self._recovery = self._recovery, None
                else:
                    try:
                        step = self._next_step()
                    except Exception as error:
                        self.on_error(error)  # a recovery step sets `_again`: the loop goes on with it
                        continue
                current.release()  # the step before has ended
                if step is None:
                    self._ended = True
                    self._observer.on_completed()
                    return
                current.current = subscribe_to(
                    step, self.on_next, self.on_error, self.advance, self._scheduler
                )
        finally:
            self._running = False
