"""The caller's handle on a run: interrupt it from any thread, see where it waits for its session, deliver
messages into it."""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Callable
from typing import Literal, TypeAlias

from rxagent.messages import Msg
from rxagent.session.keeper import Place

__all__ = ["RunControl", "RunStatus"]


_GUARD = threading.Lock()
"""Guards every control's binding and interrupt flag: held for a few assignments, once or twice a run, so
one lock serves them all (a lock per control was one more object per run for the garbage collector)."""


def _nothing() -> None:
    """Unregisters a callback that ran at once (the run was interrupted already)."""


class _Registration:
    """Unregisters an interrupt callback when called: one object per step that listens, not a closure."""

    __slots__ = ("_callback", "_callbacks")

    def __init__(self, callbacks: list[Callable[[], None]], callback: Callable[[], None]) -> None:
        self._callbacks = callbacks
        self._callback = callback

    def __call__(self) -> None:
        # By identity (`remove` compares with ==, and two bound methods of one object are equal).
        callbacks, callback = self._callbacks, self._callback
        for at in range(len(callbacks) - 1, -1, -1):
            if callbacks[at] is callback:
                del callbacks[at]
                return


RunStatus: TypeAlias = Literal["idle", "queued", "running"]
"""Where the run a :class:`RunControl` watches stands: none bound, waiting for its session, or running."""


class RunControl:
    """The caller's handle on a run: interrupt it from any thread, and see where it waits for its session.

    An interrupt stops the model stream or the running tools; calls that already finished keep their real
    results, unfinished calls get ``interrupted`` results, and the run ends with reason ``INTERRUPTED``
    (unlike dispose, which only cleans up). A control is bound to one run at a time, from subscription
    until the run has released its session; it can be reused for the next run.

    Attributes:
        inbox: messages delivered into the running run (a session handle's ``steer`` and ``inject``), each
            with whether one left over starts the next run; the loop adds them to the history right
            before the next reasoning step. Touch it on the run's event loop only.
    """

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interrupted = False
        self._callbacks: list[Callable[[], None]] = []
        self._place: Place | None = None
        self._idle: list[asyncio.Future[None]] | None = None  # made by the first wait_idle
        self.inbox: deque[tuple[Msg, bool]] = deque()

    def interrupt(self) -> bool:
        """Interrupt the bound run; safe from any thread (a UI thread, a signal handler, a widget callback).

        The interrupt is marshalled onto the run's event loop and takes effect on the loop's next turn, so
        an event being delivered when ``interrupt`` is called from its handler still reaches every
        subscriber before the run's closing events. An interrupt while the run waits for its session ends
        it as soon as it gets the session, before any model call.

        Returns:
            ``True`` when a run was bound to receive it; ``False`` (a no-op) before the run is subscribed,
            after it has ended, or when it was already interrupted.
        """
        with _GUARD:
            loop = self._loop
            if loop is None or self._interrupted:
                return False
            self._interrupted = True
        try:
            loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop closed: the run is over
            return False
        return True

    def _fire(self) -> None:
        # Innermost first: a step that ends itself gracefully on interrupt (a model call keeps the text
        # streamed so far) registered after the loop around it, and must act before the loop cuts it.
        for callback in reversed(tuple(self._callbacks)):
            callback()

    @property
    def interrupted(self) -> bool:
        """True once the bound run was interrupted."""
        return self._interrupted

    @property
    def status(self) -> RunStatus:
        """``idle`` (no run bound), ``queued`` (waiting for its session) or ``running``."""
        place = self._place
        if self._loop is None:
            return "idle"
        return "running" if place is None or place.position == 0 else "queued"

    @property
    def position(self) -> int | None:
        """``0`` while the run holds its session, ``n`` while it waits ``n``-th in the session's line (which
        runs of every agent object and process share, in the order they were submitted), else ``None``."""
        place = self._place
        return place.position if place is not None else None

    def on_interrupt(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on interrupt (at once if already interrupted); returns an unregister function.

        For the run's own steps: register and call on the run's loop.
        """
        if self._interrupted:
            callback()
            return _nothing
        self._callbacks.append(callback)
        return _Registration(self._callbacks, callback)

    def bind(self, loop: asyncio.AbstractEventLoop, place: Place | None = None) -> None:
        """Attach the control to a run starting on ``loop`` (the agent does this at subscription), and to
        the run's ``place`` in its session's line (what :attr:`position` shows).

        Raises:
            RuntimeError: the control is bound to another run that has not ended.
        """
        with _GUARD:
            if self._loop is not None:
                raise RuntimeError("this RunControl is already bound to a run that has not ended")
            self._loop, self._place, self._interrupted = loop, place, False
            self._callbacks.clear()

    def unbind(self) -> None:
        """Detach from the ended run: later interrupts are no-ops until the next :meth:`bind`."""
        with _GUARD:
            self._loop, self._place = None, None
            self._callbacks.clear()
            waiting, self._idle = self._idle or (), None
        for waiter in waiting:  # the run unbinds on its loop, where they wait
            if not waiter.done():
                waiter.set_result(None)

    async def wait_idle(self) -> None:
        """Wait until no run is bound: the bound run has ended and given its session back (a cancelled run
        records its end on the loop's next turns). Returns at once when none is bound. Await it on the
        run's loop."""
        with _GUARD:
            if self._loop is None:
                return
            waiter = asyncio.get_running_loop().create_future()
            if self._idle is None:
                self._idle = []
            self._idle.append(waiter)
        await waiter
