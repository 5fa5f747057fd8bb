"""Who a run is for: the runtime context passed to every part of a run (tools, permissions, middleware)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

from rxagent.messages import new_id

if TYPE_CHECKING:
    from rxagent.state import AgentState

__all__ = ["EventDetail", "RunContext", "RuntimeContext", "ToolScope"]

EventDetail: TypeAlias = Literal["all", "folded", "result"]
"""How much of a run's events its caller watches: every event, every event but the per-token deltas
(``stream_events(deltas=False)``), or only the result (``call`` with no middleware watching)."""


@dataclass(frozen=True, slots=True)
class ToolScope:
    """Which tools one run may use and the values preset for them: one shared agent, a view per caller.

    A multi-tenant app passes one per request in :attr:`RuntimeContext.tools`, so each user gets their
    own tools and their tenant id without an agent per tenant.

    Attributes:
        allow: the only tool names the run may see and call (``None``: every tool of the toolkit).
        groups: tool groups active at the start for a session that has not activated its own
            (``None``: the toolkit's defaults).
        presets: per-tool values injected at execution (``{"search": {"tenant": "acme"}}``): hidden from
            the model's schema, and they win over anything the model sends.
        shared_presets: values preset for every tool that has a parameter of that name
            (``{"tenant_id": "acme"}``).
    """

    allow: Collection[str] | None = None
    groups: Collection[str] | None = None
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {})
    shared_presets: Mapping[str, Any] = field(default_factory=lambda: {})


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Identity and attributes of one run.

    Attributes:
        user_id: the end user the run acts for (tools and permissions may depend on it).
        session_id: the conversation the run belongs to.
        trace_id: correlates every event, log line and request of the run.
        attributes: free-form application data (tenant, locale, feature flags, …).
        tools: the tools this run may use and their preset values (``None``: the agent's whole toolkit).
        parent_run_id: the run this one is nested in (an agent used as a tool of another agent, see
            :meth:`rxagent.agent.ReActAgent.as_tool`): every event of the run carries it.
    """

    user_id: str | None = None
    session_id: str | None = None
    trace_id: str = field(default_factory=lambda: new_id("trace"))
    attributes: Mapping[str, Any] = field(default_factory=lambda: {})
    tools: ToolScope | None = None
    parent_run_id: str | None = None


@dataclass(frozen=True, slots=True)
class RunContext(RuntimeContext):
    """The context of one agent run, as middleware hooks, interceptors and tools receive it.

    It is the caller's :class:`RuntimeContext` plus the run's own facts.

    Attributes:
        run_id: the run's id (as in its events).
        state: the session's state, saved when the run ends; middleware may keep its own data in
            ``state.extras`` (under a key of its own), so that work like compression is not redone.
        event_detail: how much of the run's events its caller watches; a tool that runs another agent
            asks that run for as much (see :meth:`rxagent.agent.ReActAgent.as_tool`).
    """

    run_id: str = ""
    state: AgentState | None = None
    event_detail: EventDetail = "all"
