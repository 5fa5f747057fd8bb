"""One server-sent-events response: writes with a deadline, heartbeats while idle, and an end on request.

An endpoint that streams (the session feed, AG-UI) opens an :class:`EventStream` and runs its body in it:
the body reads the session's feed and :meth:`~EventStream.send`\\ s what it has, in one write per wake of
the feed. Beside it a small watchdog task writes ``: ping`` after ``heartbeat`` seconds without a write,
and drops a client that takes nothing for ``send_timeout`` seconds.

**Memory per client stays bounded.** A client that stops reading fills its connection's buffers: the
system's, then the transport's, up to its high-water mark (64 KiB). A body asks :meth:`EventStream.would_wait`
before each write; once a write could wait for the client, it lets go of everything it read from the feed
(its watcher, the batch and its encoding) and waits with that one write alone, so a stalled client holds the
transport's buffer and one write, and nothing else. Nothing is queued for it: when it reads again its
watcher catches up from the session's log. A client that takes nothing for ``send_timeout`` seconds while
data waits for it is dropped (its connection aborted, its buffers freed); it can come back with
``Last-Event-ID``.

**Ending.** :meth:`~EventStream.end` asks the body to stop where it waits (the server stopping, a run
that ended without telling the feed): the body's task is cancelled, the stream takes that cancellation
back, and the endpoint can still write a last word before the response ends. A client that goes away
cancels the endpoint (the server runs with handler cancellation), which stops only its watcher, never a
run.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from aiohttp import web

from rxagent.clock import SYSTEM_CLOCK, Clock

__all__ = ["EventStream"]

_PING = b": ping\n\n"


class EventStream:
    """One SSE response to ``request`` (see the module).

    Args:
        request: the request being answered.
        heartbeat: seconds without a write after which ``: ping`` is sent.
        send_timeout: seconds a write may wait for the client before the client is dropped.
        ends_by_itself: the body returns on its own once it has said everything (an AG-UI run's stream);
            a stopping server lets such streams finish before it ends the others.
        clock: what heartbeats and the send deadline are timed on (the agent's).
        session: the id of the session it streams, if one (ended when the session is deleted).
    """

    def __init__(
        self,
        request: web.Request,
        *,
        heartbeat: float,
        send_timeout: float,
        ends_by_itself: bool = False,
        clock: Clock = SYSTEM_CLOCK,
        session: str | None = None,
    ) -> None:
        self.request = request
        self.session = session
        self.clock = clock
        self.ends_by_itself = ends_by_itself
        self.closed = asyncio.Event()
        """Set once :meth:`serve` has returned."""
        self.heartbeat = heartbeat
        self.send_timeout = send_timeout
        self.response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-cache, no-store",
                "X-Accel-Buffering": "no",  # proxies must pass events on as they come
                "X-Content-Type-Options": "nosniff",
            }
        )
        self.ended = False
        """:meth:`end` was called: the body is being (or was) asked to stop."""
        self._task: asyncio.Task[object] | None = None
        self._cancels = 0
        self._writing = False
        self._dropped = False
        self._last_write = 0.0

    async def send(self, data: bytes, *, drain: bool = False) -> None:
        """Write ``data`` (whole SSE events) to the client; with ``drain``, then wait until the client has
        taken enough that the next write would not wait (the connection's buffer is under its low-water
        mark): what a body that let go of its data before the write does (see the module).

        Raises:
            ConnectionError: the client went away, or was dropped for taking nothing for
                ``send_timeout`` seconds.
        """
        # No timer per write (a write is one syscall when the client keeps up): the watchdog enforces
        # the deadline.
        self._writing = True
        try:
            await self.response.write(data)
            if drain:  # aiohttp drains only past 64 KiB written since its last drain
                await self.request.writer.drain()
        finally:
            self._writing = False
            self._last_write = self.clock.now()
        if self._dropped:
            raise ConnectionResetError(f"the client took no data for {self.send_timeout:g} s")

    @property
    def waiting(self) -> bool:
        """Whether a write waits for the client now (it took none of it yet, or too little)."""
        return self._writing

    def would_wait(self, size: int) -> bool:
        """Whether writing ``size`` more bytes now could wait for the client: what its connection holds
        unsent, with them, would pass the transport's high-water mark (where aiohttp waits for it to drain).
        A body that holds data read for the client lets go of it first (see the module)."""
        transport = self.request.transport
        if transport is None:
            return False  # gone: the write raises at once
        return transport.get_write_buffer_size() + size > transport.get_write_buffer_limits()[1]

    def end(self) -> None:
        """Ask the body to stop (from any code on the loop): it is cancelled where it waits, and
        :meth:`serve` returns normally. A no-op once the body has returned."""
        self.ended = True
        if self._task is not None:
            self._cancels += 1
            self._task.cancel()

    async def serve(
        self, body: Callable[[], Awaitable[None]], last_word: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        """Open the response, run ``body`` with heartbeats beside it, then ``last_word`` (which may write a
        closing event; it runs after the body returns or was ended, not when the client went away)."""
        try:
            await self.response.prepare(self.request)
        except ConnectionError:  # gone before the answer's head could be written: nothing to serve
            self.closed.set()
            return
        loop = asyncio.get_running_loop()
        self._last_write = self.clock.now()
        task = asyncio.current_task()
        assert task is not None
        watchdog = loop.create_task(self._watch(), name="rxagent.serve.watchdog")
        try:
            self._task = task
            try:
                if not self.ended:  # asked to end before it began (what it waited for had already come)
                    await body()
            except asyncio.CancelledError:
                cancels, self._cancels, self._task = self._cancels, 0, None
                for _ in range(cancels):
                    task.uncancel()
                if task.cancelling():  # someone else cancelled too (the client left): not ours to keep
                    raise
            finally:
                self._task = None
            if last_word is not None:
                await last_word()
        except ConnectionError:  # the client went away or was dropped: nothing more to say
            pass
        finally:
            self.closed.set()
            watchdog.cancel()  # not awaited: awaiting here could swallow a cancellation of this task

    async def _watch(self) -> None:
        """Ping after ``heartbeat`` seconds without a write; drop a client that took nothing for
        ``send_timeout`` seconds while data waited for it (a write pending, or bytes left unsent)."""
        clock = self.clock
        transport = self.request.transport
        check = min(self.heartbeat, self.send_timeout) / 2
        stalled_since: float | None = None
        seen = (self._last_write, 0)
        with contextlib.suppress(ConnectionError):
            while transport is not None and not transport.is_closing():
                now = clock.now()
                unsent = transport.get_write_buffer_size()
                if self._writing or unsent:
                    progress = self._last_write != seen[0] or unsent < seen[1]
                    seen = (self._last_write, unsent)
                    if stalled_since is None or progress:
                        stalled_since = now
                    elif now - stalled_since >= self.send_timeout:
                        self._dropped = True
                        self._abort()
                        return
                    await clock.sleep(check)
                    continue
                stalled_since, seen = None, (self._last_write, 0)
                due = self._last_write + self.heartbeat
                if now < due:
                    await clock.sleep(due - now)
                else:  # nothing is pending, so this write does not wait
                    await self.send(_PING)

    def _abort(self) -> None:
        transport = self.request.transport
        if transport is not None:
            transport.abort()  # frees what the client left unread
