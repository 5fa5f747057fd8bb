"""Bad input never reaches the log, on a real ``rxagent serve`` app on 127.0.0.1 over a real SQLite file.

Every POST route of the session API and AG-UI gets each bad body: a lone surrogate (``"\\udc80"``, which
JSON can spell and UTF-8 cannot encode), lists nested 10 000 deep, and a body of 1 MiB + 1 byte. Each is
refused with 400 or 413 and a clear message; the log holds nothing of it (its facts are the same, byte for
byte, before and after); and the session still works afterwards (the waiting call is answered, a new run
answers). A log that holds an unreadable fact (written into the SQLite file by hand) is reported with the
fact's sequence number (409), not with a 500 on every read, and other sessions go on.

Bad inputs tried: the three above on ``/runs``, ``/steer``, ``/respond``, ``/interrupt`` and ``/ag-ui``;
a lone surrogate in an object key; nesting one level past the limit (and exactly at it, accepted); a valid
surrogate pair spelled with escapes (an emoji: accepted); a damaged ``message`` fact and a damaged
``run_started`` fact.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.operators import to_list
from rxagent.session import SQLiteStore, StoredFact, UnreadableFactError
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, Live, serving

refunds: list[str] = []

LIMIT = 1 << 20
"""The server's default body limit (``ServeSettings.max_body``)."""


@tool
def refund(order: str) -> str:
    """Refund an order."""
    refunds.append(order)
    return f"refunded {order}"


def clerk(request: ChatRequest) -> ScriptedResponse | str:
    """Asks to refund when told to; answers anything else."""
    last = request.messages[-1]
    if last.role == "user" and last.text.startswith("refund "):
        order = last.text.removeprefix("refund ")
        return ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": order}, id="r1")])
    if last.role == "tool":
        return f"answered: {last.tool_results[0].text}"
    return f"answered: {last.text}"


def refund_agent(path: Path) -> ReActAgent:
    return ReActAgent(
        FunctionModel(clerk),
        Toolkit([refund]),
        permissions=Permissions().ask("refund"),
        store=SQLiteStore(path),
    )


@pytest.fixture(autouse=True)
def no_refunds() -> None:
    refunds.clear()


def agui_body(thread: str, text: str, resume: Any = None, forwarded: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": "r",
        "state": {},
        "messages": [{"id": "m-" + str(abs(hash(text))), "role": "user", "content": text}],
        "tools": [],
        "context": [],
        "forwardedProps": {} if forwarded is None else forwarded,
    }
    if resume is not None:
        body["resume"] = resume
    return body


LONE = "\udc80"

ROUTES: list[tuple[str, dict[str, Any]]] = [
    ("/api/sessions/s/runs", {"input": f"hi {LONE}"}),
    ("/api/sessions/s/steer", {"message": f"{LONE} steer"}),
    ("/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": False, "reason": f"no {LONE}"}]}),
    ("/api/sessions/s/interrupt", {f"{LONE}": True}),  # in a key
    (
        "/ag-ui",
        agui_body("s", "x", resume=[{"interruptId": "r1", "payload": {"allow": False, "reason": LONE}}]),
    ),
]
"""Each POST route, with a body that would fit it but for a lone surrogate."""


async def raw_post(live: Live, path: str, data: bytes) -> tuple[int, Any]:
    async with live.http.post(path, data=data, headers={"Content-Type": "application/json"}) as response:
        return response.status, await response.json()


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


async def log_of(agent: ReActAgent, session: str) -> list[StoredFact]:
    return await agent.sessions.facts(RuntimeContext(session_id=session))


async def waiting_session(live: Live) -> None:
    _, started = await live.post("/api/sessions/s/runs", {"input": "refund A-1"})
    run = live.server.hub.handle("s").last_run
    assert run is not None
    assert run.id == started["run_id"]
    assert (await asyncio.wait_for(run, WAIT)).reason == "PERMISSION_ASKING"


@pytest.mark.parametrize(("path", "body"), ROUTES, ids=[p for p, _ in ROUTES])
async def test_each_route_refuses_bad_bodies_and_the_log_keeps_nothing_of_them(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    agent = refund_agent(tmp_path / "sessions.db")
    async with serving(agent) as live:
        await waiting_session(live)
        before = await log_of(agent, "s")
        status_before = await live.get("/api/sessions/s")

        data = json.dumps(body).encode()  # ensure_ascii: the surrogate travels as the escape \udc80
        assert b"\\udc80" in data
        status, error = await raw_post(live, path, data)
        assert status == 400, error
        assert "lone surrogate" in error["error"]
        assert "not valid Unicode" in error["error"]

        deep = f'{{"input": {nested(10_000)}}}'.encode()
        status, error = await raw_post(live, path, deep)
        assert status == 400, error
        assert "deeper than 100 levels" in error["error"]

        filler = b"x" * (LIMIT + 1 - len(b'{"input": ""}'))
        huge = b'{"input": "' + filler + b'"}'
        assert len(huge) == LIMIT + 1
        status, error = await raw_post(live, path, huge)
        assert status == 413, error
        assert f"over the limit of {LIMIT} bytes" in error["error"]

        after = await log_of(agent, "s")
        assert after == before  # nothing of the refused requests reached the log
        assert not [f for f in after if "udc80" in f.payload or LONE in f.payload]
        assert await live.get("/api/sessions/s") == status_before

        # The session still works: its call is answered, and a new run answers.
        status, answered = await live.post(
            "/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": True}]}
        )
        assert status == 202, answered
        run = live.server.hub.handle("s").last_run
        assert run is not None
        assert (await asyncio.wait_for(run, WAIT)).text == "answered: refunded A-1"
        assert refunds == ["A-1"]
        status, again = await live.post("/api/sessions/s/runs", {"input": "still there?"})
        assert status == 202
        run = live.server.hub.handle("s").last_run
        assert run is not None
        assert run.id == again["run_id"]
        assert (await asyncio.wait_for(run, WAIT)).text == "answered: still there?"


