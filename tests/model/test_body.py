"""Reading a streamed body a network read at a time (rxagent/model/_body.py), on real chunked bodies.

``read_available`` uses aiohttp's private ``StreamReader`` state; these tests are what catches an aiohttp
release that changes it: the bytes must come out whole and in order, many HTTP chunks in one piece, and a
reader paused past its high-water marks must be resumed (else the body never ends).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from rxagent.model._body import read_available

CHUNKS = [b'data: {"n": %d}\n\n' % n for n in range(500)]
BODY = b"".join(CHUNKS)
HANG_S = 60
"""Far longer than reading the body takes: longer only for a reader that never resumes."""


async def stream_chunks(request: web.Request) -> web.StreamResponse:
    """Each chunk its own HTTP chunk, all written before the server's task yields."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await response.prepare(request)
    for chunk in CHUNKS:
        await response.write(chunk)
    await response.write_eof()
    return response


async def empty(request: web.Request) -> web.StreamResponse:
    return web.Response(body=b"", content_type="text/event-stream")


async def cut_off(request: web.Request) -> web.StreamResponse:
    """A chunked body whose connection closes in the middle of a chunk."""
    assert request.transport is not None
    request.transport.write(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'10\r\ndata: {"n": 0}\n\n\r\n40\r\ndata: {"n"'
    )
    request.transport.close()
    return web.StreamResponse()


@asynccontextmanager
async def served(
    handler: Callable[[web.Request], Coroutine[Any, Any, web.StreamResponse]],
) -> AsyncGenerator[str]:
    app = web.Application()
    app.router.add_get("/", handler)
    async with TestServer(app, host="127.0.0.1") as server:
        yield str(server.make_url("/"))


async def read_all(content: aiohttp.StreamReader) -> list[bytes]:
    pieces: list[bytes] = []
    while piece := await read_available(content):
        pieces.append(piece)
    return pieces


async def test_a_buffered_body_comes_out_in_one_piece() -> None:
    async with served(stream_chunks) as url, aiohttp.ClientSession() as session, session.get(url) as response:
        content = response.content
        await content.wait_eof()  # every chunk is in the reader's buffer now
        assert await read_all(content) == [BODY]
        assert await read_available(content) == b""
        # The reader's bookkeeping is as readany leaves it: nothing held, of the chunk ends only the last.
        assert content.is_eof()
        assert list(content._http_chunk_splits or ()) == [len(BODY)]  # pyright: ignore[reportPrivateUsage]


async def test_the_pieces_are_the_body_in_order_and_readany_agrees() -> None:
    async with served(stream_chunks) as url, aiohttp.ClientSession() as session:
        async with session.get(url) as response:
            pieces = await read_all(response.content)
        async with session.get(url) as response:
            expected = [piece async for piece in response.content.iter_any()]
    assert b"".join(pieces) == b"".join(expected) == BODY


async def test_a_reader_paused_past_its_high_water_marks_is_resumed() -> None:
    # A small read buffer: the reader pauses the connection after a few dozen chunks or 512 bytes; a
    # body of 500 chunks (8 KiB) then ends only if every read resumes it.
    async with (
        served(stream_chunks) as url,
        aiohttp.ClientSession(read_bufsize=256) as session,
        session.get(url) as response,
    ):
        content = response.content
        assert content.get_read_buffer_limits() == (256, 512)
        # A reader left paused waits forever: a generous bound turns that into a failure.
        async with asyncio.timeout(HANG_S):
            pieces = await read_all(content)
        protocol = response.connection.protocol if response.connection else None
    assert b"".join(pieces) == BODY
    assert len(pieces) < len(CHUNKS)  # many chunks per piece: the reader's buffer was taken whole
    assert protocol is None or not protocol._reading_paused  # pyright: ignore[reportPrivateUsage]


async def test_an_empty_body_reads_as_its_end() -> None:
    async with served(empty) as url, aiohttp.ClientSession() as session, session.get(url) as response:
        assert await read_available(response.content) == b""


async def test_a_body_cut_off_raises_what_readany_raises() -> None:
    async with served(cut_off) as url, aiohttp.ClientSession() as session, session.get(url) as response:
        assert (await read_available(response.content)).startswith(b"data: ")
        with pytest.raises(aiohttp.ClientPayloadError):
            await read_all(response.content)
