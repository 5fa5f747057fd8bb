"""The sessions list, live: each session's title and where it stands, pushed to clients as it changes.

``GET /api/feed`` (SSE) is what the dashboard's sessions list reads instead of asking again and again. It
sends the whole list first, then each change as it happens::

    event: sessions
    data: {"sessions": [<summary>, …]}          (newest first; again after a reconnect)

    event: session
    data: <summary>                             (a session that is new, or whose summary changed)

    event: removed
    data: {"session_id": "…"}                   (a session deleted)

A summary is ``{"session_id", "title", "state", "error", "facts", "updated_at", "owner", "queued"}``:
``title`` is the session's first input (its text, at most 200 characters; ``null`` for a session that began
some other way); ``state`` is ``running``, ``queued``, ``waiting_for_approval``, ``waiting_for_results``,
``uncertain``, ``failed`` (its last run failed: ``error`` says why) or ``idle``; ``facts``, ``updated_at``
and ``owner`` are as in ``GET /api/sessions``; ``queued`` counts the runs waiting on this server.

**How it stays current without every client asking.** While at least one client follows the list, the
server reads the store's list of sessions every :data:`INTERVAL` seconds (one small query: a row per
session, their heads and leases) and, for a session whose head moved, the first facts of its log once
(for its title) and the last few (for how its last run ended); the runs this server holds (queued, running,
waiting) it knows without reading. Clients are told only what changed; a client that reads slowly gets the
latest summary of each session it missed, never a backlog. The same list serves every client, so many tabs
cost the store what one does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast

from aiohttp import web

from rxagent.serve.hub import HUB, SESSION_ID, SessionHub
from rxagent.serve.streams import EventStream
from rxagent.session import SessionInfo, StoredFact

__all__ = ["INTERVAL", "ListedState", "SessionIndex", "Summary", "routes"]

INTERVAL = 0.25
"""Seconds between two reads of the store's list of sessions while clients follow it (the same pace at
which a session's feed reads a SQLite log another process writes)."""

_TAIL = 48
"""Facts read from the end of a changed session's log to find how its last run ended."""

_TITLE_FACTS = 8
"""Facts read from the start of a session's log to find its first input."""

ListedState: TypeAlias = Literal[
    "running", "queued", "waiting_for_approval", "waiting_for_results", "uncertain", "failed", "idle"
]
"""Where a session stands, as the list shows it (see the module)."""


@dataclass(frozen=True, slots=True)
class Summary:
    """One session as the list shows it (see the module for the fields)."""

    session_id: str
    title: str | None
    state: ListedState
    error: str | None
    facts: int
    updated_at: float
    owner: str | None
    queued: int

    def to_json(self) -> dict[str, Any]:
        """The summary as the feed writes it."""
        return {
            "session_id": self.session_id,
            "title": self.title,
            "state": self.state,
            "error": self.error,
            "facts": self.facts,
            "updated_at": self.updated_at,
            "owner": self.owner,
            "queued": self.queued,
        }


@dataclass(frozen=True, slots=True)
class _Read:
    """What the log said of a session at ``facts``: its title and how its last run ended."""

    facts: int
    owner: str | None
    title: str | None
    state: ListedState
    error: str | None


class SessionIndex:
    """The summaries of a hub's sessions, kept current while someone follows them (see the module).

    Args:
        hub: the sessions' hub.
        interval: seconds between two reads of the store's list.
    """

    def __init__(self, hub: SessionHub, interval: float = INTERVAL) -> None:
        self.hub = hub
        self.interval = interval
        self.current: dict[str, tuple[Summary, str]] = {}
        """Each session's summary and its encoding, newest first."""
        self.version = 0
        """Grows by one at each change of :attr:`current`."""
        self._read: dict[str, _Read] = {}
        self._changed = asyncio.Condition()
        self._refreshing = asyncio.Lock()
        self._followers = 0
        self._task: asyncio.Task[None] | None = None

    async def refresh(self) -> None:
        """Read the store's list (and the logs of sessions that changed) once; tell followers of changes."""
        async with self._refreshing:  # a new follower's refresh and the periodic one, one at a time
            await self._refresh()

    async def _refresh(self) -> None:
        # Sessions the API cannot name are a run's own (an agent used as a tool keeps its runs in
        # "{session}/{tool}/…"): the trace shows them, in their parent's.
        stored = await self.hub.agent.store.sessions()
        infos = [i for i in stored if i.key[0] is None and SESSION_ID.fullmatch(i.key[1])]
        infos.sort(key=lambda i: i.updated_at, reverse=True)
        summaries: dict[str, tuple[Summary, str]] = {}
        for info in infos:
            summary = await self._summary(info)
            old = self.current.get(summary.session_id)
            if old is not None and old[0] == summary:
                summaries[summary.session_id] = old
            else:
                encoded = json.dumps(summary.to_json(), separators=(",", ":"))
                summaries[summary.session_id] = (summary, encoded)
        for gone in set(self._read) - set(summaries):
            del self._read[gone]
        if list(summaries.items()) != list(self.current.items()):
            self.current = summaries
            async with self._changed:
                self.version += 1
                self._changed.notify_all()

    async def _summary(self, info: SessionInfo) -> Summary:
        session_id = info.key[1]
        read = self._read.get(session_id)
        if read is None or read.facts != info.facts or read.owner != info.owner:
            title = read.title if read is not None and read.facts <= info.facts else None
            read = self._read[session_id] = await self._read_log(info, title)
        state, error = read.state, read.error
        queued = 0
        handle = self.hub.known(session_id)
        if handle is not None:  # what this server holds of it is known without reading
            status = handle.status()
            queued = status.queued
            if status.state != "idle":  # "idle" here may be a session it never loaded: the log says more
                state, error = status.state, None
        return Summary(session_id, read.title, state, error, info.facts, info.updated_at, info.owner, queued)

    async def _read_log(self, info: SessionInfo, title: str | None) -> _Read:
        store = self.hub.agent.store
        if title is None:
            title = _title(await store.read(info.key, after=0, limit=_TITLE_FACTS))
        tail = await store.read(info.key, after=max(0, info.facts - _TAIL))
        state, error = _last_run(tail, info.owner)
        return _Read(info.facts, info.owner, title, state, error)

    async def wait(self, seen: int) -> int:
        """Wait until :attr:`version` is past ``seen``; the version then."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.version > seen)
            return self.version

    @contextlib.asynccontextmanager
    async def following(self) -> AsyncGenerator[SessionIndex]:
        """Keep the list current while the caller follows it (the first follower starts the reads; when the
        last one leaves they stop)."""
        self._followers += 1
        if self._followers == 1:
            self._task = asyncio.get_running_loop().create_task(self._keep(), name="rxagent.serve.sessions")
        try:
            yield self
        finally:
            self._followers -= 1
            if self._followers == 0:
                task, self._task = self._task, None
                if task is not None:
                    task.cancel()

    async def _keep(self) -> None:
        clock = self.hub.agent.clock
        while True:
            await self.refresh()
            await clock.sleep(self.interval)


def _title(facts: list[StoredFact]) -> str | None:
    """The text of a session's first input (its first run's, or its first user message's)."""
    for fact in facts:
        if fact.kind not in ("run_started", "message"):
            continue
        data: dict[str, Any] = json.loads(fact.payload)
        messages = data.get("input") if fact.kind == "run_started" else [data.get("message")]
        for message in cast("list[Any]", messages) if isinstance(messages, list) else []:
            text = _user_text(message)
            if text:
                return text[:200]
    return None


