"""A loop of observables at constant depth: each step is subscribed at the top, never inside the previous."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from reactivex import Observable, abc

from rxagent.operators._source import Sink, Source, subscribe_sink

__all__ = ["StepLoop", "run_steps"]

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
        threads: any, one per subscription.
    """

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        loop = _Steps(observer, scheduler, next_step, recover)
        loop.advance()
        return loop

    return Source(subscribe)


class StepLoop(Sink[_T], abc.DisposableBase):
    """One subscription of a loop of steps (:func:`~rxagent.operators.run_steps`): the observer of every
    step, and the disposable its subscriber holds.

    :func:`run_steps` takes the next step and the recovery as callbacks; a subclass defines them as the
    methods :meth:`next_step` and :meth:`recover`, with the loop's own state in its slots (the agent's
    run loop does). Build one in a subscribe function, call :meth:`advance` to start the first step, and
    return it.

    A class rather than closures that call each other: ``advance`` and ``on_error`` as closures would
    reference themselves through their cells, a cycle that leaves every finished loop (and the whole run
    it references) to the garbage collector. Here the only cycle runs through :attr:`current` (the step's
    subscription holds this loop, its observer) and is cut when the step or the loop ends. The loop is
    the observer of each step in turn (:attr:`stopped` is the current step's), so a step costs its own
    subscription and nothing here.

    Lifecycle: as :func:`~rxagent.operators.run_steps`'s. Use it on one thread at a time, the one its
    steps signal on (the event loop's, for rxagent's sources).
    """

    __slots__ = (
        "_again",
        "_ended",
        "_observer",
        "_recovering",
        "_recovery",
        "_running",
        "_scheduler",
        "current",
        "is_disposed",
    )

    def __init__(self, observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None) -> None:
        super().__init__()
        self._observer = observer
        self._scheduler = scheduler
        self._running = False
        self._again = False
        self._ended = False
        self._recovering = False
        self._recovery: Observable[_T] | None = None
        self.is_disposed = False
        self.current: abc.DisposableBase | None = None
        """The current step's subscription."""

    def next_step(self) -> Observable[_T] | None:
        """The next step, or ``None`` when the loop is done."""
        raise NotImplementedError

    def recover(self, error: Exception) -> Observable[_T] | None:
        """One final step that replaces a failing step (default ``None``: the error stands)."""
        del error
        return None

    def on_next(self, value: _T) -> None:
        if not self.is_disposed:  # a step subscribed directly may outlive a downstream `take`
            self._observer.on_next(value)

    def on_completed(self) -> None:
        self.stopped = True
        self.advance()

    def on_error(self, error: Exception) -> None:
        self.stopped = True
        if self._ended or self.is_disposed:
            return
        if not self._recovering:
            try:
                replacement = self.recover(error)
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
        self._release()
        self._observer.on_error(error)

    def _release(self) -> None:
        """Dispose the current step's subscription (the step has ended) and hold none."""
        current, self.current = self.current, None
        if current is not None:
            current.dispose()

    def dispose(self) -> None:
        """Dispose the current step; no further step starts. Idempotent."""
        if not self.is_disposed:
            self.is_disposed = True
            self._release()

    def advance(self) -> None:
        if self._ended:
            return
        self._again = True
        if self._running:  # a step completed during its own subscription: the loop below picks it up
            return
        self._running = True
        try:
            while self._again and not self.is_disposed:
                self._again = False
                if self._recovering:
                    step, self._recovery = self._recovery, None
                else:
                    try:
                        step = self.next_step()
                    except Exception as error:
                        self.on_error(error)  # a recovery step sets `_again`: the loop goes on with it
                        continue
                self._release()  # the step before has ended
                if step is None:
                    self._ended = True
                    self._observer.on_completed()
                    return
                self.stopped = False
                subscription = subscribe_sink(step, self, self._scheduler)
                if self.is_disposed or self._ended:  # disposed, or failed, while the step subscribed
                    subscription.dispose()
                else:
                    self.current = subscription
        finally:
            self._running = False


class _Steps(StepLoop[_T]):
    """One subscription of :func:`run_steps`: a :class:`StepLoop` whose steps come from its callbacks."""

    __slots__ = ("_next", "_recover")

    def __init__(
        self,
        observer: abc.ObserverBase[_T],
        scheduler: abc.SchedulerBase | None,
        next_step: Callable[[], Observable[_T] | None],
        recover: Callable[[Exception], Observable[_T] | None] | None,
    ) -> None:
        super().__init__(observer, scheduler)
        self._next = next_step
        self._recover = recover

    def next_step(self) -> Observable[_T] | None:
        return self._next()

    def recover(self, error: Exception) -> Observable[_T] | None:
        return None if self._recover is None else self._recover(error)
