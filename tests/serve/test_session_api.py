"""The session API on a real server on 127.0.0.1: reading sessions, the SSE feed, driving runs.

Bad inputs tried (each answered 4xx with nothing changed — the session's head and status are checked
after): a body that is not JSON, a JSON array, another content type, a missing field, an unknown field,
wrong types (a number for the input, "yes" for allow, a list for arguments, a status that is not ok or
error), an empty text, an invalid session id, unknown sessions on every endpoint, a negative, non-numeric
or future ``after`` and ``Last-Event-ID``, no answers at all, an unknown call id, a result for a call that
asks for approval, a decision for an external call, two answers for one call, a denial with edited
arguments, edited arguments the tool's schema refuses, answers while a run is going, new input and steering
while calls wait for answers.
"""

from __future__ import annotations

import asyncio
import json
import socket
from typing import Any

import aiohttp
import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.clock import VirtualClock
from rxagent.events import event_from_json
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, ValveModel, fact_events, head_reaches, is_result_of, serving

refunds: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    refunds.append(order)
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external tools do not run here")


@pytest.fixture(autouse=True)
def no_refunds() -> None:
    refunds.clear()


def refund_agent(*script: Any, **options: Any) -> ReActAgent:
    return ReActAgent(
        ScriptedModel(list(script)),
        Toolkit([refund, sign]),
        permissions=Permissions().ask("refund"),
        options=AgentOptions(**options),
    )


def asks_refund(order: str = "A-1", call_id: str = "r1") -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": order}, id=call_id)])


# ---- runs and the feed ------------------------------------------------------------------------------------


async def test_a_run_streams_on_the_feed_exactly_as_the_log_has_it() -> None:
    model = ScriptedModel([ScriptedResponse(text="Hello there, traveller.", chunk_size=3)])
    async with serving(ReActAgent(model)) as live:
        status, answer = await live.post("/api/sessions/s1/runs", {"input": "hi"})
        assert status == 202
        run_id = answer["run_id"]
        async with live.sse("/api/sessions/s1/feed") as feed:
            events = await feed.until(is_result_of(run_id))
        facts = fact_events(events)
        assert [f["seq"] for f in facts] == list(range(1, len(facts) + 1))  # no gap, no duplicate
        assert [e.id for e in events] == [str(f["seq"]) for f in facts]
        stored = await live.agent.sessions.facts(live.server.hub.handle("s1").ctx)
        assert [(f["seq"], f["kind"], f["run_id"]) for f in facts] == [
            (s.seq, s.kind, s.run_id) for s in stored[: len(facts)]
        ]
        run_events = [event_from_json(json.dumps(f["data"])) for f in facts if f["kind"] == "event"]
        assert run_events[0].type == "run_started"
        assert "".join(e.text for e in run_events if e.type == "text_delta") == "Hello there, traveller."  # type: ignore[union-attr]
        assert run_events[-1].type == "agent_result"


async def test_sessions_are_listed_and_read_with_their_turns() -> None:
    async with serving(ReActAgent(ScriptedModel(["one", "two"]))) as live:
        for session in ("older", "newer"):
            _, answer = await live.post(f"/api/sessions/{session}/runs", {"input": f"hi {session}"})
            await _result_of(live, session, answer["run_id"])
        status, listing = await live.get("/api/sessions")
        assert status == 200
        assert [s["session_id"] for s in listing["sessions"]] == ["newer", "older"]
        status, session = await live.get("/api/sessions/older")
        assert status == 200
        assert session["session_id"] == "older"
        assert session["head"] == listing["sessions"][1]["facts"] > 0
        assert session["status"] == {
            "state": "idle",
            "running": None,
            "queued": 0,
            "pending": [],
            "held_elsewhere": False,
            "position": None,
            "uncertain": [],
            "queued_runs": [],
        }
        status, turns = await live.get("/api/sessions/older/turns")
        assert status == 200
        (turn,) = turns["turns"]
        assert turn["input"] == ["hi older"]
        assert [(r["outcome"], r["reason"]) for r in turn["runs"]] == [("finished", "MODEL_STOP")]