def _user_text(message: Any) -> str:
    """The text of a user message as JSON (``""`` for anything else)."""
    if not isinstance(message, dict):
        return ""
    data = cast("dict[str, Any]", message)
    content: Any = data.get("content")
    if data.get("role") != "user" or not isinstance(content, list):
        return ""
    blocks = [cast("dict[str, Any]", b) for b in cast("list[Any]", content) if isinstance(b, dict)]
    texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
    return " ".join(texts).strip()


def _last_run(tail: list[StoredFact], owner: str | None) -> tuple[ListedState, str | None]:
    """How the session's last run stands, from the end of its log."""
    for fact in reversed(tail):
        kind = fact.kind
        if kind == "run_failed":
            error = json.loads(fact.payload).get("error")
            return "failed", str(error)[:300] if error is not None else None
        if kind == "run_finished":
            reason = json.loads(fact.payload).get("reason")
            if reason == "ERROR":
                return "failed", _error_before(tail, fact.seq)
            if reason == "PERMISSION_ASKING":
                return "waiting_for_approval", None
            if reason == "TOOL_SUSPENDED":
                return "waiting_for_results", None
            return "idle", None
        if kind == "run_cancelled":
            return "idle", None
        if kind == "run_started":
            break
    # A run started and not ended: going (on a server holding the session), or left by one that stopped.
    return ("running" if owner is not None else "idle"), None


def _error_before(tail: list[StoredFact], seq: int) -> str | None:
    """The message of the last ``error`` event before fact ``seq`` in ``tail``, if any."""
    for fact in reversed(tail):
        if fact.seq < seq and fact.kind == "event" and '"error"' in fact.payload:
            data = json.loads(fact.payload)
            if data.get("type") == "error":
                return f"{data.get('error_type')}: {data.get('message')}"[:300]
    return None


def _encoded(summaries: dict[str, tuple[Summary, str]], session_id: str) -> str | None:
    known = summaries.get(session_id)
    return None if known is None else known[1]


def _removed(session_id: str) -> bytes:
    return _event("removed", json.dumps({"session_id": session_id}))


def _event(name: str, data: str) -> bytes:
    return f"event: {name}\ndata: {data}\n\n".encode()


SESSION_INDEX = web.AppKey("rxagent.serve.session_index", SessionIndex)
"""Where the app keeps its :class:`SessionIndex`."""


def install(app: web.Application) -> None:
    """Add the sessions list's route to ``app`` (its hub must be set)."""
    app[SESSION_INDEX] = SessionIndex(app[HUB])
    app.add_routes(routes())


def routes() -> list[web.RouteDef]:
    """The sessions list's route."""
    return [web.get("/api/feed", get_feed, allow_head=False)]


async def get_feed(request: web.Request) -> web.StreamResponse:
    """``GET /api/feed``: the sessions list, then its changes (SSE; see the module)."""
    hub = request.app[HUB]
    hub.refuse_while_stopping()
    index = request.app[SESSION_INDEX]
    settings = hub.settings
    stream = EventStream(
        request, heartbeat=settings.heartbeat, send_timeout=settings.send_timeout, clock=hub.agent.clock
    )

    async def body() -> None:
        async with index.following():
            await index.refresh()  # what the list is now, not when someone last followed it
            seen = index.version
            sent = dict(index.current)
            items = ",".join(encoded for _, encoded in sent.values())
            await stream.send(_event("sessions", '{"sessions":[' + items + "]}"))
            while True:
                seen = await index.wait(seen)
                now = index.current
                parts = [_event("session", e) for sid, (_, e) in now.items() if _encoded(sent, sid) != e]
                parts += [_removed(sid) for sid in sent if sid not in now]
                sent = dict(now)
                if parts:
                    await stream.send(b"".join(parts))

    await hub.serve_stream(stream, body)
    return stream.response
