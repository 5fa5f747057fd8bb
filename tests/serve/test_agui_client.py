"""AG-UI with the official client: ``@ag-ui/client`` 1.0 (npm) in node drives a real server on 127.0.0.1, as a
front end would, through ``tests/serve/agui_client/agui_driver.mjs``. The client checks every event sequence
itself (a protocol error fails its run), and what it keeps (messages, state) is compared with what the
thread holds.

Shown: a front-end tool round trip; a state snapshot and a state delta the client applies; a messages
snapshot after an abort; a front end on another origin with ``--allow-origin`` and without it (and without
the token); a retry after ``RUN_ERROR``; ``--cancel-on-disconnect`` (and per request), against the default.
Waits are on events (the run's own end, the valve the model streams through), never on sleeps.
"""

from __future__ import annotations

from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent, RunHandle
from rxagent.agent.shared_state import SHARED_STATE_KEY, shared_state
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult
from rxagent.tools import ToolContext, Toolkit, tool
from tests.serve.agui_js import AguiClient, agui_client, of, types
from tests.serve.conftest import Live, ValveModel, serving

CONFIRM = {
    "name": "confirm",
    "description": "Ask the person at the screen to confirm.",
    "parameters": {
        "type": "object",
        "properties": {"question": {"type": "string"}},
        "required": ["question"],
    },
}


@tool
def add_item(item: str, context: ToolContext[object]) -> str:
    """Add an item to the user's shopping list."""
    state = shared_state(context)
    items = state.setdefault("items", [])
    assert isinstance(items, list)
    items.append(item)
    return f"{state.get('owner')}'s list has {len(items)} items"


def thread_messages(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """Role and text of a client's messages (results by call), in order."""
    shown: list[tuple[str, str]] = []
    for m in messages:
        if m["role"] == "tool":
            shown.append(("tool", f"{m['toolCallId']}={m['content']}"))
        else:
            calls = ",".join(c["id"] for c in m.get("toolCalls") or [])
            shown.append((m["role"], (m.get("content") or "") + (f" [{calls}]" if calls else "")))
    return shown


def last_run(live: Live, thread: str = "t") -> RunHandle:
    """The run submitted last on the thread."""
    run = live.server.hub.handle(thread).last_run
    assert run is not None
    return run


async def ended(live: Live, run: RunHandle) -> AgentResult:
    """``run``'s result once it has ended and let the session go (its own end: an event, not a sleep)."""
    result = await run
    await live.server.hub.handle("t").wait()
    return result


# ---- front-end tools ---------------------------------------------------------------------------------------


async def test_a_front_end_tool_round_trip() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("confirm", {"question": "Ship to Oslo?"}, id="f1"),
                    ScriptedToolCall("confirm", {"question": "Gift wrap?"}, id="f2"),
                ]
            ),
            "Shipping to Oslo, gift-wrapped.",
        ]
    )
    async with serving(ReActAgent(model)) as live, agui_client() as client:
        await client.agent(live.url, "t")
        await client.say("u1", "Ship my order.")
        first = await client.run(tools=[CONFIRM])
        assert first["error"] is None
        assert first["finished"]["outcome"] == "success"
        assert first["finished"]["pendingToolCallIds"] == ["f1", "f2"]  # for the front end to run
        (answer,) = [m for m in first["messages"] if m["role"] == "assistant"]
        assert [c["id"] for c in answer["toolCalls"]] == ["f1", "f2"]  # one message: parentMessageId
        assert {e["parentMessageId"] for e in of(first["events"], "TOOL_CALL_START")} == {answer["id"]}
        assert [t.name for t in model.requests[0].tools] == ["confirm"]

        for call_id, said in (("f1", "yes"), ("f2", "yes, gold paper")):
            tool_message = {"id": f"r-{call_id}", "role": "tool", "toolCallId": call_id, "content": said}
            await client.call("addMessage", message=tool_message)
        second = await client.run(tools=[CONFIRM])
        assert second["error"] is None
        assert second["finished"]["result"]["text"] == "Shipping to Oslo, gift-wrapped."
        assert "TOOL_CALL_RESULT" not in types(second["events"])  # the client has its own results
        assert "MESSAGES_SNAPSHOT" not in types(second["events"])  # and agrees with the thread
        assert [r.text for r in model.requests[1].messages[-1].tool_results] == ["yes", "yes, gold paper"]
        assert thread_messages(second["messages"]) == [
            ("user", "Ship my order."),
            ("assistant", " [f1,f2]"),
            ("tool", "f1=yes"),
            ("tool", "f2=yes, gold paper"),
            ("assistant", "Shipping to Oslo, gift-wrapped."),
        ]

        third = await client.run(tools=[CONFIRM], refused=True)  # the same results again: nothing to run
        assert third["error"]["status"] == 409


# ---- shared state ------------------------------------------------------------------------------------------


