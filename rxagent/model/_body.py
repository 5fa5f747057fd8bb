"""Reading a response body a network read at a time: one piece per wake-up, whatever it carries.

aiohttp's ``StreamReader`` keeps one buffer entry per HTTP chunk, and a streaming server sends one chunk
per event (per token). ``readany`` takes the entries one call at a time, and each call asks the protocol
to resume reading, which runs the HTTP parser again on no data even when nothing was paused: measured,
that was a third of the client's CPU per streamed token when a network read carries many events, work
done once per event that is needed at most once per read. :func:`read_available` takes the whole buffer
in one join and resumes the protocol only if it was paused.

It uses aiohttp's private ``StreamReader`` state (``_buffer``, ``_buffer_offset``, ``_size``,
``_cursor``, ``_http_chunk_splits``, ``_protocol``, ``_timer``, ``_eof``, ``_exception``, ``_wait``) and
the protocol's ``_reading_paused``, doing what aiohttp's own ``readany`` does with them.
``tests/model/test_body.py`` reads real chunked bodies with it, with the reader paused past its
high-water marks and resumed, and compares with ``readany``: an aiohttp release that changes this state
fails there rather than in a stream.
"""

from __future__ import annotations

# pyright: reportPrivateUsage=false
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import aiohttp

__all__ = ["read_available"]


async def read_available(content: aiohttp.StreamReader) -> bytes:
    """The bytes the body holds now, in one piece, waiting for some if it holds none; ``b""`` at its end.

    What ``content.readany()`` returns, with the reader's bookkeeping done once per call rather than
    once per HTTP chunk.

    Raises:
        Whatever the reader holds as its exception (the connection failed, the body was malformed), as
        ``readany`` does.
    """
    try:
        buffer = content._buffer
    except AttributeError:  # the reader of an empty body, which has none of the state below
        return await content.readany()
    while True:
        exception = content._exception
        if exception is not None:
            raise exception
        if buffer:
            break
        if content._eof:
            return b""
        await content._wait("readany")
    content._timer.assert_timeout()
    offset = content._buffer_offset
    if offset:
        buffer[0] = buffer[0][offset:]
        content._buffer_offset = 0
    data = buffer.popleft() if len(buffer) == 1 else b"".join(buffer)
    buffer.clear()
    size = len(data)
    content._size -= size
    cursor = content._cursor = content._cursor + size
    splits = content._http_chunk_splits
    while splits and splits[0] < cursor:
        splits.popleft()  # the ends of the chunks taken (aiohttp drops them the same way)
    protocol = content._protocol
    if protocol._reading_paused:  # past a high-water mark (bytes or chunks); the buffer is empty now
        protocol.resume_reading()
    return data
