"""A scriptable OpenAI-compatible server on 127.0.0.1 for the model client's tests.

Each test scripts the replies, one per request, in order: a status, headers, and a body written as a
list of frames — raw byte frames (each one ``write``; :class:`Pause` between two frames makes the
client read them separately), :class:`Hold` (send nothing more until the test opens a gate),
:class:`Stall` (send nothing more until the client goes away) and :class:`Cut` (drop the connection
mid-body). The server records every request (path, query, headers, JSON body)
and notices when a client disconnects in the middle of a reply (the handler is cancelled). Pauses and the
request times are on the server's ``clock``: give it the client's :class:`~rxagent.clock.VirtualClock`
and both sides wait on the same virtual time. ``GET /v1/models`` answers with the model list a test sets
(:meth:`OpenAIServer.list_models`), without using up a scripted reply.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections import deque
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.messages import Msg
from rxagent.model.openai import OpenAIChatModel
from rxagent.model.types import ChatRequest
from rxagent.retry import RetryPolicy

__all__ = [
    "API_KEY",
    "BASIC",
    "DONE",
    "FAST_RETRY",
    "PASSWORD",
    "PROXY_USER",
    "QUERY_KEY",
    "SECRETS",
    "Cut",
    "Frame",
    "Hold",
    "OpenAIServer",
    "Pause",
    "RecordedRequest",
    "Reply",
    "Stall",
    "ask",
    "assert_no_secret",
    "chunk",
    "client_log",
    "event",
    "finish_chunk",
    "make_model",
    "text_chunk",
    "tool_chunk",
    "usage_chunk",
    "with_credentials",
]

DONE = b"data: [DONE]\n\n"


@dataclass(frozen=True)
class Pause:
    """Wait before the next frame (so the client sees separate reads)."""

    seconds: float = 0.02


@dataclass(frozen=True)
class Stall:
    """Send nothing more and hold the connection until the client goes away."""


@dataclass(frozen=True)
class Cut:
    """Drop the connection now, in the middle of the body."""


@dataclass(frozen=True)
class Hold:
    """Send nothing more until the test sets ``gate`` (the test paces the reply, delta by delta).
    ``reached`` is set when the reply gets here (everything before it has been written)."""

    gate: asyncio.Event
    reached: asyncio.Event = field(default_factory=asyncio.Event, compare=False)


Frame = bytes | Pause | Stall | Cut | Hold


@dataclass
class Reply:
    """One scripted response."""

    frames: list[Frame] = field(default_factory=lambda: [])
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=lambda: {})
    content_type: str = "text/event-stream"
    hold_headers: bool = False
    """Send nothing at all, not even the status line, until the client goes away."""

    @classmethod
    def sse(cls, *frames: Frame, headers: Mapping[str, str] | None = None) -> Reply:
        """A ``200 text/event-stream`` reply made of ``frames``."""
        return cls(list(frames), headers=headers or {})

    @classmethod
    def json(cls, body: object, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
        """A JSON reply (a whole completion, or an error body)."""
        return cls([json.dumps(body).encode()], status, headers or {}, "application/json")

    @classmethod
    def error(cls, status: int, text: str = "", headers: Mapping[str, str] | None = None) -> Reply:
        """An error status with a plain-text body."""
        return cls([text.encode()], status, headers or {}, "text/plain")


@dataclass
class RecordedRequest:
    """What the server received."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    received_at: float
    """The server's clock at the request."""
    client_port: int
    """The client's port: the same port on two requests means the connection was reused."""
    query: str = ""
    """The query string as sent (still percent-encoded)."""


def event(data: str) -> bytes:
    """One SSE event with a single ``data:`` line."""
    return f"data: {data}\n\n".encode()


def chunk(delta: Mapping[str, Any] | None = None, *, finish_reason: str | None = None, **extra: Any) -> bytes:
    """An OpenAI ``chat.completion.chunk`` event with one choice."""
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "test-model",
        "choices": [{"index": 0, "delta": dict(delta or {}), "finish_reason": finish_reason}],
        **extra,
    }
    return event(json.dumps(body))


def text_chunk(text: str) -> bytes:
    """A chunk whose delta is ``text``."""
    return chunk({"content": text})


def finish_chunk(reason: str = "stop") -> bytes:
    """A chunk with an empty delta and ``finish_reason``."""
    return chunk({}, finish_reason=reason)


