"""What the serve tests share: a real server on 127.0.0.1, an HTTP client, an SSE reader, and models the
test paces (so "mid-run" is a place the test chooses, not a race)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from playwright.async_api import Browser, async_playwright
from reactivex import Observable

from rxagent.agent import ReActAgent, SessionHandle
from rxagent.chunks import ChatChunk
from rxagent.model.scripted import ScriptedModel, ScriptStep
from rxagent.model.types import ChatRequest, ModelCapabilities
from rxagent.operators import from_async_iterable, to_async_iterator
from rxagent.serve import AgentServer, ServeSettings
from rxagent.session import FeedGap

WAIT = 10.0
"""The longest any single wait in these tests may take."""


class ValveModel:
    """A scripted model whose chunks pass only as the test lets them: :meth:`release` lets ``n`` more
    through (:meth:`open`: all from now on). ``chunks_sent`` counts those that went out."""

    def __init__(self, *script: ScriptStep) -> None:
        self.inner = ScriptedModel(list(script))
        self._permits = asyncio.Semaphore(0)
        self._open = False
        self.chunks_sent = 0
        self._sent = asyncio.Condition()
        self.waiting = asyncio.Event()
        """Set while a chunk waits for a permit."""

    @property
    def model_name(self) -> str:
        return "valve"

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.inner.capabilities

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        async def chunks() -> AsyncIterator[ChatChunk]:
            async for chunk in to_async_iterator(self.inner.stream(request)):
                if not self._open:
                    self.waiting.set()
                    await self._permits.acquire()
                    self.waiting.clear()
                async with self._sent:
                    self.chunks_sent += 1
                    self._sent.notify_all()
                yield chunk

        return from_async_iterable(chunks)

    def release(self, n: int = 1) -> None:
        for _ in range(n):
            self._permits.release()

    def open(self) -> None:
        self._open = True
        self.release(1_000_000)

    def close(self) -> None:
        """From now on chunks wait for :meth:`release` again."""
        self._open = False
        self._permits = asyncio.Semaphore(0)

    async def until_sent(self, n: int) -> None:
        """Wait until ``n`` chunks in all have gone out."""
        async with self._sent:
            await asyncio.wait_for(self._sent.wait_for(lambda: self.chunks_sent >= n), WAIT)


@dataclass
class SSE:
    """One server-sent event as a client reads it."""

    event: str = "message"
    data: str = ""
    id: str | None = None

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass
class SSEReader:
    """Reads SSE events off a response, keeping the comment lines it passed (heartbeats)."""

    response: aiohttp.ClientResponse
    comments: list[str] = field(default_factory=lambda: [])

    async def next(self) -> SSE | None:
        """The next event (``None`` at the end of the stream); comment lines are kept in ``comments``."""
        while True:
            item = await self._next_item()
            if not isinstance(item, str):
                return item

    async def next_comment(self) -> str:
        """Read on to the next comment line (a heartbeat) and return it; events on the way must not come."""
        item = await self._next_item()
        assert isinstance(item, str), f"an event came where only a heartbeat was due: {item}"
        return item

    async def _next_item(self) -> SSE | str | None:
        current = SSE()
        fields = 0
        while True:
            raw = await asyncio.wait_for(self.response.content.readline(), WAIT)
            if not raw:
                return None
            line = raw.decode().rstrip("\r\n")
            if not line:
                if fields:
                    return current
                continue
            if line.startswith(":"):
                comment = line[1:].strip()
                self.comments.append(comment)
                if not fields:
                    return comment
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            fields += 1
            if name == "event":
                current.event = value
            elif name == "data":
                current.data = value if not current.data else current.data + "\n" + value
            elif name == "id":
                current.id = value

    async def until(self, stop: Callable[[SSE], bool]) -> list[SSE]:
        """Every event up to and including the first ``stop`` accepts."""
        seen: list[SSE] = []
        while True:
            event = await self.next()
            assert event is not None, f"the stream ended after {len(seen)} events"
            seen.append(event)
            if stop(event):
                return seen

    async def rest(self) -> list[SSE]:
        """Every event to the end of the stream."""
        seen: list[SSE] = []
        while (event := await self.next()) is not None:
            seen.append(event)
        return seen


@dataclass
class Live:
    """A running server and a client session pointed at it."""

    server: AgentServer
    http: aiohttp.ClientSession
    agent: ReActAgent

    @property
    def url(self) -> str:
        return self.server.url

    async def post(self, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        """POST JSON; the status and the decoded answer."""
        async with self.http.post(path, json=body, **kwargs) as response:
            return response.status, await response.json()

    async def get(self, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.http.get(path, **kwargs) as response:
            return response.status, await response.json()

    @asynccontextmanager
    async def sse(self, path: str, **kwargs: Any) -> AsyncIterator[SSEReader]:
        """An open SSE response to ``GET path`` (or ``POST`` with ``json=``), read with :class:`SSEReader`."""
        method = "POST" if "json" in kwargs else "GET"
        async with self.http.request(method, path, timeout=aiohttp.ClientTimeout(total=None), **kwargs) as r:
            assert r.status == 200, await r.text()
            assert r.headers["Content-Type"].startswith("text/event-stream")
            try:
                yield SSEReader(r)
            finally:
                r.close()  # leave mid-stream: the connection closes, as a browser tab's would


@asynccontextmanager
async def serving(agent: ReActAgent, **settings: Any) -> AsyncIterator[Live]:
    """``agent``'s sessions served on 127.0.0.1 (a free port), with a client; stopped and closed after."""
    server = AgentServer(agent, ServeSettings(port=0, **settings))
    async with server, aiohttp.ClientSession(base_url=server.url) as http:
        yield Live(server, http, agent)
    await agent.aclose()


async def head_reaches(handle: SessionHandle, seq: int) -> None:
    """Wait until the session's feed has published fact ``seq``."""
    feed = await handle.open_feed()
    if feed.head >= seq:
        return
    async with asyncio.timeout(WAIT):
        async for batch in feed.watch_batches(feed.head):
            if not isinstance(batch, FeedGap) and batch[-1].seq >= seq:
                return


def fact_events(events: list[SSE]) -> list[dict[str, Any]]:
    """The ``data`` of each ``fact`` event."""
    return [e.json() for e in events if e.event == "fact"]


def is_result_of(run_id: str) -> Callable[[SSE], bool]:
    """Whether a feed event is the ``agent_result`` event of ``run_id``."""

    def check(event: SSE) -> bool:
        if event.event != "fact":
            return False
        data = event.json()
        return (
            data["kind"] == "event"
            and data["data"]["type"] == "agent_result"
            and data["data"]["run_id"] == run_id
        )

    return check


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for every test that drives the dashboard (see ``tests/serve/browser.py``). In
    CI a missing browser fails the tests; elsewhere it skips them, saying why (the set-up could not
    install it)."""
    from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS

    if not CHROMIUM.exists():
        problem = (
            f"Chromium is not at {CHROMIUM}: `bash scripts/test.sh` installs it with apt-get (as root, or "
            "with sudo); set RXAGENT_CHROMIUM to use another"
        )
        if os.environ.get("CI"):
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
