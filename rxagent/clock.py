"""Time you can control: the clock every wait and deadline in rxagent runs on.

Retries and their backoff, the model clients' connect, idle-read and total timeouts, tool timeouts, the
scripted model's delays and the ``retry_backoff`` / ``timeout_total`` operators read the time from a
:class:`Clock` and wait on it, never on asyncio directly. Each of them takes a ``clock`` argument:

* :data:`SYSTEM_CLOCK` (the default everywhere) is the running event loop's own clock: ``loop.time()``,
  ``loop.call_at``, ``asyncio.sleep``. It costs what using asyncio directly costs.
* :class:`VirtualClock` is time that moves only when you move it, for tests of retry and timeout
  behaviour that should neither sleep nor depend on how busy the machine is. ``await clock.advance(5)``
  fires what falls due in those five seconds, in time order, letting the loop run between them;
  ``await clock.run(awaitable)`` awaits something and jumps the time to the next timer whenever the loop
  has nothing else to do. Real I/O on the same loop (a loopback HTTP server) keeps working: only the
  waiting is virtual.

A clock offers four things: :meth:`Clock.now` (monotonic seconds), :meth:`Clock.call_at` /
:meth:`Clock.call_later` (a cancellable callback, what operators use), ``await`` :meth:`Clock.sleep`, and
:meth:`Clock.timeout` / :meth:`Clock.timeout_at`, a :class:`Deadline` that behaves like
``asyncio.timeout``: on expiry it cancels the body it wraps and raises ``TimeoutError`` from the
``async with``; ``reschedule`` moves it (cheaply: pushing an idle deadline forward on every read costs a
comparison, not a new timer).

Example:
    >>> import asyncio
    >>> async def main() -> tuple[str, float]:
    ...     clock = VirtualClock()
    ...     async def slow() -> str:
    ...         await clock.sleep(3600)  # an hour, in no time
    ...         return "done"
    ...     return await clock.run(slow()), clock.now()
    >>> asyncio.run(main())
    ('done', 3600.0)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import time
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sized
from types import TracebackType
from typing import Any, Final, Literal, Protocol, TypeVar, cast

__all__ = ["SYSTEM_CLOCK", "Clock", "Deadline", "SystemClock", "Timer", "VirtualClock"]

_T = TypeVar("_T")


class Timer(Protocol):
    """A scheduled callback (what :meth:`Clock.call_at` returns); ``asyncio.TimerHandle`` is one."""

    def cancel(self) -> None:
        """Stop the callback from running; harmless once it ran or was cancelled."""
        ...


class Clock(ABC):
    """Where rxagent reads the time and waits. Subclasses implement :meth:`now` and :meth:`call_at`.

    Everything else (:meth:`call_later`, :meth:`sleep`, :meth:`timeout`) is built on those two, so a
    clock of your own needs only them. Clocks are used inside a running asyncio loop.
    """

    @abstractmethod
    def now(self) -> float:
        """The current time in seconds, monotonic (only differences between two readings mean anything)."""

    @abstractmethod
    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` on the loop once :meth:`now` reaches ``when`` (soon, if it already has)."""

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` on the loop ``delay`` seconds from now."""
        return self.call_at(self.now() + delay, callback)

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` (zero or less: let the loop run once). Cancelling the wait cancels its timer."""
        if not seconds > 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        timer = self.call_later(seconds, wake)
        try:
            await future
        finally:
            timer.cancel()

    def timeout(self, seconds: float | None) -> Deadline:
        """A :class:`Deadline` ``seconds`` from now (``None``: none until rescheduled), like asyncio.timeout.

        Example:
            >>> import asyncio
            >>> async def main() -> str:
            ...     clock = VirtualClock()
            ...     async def wait_forever() -> None:
            ...         async with clock.timeout(5):
            ...             await asyncio.Event().wait()
            ...     try:
            ...         await clock.run(wait_forever())
            ...     except TimeoutError:
            ...         return f"gave up at {clock.now()} s"
            ...     return "unreachable"
            >>> asyncio.run(main())
            'gave up at 5.0 s'
        """
        return Deadline(self, None if seconds is None else self.now() + seconds)

    def timeout_at(self, when: float | None) -> Deadline:
        """A :class:`Deadline` at the absolute time ``when`` on this clock (``None``: none yet)."""
        return Deadline(self, when)


_State = Literal["created", "entered", "expiring", "expired", "exited"]


class Deadline:
    """A deadline over the body of an ``async with``, on a :class:`Clock` (``asyncio.timeout``'s semantics).

    When the clock reaches :meth:`when`, the task running the body is cancelled and the ``async with``
    raises ``TimeoutError`` (chained from the ``CancelledError``); a cancellation from elsewhere passes
    through as a cancellation. :meth:`reschedule` moves the deadline while the body runs: ``None``
    disarms it, a later time pushes it back. A later time does not replace the timer: the armed timer
    fires, finds the deadline moved and re-arms itself once, so pushing an idle deadline forward on
    every read costs an assignment, not a timer.

    Create one with :meth:`Clock.timeout` or :meth:`Clock.timeout_at`; enter it once, inside a task.
    """

    __slots__ = ("_armed_at", "_cancelling", "_clock", "_state", "_task", "_timer", "_wake", "_when")

    def __init__(self, clock: Clock, when: float | None) -> None:
        self._clock = clock
        self._when = when
        self._state: _State = "created"
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self._timer: Timer | None = None
        self._armed_at = math.inf
        self._wake = math.inf

    def wake_by(self, when: float) -> None:
        """Arm the timer at ``when`` on entering, if that comes before the deadline, without moving the
        deadline: for one that will be moved to about ``when`` soon after (a request's idle limit, once it
        has its connection), so that moving it there costs an assignment instead of a second timer. Woken
        early, the timer finds the deadline later and re-arms itself at it, as after a push.

        Raises:
            RuntimeError: the deadline was entered already.
        """
        if self._state != "created":
            raise RuntimeError(f"wake_by is for a deadline not entered yet (it is {self._state})")
        self._wake = when

    def when(self) -> float | None:
        """The deadline on the clock's time scale, or ``None`` when disarmed."""
        return self._when

    def reschedule(self, when: float | None) -> None:
        """Move the deadline to ``when`` (the clock's :meth:`~Clock.now` plus a delay); ``None`` disarms it.

        Raises:
            RuntimeError: the deadline is not inside its ``async with`` (not entered yet, expired or left).
        """
        if self._state != "entered":
            raise RuntimeError(
                f"a deadline can be rescheduled only inside its `async with` (it is {self._state})"
            )
        self._when = when
        if when is not None and (self._timer is None or when < self._armed_at):
            self._arm(when)

    def expired(self) -> bool:
        """True once the deadline has passed and cancelled the body."""
        return self._state in ("expiring", "expired")

    async def __aenter__(self) -> Deadline:
        if self._state != "created":
            raise RuntimeError("a Deadline can be entered only once")
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("a Deadline must be entered inside an asyncio task")
        self._task = task
        self._cancelling = task.cancelling()
        self._state = "entered"
        if self._when is not None:
            self._arm(min(self._when, self._wake))
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._state != "expiring":
            self._state = "exited"
            return
        self._state = "expired"
        assert self._task is not None
        # Our cancel is the one to turn into TimeoutError only if nobody else cancelled the task meanwhile.
        if self._task.uncancel() <= self._cancelling and exc_type is asyncio.CancelledError:
            raise TimeoutError from exc

    def _arm(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed_at = when
        self._timer = self._clock.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        when = self._when
        if self._state != "entered" or when is None:
            return
        if when > self._armed_at:  # pushed back since the timer was armed
            self._arm(when)
            return
        self._state = "expiring"
        assert self._task is not None
        self._task.cancel()

    def __repr__(self) -> str:
        return f"Deadline(when={self._when!r}, state={self._state!r})"


class SystemClock(Clock):
    """The running event loop's clock: ``loop.time()``, ``loop.call_at``, ``asyncio.sleep``.

    Outside a running loop :meth:`now` reads ``time.monotonic()``, the clock asyncio's loops use.
    Use the shared instance :data:`SYSTEM_CLOCK`.
    """

    def now(self) -> float:
        """The running loop's ``time()`` (``time.monotonic()`` when no loop runs)."""
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:
            return time.monotonic()

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """``loop.call_at(when, callback)`` on the running loop."""
        return asyncio.get_running_loop().call_at(when, callback)

    def call_later(self, delay: float, callback: Callable[[], object]) -> Timer:
        """``loop.call_later(delay, callback)`` on the running loop."""
        return asyncio.get_running_loop().call_later(delay, callback)

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep(seconds)``."""
        await asyncio.sleep(seconds)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK: Final[Clock] = SystemClock()
"""The default clock of every rxagent component: the running event loop's."""


class _VirtualTimer:
    __slots__ = ("_callback", "_handle", "cancelled", "when")

    def __init__(self, when: float, callback: Callable[[], object]) -> None:
        self.when = when
        self.cancelled = False
        self._callback: Callable[[], object] | None = callback
        self._handle: asyncio.Handle | None = None

    def cancel(self) -> None:
        self.cancelled = True
        self._callback = None
        if self._handle is not None:
            self._handle.cancel()

    def fire(self, loop: asyncio.AbstractEventLoop) -> None:
        # Through the loop, as asyncio runs its timers: the callback's errors go to the loop's handler.
        self._handle = loop.call_soon(self._run)

    def _run(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None and not self.cancelled:
            callback()


_QUIET_HOPS = 3
"""Loop turns in a row with nothing ready before the loop counts as idle. One turn can start I/O whose
completion the next turn's poll sees (a write on a loopback socket), so one quiet turn is not enough."""

_BLIND_HOPS = 100
"""Loop turns to let pass on a loop whose ready queue cannot be seen (not CPython's asyncio loop)."""


_settling: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Future[bool]] = (
    weakref.WeakKeyDictionary()
)
"""The settle under way on each loop. Tasks settling at once would each see the others' turns as work
and keep each other busy forever, so one task watches the loop and the others wait for its verdict."""


async def _settle(until: asyncio.Future[Any] | None = None) -> None:
    """Let the loop run until it only waits (for timers, I/O or threads), or until ``until`` is done."""
    loop = asyncio.get_running_loop()
    while (under_way := _settling.get(loop)) is not None:
        if await asyncio.shield(under_way) or (until is not None and until.done()):
            return
    verdict: asyncio.Future[bool] = loop.create_future()
    _settling[loop] = verdict
    idle = False
    try:
        idle = await _until_idle(loop, until)
    finally:
        del _settling[loop]
        verdict.set_result(idle)


async def _until_idle(loop: asyncio.AbstractEventLoop, until: asyncio.Future[Any] | None) -> bool:
    """Turn the loop until it is idle (True) or ``until`` is done (False)."""
    # CPython's loops keep their runnable callbacks in `_ready`; it is the only way to see that the loop
    # is idle. Other loops get a fixed number of turns instead.
    ready = cast("Sized | None", getattr(loop, "_ready", None))
    quiet = 0
    while quiet < (_QUIET_HOPS if ready is not None else _BLIND_HOPS):
        await asyncio.sleep(0)
        if until is not None and until.done():
            return False
        quiet = 0 if ready is not None and len(ready) else quiet + 1
    return True


class VirtualClock(Clock):
    """A clock whose time moves only when you move it: retry and timeout tests without sleeping.

    Timers wait in a queue ordered by due time. :meth:`advance` moves the time forward, firing what falls
    due in time order and letting the loop run until it is idle after each; :meth:`run` awaits something
    and, whenever the loop is idle, jumps straight to the next timer. Timers due at the current time fire
    on the loop's next turn without any advancing, as ``asyncio.sleep(0)`` would.

    "Idle" means that the loop has no callback ready to run: it would block waiting for a timer, for I/O
    or for a thread. Real I/O with a server on the same loop finishes before time jumps; work in a thread
    or another process does not hold time back, so a test waiting on one should :meth:`advance` by hand.

    Args:
        start: the time at which the clock starts.

    Raises:
        ValueError: ``start`` is not a finite number.

    Example:
        >>> import asyncio
        >>> async def main() -> list[tuple[str, float]]:
        ...     clock = VirtualClock()
        ...     fired: list[tuple[str, float]] = []
        ...     clock.call_later(2, lambda: fired.append(("b", clock.now())))
        ...     clock.call_later(1, lambda: fired.append(("a", clock.now())))
        ...     await clock.advance(1.5)
        ...     fired.append(("advanced", clock.now()))
        ...     await clock.advance(10)
        ...     return fired
        >>> asyncio.run(main())
        [('a', 1.0), ('advanced', 1.5), ('b', 2.0)]
    """

    def __init__(self, start: float = 0.0) -> None:
        if not math.isfinite(start):
            raise ValueError(f"VirtualClock needs a finite start time, got {start!r}")
        self._now = float(start)
        self._queue: list[tuple[float, int, _VirtualTimer]] = []
        self._order = itertools.count()
        self._advancing = False
        self._wakeup: asyncio.Future[None] | None = None

    def now(self) -> float:
        """The virtual time in seconds."""
        return self._now

    def call_at(self, when: float, callback: Callable[[], object]) -> Timer:
        """Run ``callback`` when the virtual time reaches ``when``.

        Raises:
            ValueError: ``when`` is NaN.
        """
        if math.isnan(when):
            raise ValueError("a timer cannot be due at NaN")
        timer = _VirtualTimer(when, callback)
        heapq.heappush(self._queue, (when, next(self._order), timer))
        if when <= self._now:
            asyncio.get_running_loop().call_soon(self._fire_due)
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)
        return timer

    def pending(self) -> tuple[float, ...]:
        """The due times of the timers not yet fired or cancelled, earliest first."""
        return tuple(sorted(when for when, _, timer in self._queue if not timer.cancelled))

    async def advance(self, seconds: float) -> None:
        """Move the time ``seconds`` forward, firing what falls due on the way in time order.

        The loop runs until idle before the first timer fires, after each due time's timers fired, and
        at the end, so callbacks see the time they were due at and what they start gets to run.
        ``advance(0)`` just lets the loop run until idle.

        Raises:
            ValueError: ``seconds`` is negative or not finite.
            RuntimeError: another ``advance`` or :meth:`run` of this clock is moving the time.
        """
        if not (seconds >= 0 and math.isfinite(seconds)):
            raise ValueError(f"advance needs a finite number of seconds >= 0, got {seconds!r}")
        await self._advance_to(self._now + seconds)

    async def run(self, awaitable: Awaitable[_T]) -> _T:
        """Await ``awaitable``, jumping the time to the next timer whenever the loop is idle.

        Returns its result (or raises its error). When the loop is idle and no timer is pending, it waits
        for the awaitable or for a timer to be scheduled, without moving the time. Cancelling ``run``
        cancels the awaitable.

        Raises:
            RuntimeError: another ``advance`` or ``run`` of this clock is moving the time.
        """
        task = asyncio.ensure_future(awaitable)
        try:
            while True:
                await _settle(task)
                if task.done():
                    return task.result()
                due = self._next_due()
                if due is None or math.isinf(due):
                    await self._until_scheduled(task)
                else:
                    await self._advance_to(due)
        finally:
            if not task.done():
                task.cancel()

    async def _advance_to(self, target: float) -> None:
        if self._advancing:
            raise RuntimeError("this VirtualClock is already being advanced")
        self._advancing = True
        try:
            await _settle()
            while (due := self._next_due()) is not None and due <= target:
                self._now = max(self._now, due)
                self._fire_due()
                await _settle()
            self._now = max(self._now, target)
        finally:
            self._advancing = False

    async def _until_scheduled(self, task: asyncio.Future[_T]) -> None:
        wakeup: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._wakeup = wakeup
        try:
            await asyncio.wait((task, wakeup), return_when=asyncio.FIRST_COMPLETED)
        finally:
            self._wakeup = None
            wakeup.cancel()

    def _next_due(self) -> float | None:
        queue = self._queue
        while queue and queue[0][2].cancelled:
            heapq.heappop(queue)
        return queue[0][0] if queue else None

    def _fire_due(self) -> None:
        loop = asyncio.get_running_loop()
        queue = self._queue
        while queue and queue[0][0] <= self._now:
            _, _, timer = heapq.heappop(queue)
            if not timer.cancelled:
                timer.fire(loop)

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now!r}, pending={len(self.pending())})"
