"""The sessions list, live over SSE (``GET /api/feed``), and what the dashboard's list drives: deleting a
session, cancelling a queued run, "always allow" on an approval; and the sign-in page a browser gets
without the token.

Bad inputs tried: deleting a session whose run is going, or that does not exist; cancelling a run that
runs, one that does not exist, one cancelled already; ``always`` that is not a boolean, or with a
denial; the page with no token and with a wrong one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.agent.grants import SESSION_RULES
from rxagent.context import RuntimeContext
from rxagent.serve.dashboard import sign_in_page
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import SSE, WAIT, Live, SSEReader, ValveModel, fact_events, is_result_of, serving

TOKEN = "tok-SIGN-IN-never-echoed"

ran: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(order)
    return f"refunded {order}"


def asks(order: str, call_id: str) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": order}, id=call_id)])


async def delete(live: Live, path: str) -> tuple[int, Any]:
    async with live.http.delete(path) as response:
        return response.status, await response.json()


async def until_summary(feed: SSEReader, session: str, state: str) -> dict[str, Any]:
    """Read the list's feed until it says ``session`` is in ``state``; that summary."""
    while True:
        event = await feed.next()
        assert event is not None, "the list's feed ended"
        found = _summaries(event)
        if session in found and found[session]["state"] == state:
            return found[session]


def _summaries(event: SSE) -> dict[str, dict[str, Any]]:
    if event.event == "sessions":
        return {s["session_id"]: s for s in event.json()["sessions"]}
    if event.event == "session":
        summary = event.json()
        return {summary["session_id"]: summary}
    return {}


async def result_of(live: Live, session: str, run_id: str) -> list[dict[str, Any]]:
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        return fact_events(await feed.until(is_result_of(run_id)))


