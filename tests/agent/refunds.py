"""A refund desk for the one-answer tests (tests/agent and tests/serve): a ``refund`` tool that needs an
approval and counts its side effect outside the store, and a model that asks for it."""

from __future__ import annotations

from collections import Counter

from rxagent import ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import SessionStore
from rxagent.tools import Permissions, Toolkit, tool

refunds: Counter[str] = Counter()
"""How often each order was refunded (the side effect, counted outside the store; tests clear it)."""


@tool
def refund(order: str) -> str:
    """Refund an order."""
    refunds[order] += 1
    return f"refunded {order}"


def clerk(request: ChatRequest) -> ScriptedResponse | str:
    """Asks to refund the order a user message names; says it is done after anything else."""
    last = request.messages[-1]
    if last.role == "user":
        call = ScriptedToolCall("refund", {"order": last.text}, id=f"r-{last.text}")
        return ScriptedResponse(tool_calls=[call])
    return "done"


def refund_agent(store: SessionStore | None = None) -> ReActAgent:
    """An agent whose refunds each wait for an approval."""
    return ReActAgent(
        FunctionModel(clerk), Toolkit([refund]), permissions=Permissions().ask("refund"), store=store
    )
