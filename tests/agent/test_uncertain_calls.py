"""Calls a crash left without an outcome, in one process: the log is written as a dead process leaves it.

(tests/session/test_crash.py kills real processes; here the log is built fact by fact, so each case is
exact.)
"""

from __future__ import annotations

from rxagent import Msg
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.messages import ToolUseBlock
from rxagent.model.scripted import ScriptedModel
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
    assert [c.id for c in await agent.uncertain(CTX)] == ["c1"]

    result = await agent.call(None, CTX)

    assert result.reason == "MODEL_STOP"
    assert ran == ["A", "B"]  # each once, in the batch's order
    state = await agent.state(CTX)
    tool_messages = [m for m in state.messages if m.role == "tool"]
    assert len(tool_messages) == 1
    assert [(r.tool_use_id, r.status) for r in tool_messages[0].tool_results] == [("c1", "ok"), ("c2", "ok")]
    facts = await store.read(("ada", "orders"))
    assert [f.data() for f in facts if f.kind == "reconciled"] == [
        {"call_id": "c1", "outcome": "retry", "automatic": True}
    ]
    assert sum(f.kind == "tool_dispatched" for f in facts) == 3  # c1 twice (lost, then again), c2 once
    assert await agent.uncertain(CTX) == []
