"""What an agent remembers about a session between runs.

:class:`AgentState` is plain data (JSON round-trips exactly). A session's log (:mod:`rxagent.session`)
is what keeps it: the state is the log's projection.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from rxagent.display import Displayable
from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock

__all__ = ["DEFAULT_SESSION", "AgentState", "PendingCall", "SessionKey"]

SessionKey = tuple[str | None, str]
"""``(user_id, session_id)``: what runs are serialised on and state is stored under."""

DEFAULT_SESSION = "default"
"""The session of a run whose context names none."""


class PendingCall(BaseModel):
    """A tool call waiting: for a human decision (``ask``), for the caller to run it (``external``), or to
    run again because its outcome was lost and it is safe or was reconciled to repeat (``retry``: the next
    run runs it before anything else)."""

    model_config = ConfigDict(defer_build=True)  # validators built on first use, not at import

    call: ToolUseBlock
    kind: Literal["ask", "external", "retry"]
    reason: str = ""


class AgentState(Displayable, BaseModel):
    """A session's conversation and the tool calls it is waiting on.

    Attributes:
        messages: the conversation so far (the system prompt is the agent's, not stored here).
        pending: calls of the last assistant message that have no result yet, in call order.
        partial_results: results already known for that message's other calls, waiting to be sent together.
        active_groups: tool groups activated in this session (``None``: the toolkit's defaults).
        extras: data middleware keeps with the session (each under a key of its own), e.g. summaries.
    """

    model_config = ConfigDict(defer_build=True)  # validators built on first use, not at import

    messages: list[Msg] = Field(default_factory=lambda: [])
    pending: list[PendingCall] = Field(default_factory=lambda: [])
    partial_results: list[ToolResultBlock] = Field(default_factory=lambda: [])
    active_groups: list[str] | None = None
    extras: dict[str, JsonValue] = Field(default_factory=lambda: {})

    def close_batch(self) -> Msg | None:
        """Send the waiting results as one tool message, in the order of the newest assistant's calls.

        Returns the message appended (``None`` when no result was waiting).
        """
        results = self.partial_results
        if not results:
            return None
        calls: tuple[ToolUseBlock, ...] = ()
        for message in reversed(self.messages):
            if message.role == "assistant":
                calls = message.tool_calls
                break
        order = {c.id: i for i, c in enumerate(calls)}
        ordered = sorted(results, key=lambda r: order.get(r.tool_use_id, len(order)))
        message = Msg.from_tool_results(*ordered)
        self.messages.append(message)
        self.partial_results = []
        return message