async def test_the_feed_resumes_after_last_event_id_with_no_gap_and_no_duplicate() -> None:
    model = ValveModel(ScriptedResponse(text="abcdefghijklmnopqrstuvwxyz", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "letters"})
        run_id = answer["run_id"]
        model.release(5)
        async with live.sse("/api/sessions/s/feed") as feed:
            first = await feed.until(lambda e: e.event == "fact" and _delta(e) == "e")
        # The client went away mid-run; it comes back with the id of the last event it read, and `after=0`
        # which the header overrides.
        last_id = first[-1].id
        assert last_id is not None
        async with live.sse("/api/sessions/s/feed?after=0", headers={"Last-Event-ID": last_id}) as feed:
            model.open()
            second = await feed.until(is_result_of(run_id))
        seqs = [f["seq"] for f in fact_events(first + second)]
        assert seqs == list(range(1, len(seqs) + 1))
        text = "".join(d for e in first + second if (d := _delta(e)) is not None)
        assert text == "abcdefghijklmnopqrstuvwxyz"
        async with live.sse(f"/api/sessions/s/feed?after={last_id}") as feed:  # `after` alone, too
            third = await feed.until(is_result_of(run_id))
        assert [f["seq"] for f in fact_events(third)] == seqs[int(last_id) :]


async def test_an_idle_feed_sends_a_heartbeat_after_15_seconds_of_silence() -> None:
    clock = VirtualClock()
    async with serving(ReActAgent(ScriptedModel(["hi"]), clock=clock)) as live:  # the default heartbeat
        _, answer = await live.post("/api/sessions/quiet/runs", {"input": "hello"})
        async with live.sse("/api/sessions/quiet/feed") as feed:
            await clock.run(feed.until(is_result_of(answer["run_id"])))
            # Nothing more happens: after 15 s of silence the server pings, and only pings.
            await clock.advance(15)
            assert await feed.next_comment() == "ping"
            await clock.advance(15)
            assert await feed.next_comment() == "ping"


async def test_a_client_that_takes_nothing_for_send_timeout_is_dropped_and_the_run_goes_on() -> None:
    clock = VirtualClock()
    model = ScriptedModel([ScriptedResponse(text="w" * 20_000, chunk_size=1)])
    async with serving(ReActAgent(model, clock=clock), send_timeout=60) as live:
        await live.post("/api/sessions/s/runs", {"input": "first"})  # the session exists
        handle = live.server.hub.handle("s")
        await clock.run(handle.wait())
        model.extend(ScriptedResponse(text="v" * 20_000, chunk_size=1))
        host, port = live.url.removeprefix("http://").split(":")
        _, writer = await _stalled_client(host, int(port), "/api/sessions/s/feed")
        try:
            (stream,) = live.server.hub.streams
            _, answer = await live.post("/api/sessions/s/runs", {"input": "second"})
            await clock.run(handle.wait())  # the stalled client fills its buffers, then waits
            assert (await live.agent.sessions.state(handle.ctx)).messages[-1].text == "v" * 20_000
            await clock.advance(60)
            await clock.advance(60)  # well past the deadline with data waiting: dropped
            await asyncio.wait_for(stream.closed.wait(), WAIT)
            assert not live.server.hub.streams
            turns = (await live.get("/api/sessions/s/turns"))[1]["turns"]
            assert turns[-1]["runs"][0]["run_id"] == answer["run_id"]
        finally:
            writer.close()


async def test_a_client_that_disconnects_never_stops_the_run() -> None:
    model = ValveModel(ScriptedResponse(text="x" * 50, chunk_size=1))
    agent = ReActAgent(model)
    async with serving(agent) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "go"})
        model.release(3)
        async with live.sse("/api/sessions/s/feed") as feed:
            await feed.until(lambda e: _delta(e) == "x")
            (stream,) = live.server.hub.streams
        await asyncio.wait_for(stream.closed.wait(), WAIT)  # the server noticed the client left
        assert not live.server.hub.streams
        assert (await live.server.hub.handle("s").open_feed()).watchers == 0  # its watcher let go
        model.open()
        handle = live.server.hub.handle("s")
        await asyncio.wait_for(handle.wait(), WAIT)
        _, turns = await live.get("/api/sessions/s/turns")
        assert [(r["run_id"], r["outcome"]) for r in turns["turns"][0]["runs"]] == [
            (answer["run_id"], "finished")
        ]
        assert (await agent.sessions.state(handle.ctx)).messages[-1].text == "x" * 50