async def test_the_list_comes_whole_then_each_change_with_titles_and_states() -> None:
    model = ValveModel(
        ScriptedResponse(text="First answer."),
        asks("A-1", "r1"),
        ScriptedResponse(error=RuntimeError("the model server fell over")),
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live, live.sse("/api/feed") as feed:
        first = await feed.next()
        assert first is not None
        assert (first.event, first.json()) == ("sessions", {"sessions": []})
        await live.post("/api/sessions/chat/runs", {"input": "Hello **there**\nsecond line"})
        running = await until_summary(feed, "chat", "running")
        assert running["title"] == "Hello **there**\nsecond line"
        model.open()
        idle = await until_summary(feed, "chat", "idle")
        assert (idle["title"], idle["error"], idle["queued"]) == (running["title"], None, 0)

        await live.post("/api/sessions/ask/runs", {"input": "refund A-1"})
        waiting = await until_summary(feed, "ask", "waiting_for_approval")
        assert waiting["title"] == "refund A-1"

        await live.post("/api/sessions/bad/runs", {"input": "break"})
        failed = await until_summary(feed, "bad", "failed")
        assert failed["error"] == "RuntimeError: the model server fell over"

        assert await delete(live, "/api/sessions/chat") == (200, {"session_id": "chat", "deleted": True})
        while (event := await feed.next()) is not None and event.event != "removed":
            pass
        assert event is not None
        assert event.json() == {"session_id": "chat"}

    # A client that comes later gets the list as it is now, newest first.
    async with serving(agent) as live, live.sse("/api/feed") as feed:
        now = await feed.next()
        assert now is not None
        listed = [(s["session_id"], s["state"]) for s in now.json()["sessions"]]
        assert listed == [("bad", "failed"), ("ask", "waiting_for_approval")]


async def test_a_queued_run_is_listed_and_cancelled_and_a_running_one_is_not() -> None:
    model = ValveModel(ScriptedResponse(text="slow"), ScriptedResponse(text="never"))
    async with serving(ReActAgent(model)) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "first"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        _, second = await live.post("/api/sessions/s/runs", {"input": "second, queued"})
        status, session = await live.get("/api/sessions/s")
        assert status == 200
        assert session["status"]["queued_runs"] == [
            {"run_id": second["run_id"], "position": session["status"]["queued_runs"][0]["position"],
             "input": "second, queued"}
        ]  # fmt: skip
        status, refused = await delete(live, f"/api/sessions/s/runs/{first['run_id']}")
        assert status == 409
        assert "is running: interrupt it" in refused["error"]
        status, refused = await delete(live, "/api/sessions/s")
        assert (status, refused["state"]) == (409, "running")
        assert await delete(live, f"/api/sessions/s/runs/{second['run_id']}") == (
            200,
            {"run_id": second["run_id"], "cancelled": True},
        )
        status, answer = await delete(live, "/api/sessions/s/runs/run_unknown")
        assert status == 404, answer
        # Cancelled already: refused (a server that still remembers the run says how it ended, 409).
        status, answer = await delete(live, f"/api/sessions/s/runs/{second['run_id']}")
        assert status in (404, 409), answer
        model.open()
        await result_of(live, "s", first["run_id"])
        status, session = await live.get("/api/sessions/s")
        assert (session["status"]["state"], session["status"]["queued_runs"]) == ("idle", [])
        state = await live.agent.sessions.state(RuntimeContext(session_id="s"))
        assert [m.text for m in state.messages] == ["first", "slow"]  # the cancelled run never ran
        assert (await delete(live, "/api/sessions/nobody"))[0] == 404


async def test_always_allow_over_http_records_the_rule_and_the_next_call_runs_without_asking() -> None:
    ran.clear()
    model = ScriptedModel([asks("A-1", "r1"), "Refunded A-1.", asks("B-2", "r2"), "Refunded B-2."])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        _, run = await live.post("/api/sessions/s/runs", {"input": "refund A-1"})
        await result_of(live, "s", run["run_id"])
        for bad, said in (
            ({"call_id": "r1", "allow": True, "always": "yes"}, "'always' must be true or false"),
            ({"call_id": "r1", "allow": False, "always": True}, "'always' comes with an approval"),
        ):
            status, answer = await live.post("/api/sessions/s/respond", {"decisions": [bad]})
            assert status in (400, 409), answer
            assert said in answer["error"]
        assert ran == []
        status, run = await live.post(
            "/api/sessions/s/respond", {"decisions": [{"call_id": "r1", "allow": True, "always": True}]}
        )
        assert status == 202, run
        await result_of(live, "s", run["run_id"])
        _, run = await live.post("/api/sessions/s/runs", {"input": "refund B-2"})
        facts = await result_of(live, "s", run["run_id"])
        assert ran == ["A-1", "B-2"]
        assert facts[-1]["data"]["reason"] == "MODEL_STOP"
        rules = [f["data"]["extras"][SESSION_RULES] for f in facts if f["kind"] == "extras"]
        assert rules[-1] == [{"decision": "allow", "tool": "refund", "call_id": "r1", "reason": ""}]


async def test_a_browser_without_the_token_gets_a_sign_in_form_not_json() -> None:
    async with serving(ReActAgent(ScriptedModel([])), token=TOKEN) as live:
        for path, wrong in (("/", False), ("/?token=wrong", True)):
            async with aiohttp.ClientSession() as browser, browser.get(live.url + path) as response:
                assert response.status == 401
                assert response.headers["Content-Type"] == "text/html; charset=utf-8"
                policy = response.headers["Content-Security-Policy"]
                body = await response.text()
            assert "script-src" not in policy
            assert "default-src 'none'" in policy
            assert "form-action 'self'" in policy
            assert '<form id="sign-in" method="get" action="/"' in body
            assert 'name="token" type="password"' in body
            assert "<script" not in body
            assert ("not this server's token" in body) is wrong
            assert TOKEN not in body
            assert "wrong" not in body.split("<main>")[1].split("token.")[0]  # what was given is not shown
            assert body.encode() == sign_in_page(wrong)[0]
        # The API still answers JSON, and the form's address signs in as the link always did.
        status, answer = await live.get("/api/sessions")
        assert status == 401
        assert "needs its token" in answer["error"]
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as browser:
            async with browser.get(f"{live.url}/?token={TOKEN}", allow_redirects=False) as response:
                assert response.status == 303
                assert response.cookies[f"rxagent_token_{live.url.rsplit(':', 1)[1]}"].value == TOKEN
            async with browser.get(live.url + "/") as response:
                assert response.status == 200
                assert "Content-Security-Policy" in response.headers
