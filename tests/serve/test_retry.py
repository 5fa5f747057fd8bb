"""One retry rule for both front-end doors (``rxagent.serve.retry``): AG-UI (``POST /ag-ui``) and the AI SDK's
chat route (``POST /api/chat``), each test run through both on a real server on 127.0.0.1.

A client retries a failed turn by sending its user message again with the same id; the turn runs again
from where it stopped, once. Bad inputs tried (each refused with 409, nothing run): the same message once
its turn is answered, an older message (a later turn follows it), the same message while its turn waits
for an approval, the same new message while a run carrying it waits in line, and two retries sent at once
(one runs).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, Live, ValveModel, serving
from tests.serve.test_agui import run_input
from tests.serve.test_agui_thread import Lockstep
from tests.serve.test_vercel_ai import chat_body, said, user

DOORS = ["ag-ui", "api-chat"]

ran: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    ran.append(city)
    return f"{city}: big"


@pytest.fixture(autouse=True)
def nothing_ran() -> None:
    ran.clear()


async def send(live: Live, door: str, sid: str, *turns: tuple[str, str]) -> tuple[int, str]:
    """Send ``turns`` (``(id, text)`` user messages, the last one counts) through ``door``: the status and
    the whole answer (the stream, or the refusal's JSON)."""
    if door == "ag-ui":
        path, body = "/ag-ui", run_input(sid, f"r{len(ran)}-{turns[-1][0]}", *turns)
    else:
        path, body = "/api/chat", chat_body(sid, *(user(i, said(text)) for i, text in turns))
    async with asyncio.timeout(WAIT), live.http.post(path, json=body) as answer:
        return answer.status, await answer.text()


def said_in(stream: str) -> str:
    """The text a stream's answer said (AG-UI's ``TEXT_MESSAGE_CONTENT``, the AI SDK's ``text-delta``)."""
    chunks = [json.loads(line[6:]) for line in stream.splitlines() if line.startswith("data: {")]
    return "".join(c["delta"] for c in chunks if c["type"] in ("TEXT_MESSAGE_CONTENT", "text-delta"))


def failed(stream: str) -> bool:
    """Whether a stream ends with the protocol's error (``RUN_ERROR``, or the AI SDK's ``error`` part)."""
    return '"type":"RUN_ERROR"' in stream or '"type":"error"' in stream


def refusal(answer: tuple[int, str]) -> str:
    status, text = answer
    assert status == 409, text
    return json.loads(text)["error"]


async def messages(agent: ReActAgent, sid: str) -> list[tuple[str, str]]:
    state = await agent.sessions.state(RuntimeContext(session_id=sid))
    return [(m.role, m.text) for m in state.messages]


@pytest.mark.parametrize("door", DOORS)
async def test_a_turn_that_failed_after_a_tool_round_runs_again_from_where_it_stopped_once(door: str) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Paris"}, id="c1")]),
            RuntimeError("the model fell over"),
            "Paris is big.",
            "never asked",
        ]
    )
    agent = ReActAgent(model, Toolkit([lookup]), options=AgentOptions(retry_budget=0))
    async with serving(agent) as live:
        status, stream = await send(live, door, "s", ("m1", "How big is Paris?"))
        assert status == 200
        assert failed(stream)
        await live.server.hub.handle("s").wait()

        status, stream = await send(live, door, "s", ("m1", "How big is Paris?"))  # the client's retry
        assert status == 200
        assert said_in(stream) == "Paris is big.", stream
        assert ran == ["Paris"]  # the tool round the failed run recorded stays: it is not run again
        retried = model.requests[2].messages
        assert [m.role for m in retried] == ["user", "assistant", "tool"]

        again = refusal(await send(live, door, "s", ("m1", "How big is Paris?")))
        assert again.startswith("nothing to run: ")
        assert "answered user message 'm1' already" in again
        assert len(model.requests) == 3
        assert [r for r, _ in await messages(agent, "s")] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.parametrize("door", DOORS)
