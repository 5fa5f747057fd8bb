"""A call of our own run up to its first wait at once: no task for a call that does not wait.

A task costs a task object, its coroutine's context, a step scheduled through the event loop (one more loop
iteration before anything runs) and a done callback. Many calls rxagent makes for itself finish without
waiting (the memory store's calls, a run's release on it): run at once, up to their first wait, they need
none of that, and a task is made only for the rest of a call that does wait.

What Python 3.12's ``asyncio.eager_task_factory`` does, with one difference that decides where it may be
used: the first step runs in the **caller's** task and context (3.11 cannot make a task current before
creating it, and creating one schedules its step). So whatever binds the current task during the first
step — ``asyncio.timeout``, a ``TaskGroup``, a :class:`~rxagent.clock.Deadline`, anyio's cancel scopes,
``asyncio.current_task()`` — binds the caller's, and a call that then waits goes on in another task: a
deadline bound so would cancel the caller, or a finished task. Use it only for calls whose code is known not
to do that before their first wait; never for user code (tools, a source's iterator, ``using_resource``'s
``acquire``/``release``), which runs in a task of its own.
"""

from __future__ import annotations

from collections.abc import Coroutine, Generator
from typing import Any, TypeVar

__all__ = ["Resumed", "first_step"]

_T = TypeVar("_T")


def first_step(call: Coroutine[Any, Any, _T]) -> tuple[bool, object]:
    """Run ``call`` up to its first wait, in the caller's task and context (see the module).

    Returns:
        ``(True, its result)`` if it finished there, else ``(False, what it waits on)``, to hand to a task
        with :class:`Resumed` (or to ``await Resumed(call, waiting)`` inside one).

    Raises:
        BaseException: whatever ``call`` raised in its first step, as awaiting it would.
    """
    try:
        return False, call.send(None)
    except StopIteration as stop:
        return True, stop.value


class Resumed(Coroutine[Any, Any, _T]):
    """A call that :func:`first_step` ran up to its first wait, for a task (or an ``await``) to go on with:
    its first step is handed what the call waits on, as if it had run that step itself; a cancel before
    that is thrown into the call."""

    __slots__ = ("_call", "_started", "_waiting")

    def __init__(self, call: Coroutine[Any, Any, _T], waiting: object) -> None:
        self._call = call
        self._waiting: object = waiting
        self._started = False

    def send(self, value: object, /) -> object:
        """The call's next step (the first: what it waits on, handed over)."""
        if not self._started:
            self._started = True
            waiting, self._waiting = self._waiting, None
            return waiting
        return self._call.send(value)

    def throw(self, *error: Any) -> object:  # pyright: ignore[reportIncompatibleMethodOverride]
        """Throw into the call (a cancel, say)."""
        self._started = True
        self._waiting = None
        return self._call.throw(*error)

    def close(self) -> None:
        """Close the call."""
        self._call.close()

    def __await__(self) -> Generator[Any, None, _T]:
        return self  # pyright: ignore[reportReturnType] - an iterator of its own steps, as a coroutine is

    def __iter__(self) -> Resumed[_T]:
        return self

    def __next__(self) -> object:
        return self.send(None)
