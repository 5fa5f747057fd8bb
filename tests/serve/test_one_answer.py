"""One answer per pending call over HTTP, on a real ``rxagent serve`` app on 127.0.0.1: an allow and a
deny sent at once (two dashboard tabs clicking together), a hundred times, over the session API and over
AG-UI. One is taken; the other is refused with 409 before any run starts, naming the call and the answer
taken; the tool runs at most once, exactly when the allow was taken. Two servers on one SQLite file (two
processes sharing sessions) hold the same line: the lease decides.

Bad inputs tried: a second answer to a pending call at the same moment as the first (each way round),
through one server and through two; a resume entry for an interrupt another resume answered.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxagent.serve import AgentServer, ServeSettings
from rxagent.session import SQLiteStore
from tests.agent.refunds import refund_agent, refunds
from tests.serve.conftest import WAIT, Live, serving

ROUNDS = 100


@pytest.fixture(autouse=True)
def no_refunds() -> None:
    refunds.clear()


async def run_ends(live: Live, session: str, run_id: str) -> str:
    """Wait for a run submitted over HTTP to end; its reason."""
    run = live.server.hub.handle(session).last_run
    assert run is not None
    assert run.id == run_id
    return (await asyncio.wait_for(run, WAIT)).reason


async def post(http: aiohttp.ClientSession, path: str, body: Any) -> tuple[int, Any]:
    """POST JSON; the status and the answer (JSON, or an AG-UI stream read to its end, as text)."""
    async with http.post(path, json=body, timeout=aiohttp.ClientTimeout(total=WAIT)) as response:
        if response.content_type == "text/event-stream":
            return response.status, await response.text()
        return response.status, await response.json()


def decision(call_id: str, allow: bool) -> dict[str, Any]:
    return {"decisions": [{"call_id": call_id, "allow": allow}]}


def check_one_taken(
    outcomes: dict[bool, tuple[int, Any]], call_id: str, order: str, taken: Counter[str]
) -> tuple[bool, Any]:
    """Exactly one answer taken (2xx) and one refused (409 naming the call and the answer taken); the tool
    ran exactly when the allow was taken. Returns which was taken and its answer."""
    statuses = sorted(status for status, _ in outcomes.values())
    assert statuses[1] == 409, outcomes
    assert statuses[0] in (200, 202), outcomes
    [(allowed, answer)] = [(a, body) for a, (status, body) in outcomes.items() if status != 409]
    [refusal] = [body for status, body in outcomes.values() if status == 409]
    kind = "approval" if allowed else "denial"
    assert (refusal["call_id"], refusal["taken"]) == (call_id, kind), refusal
    assert refusal["error"].startswith(f"tool call '{call_id}' was answered already: ")
    taken[kind] += 1
    return allowed, answer


async def test_allow_and_deny_at_once_over_the_session_api_one_is_taken() -> None:
    taken: Counter[str] = Counter()
    async with serving(refund_agent()) as live:
        for round_ in range(ROUNDS):
            session, order = f"s{round_}", f"S-{round_}"
            call_id = f"r-{order}"
            _, started = await live.post(f"/api/sessions/{session}/runs", {"input": order})
            assert await run_ends(live, session, started["run_id"]) == "PERMISSION_ASKING"
            first = round_ % 2 == 0  # each answer goes first in half the rounds
            sent = [
                post(live.http, f"/api/sessions/{session}/respond", decision(call_id, first)),
                post(live.http, f"/api/sessions/{session}/respond", decision(call_id, not first)),
            ]
            one, other = await asyncio.gather(*sent)
            allowed, answer = check_one_taken({first: one, not first: other}, call_id, order, taken)
            assert await run_ends(live, session, answer["run_id"]) == "MODEL_STOP"
            refusal = one[1] if one[0] == 409 else other[1]
            assert refusal["taken_by"] == answer["run_id"]
            assert refunds[order] == (1 if allowed else 0)
            facts = await live.agent.sessions.facts(live.server.hub.handle(session).ctx)
            assert [f.kind for f in facts].count("run_started") == 2  # the refused answer started no run
            assert [f.kind for f in facts].count("decision") == 1
    assert taken["approval"] > 0
    assert taken["denial"] > 0
    assert sum(refunds.values()) == taken["approval"]
    print(f"\nsession API: {dict(taken)} taken in {ROUNDS} rounds")


def agui_input(thread: str, run: str, messages: list[tuple[str, str]], resume: Any = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "threadId": thread,
        "runId": run,
        "state": {},
        "messages": [{"id": i, "role": "user", "content": text} for i, text in messages],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    if resume is not None:
        body["resume"] = resume
    return body


def stream_events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[len("data: ") :]) for line in text.splitlines() if line.startswith("data: ")]


async def test_allow_and_deny_resumes_at_once_over_agui_one_is_taken() -> None:
    taken: Counter[str] = Counter()
    async with serving(refund_agent()) as live:
        for round_ in range(ROUNDS):
            thread, order = f"t{round_}", f"A-{round_}"
            call_id = f"r-{order}"
            asked = [("m1", order)]
            status, stream = await post(live.http, "/ag-ui", agui_input(thread, "run-1", asked))
            assert status == 200
            assert stream_events(stream)[-1]["outcome"]["type"] == "interrupt"
            first = round_ % 2 == 0

            def resume(allow: bool) -> dict[str, Any]:
                entry = {"interruptId": call_id, "status": "resolved", "payload": allow}  # noqa: B023
                return agui_input(thread, f"run-{allow}", asked, [entry])  # noqa: B023

            one, other = await asyncio.gather(
                post(live.http, "/ag-ui", resume(first)), post(live.http, "/ag-ui", resume(not first))
            )
            allowed, answer = check_one_taken({first: one, not first: other}, call_id, order, taken)
            events = stream_events(answer)
            assert events[-1]["type"] == "RUN_FINISHED"
            assert events[-1]["outcome"]["type"] == "success"
            results = [e for e in events if e["type"] == "TOOL_CALL_RESULT"]
            assert [r["toolCallId"] for r in results] == [call_id]  # told once, denial or not
            assert results[0]["metadata"]["status"] == ("ok" if allowed else "denied")
            assert refunds[order] == (1 if allowed else 0)
    assert taken["approval"] > 0
    assert taken["denial"] > 0
    assert sum(refunds.values()) == taken["approval"]
    print(f"\nAG-UI: {dict(taken)} taken in {ROUNDS} rounds")


async def test_two_servers_on_one_file_take_one_answer_per_call(tmp_path: Path) -> None:
    path = tmp_path / "sessions.db"
    taken: Counter[str] = Counter()
    rounds = 30  # the second server polls for the lease: slower rounds, the same contract
    agents = [refund_agent(SQLiteStore(path)), refund_agent(SQLiteStore(path))]
    servers = [AgentServer(agent, ServeSettings(port=0)) for agent in agents]
    try:
        for server in servers:
            await server.start()
        async with (
            aiohttp.ClientSession(base_url=servers[0].url) as left,
            aiohttp.ClientSession(base_url=servers[1].url) as right,
        ):
            for round_ in range(rounds):
                session, order = f"two-{round_}", f"D-{round_}"
                call_id = f"r-{order}"
                status, _ = await post(left, f"/api/sessions/{session}/runs", {"input": order})
                assert status == 202
                await asyncio.wait_for(servers[0].hub.handle(session).wait(), WAIT)
                first = round_ % 2 == 0
                one, other = await asyncio.gather(
                    post(left, f"/api/sessions/{session}/respond", decision(call_id, first)),
                    post(right, f"/api/sessions/{session}/respond", decision(call_id, not first)),
                )
                allowed, _ = check_one_taken({first: one, not first: other}, call_id, order, taken)
                for server in servers:
                    await asyncio.wait_for(server.hub.handle(session).wait(), WAIT)
                assert refunds[order] == (1 if allowed else 0)
                facts = await agents[0].sessions.facts(servers[0].hub.handle(session).ctx)
                assert [f.kind for f in facts].count("decision") == 1
                assert [f.kind for f in facts].count("run_started") == 2
    finally:
        for server in servers:
            await server.stop()
        for agent in agents:
            await agent.aclose()
    assert taken["approval"] > 0
    assert taken["denial"] > 0
    assert sum(refunds.values()) == taken["approval"]
    print(f"\ntwo servers: {dict(taken)} taken in {rounds} rounds")