async def test_an_older_message_is_nothing_to_run(door: str) -> None:
    agent = ReActAgent(ScriptedModel(["One.", "Two.", "never asked"]))
    async with serving(agent) as live:
        assert (await send(live, door, "s", ("m1", "first")))[0] == 200
        assert (await send(live, door, "s", ("m1", "first"), ("m2", "second")))[0] == 200

        older = refusal(await send(live, door, "s", ("m1", "first")))
        assert older.startswith("nothing to run: ")
        assert "user message 'm1' already, and turns after it" in older
        assert await messages(agent, "s") == [
            ("user", "first"),
            ("assistant", "One."),
            ("user", "second"),
            ("assistant", "Two."),
        ]


@pytest.mark.parametrize("door", DOORS)
async def test_a_retry_while_its_turn_waits_for_an_approval_is_refused(door: str) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("lookup", {"city": "Rome"}, id="c1")]), "never asked"]
    )
    agent = ReActAgent(model, Toolkit([lookup]), permissions=Permissions().ask("lookup"))
    async with serving(agent) as live:
        assert (await send(live, door, "s", ("m1", "Rome?")))[0] == 200
        waits = refusal(await send(live, door, "s", ("m1", "Rome?")))
        assert "waits for answers to tool calls (lookup (c1, ask))" in waits
        assert "running the turn of 'm1' again" in waits
        assert ran == []
        assert len(model.requests) == 1


@pytest.mark.parametrize("door", DOORS)
async def test_the_same_new_message_sent_again_while_its_run_waits_in_line_runs_once(
    door: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    valve = ValveModel("First.", "Second.", "never asked")
    agent = ReActAgent(valve)
    async with serving(agent) as live:
        assert (await live.post("/api/sessions/s/runs", {"input": "hold the line"}))[0] == 202
        hub, queued = live.server.hub, asyncio.Event()
        submit = hub.submit

        def submitted(*args: Any, **kwargs: Any) -> Any:
            run = submit(*args, **kwargs)
            queued.set()
            return run

        monkeypatch.setattr(hub, "submit", submitted)
        first = asyncio.ensure_future(send(live, door, "s", ("m2", "next")))
        await asyncio.wait_for(queued.wait(), WAIT)  # the message's run is in line behind the first
        assert [run.status for run in hub.handle("s").runs] == ["running", "queued"]
        twice = refusal(await send(live, door, "s", ("m2", "next")))
        assert twice == "a run of this " + ("thread" if door == "ag-ui" else "session") + (
            " is going or queued with message 'm2' already"
        )
        valve.open()
        status, stream = await asyncio.wait_for(first, WAIT)
        assert status == 200
        assert said_in(stream) == "Second."
        assert await messages(agent, "s") == [
            ("user", "hold the line"),
            ("assistant", "First."),
            ("user", "next"),
            ("assistant", "Second."),
        ]


@pytest.mark.parametrize("door", DOORS)
async def test_a_retry_sent_twice_at_once_runs_once(door: str) -> None:
    model = ScriptedModel([RuntimeError("the model fell over"), "Hello!", "never asked"])
    store = Lockstep()
    agent = ReActAgent(model, options=AgentOptions(retry_budget=0), store=store)
    async with serving(agent) as live:
        status, stream = await send(live, door, "s", ("m1", "hi"))
        assert status == 200
        assert failed(stream)
        await live.server.hub.handle("s").wait()

        store.pairs = READS_BEFORE_SUBMIT[door]  # both read the session at the same points until they submit
        answers = await asyncio.gather(
            send(live, door, "s", ("m1", "hi")), send(live, door, "s", ("m1", "hi"))
        )
        assert sorted(status for status, _ in answers) == [200, 409]
        assert "may be answering 'm1' already" in refusal(next(a for a in answers if a[0] == 409))
        await live.server.hub.handle("s").wait()
        assert await messages(agent, "s") == [("user", "hi"), ("assistant", "Hello!")]
        assert len(model.requests) == 2  # the failed turn, one retry


READS_BEFORE_SUBMIT = {"ag-ui": 3, "api-chat": 3}
"""How many times a request of each door reads the session's head before it submits its run."""