async def test_a_stalled_client_holds_bounded_memory_and_then_catches_up_exactly() -> None:
    """A client connects and reads nothing while a long answer streams: the server queues nothing for it
    (its connection's buffer stays under a bound however long the answer), and when it reads it gets
    every fact, in order, from the log."""
    model = ValveModel(ScriptedResponse(text="y" * 30_000, chunk_size=1))
    async with serving(ReActAgent(model), send_timeout=WAIT * 6) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "long"})
        handle = live.server.hub.handle("s")
        host, port = live.url.removeprefix("http://").split(":")
        reader, writer = await _stalled_client(host, int(port), "/api/sessions/s/feed")
        try:
            (stream,) = live.server.hub.streams  # the answer's headers came: the stream is open
            transport = stream.request.transport
            assert transport is not None
            feed = await handle.open_feed()
            buffered: list[int] = []
            for deltas in (3_000, 30_000):  # the answer grows 10x while the client reads nothing
                model.release(deltas - model.chunks_sent)
                await model.until_sent(deltas)
                await head_reaches(handle, deltas)
                buffered.append(transport.get_write_buffer_size())
                assert feed.held <= feed.capacity
            assert max(buffered) < 512 * 1024, buffered
            model.open()
            await asyncio.wait_for(handle.wait(), WAIT)
            head = feed.head
            assert await _read_all_seqs(reader, head) == list(range(1, head + 1))
            assert (await live.get("/api/sessions/s/turns"))[1]["turns"][0]["runs"][0]["run_id"] == answer[
                "run_id"
            ]
        finally:
            writer.close()


# ---- driving -----------------------------------------------------------------------------------------------


async def test_an_approval_through_respond_runs_the_call_once() -> None:
    agent = refund_agent(asks_refund(), "Refunded.")
    async with serving(agent) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "refund A-1"})
        await _result_of(live, "s", answer["run_id"])
        _, session = await live.get("/api/sessions/s")
        status = session["status"]
        assert status["state"] == "waiting_for_approval"
        (pending,) = status["pending"]
        assert (pending["id"], pending["name"], pending["kind"], pending["input"]) == (
            "r1",
            "refund",
            "ask",
            {"order": "A-1"},
        )
        assert refunds == []
        code, answer = await live.post(
            "/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": True}]}
        )
        assert code == 202
        events = await _result_of(live, "s", answer["run_id"])
        assert events[-1]["data"]["reason"] == "MODEL_STOP"
        assert refunds == ["A-1"]
        _, session = await live.get("/api/sessions/s")
        assert session["status"]["state"] == "idle"


async def test_an_external_result_and_an_edited_approval_answer_together() -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )
    agent = refund_agent(both, "Done.")
    async with serving(agent) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "refund and sign"})
        await _result_of(live, "s", answer["run_id"])
        code, answer = await live.post(
            "/api/sessions/s/respond",
            {
                "decisions": [{"call_id": "r1", "allow": True, "arguments": {"order": "A-2"}}],
                "results": [{"call_id": "e1", "output": "signed by Ada"}],
            },
        )
        assert code == 202
        await _result_of(live, "s", answer["run_id"])
        assert refunds == ["A-2"]


