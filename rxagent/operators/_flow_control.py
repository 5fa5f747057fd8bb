"""Cooperative backpressure for rxagent's own sources.

reactivex has no backpressure: ``on_next`` is a plain call and a producer cannot be made to wait inside
it. rxagent's sources are asyncio tasks, though, and a task *can* wait between items. A consumer that
buffers (``to_async_iterator``) installs a :class:`FlowGate` in a context variable while it subscribes;
every rxagent source subscribed in that call (and every source subscribed later from within those
sources' tasks, which inherit the context) captures the gate and awaits it before pulling its next item.
The consumer closes the gate when its buffer reaches its high watermark and opens it again when the
buffer has drained to its low watermark, so the producer's own buffers (the socket, aiohttp's reader)
hold the rest and memory stays flat however long the stream runs. Synchronous sources
(``reactivex.from_iterable`` and the like) cannot wait; for them the consumer's overflow policy applies,
and :class:`BufferOverflowError` is how a bounded consumer says it had to give up.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar

__all__ = ["BufferOverflowError", "FlowGate", "current_gate"]


class BufferOverflowError(RuntimeError):
    """A bounded consumer received more items than its overflow policy lets it hold.

    Raised by ``to_async_iterator`` with ``overflow="error"`` when its buffer is full, and with
    ``overflow="block"`` when a source that cannot pause overruns the buffer's hard cap.
    """


class FlowGate:
    """An open/closed signal that producers await between items."""

    __slots__ = ("_event", "is_open")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._event.set()
        # A plain attribute, not a property over the event: producers and the consumer read it once per
        # item each.
        self.is_open = True
        """True while producers may emit (read-only: use :meth:`close` and :meth:`open`)."""

    def close(self) -> None:
        """Ask producers to pause before their next item."""
        self.is_open = False
        self._event.clear()

    def open(self) -> None:
        """Let paused producers continue."""
        self.is_open = True
        self._event.set()

    async def wait_open(self) -> None:
        """Return once the gate is open."""
        await self._event.wait()


current_gate: ContextVar[FlowGate | None] = ContextVar("rxagent_flow_gate", default=None)
"""The gate of the buffering consumer being subscribed, if any (read by sources at subscribe time)."""