async def test_a_state_snapshot_and_a_state_delta_are_applied_by_the_client() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("add_item", {"item": "milk"}, id="c1")]),
            "Added milk.",
            "Your list has eggs and milk.",
        ]
    )
    agent = ReActAgent(model, Toolkit([add_item]))
    async with serving(agent) as live, agui_client() as client:
        await client.agent(live.url, "t", state={"owner": "Ada", "items": ["eggs"]})
        await client.say("u1", "Add milk.")
        first = await client.run()
        assert first["error"] is None
        (snapshot,) = of(first["events"], "STATE_SNAPSHOT")
        assert snapshot["snapshot"] == {"owner": "Ada", "items": ["eggs"]}
        (delta,) = of(first["events"], "STATE_DELTA")
        assert delta["delta"] == [{"op": "add", "path": "/items/1", "value": "milk"}]
        assert first["state"] == {"owner": "Ada", "items": ["eggs", "milk"]}  # applied by the client
        state = await agent.sessions.state(RuntimeContext(session_id="t"))
        assert state.extras[SHARED_STATE_KEY] == first["state"]
        assert first["messages"][-1]["content"] == "Added milk."

        # A front end loaded afresh has no state: it gets the thread's, and its messages.
        await client.agent(live.url, "t")
        await client.say("u2", "What is on my list?")
        second = await client.run()
        assert second["error"] is None
        assert second["state"] == {"owner": "Ada", "items": ["eggs", "milk"]}
        assert "MESSAGES_SNAPSHOT" in types(second["events"])
        assert [text for _, text in thread_messages(second["messages"])][-2:] == [
            "What is on my list?",
            "Your list has eggs and milk.",
        ]


# ---- messages ----------------------------------------------------------------------------------------------


async def test_a_messages_snapshot_after_an_abort_puts_the_thread_back_in_order() -> None:
    model = ValveModel(ScriptedResponse(text="Hello there, how are you?", chunk_size=2), "Fine, thanks.")
    async with serving(ReActAgent(model)) as live, agui_client() as client:
        await client.agent(live.url, "t")
        await client.say("u1", "Hi")
        model.release(3)  # three chunks of text reach the client, which aborts at the first
        first = await client.run(abortOn="TEXT_MESSAGE_CONTENT")
        assert first["aborted"]
        (user, partial) = first["messages"]
        assert user["content"] == "Hi"
        assert "Hello there, how are you?".startswith(partial["content"])
        assert len(partial["content"]) <= 6  # no more than the three chunks: the answer is cut short
        model.open()  # the run goes on without the client (the default) and answers in full
        assert (await ended(live, last_run(live))).text == "Hello there, how are you?"

        await client.say("u2", "And you?")
        second = await client.run()
        assert second["error"] is None
        (snapshot,) = of(second["events"], "MESSAGES_SNAPSHOT")
        assert types(second["events"])[:2] == ["RUN_STARTED", "MESSAGES_SNAPSHOT"]
        assert [m["content"] for m in snapshot["messages"]] == ["Hi", "Hello there, how are you?", "And you?"]
        assert thread_messages(second["messages"]) == [
            ("user", "Hi"),
            ("assistant", "Hello there, how are you?"),
            ("user", "And you?"),
            ("assistant", "Fine, thanks."),
        ]

        # The renamed user message is known by its id in the thread: sent again, it runs nothing.
        third = await client.run(refused=True)
        assert third["error"]["status"] == 409
        assert "nothing to run" in third["error"]["payload"]["error"]


# ---- another origin ----------------------------------------------------------------------------------------


async def test_a_front_end_on_another_origin_runs_with_allow_origin_and_the_token_only() -> None:
    page = "http://localhost:5173"
    browser_like = {"Origin": page, "Sec-Fetch-Site": "cross-site"}
    bearer = {"Authorization": "Bearer s3cret"}
    async with agui_client() as client:
        async with serving(ReActAgent(ScriptedModel(["Hello from afar."])), token="s3cret") as live:
            await client.agent(live.url, "t", headers={**browser_like, **bearer})
            await client.say("u1", "Hi")
            refused = await client.run(refused=True)
            assert refused["error"]["status"] == 403
            assert "origin" in refused["error"]["payload"]["error"]
            assert await live.agent.sessions.list() == []

        agent = ReActAgent(ScriptedModel(["Hello from afar."]))
        async with serving(agent, token="s3cret", allow_origins=(page,)) as live:
            await client.agent(live.url, "t", headers=browser_like)  # no token: still refused
            await client.say("u1", "Hi")
            assert (await client.run(refused=True))["error"]["status"] == 401

            await client.agent(live.url, "t", headers={**browser_like, **bearer})
            await client.say("u1", "Hi")
            allowed = await client.run()
            assert allowed["error"] is None
            assert allowed["messages"][-1]["content"] == "Hello from afar."


