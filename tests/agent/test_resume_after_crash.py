"""Resuming a session that a dead process left mid-run: the log is written as such a process leaves it.

(tests/session/test_crash.py kills real processes; here the log is built fact by fact, so each case is
exact.)
"""

from __future__ import annotations

from rxagent import Msg
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.messages import TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.session import MemoryStore
from rxagent.session.recorder import fact, message_fact
from rxagent.tools import Toolkit, tool

CTX = RuntimeContext(user_id="ada", session_id="orders")


def shipping(ran: list[str]) -> Toolkit:
    @tool(idempotent=True)
    def ship(order: str) -> str:
        """Mark an order shipped (idempotent).

        Args:
            order: the order.
        """
        ran.append(order)
        return f"{order} shipped"

    return Toolkit([ship])


async def test_an_idempotent_uncertain_call_and_a_call_that_never_started_each_run_once() -> None:
    store = MemoryStore()
    first = ToolUseBlock(id="c1", name="ship", input={"order": "A"}, raw_arguments='{"order": "A"}')
    second = ToolUseBlock(id="c2", name="ship", input={"order": "B"}, raw_arguments='{"order": "B"}')
    lease = await store.acquire(("ada", "orders"), "the process that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            message_fact("message", Msg.user("Ship A and B."), "run_1"),
            message_fact(
                "message", Msg.model_validate({"role": "assistant", "content": [first, second]}), "run_1"
            ),
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            fact("tool_dispatched", {"call": first.model_dump(mode="json")}, "run_1"),
        ],  # killed while `first` ran: no result; `second` (sequential) never started
    )
    await store.release(lease)  # as if it expired
    ran: list[str] = []
    agent = ReActAgent(ScriptedModel(["Both shipped."]), shipping(ran), store=store)
    assert [c.id for c in await agent.sessions.uncertain(CTX)] == ["c1"]

    result = await agent.call(None, CTX)

    assert result.reason == "MODEL_STOP"
    assert ran == ["A", "B"]  # each once, in the batch's order
    state = await agent.sessions.state(CTX)
    tool_messages = [m for m in state.messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert [(r.tool_use_id, r.status) for r in tool_messages[0].tool_results] == [("c1", "ok"), ("c2", "ok")]
    facts = await store.read(("ada", "orders"))
    assert [f.data() for f in facts if f.kind == "reconciled"] == [
        {"call_id": "c1", "outcome": "retry", "automatic": True}
    ]
    assert sum(f.kind == "tool_dispatched" for f in facts) == 3  # c1 twice (lost, then again), c2 once
    assert await agent.sessions.uncertain(CTX) == []


async def test_results_recorded_before_the_process_died_are_sent_before_the_next_input() -> None:
    store = MemoryStore()
    call = ToolUseBlock(id="c1", name="ship", input={"order": "A"}, raw_arguments='{"order": "A"}')
    result = ToolResultBlock(tool_use_id="c1", name="ship", output=(TextBlock(text="A shipped"),))
    lease = await store.acquire(("ada", "orders"), "the process that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            message_fact("message", Msg.user("Ship A."), "run_1"),
            message_fact("message", Msg.model_validate({"role": "assistant", "content": [call]}), "run_1"),
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            fact("tool_dispatched", {"call": call.model_dump(mode="json")}, "run_1"),
            fact("tool_result", {"result": result.model_dump(mode="json")}, "run_1"),
        ],  # killed in the next model call: the batch's results were never sent on in a tool message
    )
    await store.release(lease)
    ran: list[str] = []
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("ship", {"order": "B"}, id="c2")]), "Both shipped."]
    )
    agent = ReActAgent(model, shipping(ran), store=store)
    assert await agent.sessions.uncertain(CTX) == []

    assert (await agent.call("Now ship B.", CTX)).reason == "MODEL_STOP"

    assert ran == ["B"]
    first = model.requests[0].messages
    assert [m.role for m in first] == ["user", "assistant", "tool", "user"]
    assert first[2].tool_results == (result,)  # the recorded result, in its place
    state = await agent.sessions.state(CTX)
    layout = [(m.role, [r.tool_use_id for r in m.tool_results]) for m in state.messages]
    assert layout == [
        ("user", []),
        ("assistant", []),
        ("tool", ["c1"]),
        ("user", []),
        ("assistant", []),
        ("tool", ["c2"]),
        ("assistant", []),
    ]
    assert state.partial_results == []