def usage_chunk(prompt: int = 5, completion: int = 7) -> bytes:
    """The ``include_usage`` final chunk: empty ``choices`` and a ``usage`` object."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
    return event(json.dumps(body))


def tool_chunk(
    index: int | None, call_id: str | None = None, name: str | None = None, arguments: object = None
) -> bytes:
    """A chunk carrying one tool-call fragment (``index=None`` leaves the field out, as some servers do)."""
    call: dict[str, Any] = {}
    if index is not None:
        call["index"] = index
    if call_id is not None:
        call["id"] = call_id
        call["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    call["function"] = function
    return chunk({"tool_calls": [call]})


class OpenAIServer:
    """The loopback server. Use ``async with OpenAIServer() as server`` and ``server.script(...)``."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        self.clock = clock
        """Where pauses wait and request times are read; set it before scripting (tests may swap it)."""
        self.replies: deque[Reply] = deque()
        self.requests: list[RecordedRequest] = []
        self.disconnects = 0
        self.disconnected = asyncio.Event()
        """Set when a client went away in the middle of a reply."""
        self.stalled = asyncio.Event()
        """Set when a reply reaches a :class:`Stall` (everything before it has been written)."""
        self.model_list: Reply = Reply.error(404, "no model list scripted")
        """The answer to every ``GET /v1/models`` (see :meth:`list_models`); it is not used up."""
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._handle)
        app.router.add_post("/v1/responses", self._handle)  # OpenAI's Responses API (responses_server.py)
        app.router.add_get("/v1/models", self._handle_models)
        self._server = TestServer(app, host="127.0.0.1", port=0)

    @property
    def base_url(self) -> str:
        """The API root to give the client."""
        return str(self._server.make_url("/v1"))

    def script(self, *replies: Reply) -> None:
        """Queue replies for the next requests, one each."""
        self.replies.extend(replies)

    def list_models(self, *names: str) -> None:
        """Answer ``GET /v1/models`` with ``names``, as OpenAI lists its models."""
        models = [{"id": name, "object": "model", "created": 0, "owned_by": "test"} for name in names]
        self.model_list = Reply.json({"object": "list", "data": models})

    async def __aenter__(self) -> Self:
        await self._server.start_server()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self._server.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self._record(request, await request.read())
        return await self._reply(
            request, self.replies.popleft() if self.replies else Reply.error(500, "no reply scripted")
        )

    async def _handle_models(self, request: web.Request) -> web.StreamResponse:
        self._record(request, b"")
        return await self._reply(request, self.model_list)

    def _record(self, request: web.Request, raw: bytes) -> None:
        self.requests.append(
            RecordedRequest(
                request.path,
                dict(request.headers),
                json.loads(raw) if raw else {},
                self.clock.now(),
                request.transport.get_extra_info("peername")[1] if request.transport else -1,
                query=request.raw_path.partition("?")[2],
            )
        )

    async def _reply(self, request: web.Request, reply: Reply) -> web.StreamResponse:
        response = web.StreamResponse(status=reply.status, headers=reply.headers)
        response.content_type = reply.content_type
        try:
            if reply.hold_headers:
                self.stalled.set()
                await asyncio.Event().wait()  # until the client disconnects (the handler is cancelled)
            await response.prepare(request)
            for frame in reply.frames:
                if isinstance(frame, bytes):
                    await response.write(frame)
                elif isinstance(frame, Pause):
                    await self.clock.sleep(frame.seconds)
                elif isinstance(frame, Hold):
                    frame.reached.set()
                    await frame.gate.wait()
                elif isinstance(frame, Stall):
                    self.stalled.set()
                    await asyncio.Event().wait()  # until the client disconnects (the handler is cancelled)
                else:
                    assert request.transport is not None
                    request.transport.abort()
                    return response
            await response.write_eof()
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnects += 1
            self.disconnected.set()
            raise
        return response


API_KEY = "sk-test-3f9a1c-DO-NOT-LEAK"
"""The key the test models send; no error, repr or traceback may contain it."""

PROXY_USER = "proxy-user"
PASSWORD = "pw-7c1e-DO-NOT-LEAK"
"""The proxy's password in a credentialed base URL (:func:`with_credentials`)."""
QUERY_KEY = "qk-5d2b-DO-NOT-LEAK"
"""The key in a credentialed base URL's query, as Azure takes it."""
BASIC = base64.b64encode(f"{PROXY_USER}:{PASSWORD}".encode()).decode()
"""The Basic token of the URL's credentials: a secret too (it decodes to the password)."""
SECRETS = (API_KEY, PASSWORD, QUERY_KEY, BASIC)
"""What no error, event, log line or repr may contain."""


def with_credentials(base_url: str) -> str:
    """``base_url`` with a proxy's user and password, and an Azure-style API version and key in its query."""
    url = URL(base_url).with_user(PROXY_USER).with_password(PASSWORD)
    return str(url.with_query({"api-version": "2024-06-01", "api-key": QUERY_KEY}))


def assert_no_secret(text: str) -> None:
    """None of :data:`SECRETS` is in ``text``."""
    for secret in SECRETS:
        assert secret not in text


def client_log(caplog: pytest.LogCaptureFixture) -> str:
    """What our side logged: all but the loopback model server's own access log, which is the far side's
    (it writes the request line, query included, as any server would)."""
    return "\n".join(
        caplog.handler.format(record) for record in caplog.records if record.name != "aiohttp.access"
    )


FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=0)


@asynccontextmanager
async def raw_http_server(answer: bytes) -> AsyncIterator[str]:
    """A loopback TCP server that reads a request's head and answers ``answer`` verbatim (broken HTTP,
    say); yields its ``/v1`` base URL."""

    async def respond(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        writer.close()

    listener = await asyncio.start_server(respond, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}/v1"
    finally:
        listener.close()
        await listener.wait_closed()


def make_model(server: OpenAIServer | str, **options: Any) -> OpenAIChatModel:
    """A model talking to ``server`` (or a base URL) with quick retries and :data:`API_KEY`.

    ``options`` override the constructor's arguments.
    """
    base_url = server if isinstance(server, str) else server.base_url
    settings: dict[str, Any] = {"base_url": base_url, "api_key": API_KEY, "retry": FAST_RETRY}
    settings.update(options)
    return OpenAIChatModel("test-model", **settings)


def ask(text: str = "hi", **options: Any) -> ChatRequest:
    """A one-message request."""
    return ChatRequest((Msg.user(text),), **options)