async def test_nesting_is_refused_one_level_past_the_limit_and_valid_surrogate_pairs_pass(
    tmp_path: Path,
) -> None:
    agent = refund_agent(tmp_path / "sessions.db")
    async with serving(agent) as live:
        # The body is one level; forwardedProps takes any JSON: 99 more levels make 100, accepted.
        at_limit = json.loads(nested(99))
        async with live.http.post("/ag-ui", json=agui_body("t", "hi", forwarded=at_limit)) as response:
            assert response.status == 200
            assert "RUN_FINISHED" in await response.text()
        await asyncio.wait_for(live.server.hub.handle("t").wait(), WAIT)
        head = len(await log_of(agent, "t"))
        past = json.loads(nested(100))
        status, error = await live.post("/ag-ui", agui_body("t", "again", forwarded=past))
        assert status == 400
        assert "deeper than 100 levels" in error["error"]
        assert len(await log_of(agent, "t")) == head
        # Brackets inside strings are text, not nesting.
        status, accepted = await live.post("/api/sessions/u/runs", {"input": "[" * 5000})
        assert status == 202, accepted
        # An emoji spelled as an escaped surrogate pair is valid text.
        status, accepted = await live.post("/api/sessions/u/runs", {"input": "smile \U0001f600"})
        assert status == 202, accepted
        handle = live.server.hub.handle("u")
        await asyncio.wait_for(handle.wait(), WAIT)
        texts = [m.text for m in (await agent.sessions.state(handle.ctx)).messages if m.role == "user"]
        assert texts == ["[" * 5000, "smile \U0001f600"]


def damage(path: Path, session: str, kind: str, payload: str) -> int:
    """Overwrite the payload of the session's first fact of ``kind`` in the SQLite file; its seq."""
    with sqlite3.connect(path) as conn:
        row = conn.execute(
            "SELECT f.seq FROM facts f JOIN sessions s ON s.id = f.session "
            "WHERE s.session_id = ? AND f.kind = ? ORDER BY f.seq LIMIT 1",
            (session, kind),
        ).fetchone()
        seq = int(row[0])
        conn.execute(
            "UPDATE facts SET payload = ? "
            "WHERE seq = ? AND session = (SELECT id FROM sessions WHERE session_id = ?)",
            (payload, seq, session),
        )
    return seq


async def test_an_unreadable_fact_is_reported_with_its_sequence_number_not_a_500(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    first = refund_agent(path)
    async with serving(first) as live:
        for session in ("broken", "fine"):
            await live.post(f"/api/sessions/{session}/runs", {"input": f"hello {session}"})
            await asyncio.wait_for(live.server.hub.handle(session).wait(), WAIT)
    message_seq = damage(path, "broken", "message", '{"message": {"role": 5, "content": "')

    agent = refund_agent(path)
    async with serving(agent) as live:
        before = await log_of(agent, "broken")
        for _ in range(2):  # every read says the same, and says where
            status, error = await live.get("/api/sessions/broken")
            assert status == 409, error
            assert error["unreadable_fact"] == message_seq
            assert f"fact {message_seq} (message) of the session's log cannot be read" in error["error"]
            assert "fork it before that fact" in error["error"]
        status, turns = await live.get("/api/sessions/broken/turns")  # turns do not read messages
        assert status == 200
        assert [t["input"] for t in turns["turns"]] == [["hello broken"]]
        status, error = await live.post("/api/sessions/broken/runs", {"input": "more"})
        assert (status, error["unreadable_fact"]) == (409, message_seq)
        assert await log_of(agent, "broken") == before  # the refused run recorded nothing
        # The Python API says the same, and a run on it fails before it starts, with no event.
        ctx = RuntimeContext(session_id="broken")
        with pytest.raises(UnreadableFactError) as unreadable:
            await agent.sessions.state(ctx)
        assert (unreadable.value.seq, unreadable.value.kind) == (message_seq, "message")
        seen: list[AgentEvent] = []
        with pytest.raises(UnreadableFactError):
            seen = await to_list(agent.stream_events("more", ctx))
        assert seen == []
        # Other sessions go on.
        assert (await live.get("/api/sessions"))[0] == 200
        assert (await live.post("/api/sessions/fine/runs", {"input": "still fine?"}))[0] == 202
        await asyncio.wait_for(live.server.hub.handle("fine").wait(), WAIT)
        assert (await live.get("/api/sessions/fine"))[1]["status"]["state"] == "idle"

    run_seq = damage(path, "broken", "run_started", "not json at all")
    agent = refund_agent(path)
    async with serving(agent) as live:
        status, error = await live.get("/api/sessions/broken/turns")
        assert status == 409, error
        assert error["unreadable_fact"] == run_seq
        assert f"fact {run_seq} (run_started)" in error["error"]