async def test_interrupt_ends_the_running_run_and_says_whether_one_was_going() -> None:
    model = ValveModel(ScriptedResponse(text="slow answer", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "go"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        assert await live.post("/api/sessions/s/interrupt") == (200, {"interrupted": True})
        events = await _result_of(live, "s", answer["run_id"])
        assert events[-1]["data"]["reason"] == "INTERRUPTED"
        assert await live.post("/api/sessions/s/interrupt") == (200, {"interrupted": False})


async def test_steer_reaches_the_running_run() -> None:
    model = ValveModel(
        ScriptedResponse(tool_calls=[ScriptedToolCall("sign_off", {})]), ScriptedResponse(text="Done.")
    )

    @tool
    def sign_off() -> str:
        """Sign off."""
        return "ok"

    agent = ReActAgent(model, Toolkit([sign_off]))
    async with serving(agent) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "go"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        assert await live.post("/api/sessions/s/steer", {"message": "Be brief."}) == (202, {})
        model.open()
        await _result_of(live, "s", answer["run_id"])
        second = model.inner.requests[1]
        assert [m.text for m in second.messages][-1] == "Be brief."


# ---- bad input ---------------------------------------------------------------------------------------------

BAD_RUN_BODIES: list[tuple[Any, str, int, str]] = [
    ("{not json", "application/json", 400, "not valid JSON"),
    ("[1, 2]", "application/json", 400, "must be a JSON object"),
    ('{"input": "hi"}', "text/plain", 415, "application/json"),
    ("{}", "application/json", 400, "missing field(s): 'input'"),
    ('{"input": "hi", "extra": 1}', "application/json", 400, "unknown field(s): 'extra'"),
    ('{"input": 123}', "application/json", 400, "'input' must be a string, not int"),
    ('{"input": null}', "application/json", 400, "'input' must be a string, not null"),
    ('{"input": "   "}', "application/json", 400, "'input' must not be empty"),
]


@pytest.mark.parametrize(("body", "content_type", "status", "message"), BAD_RUN_BODIES)
async def test_bad_run_bodies_are_refused_and_change_nothing(
    body: str, content_type: str, status: int, message: str
) -> None:
    async with serving(ReActAgent(ScriptedModel(["first"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "first"})
        await _result_of(live, "s", answer["run_id"])
        before = await live.get("/api/sessions/s")
        async with live.http.post(
            "/api/sessions/s/runs", data=body, headers={"Content-Type": content_type}
        ) as response:
            assert response.status == status
            error = (await response.json())["error"]
        assert message in error
        assert await live.get("/api/sessions/s") == before
        async with live.http.post(
            "/api/sessions/new/runs", data=body, headers={"Content-Type": content_type}
        ) as response:
            assert response.status == status
        assert (await live.get("/api/sessions/new"))[0] == 404  # no session was made


async def test_unknown_sessions_and_invalid_ids() -> None:
    async with serving(ReActAgent(ScriptedModel([]))) as live:
        for path in ("", "/turns", "/feed"):
            status, answer = await live.get(f"/api/sessions/nobody{path}")
            assert (status, answer) == (404, {"error": "no session 'nobody'"})
        for path, body in (
            ("/steer", {"message": "hi"}),
            ("/respond", {"decisions": [{"call_id": "c", "allow": True}]}),
            ("/interrupt", None),
        ):
            assert (await live.post(f"/api/sessions/nobody{path}", body))[0] == 404
        for bad in ("bad%20id", "-starts-with-dash", "x" * 129, "semi;colon"):
            status, answer = await live.post(f"/api/sessions/{bad}/runs", {"input": "hi"})
            assert status == 400, bad
            assert "session id" in answer["error"]
        assert (await live.get("/api/sessions"))[1] == {"sessions": []}
        async with live.http.head("/api/sessions/nobody/feed") as response:
            assert response.status == 405  # a HEAD would hold a watcher for nothing
        status, answer = await live.get("/api/nothing-here")
        assert status == 404
        assert "error" in answer


@pytest.mark.parametrize(
    ("query", "headers", "message"),
    [
        ("?after=-1", {}, "after must be 0 or more"),
        ("?after=abc", {}, "after must be a whole number"),
        ("", {"Last-Event-ID": "x7"}, "Last-Event-ID must be a whole number"),
    ],
)
async def test_bad_feed_positions_are_refused(query: str, headers: dict[str, str], message: str) -> None:
    async with serving(ReActAgent(ScriptedModel(["hi"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await _result_of(live, "s", answer["run_id"])
        status, error = await live.get(f"/api/sessions/s/feed{query}", headers=headers)
        assert status == 400
        assert message in error["error"]


@pytest.mark.parametrize(("query", "headers"), [("?after=100000", {}), ("", {"Last-Event-ID": "100000"})])
async def test_a_feed_position_past_the_logs_head_is_told_where_to_reconnect_from(
    query: str, headers: dict[str, str]
) -> None:
    async with serving(ReActAgent(ScriptedModel(["hi"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await _result_of(live, "s", answer["run_id"])
        _, session = await live.get("/api/sessions/s")
        head = session["head"]

        status, refused = await live.get(f"/api/sessions/s/feed{query}", headers=headers)

        assert status == 409  # never a silent skip to the head
        assert (refused["head"], refused["reconnect_from"]) == (head, head)
        assert f"Reconnect from {head}" in refused["error"]
        async with live.sse("/api/sessions/s/feed", headers={"Last-Event-ID": str(head - 1)}) as feed:
            last = await feed.next()  # from where it was told: the log's last fact, then live
        assert last is not None
        assert last.id == str(head)


BAD_RESPONSES: list[tuple[Any, int, str]] = [
    ({}, 400, "at least one entry"),
    ({"decisions": [], "results": []}, 400, "at least one entry"),
    ({"decisions": {"call_id": "r1"}}, 400, "'decisions' must be a list"),
    ({"decisions": ["r1"]}, 400, "decisions[0]: an entry must be an object"),
    ({"decisions": [{"call_id": "r1"}]}, 400, "decisions[0]: missing field(s): 'allow'"),
    ({"decisions": [{"call_id": "r1", "allow": "yes"}]}, 400, "'allow' must be true or false"),
    (
        {"decisions": [{"call_id": "r1", "allow": True, "arguments": [1]}]},
        400,
        "'arguments' must be an object",
    ),
    ({"decisions": [{"call_id": "", "allow": True}]}, 400, "'call_id' must not be empty"),
    (
        {"results": [{"call_id": "e1", "output": "x", "status": "maybe"}]},
        400,
        "'status' must be 'ok' or 'error'",
    ),
    ({"results": [{"call_id": "e1", "output": 5}]}, 400, "'output' must be a string"),
    ({"answers": []}, 400, "unknown field(s): 'answers'"),
    ({"decisions": [{"call_id": "nope", "allow": True}]}, 409, "no pending tool call with id 'nope'"),
    ({"results": [{"call_id": "r1", "output": "done"}]}, 409, "asks for permission, not a result"),
    ({"decisions": [{"call_id": "e1", "allow": True}]}, 409, "is external: send an ExternalResult"),
    (
        {"decisions": [{"call_id": "r1", "allow": True}, {"call_id": "r1", "allow": False}]},
        409,
        "two answers for tool call 'r1'",
    ),
    (
        {"decisions": [{"call_id": "r1", "allow": False, "arguments": {"order": "B"}}]},
        409,
        "edited arguments come with an approval",
    ),
    (
        {"decisions": [{"call_id": "r1", "allow": True, "arguments": {"order": 5, "nope": 1}}]},
        409,
        "the edited arguments were refused",
    ),
]


@pytest.mark.parametrize(("body", "status", "message"), BAD_RESPONSES)
async def test_bad_answers_are_refused_and_change_nothing(body: Any, status: int, message: str) -> None:
    both = ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
            ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
        ]
    )
    async with serving(refund_agent(both, "Done.")) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "refund and sign"})
        await _result_of(live, "s", answer["run_id"])
        before = await live.get("/api/sessions/s")
        code, error = await live.post("/api/sessions/s/respond", body)
        assert code == status, error
        assert message in error["error"]
        assert await live.get("/api/sessions/s") == before
        assert refunds == []


async def test_while_calls_wait_new_input_and_steering_are_refused() -> None:
    async with serving(refund_agent(asks_refund())) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "refund"})
        await _result_of(live, "s", answer["run_id"])
        before = await live.get("/api/sessions/s")
        for path, body in (("/runs", {"input": "something else"}), ("/steer", {"message": "hurry"})):
            code, error = await live.post(f"/api/sessions/s{path}", body)
            assert code == 409
            assert "waits for answers to tool calls (refund (r1, ask))" in error["error"]
        assert await live.get("/api/sessions/s") == before


async def test_a_second_answer_while_the_first_one_runs_is_refused_naming_the_first() -> None:
    model = ValveModel(asks_refund(), ScriptedResponse(text="later"))
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "refund"})
        model.open()
        await _result_of(live, "s", first["run_id"])
        model.close()  # the next run waits for the test
        _, answer = await live.post(
            "/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": False}]}
        )
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        code, error = await live.post(
            "/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": True}]}
        )
        assert code == 409
        assert (error["call_id"], error["taken"], error["taken_by"]) == ("r1", "denial", answer["run_id"])
        assert error["error"].startswith("tool call 'r1' was answered already: denied by run")
        model.open()
        await _result_of(live, "s", answer["run_id"])
        assert refunds == []


