"""The benches' loopback OpenAI-compatible server: a separate process, so the client's CPU is its own.

A bench runs itself with ``--serve`` in a child process (:func:`spawned_server`), which serves every
``POST /v1/…`` (``/v1/chat/completions``, ``/v1/responses``) on 127.0.0.1 with the bench's handler
(:func:`serve`), prints its port, and stops when the parent closes its stdin (or dies).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager

from aiohttp import web

__all__ = ["floor_run", "serve", "spawned_server", "write_sse"]


async def write_sse(
    request: web.Request, events: Sequence[bytes], pace: float = 0.0, spin: float = 0.0
) -> web.StreamResponse:
    """Stream pre-encoded SSE ``events``; the last one goes out together with the end of the body.

    ``pace`` sleeps that many seconds after each event (the loop's timers round it up to about a
    millisecond, so the client idles between reads); ``spin`` busy-waits that many seconds instead, so the
    client reads one or two events at a time without going cold, as it does on a quiet machine where the
    server only just keeps up with it (reproducible on a loaded one, where a flat-out stream piles up
    into large reads).
    """
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for event in events[:-1]:
        await response.write(event)
        if pace:
            await asyncio.sleep(pace)
        if spin:
            until = time.perf_counter() + spin
            while time.perf_counter() < until:
                pass
    # [DONE] and the end of the body go out together, as real servers send them.
    await response.write(events[-1])
    await response.write_eof()
    return response


def serve(completions: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> None:
    """Serve ``completions`` at every ``POST /v1/…`` on a free loopback port; print the port; return when
    stdin closes."""

    async def run() -> None:
        app = web.Application()
        app.router.add_post("/v1/{endpoint:.+}", completions)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        server = site._server  # pyright: ignore[reportPrivateUsage]
        assert isinstance(server, asyncio.Server)
        print(server.sockets[0].getsockname()[1], flush=True)
        # Stop when the parent closes our stdin (also when the parent dies).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(run())


@contextmanager
def spawned_server(script: str, arguments: Sequence[str]) -> Iterator[int]:
    """Run ``script --serve *arguments`` in a child process; yield its port; stop it afterwards."""
    server = subprocess.Popen(
        [sys.executable, script, "--serve", *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=5)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


class _Floor(asyncio.Protocol):
    """Receives a response and notes only its size and where its chunked body ends."""

    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.received = 0
        self.tail = b""

    def data_received(self, data: bytes) -> None:
        self.received += len(data)
        self.tail = (self.tail + data)[-5:]  # the end of the body may straddle two reads
        if self.tail == b"0\r\n\r\n":  # the last chunk: SSE events end in a blank line, never in this
            self.done.set_result(self.received)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(ConnectionError(f"the stream ended after {self.received} bytes"))


async def floor_run(port: int, path: str, body: bytes) -> int:
    """The floor of a streaming client: POST ``body`` to ``/v1/{path}`` and receive the response's bytes
    with a protocol that does nothing else (no HTTP parsing, no SSE framing, no JSON), over a new connection;
    returns how many bytes came. What any client pays to take each network read as it arrives (the event
    loop's wake-up, the ``recv``): no client that does so goes below its CPU at the same read sizes."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    transport, _ = await loop.create_connection(lambda: _Floor(done), "127.0.0.1", port)
    try:
        head = f"POST /v1/{path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        transport.write(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
        return await done
    finally:
        transport.close()
