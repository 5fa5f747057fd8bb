"""The session API as a curl user reads it (a session's messages, a run's status, result and usage),
deleting a session, cancelling a queued run, the health checks, and what the server keeps in memory (idle
sessions leave it after a TTL; refused requests leave nothing behind). Real servers on 127.0.0.1.

Bad inputs tried: unknown sessions and runs on every new endpoint, malformed session and run ids, a run id
of another session, cancelling a running run, a finished one, a cancelled one and one never queued,
deleting a session whose run is going or queued, deleting twice, a DELETE from another origin, the health
checks without the token (allowed), a POST to them, a store that stopped answering, and requests for new
session ids refused for their body, their content type, their size, their AG-UI input or their state.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse
from rxagent.agent import ReActAgent
from rxagent.clock import VirtualClock
from rxagent.model.types import Usage
from tests.serve.conftest import WAIT, Live, ValveModel, is_result_of, serving

TOKEN = "tok-admin-51c2-NEVER-SHOWN"


async def _call(live: Live, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
    """Any method; the status and the decoded answer."""
    async with live.http.request(method, path, **kwargs) as response:
        return response.status, await response.json()


async def _ended(live: Live, session: str, run_id: str) -> dict[str, Any]:
    """Follow the session's feed to the run's result; then the run as ``GET …/runs/{id}`` has it."""
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        await feed.until(is_result_of(run_id))
    status, run = await live.get(f"/api/sessions/{session}/runs/{run_id}")
    assert status == 200, run
    return run


# ---- reading -----------------------------------------------------------------------------------------------


async def test_a_sessions_messages_are_read_as_its_log_has_them() -> None:
    async with serving(ReActAgent(ScriptedModel(["Hello, Ada."]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "I am Ada."})
        await _ended(live, "s", answer["run_id"])
        status, read = await live.get("/api/sessions/s/messages")
        assert status == 200
        assert read["session_id"] == "s"
        assert [(m["role"], m["content"]) for m in read["messages"]] == [
            ("user", [{"type": "text", "text": "I am Ada."}]),
            ("assistant", [{"type": "text", "text": "Hello, Ada."}]),
        ]
        assert all(m["id"].startswith("msg_") for m in read["messages"])
        assert (await live.get("/api/sessions/nope/messages"))[0] == 404
        status, refused = await live.get("/api/sessions/-bad/messages")
        assert status == 400
        assert "a session id is" in refused["error"]


async def test_a_run_is_read_while_queued_while_running_and_once_it_ended() -> None:
    model = ValveModel(
        ScriptedResponse(text="first", chunk_size=1, usage=Usage(input_tokens=7, output_tokens=5)),
        ScriptedResponse(text="second", usage=Usage(input_tokens=9, output_tokens=1)),
    )
    async with serving(ReActAgent(model)) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "one"})
        _, second = await live.post("/api/sessions/s/runs", {"input": "two"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)  # the first runs, held by the valve
        _, running = await live.get(f"/api/sessions/s/runs/{first['run_id']}")
        assert running == {
            "run_id": first["run_id"],
            "status": "running",
            "position": None,
            "started": None,
            "ended": None,
            "reason": None,
            "error": None,
            "result": None,
            "usage": None,
        }
        _, queued = await live.get(f"/api/sessions/s/runs/{second['run_id']}")
        assert (queued["status"], queued["position"]) == ("queued", 1)
        model.open()
        done = await _ended(live, "s", first["run_id"])
        assert done["status"] == "finished"
        assert done["reason"] == "MODEL_STOP"
        assert done["error"] is None
        assert 0 < done["started"] < done["ended"]
        assert done["result"]["message"]["content"] == [{"type": "text", "text": "first"}]
        assert done["result"]["reason"] == "MODEL_STOP"
        assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == (7, 5)
        assert done["usage"] == done["result"]["usage"]
        later = await _ended(live, "s", second["run_id"])
        assert (later["status"], later["usage"]["input_tokens"]) == ("finished", 9)
        assert later["started"] > done["ended"]


async def test_a_failed_run_says_why() -> None:
    async with serving(ReActAgent(ScriptedModel([RuntimeError("the model is not loaded")]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        run = await _ended(live, "s", answer["run_id"])
        assert run["status"] == "failed"
        assert "the model is not loaded" in run["error"]
        assert run["result"]["reason"] == "ERROR"


async def test_unknown_and_malformed_runs_are_refused() -> None:
    async with serving(ReActAgent(ScriptedModel(["a", "b"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await _ended(live, "s", answer["run_id"])
        _, other = await live.post("/api/sessions/t/runs", {"input": "hi"})
        await _ended(live, "t", other["run_id"])
        for method in ("GET", "DELETE"):
            async with live.http.request(method, "/api/sessions/s/runs/run_nope") as response:
                assert response.status == 404
                assert "no run 'run_nope'" in (await response.json())["error"]
            async with live.http.request(method, f"/api/sessions/s/runs/{other['run_id']}") as response:
                assert response.status == 404  # a run of another session is not this one's
            async with live.http.request(method, "/api/sessions/nope/runs/run_nope") as response:
                assert (response.status, await response.json()) == (404, {"error": "no session 'nope'"})
            async with live.http.request(method, "/api/sessions/s/runs/-run") as response:
                assert response.status == 400
                assert "a run id is" in (await response.json())["error"]


# ---- cancelling and deleting -------------------------------------------------------------------------------


async def test_a_queued_run_is_cancelled_and_others_are_not() -> None:
    model = ValveModel(ScriptedResponse(text="only", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "one"})
        _, second = await live.post("/api/sessions/s/runs", {"input": "two"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        status, refused = await _call(live, "DELETE", f"/api/sessions/s/runs/{first['run_id']}")
        assert status == 409
        assert "is running: interrupt it (POST /api/sessions/s/interrupt)" in refused["error"]
        status, cancelled = await _call(live, "DELETE", f"/api/sessions/s/runs/{second['run_id']}")
        assert (status, cancelled) == (200, {"run_id": second["run_id"], "cancelled": True})
        _, read = await live.get(f"/api/sessions/s/runs/{second['run_id']}")
        assert (read["status"], read["started"]) == ("cancelled", None)  # it never began: not in the log
        status, again = await _call(live, "DELETE", f"/api/sessions/s/runs/{second['run_id']}")
        assert (status, again["run_status"]) == (409, "cancelled")
        assert "was cancelled" in again["error"]
        model.open()
        await _ended(live, "s", first["run_id"])
        status, ended = await _call(live, "DELETE", f"/api/sessions/s/runs/{first['run_id']}")
        assert (status, ended["run_status"]) == (409, "finished")
        _, turns = await live.get("/api/sessions/s/turns")
        assert [[r["run_id"] for r in t["runs"]] for t in turns["turns"]] == [[first["run_id"]]]


async def test_a_session_is_deleted_with_its_log_and_its_feed_ends() -> None:
    async with serving(ReActAgent(ScriptedModel(["one", "two"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await _ended(live, "s", answer["run_id"])
        async with live.sse("/api/sessions/s/feed") as feed:
            await feed.until(is_result_of(answer["run_id"]))
            status, _ = await _call(
                live, "DELETE", "/api/sessions/s", headers={"Origin": "http://evil.example"}
            )
            assert status == 403
            status, deleted = await _call(live, "DELETE", "/api/sessions/s")
            assert (status, deleted) == (200, {"session_id": "s", "deleted": True})
            assert await feed.rest() == []  # its feed ended, with nothing more
        assert (await live.get("/api/sessions/s"))[0] == 404
        assert (await live.get(f"/api/sessions/s/runs/{answer['run_id']}"))[0] == 404
        assert (await live.get("/api/sessions"))[1] == {"sessions": []}
        assert (await _call(live, "DELETE", "/api/sessions/s"))[0] == 404
        assert (await _call(live, "DELETE", "/api/sessions/-s"))[0] == 400
        # The id can be used again: a new session, numbered from the start.
        _, again = await live.post("/api/sessions/s/runs", {"input": "again"})
        await _ended(live, "s", again["run_id"])
        _, read = await live.get("/api/sessions/s/messages")
        assert [m["content"][0]["text"] for m in read["messages"]] == ["again", "two"]


async def test_a_session_whose_run_is_going_is_not_deleted() -> None:
    model = ValveModel(ScriptedResponse(text="slow", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        status, refused = await _call(live, "DELETE", "/api/sessions/s")
        assert (status, refused["state"]) == (409, "running")
        assert "interrupt it (POST /api/sessions/s/interrupt) or cancel it" in refused["error"]
        assert (await live.post("/api/sessions/s/interrupt"))[1] == {"interrupted": True}
        model.open()
        run = await _ended(live, "s", answer["run_id"])
        assert run["reason"] == "INTERRUPTED"
        assert (await _call(live, "DELETE", "/api/sessions/s"))[0] == 200


# ---- health ------------------------------------------------------------------------------------------------


async def test_the_health_checks_need_no_token_and_tell_no_secret(tmp_path: Path) -> None:
    agent = ReActAgent(ScriptedModel(["ok"]), store=str(tmp_path / "sessions.db"))
    async with serving(agent, token=TOKEN) as live:
        assert await live.get("/healthz") == (200, {"status": "ok"})
        assert await live.get("/readyz") == (200, {"status": "ready"})
        async with live.http.head("/healthz") as response:
            assert response.status == 200
        assert (await live.post("/healthz", {}))[0] == 401  # only the checks themselves are open
        assert (await live.get("/api/sessions"))[0] == 401
        await agent.store.aclose()  # the store stops answering
        for path in ("/healthz", "/readyz"):
            status, answer = await live.get(path)
            assert status == 503
            assert answer == {
                "status": "unavailable",
                "error": "the session store does not answer (the server's log says why)",
            }


async def test_readyz_says_stopping_once_the_server_stops_its_work() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"]))) as live:
        assert await live.get("/readyz") == (200, {"status": "ready"})
        await live.server.hub.stop()  # what AgentServer.stop does once it stopped listening
        # A connection kept alive (a load balancer's) hears it, and sends no more work.
        assert await live.get("/readyz") == (503, {"status": "stopping", "error": "the server is stopping"})
        assert (await live.post("/api/sessions/s/runs", {"input": "hi"}))[0] == 503


# ---- memory ------------------------------------------------------------------------------------------------


async def test_idle_sessions_leave_memory_after_the_ttl_and_come_back_from_the_log() -> None:
    clock = VirtualClock()
    model = ValveModel(*(ScriptedResponse(text=f"answer {n}") for n in range(4)))
    model.open()
    agent = ReActAgent(model, clock=clock)
    async with serving(agent, session_ttl=600) as live:
        hub = live.server.hub
        for session in ("a", "b", "watched"):
            await live.post(f"/api/sessions/{session}/runs", {"input": "hi"})
            await clock.run(hub.handle(session).wait())
        model.close()
        _, busy = await live.post("/api/sessions/busy/runs", {"input": "slow"})  # held by the valve
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        async with live.sse("/api/sessions/watched/feed") as feed:
            await feed.next()
            assert hub.in_memory == 4
            await clock.advance(599)
            assert hub.in_memory == 4
            await clock.advance(150)  # idle for the TTL (checked every quarter of it): gone, but for the
            assert hub.in_memory == 2  # one running and the one watched
            assert agent.keeper.cached((None, "a")) is None  # the projection kept between runs too
        # Read again, it comes back from its log, whole.
        _, read = await live.get("/api/sessions/a/messages")
        assert [m["content"][0]["text"] for m in read["messages"]] == ["hi", "answer 0"]
        assert hub.in_memory == 3
        model.open()
        await clock.run(hub.handle("busy").wait())
        _, run = await live.get(f"/api/sessions/busy/runs/{busy['run_id']}")
        assert run["status"] == "finished"


REFUSED: list[tuple[str, str, dict[str, Any]]] = [
    ("POST", "/api/sessions/new1/runs", {"json": {"input": ""}}),
    ("POST", "/api/sessions/new2/runs", {"json": {"input": "hi", "extra": 1}}),
    ("POST", "/api/sessions/new3/runs", {"data": "input=hi"}),
    ("POST", "/api/sessions/new4/runs", {"json": {"input": "x" * 4096}}),
    ("POST", "/api/sessions/new5/steer", {"json": {"message": "hi"}}),
    ("POST", "/api/sessions/new6/respond", {"json": {"decisions": [{"call_id": "c", "allow": True}]}}),
    ("POST", "/api/sessions/new7/interrupt", {}),
    ("GET", "/api/sessions/new8/feed", {}),
    ("GET", "/api/sessions/new9/messages", {}),
    ("DELETE", "/api/sessions/new10", {}),
    (
        "POST",
        "/ag-ui",
        {
            "json": {
                "threadId": "new11",
                "runId": "r",
                "messages": [{"id": "m", "role": "user", "content": " "}],
            }
        },
    ),
    ("POST", "/ag-ui", {"json": {"threadId": "new12", "runId": "r", "messages": []}}),
]
"""Requests for sessions that do not exist, each refused (4xx)."""


async def test_refused_requests_for_new_session_ids_leave_nothing_in_memory() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), max_body=2048) as live:
        for method, path, kwargs in REFUSED:
            async with live.http.request(method, path, **kwargs) as response:
                assert 400 <= response.status < 500, (path, await response.text())
            assert live.server.hub.in_memory == 0, path
        assert not await live.agent.sessions.list()
        for n in range(1, 13):
            assert live.agent.keeper.cached((None, f"new{n}")) is None
        # A request that is not refused keeps its session, of course.
        assert (await live.post("/api/sessions/kept/runs", {"input": "hi"}))[0] == 202
        assert live.server.hub.in_memory == 1


@pytest.mark.parametrize("origin", ["http://evil.example", "null"])
async def test_deleting_from_another_origin_is_refused(origin: str) -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"]))) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "hi"})
        await _ended(live, "s", answer["run_id"])
        for path in ("/api/sessions/s", f"/api/sessions/s/runs/{answer['run_id']}"):
            status, refused = await _call(live, "DELETE", path, headers={"Origin": origin})
            assert status == 403
            assert "another origin" in refused["error"]
        assert (await live.get("/api/sessions/s"))[0] == 200