# ---- helpers ----------------------------------------------------------------------------------------------


def _delta(event: Any) -> str | None:
    if event.event != "fact":
        return None
    data = event.json()
    if data["kind"] == "event" and data["data"]["type"] == "text_delta":
        return str(data["data"]["text"])
    return None


async def _result_of(live: Any, session: str, run_id: str) -> list[dict[str, Any]]:
    """The session's feed up to the run's result (the facts' data)."""
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        return fact_events(await feed.until(is_result_of(run_id)))


async def _stalled_client(
    host: str, port: int, path: str
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A client with a small receive buffer that sends the request and then reads nothing."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (host, port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    await writer.drain()
    status = await asyncio.wait_for(reader.readline(), WAIT)
    assert status.startswith(b"HTTP/1.1 200"), status
    while (await asyncio.wait_for(reader.readline(), WAIT)).strip():  # the headers; then it stalls
        pass
    return reader, writer


async def _read_all_seqs(reader: asyncio.StreamReader, head: int) -> list[int]:
    """The ``id:`` of every event the stalled client now reads, up to ``head``."""
    seqs: list[int] = []
    async with asyncio.timeout(WAIT * 3):
        while not seqs or seqs[-1] < head:
            line = await reader.readline()
            assert line, "the stream ended"
            if line.startswith(b"id: "):
                seqs.append(int(line[4:]))
    return seqs


async def test_a_stopped_server_starts_again_and_takes_work() -> None:
    async with serving(ReActAgent(ScriptedModel(["one", "two"]))) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "one"})
        await _result_of(live, "s", first["run_id"])
        await live.server.stop()
        with pytest.raises(RuntimeError, match="has not started"):
            _ = live.server.url
        await live.server.start()
        async with aiohttp.ClientSession(base_url=live.server.url) as http:
            async with http.post("/api/sessions/s/runs", json={"input": "two"}) as response:
                assert response.status == 202
            await asyncio.wait_for(live.server.hub.handle("s").wait(), WAIT)
            async with http.get("/api/sessions/s/turns") as response:
                assert len((await response.json())["turns"]) == 2


async def test_a_traceparent_joins_the_run_to_the_callers_trace_and_a_bad_one_is_ignored() -> None:
    async with serving(ReActAgent(ScriptedModel(["joined", "alone"]))) as live:
        trace = "4bf92f3577b34da6a3ce929d0e0e4736"
        header = {"traceparent": f"00-{trace}-00f067aa0ba902b7-01"}
        _, joined = await live.post("/api/sessions/s/runs", {"input": "one"}, headers=header)
        events = await _result_of(live, "s", joined["run_id"])
        assert {f["data"]["trace_id"] for f in events if f["kind"] == "event"} == {trace}
        _, alone = await live.post("/api/sessions/s/runs", {"input": "two"}, headers={"traceparent": "junk"})
        events = await _result_of(live, "s", alone["run_id"])
        traces = {
            f["data"]["trace_id"] for f in events if f["kind"] == "event" and f["run_id"] == alone["run_id"]
        }
        assert len(traces) == 1
        assert trace not in traces
