"""What an agent remembers about a session between runs, and where it keeps it.

:class:`AgentState` is plain data (JSON round-trips exactly), so any store can persist it. The default
:class:`InMemoryStateStore` keeps it in the process; the sessions layer adds SQLite and PostgreSQL.
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, Field, JsonValue

from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock

__all__ = ["AgentState", "InMemoryStateStore", "PendingCall", "SessionKey", "StateStore"]

SessionKey = tuple[str | None, str]
"""``(user_id, session_id)``: what runs are serialised on and state is stored under."""


class PendingCall(BaseModel):
    """A tool call waiting for a human decision (``ask``) or for the caller to run it (``external``)."""

    call: ToolUseBlock
    kind: Literal["ask", "external"]
    reason: str = ""


class AgentState(BaseModel):
    """A session's conversation and the tool calls it is waiting on.

    Attributes:
        messages: the conversation so far (the system prompt is the agent's, not stored here).
        pending: calls of the last assistant message that have no result yet, in call order.
        partial_results: results already known for that message's other calls, waiting to be sent together.
        active_groups: tool groups activated in this session (``None``: the toolkit's defaults).
        extras: data middleware keeps with the session (each under a key of its own), e.g. summaries.
    """

    messages: list[Msg] = Field(default_factory=lambda: [])
    pending: list[PendingCall] = Field(default_factory=lambda: [])
    partial_results: list[ToolResultBlock] = Field(default_factory=lambda: [])
    active_groups: list[str] | None = None
    extras: dict[str, JsonValue] = Field(default_factory=lambda: {})


class StateStore(Protocol):
    """Loads and saves :class:`AgentState` by session key."""

    async def load(self, key: SessionKey) -> AgentState | None:
        """The stored state, or ``None`` for a new session."""
        ...

    async def save(self, key: SessionKey, state: AgentState) -> None:
        """Store ``state`` (replacing what was there)."""
        ...


class InMemoryStateStore:
    """Keeps states in a dict, as JSON, so a saved state never changes when a run mutates its copy."""

    def __init__(self) -> None:
        self._states: dict[SessionKey, str] = {}

    async def load(self, key: SessionKey) -> AgentState | None:
        """The stored state, or ``None``."""
        data = self._states.get(key)
        return AgentState.model_validate_json(data) if data is not None else None

    async def save(self, key: SessionKey, state: AgentState) -> None:
        """Store ``state``."""
        self._states[key] = state.model_dump_json()

    def keys(self) -> list[SessionKey]:
        """Every session key stored."""
        return list(self._states)