# ---- retry -------------------------------------------------------------------------------------------------


async def test_a_retry_after_run_error_reruns_the_failed_turn_once() -> None:
    model = ScriptedModel([RuntimeError("the model fell over"), "Hello!", "never asked"])
    agent = ReActAgent(model, options=AgentOptions(retry_budget=0))
    async with serving(agent) as live, agui_client() as client:
        await client.agent(live.url, "t")
        await client.say("u1", "Hi")
        first = await client.run()
        assert first["runError"]["message"] == "RuntimeError: the model fell over"
        await ended_with_error(live, last_run(live))

        retry = await client.run()  # the same messages again: the client's retry
        assert retry["error"] is None
        assert retry["finished"]["result"]["text"] == "Hello!"
        assert thread_messages(retry["messages"]) == [("user", "Hi"), ("assistant", "Hello!")]
        assert [m.text for m in model.requests[1].messages] == ["Hi"]  # the turn again, from where it was

        again = await client.run(refused=True)  # answered now: retrying runs nothing
        assert again["error"]["status"] == 409
        assert "answered user message 'u1' already" in again["error"]["payload"]["error"]
        assert len(model.requests) == 2
        state = await agent.sessions.state(RuntimeContext(session_id="t"))
        assert [m.text for m in state.messages] == ["Hi", "Hello!"]  # the question once, one answer


async def ended_with_error(live: Live, run: RunHandle) -> None:
    with pytest.raises(RuntimeError, match="fell over"):
        await run
    await live.server.hub.handle("t").wait()


# ---- a client that goes away -------------------------------------------------------------------------------


async def abort_mid_answer(client: AguiClient, live: Live, model: ValveModel, **run: Any) -> RunHandle:
    """Run, and abort as the answer's text begins (three chunks are let through); the server's run."""
    await client.agent(live.url, "t")
    await client.say("u1", "Tell me a long story.")
    model.release(3)
    aborted = await client.run(abortOn="TEXT_MESSAGE_CONTENT", **run)
    assert aborted["aborted"]
    return last_run(live)


async def test_cancel_on_disconnect_interrupts_the_run_lets_the_thread_go_and_the_next_turn_starts() -> None:
    model = ValveModel(ScriptedResponse(text="Once upon a time " * 20, chunk_size=4), "A short one.")
    # A run that finds its session held fails at once (session_wait=0): the next turn proves it was let go.
    agent = ReActAgent(model, options=AgentOptions(session_wait=0.0))
    async with serving(agent, cancel_on_disconnect=True) as live, agui_client() as client:
        run = await abort_mid_answer(client, live, model)
        first = await ended(live, run)  # it ended with the valve still shut: the client's going ended it
        assert first.reason == "INTERRUPTED"
        assert model.chunks_sent == 3
        ctx = RuntimeContext(session_id="t")
        assert agent.sessions.active_run(ctx) is None
        assert live.server.hub.handle("t").status().state == "idle"
        (info,) = await agent.sessions.list()
        assert info.owner is None  # the lease was given back
        assert not live.server.hub.streams  # and the stream is gone

        model.open()
        await client.say("u2", "A short one, then.")
        second = await client.run()
        assert second["error"] is None
        assert second["finished"]["result"]["text"] == "A short one."


async def test_by_default_a_client_that_goes_away_leaves_the_run_going() -> None:
    model = ValveModel(ScriptedResponse(text="Once upon a time " * 20, chunk_size=4), "A short one.")
    agent = ReActAgent(model, options=AgentOptions(session_wait=0.0))
    async with serving(agent) as live, agui_client() as client:
        run = await abort_mid_answer(client, live, model)
        assert live.server.hub.handle("t").status().state == "running"
        await client.say("u2", "A short one, then.")
        busy = await client.run()  # its session is still held by the first run
        assert busy["runError"]["code"] == "SessionBusyError"
        model.open()
        assert (await ended(live, run)).reason == "MODEL_STOP"


async def test_a_request_says_whether_its_going_away_cancels_its_run() -> None:
    model = ValveModel(ScriptedResponse(text="Once upon a time " * 20, chunk_size=4), "A short one.")
    async with serving(ReActAgent(model)) as live, agui_client() as client:
        run = await abort_mid_answer(client, live, model, forwardedProps={"cancelOnDisconnect": True})
        assert (await ended(live, run)).reason == "INTERRUPTED"

    model = ValveModel(ScriptedResponse(text="Once upon a time " * 20, chunk_size=4))
    async with serving(ReActAgent(model), cancel_on_disconnect=True) as live, agui_client() as client:
        run = await abort_mid_answer(client, live, model, forwardedProps={"cancelOnDisconnect": False})
        assert live.server.hub.handle("t").status().state == "running"
        model.open()
        assert (await ended(live, run)).reason == "MODEL_STOP"
