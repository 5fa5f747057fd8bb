"""What an AG-UI input brings besides its last user message (front-end tools, tool messages, shared state,
``forwardedProps``) and what the server sends to keep the client in step, on a real server on 127.0.0.1;
and the message snapshot's ids, the answer's ``parentMessageId`` and the approval prompt, translated alone.

Bad inputs tried (each refused before anything changes, the thread as it was): a state that is a list, a
string or a number; front-end tools with a name a tool may not have, two of one name, the name of one of
the agent's tools, parameters that are not an object's schema or not a valid JSON Schema;
``forwardedProps.cancelOnDisconnect`` that is not a boolean; a tool message answering a call the thread
never made, one answering a call that asks for approval, one answering a call the thread waits on twice;
a retry sent twice at once (one runs, the other is refused).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from ag_ui.core import (
    AssistantMessage,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    RunAgentInput,
    ToolCall,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.events import (
    AgentResult,
    MessageCompleted,
    RunStarted,
    TextDelta,
    ToolCallCompleted,
    ToolCallStarted,
)
from rxagent.messages import Msg, ToolUseBlock
from rxagent.serve.agui import AguiTranslator
from rxagent.serve.agui_thread import MESSAGE_ID_KEY, ClientSync
from rxagent.session import DelegatingStore, MemoryStore, Projection
from rxagent.state import AgentState, SessionKey
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, Live, serving
from tests.serve.test_agui import agui, check_ordering, of_type, run_input

CONFIRM: dict[str, Any] = {
    "name": "confirm",
    "description": "Ask the person at the screen.",
    "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
}


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


async def thread_as_it_is(live: Live, thread: str = "t") -> tuple[Any, Any]:
    return await live.get(f"/api/sessions/{thread}"), await live.get(f"/api/sessions/{thread}/turns")


# ---- bad inputs --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"state": [1, 2]}, "'state' must be a JSON object (the thread's shared state), not a list"),
        ({"state": "x"}, "'state' must be a JSON object (the thread's shared state), not a string"),
        ({"state": 3}, "'state' must be a JSON object (the thread's shared state), not a number"),
        ({"tools": [{**CONFIRM, "name": "bad name"}]}, "a tool's name is 1 to 64 letters"),
        ({"tools": [CONFIRM, CONFIRM]}, "two front-end tools have this name"),
        ({"tools": [{**CONFIRM, "name": "refund"}]}, "the agent has a tool of this name"),
        ({"tools": [{**CONFIRM, "parameters": {"type": "string"}}]}, "must be the JSON Schema of an object"),
        ({"tools": [{**CONFIRM, "parameters": [1]}]}, "must be the JSON Schema of an object"),
        (
            {"tools": [{**CONFIRM, "parameters": {"type": "object", "required": 5}}]},
            "not a valid JSON Schema",
        ),
        ({"forwardedProps": {"cancelOnDisconnect": "yes"}}, "must be true or false, not a string"),
    ],
)
async def test_bad_front_end_inputs_are_refused_before_anything_changes(
    change: dict[str, Any], message: str
) -> None:
    agent = ReActAgent(ScriptedModel(["First.", "never"]), Toolkit([refund]))
    async with serving(agent) as live:
        await agui(live, run_input("t", "r1", ("m1", "hi")))
        before = await thread_as_it_is(live)
        status, error = await live.post(
            "/ag-ui", {**run_input("t", "r2", ("m1", "hi"), ("m2", "again")), **change}
        )
        assert status == 400, error
        assert message in error["error"]
        assert await thread_as_it_is(live) == before


async def test_tool_messages_for_calls_the_thread_does_not_wait_on_are_refused() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
                    ScriptedToolCall("confirm", {"question": "Sure?"}, id="f1"),
                ]
            ),
            "Done.",
        ]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        first = await agui(live, {**run_input("t", "r1", ("m1", "refund A-1")), "tools": [CONFIRM]})
        assert first[-1].outcome.type == "interrupt"  # type: ignore[attr-defined]
        before = await thread_as_it_is(live)

        def answering(*results: tuple[str, str]) -> dict[str, Any]:
            body = {**run_input("t", "r2", ("m1", "refund A-1")), "tools": [CONFIRM]}
            body["messages"] += [
                {"id": f"tm{i}", "role": "tool", "toolCallId": call, "content": text}
                for i, (call, text) in enumerate(results)
            ]
            return body

        status, error = await live.post("/ag-ui", answering(("ghost", "yes")))
        assert status == 409
        assert error["call_id"] == "ghost"
        assert "does not wait for (calls waiting for results: 'f1')" in error["error"]
        status, error = await live.post("/ag-ui", answering(("r1", "refunded by hand")))
        assert status == 409
        assert "asks for permission, not a result" in error["error"]
        status, error = await live.post("/ag-ui", answering(("f1", "yes"), ("f1", "no")))
        assert status == 409
        assert "two answers" in error["error"]
        assert await thread_as_it_is(live) == before


async def test_a_tool_message_the_thread_has_already_is_history() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("confirm", {"question": "Sure?"}, id="f1")]),
            "Ok.",
            "Bye.",
        ]
    )
    async with serving(ReActAgent(model)) as live:
        await agui(live, {**run_input("t", "r1", ("m1", "go")), "tools": [CONFIRM]})
        result = {"id": "tm1", "role": "tool", "toolCallId": "f1", "content": "yes"}
        body = {**run_input("t", "r2", ("m1", "go")), "tools": [CONFIRM]}
        body["messages"].append(result)
        await agui(live, body)
        body = {**run_input("t", "r3", ("m1", "go")), "tools": [CONFIRM]}
        body["messages"] += [result, {"id": "m2", "role": "user", "content": "bye"}]
        events = await agui(live, body)  # the old result again, beside new text: only the text is new
        assert events[-1].result["text"] == "Bye."  # type: ignore[attr-defined]
        assert [r.text for m in model.requests[2].messages for r in m.tool_results] == ["yes"]


async def test_a_state_given_while_the_input_is_refused_is_not_kept() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A"}, id="r1")])]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        await agui(live, run_input("t", "r1", ("m1", "refund A")))
        body = {**run_input("t", "r2", ("m1", "refund A"), ("m2", "other")), "state": {"cart": ["x"]}}
        status, error = await live.post("/ag-ui", body)
        assert status == 409  # new text while an approval waits
        assert "waits for answers" in error["error"]
        state = await agent.sessions.state(live.server.hub.handle("t").ctx)
        assert "shared_state" not in state.extras


class Lockstep(DelegatingStore):
    """Holds each ``head()`` until a second one comes, for ``pairs`` pairs: two requests read the session at
    the same points, so each gets as far as it can before the other moves on."""

    def __init__(self) -> None:
        super().__init__(MemoryStore())
        self.pairs = 0
        self._barrier = asyncio.Barrier(2)

    async def head(self, key: SessionKey) -> int:
        if self.pairs > 0:
            async with asyncio.timeout(WAIT):
                if await self._barrier.wait() == 0:
                    self.pairs -= 1
        return await super().head(key)


async def test_a_retry_sent_twice_at_once_runs_once() -> None:
    model = ScriptedModel([RuntimeError("the model fell over"), "Hello!", "never asked"])
    store = Lockstep()
    agent = ReActAgent(model, options=AgentOptions(retry_budget=0), store=store)
    async with serving(agent) as live:
        failed = await agui(live, run_input("t", "r1", ("m1", "hi")))
        assert failed[-1].type == "RUN_ERROR"
        await live.server.hub.handle("t").wait()

        async def retry(run: str) -> tuple[int, str]:
            async with live.http.post("/ag-ui", json=run_input("t", run, ("m1", "hi"))) as answer:
                return answer.status, await answer.text()

        store.pairs = 3  # each request reads the session's head three times before it submits
        (first, second) = await asyncio.gather(retry("r2"), retry("r3"))
        assert sorted([first[0], second[0]]) == [200, 409]
        refused = json.loads(first[1] if first[0] == 409 else second[1])
        assert "may be answering 'm1' already" in refused["error"]
        await live.server.hub.handle("t").wait()
        assert len(model.requests) == 2  # the failed turn, and one retry of it
        state = await agent.sessions.state(live.server.hub.handle("t").ctx)
        assert [m.text for m in state.messages] == ["hi", "Hello!"]


# ---- the snapshot's ids ------------------------------------------------------------------------------------


def synced(history: list[Msg], client: list[Message], incoming: list[Message]) -> list[Message] | None:
    sync = ClientSync(Projection(AgentState(messages=history)), "run_1", client, incoming, None)
    events = sync.opening()
    snapshots = [e for e in events if isinstance(e, MessagesSnapshotEvent)]
    return snapshots[0].messages if snapshots else None


def test_the_snapshot_keeps_the_ids_both_sides_agree_on_and_gives_the_rest_new_ones() -> None:
    asked = Msg.user("Hi", id="u1")
    answered = Msg.assistant("Hello there.", id="msg_a")
    new = UserMessage(id="u2", content="And you?")
    client: list[Message] = [
        UserMessage(id="u1", content="Hi"),
        AssistantMessage(id="stream-1", content="Hel"),  # cut short by an abort
        new,
    ]
    messages = synced([asked, answered], client, [new])
    assert messages is not None
    assert [(m.id, m.content) for m in messages] == [
        ("u1", "Hi"),
        ("msg_a", "Hello there."),
        ("u2.1", "And you?"),  # the client has u2 after its cut answer: a new id puts it after the full one
    ]
    assert messages[2].metadata == {MESSAGE_ID_KEY: "u2"}  # its id in the thread, for later inputs


def test_no_snapshot_when_the_client_agrees_results_told_in_any_order() -> None:
    calls = Msg(
        role="assistant",
        content=[
            ToolUseBlock(id="c1", name="a", input={}, raw_arguments="{}"),
            ToolUseBlock(id="c2", name="b", input={}, raw_arguments="{}"),
        ],
        id="msg_calls",
    )
    history = [Msg.user("go", id="u1"), calls]
    call = [
        ToolCall(id="c1", function=FunctionCall(name="a", arguments="{}")),
        ToolCall(id="c2", function=FunctionCall(name="b", arguments="{}")),
    ]
    later_first = [
        ToolMessage(id="t2", tool_call_id="c2", content="two"),
        ToolMessage(id="t1", tool_call_id="c1", content="one"),
    ]
    client: list[Message] = [
        UserMessage(id="u1", content="go"),
        AssistantMessage(id="s", tool_calls=call),
        *later_first,
    ]
    assert synced(history, client, later_first) is None  # the thread will keep them in the calls' order


def test_a_client_with_no_history_gets_the_thread_whole() -> None:
    history = [Msg.user("Hi", id="u1"), Msg.assistant("Hello.", id="msg_a")]
    new = UserMessage(id="u2", content="Me again")
    messages = synced(history, [new], [new])
    assert messages is not None
    assert [(m.role, m.id) for m in messages] == [("user", "u1"), ("assistant", "msg_a"), ("user", "u2.1")]


# ---- the answer's id and the approval prompt ---------------------------------------------------------------

HEAD: dict[str, Any] = {"run_id": "run_1", "session_id": "t", "trace_id": "trace_1", "seq": 0}


def test_calls_of_one_answer_share_its_message_id_with_text_or_without() -> None:
    translator = AguiTranslator("t", "r", "run_1")
    c1 = ToolUseBlock(id="c1", name="a", input={}, raw_arguments="{}")
    c2 = ToolUseBlock(id="c2", name="b", input={}, raw_arguments="{}")
    answer = Msg(role="assistant", content=[c1, c2])
    out = [
        e
        for event in (
            RunStarted(**HEAD, agent="a", input=[]),
            ToolCallStarted(**HEAD, index=0, call_id="c1", name="a"),
            ToolCallCompleted(**HEAD, call=c1),
            ToolCallStarted(**HEAD, index=1, call_id="c2", name="b"),
            ToolCallCompleted(**HEAD, call=c2),
            MessageCompleted(**HEAD, message=answer),
            TextDelta(**HEAD, text="Next answer, "),
            ToolCallStarted(**HEAD, index=0, call_id="c3", name="a"),
            AgentResult(**HEAD, message=None, reason="MODEL_STOP"),
        )
        for e in translator.translate(event)
    ]
    check_ordering(out)
    parents = [e.parent_message_id for e in of_type(out, ToolCallStartEvent)]
    assert parents[0] is not None
    assert parents[0] == parents[1]  # two calls, no text: one answer
    texts = [e.message_id for e in out if e.type == "TEXT_MESSAGE_START"]
    assert parents[2] == texts[0] != parents[0]  # the next answer: its text's id


async def test_the_approval_prompt_is_written_for_the_person_who_answers() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])]
    )
    agent = ReActAgent(
        model, Toolkit([refund]), permissions=Permissions().ask("refund*", reason="--ask refund*")
    )
    async with serving(agent) as live:
        events = await agui(live, run_input("t", "r1", ("m1", "refund A-1")))
    (interrupt,) = events[-1].outcome.interrupts  # type: ignore[attr-defined]
    assert interrupt.message == 'The assistant wants to run refund with order "A-1". Do you allow it?'
    assert interrupt.metadata["rule_reason"] == "--ask refund*"  # for an operator's own front end


def test_input_parsing_keeps_unknown_roles_out_of_the_comparison() -> None:
    body = run_input("t", "r", ("u1", "Hi"))
    body["messages"].insert(0, {"id": "sys", "role": "system", "content": "Be brief."})
    body["messages"].append({"id": "th", "role": "reasoning", "content": "thinking..."})
    parsed = RunAgentInput.model_validate(body)
    assert synced([Msg.user("Hi", id="u1")], parsed.messages, []) is None
