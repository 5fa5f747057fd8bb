"""Who a run is for: the runtime context passed to every part of a run (tools, permissions, middleware).

Trace ids are W3C Trace Context ids (32 lowercase hex digits, not all zeros), so a run's trace id can be
the trace id of its OpenTelemetry spans (see :mod:`rxagent.telemetry`) and of any request it makes. A run
joins a caller's trace through :meth:`RuntimeContext.with_traceparent` (the ``traceparent`` header of an
incoming request): its trace id becomes the caller's and its spans hang under the caller's span.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, cast

from typing_extensions import TypeVar

if TYPE_CHECKING:
    from rxagent.requests import ToolSchema
    from rxagent.state import AgentState

__all__ = [
    "DepsT",
    "EventDetail",
    "RunContext",
    "RuntimeContext",
    "ToolScope",
    "TraceParent",
    "is_trace_id",
    "new_trace_id",
    "run_context_of",
]

_INVALID_TRACE_ID = "0" * 32
_INVALID_SPAN_ID = "0" * 16
_TRACE_ID = re.compile(r"[0-9a-f]{32}")
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")


def new_trace_id() -> str:
    """A fresh W3C trace id: 32 lowercase hex digits, all random (never all zeros).

    Random in every bit, unlike :func:`~rxagent.messages.new_id`'s counter: samplers that keep a fraction
    of traces (OpenTelemetry's ``TraceIdRatioBased``) decide on the trace id's low bits.
    """
    trace_id = os.urandom(16).hex()
    while trace_id == _INVALID_TRACE_ID:  # one chance in 2**128, and the W3C forbids it
        trace_id = os.urandom(16).hex()
    return trace_id


def is_trace_id(value: str) -> bool:
    """Whether ``value`` is a valid W3C trace id (32 lowercase hex digits, not all zeros)."""
    return _TRACE_ID.fullmatch(value) is not None and value != _INVALID_TRACE_ID


@dataclass(frozen=True, slots=True)
class TraceParent:
    """A W3C ``traceparent``: the trace a request belongs to and the span that made it.

    Attributes:
        trace_id: 32 lowercase hex digits.
        span_id: the caller's span, 16 lowercase hex digits.
        sampled: the caller records this trace (its ``sampled`` flag); a parent-based sampler follows it.

    Example:
        >>> parent = TraceParent.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
        >>> parent.span_id, parent.sampled
        ('00f067aa0ba902b7', True)
        >>> parent.header()
        '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01'
    """

    trace_id: str
    span_id: str
    sampled: bool = True

    @classmethod
    def parse(cls, header: str) -> TraceParent:
        """Read a ``traceparent`` header (``version-traceid-spanid-flags``; surrounding spaces ignored).

        A future version's header is read for the four fields it must begin with, as the W3C says.

        Raises:
            ValueError: the header is not a valid ``traceparent`` (wrong shape, uppercase hex, version
                ``ff``, extra fields after version ``00``, an all-zero trace or span id). The W3C asks a
                receiver to ignore such a header and start a new trace.
        """
        text = header.strip()
        match = _TRACEPARENT.fullmatch(text)
        if match is None:
            raise ValueError(
                f"not a W3C traceparent (want 'version-traceid-spanid-flags' in lowercase hex, "
                f"such as '00-<32 hex>-<16 hex>-01'): {header[:100]!r}"
            )
        version, trace_id, span_id, flags, rest = match.groups()
        if version == "ff":
            raise ValueError(f"traceparent version ff is invalid: {header[:100]!r}")
        if version == "00" and rest is not None:
            raise ValueError(f"a version 00 traceparent has exactly four fields: {header[:100]!r}")
        if trace_id == _INVALID_TRACE_ID:
            raise ValueError(f"traceparent has an all-zero trace id: {header[:100]!r}")
        if span_id == _INVALID_SPAN_ID:
            raise ValueError(f"traceparent has an all-zero parent span id: {header[:100]!r}")
        return cls(trace_id, span_id, sampled=bool(int(flags, 16) & 1))

    def header(self) -> str:
        """This parent as a version 00 ``traceparent`` header."""
        return f"00-{self.trace_id}-{self.span_id}-{'01' if self.sampled else '00'}"


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
        caller_tools: tools the caller runs itself, as schemas (a front end's own tools, which an AG-UI
            client sends with each run): the run sees them beside the toolkit's, whatever ``allow`` and
            ``groups`` say, and a call to one suspends the run until the caller sends its result (an
            :class:`~rxagent.agent.inputs.ExternalResult`), as an ``external`` tool's call does.
    """

    allow: Collection[str] | None = None
    groups: Collection[str] | None = None
    presets: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: {})
    shared_presets: Mapping[str, Any] = field(default_factory=lambda: {})
    caller_tools: tuple[ToolSchema, ...] = ()


@dataclass(frozen=True, slots=True)
class RuntimeContext:
    """Identity and attributes of one run.

    Attributes:
        user_id: the end user the run acts for (tools and permissions may depend on it).
        session_id: the conversation the run belongs to.
        trace_id: correlates every event, log line, span and request of the run; a fresh W3C trace id
            by default (:func:`new_trace_id`), and the trace id of the run's OpenTelemetry spans.
        attributes: free-form application data (tenant, locale, feature flags, …).
        tools: the tools this run may use and their preset values (``None``: the agent's whole toolkit).
        parent_run_id: the run this one is nested in (an agent used as a tool of another agent, see
            :meth:`rxagent.agent.Agent.as_tool`): every event of the run carries it.
        parent_span_id: the caller's span that the run's spans hang under (16 lowercase hex digits, from
            an incoming ``traceparent``); ``None``: the run's span is the root of its trace.
        trace_sampled: the caller records this trace (the ``traceparent``'s ``sampled`` flag).
    """

    user_id: str | None = None
    session_id: str | None = None
    trace_id: str = field(default_factory=new_trace_id)
    attributes: Mapping[str, Any] = field(default_factory=lambda: {})
    tools: ToolScope | None = None
    parent_run_id: str | None = None
    parent_span_id: str | None = None
    trace_sampled: bool = True

    def with_traceparent(self, header: str) -> RuntimeContext:
        """This context joined to the caller's trace named by a ``traceparent`` header: the trace id, the
        parent span and the sampled flag are the header's (a :class:`RunContext` stays one).

        Raises:
            ValueError: the header is not a valid ``traceparent`` (see :meth:`TraceParent.parse`).

        Example:
            >>> ctx = RuntimeContext(session_id="s1").with_traceparent(
            ...     "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
            ... )
            >>> ctx.trace_id, ctx.parent_span_id
            ('4bf92f3577b34da6a3ce929d0e0e4736', '00f067aa0ba902b7')
        """
        parent = TraceParent.parse(header)
        return replace(
            self, trace_id=parent.trace_id, parent_span_id=parent.span_id, trace_sampled=parent.sampled
        )


DepsT = TypeVar("DepsT", default=object, covariant=True)
"""The type of the user's dependencies a run carries (``None`` when the caller gave none)."""


# Not slotted: a slotted frozen generic dataclass fails on ``RunContext[Deps](...)`` (typing sets
# ``__orig_class__`` on the instance, which the recreated slotted class refuses with a TypeError).
@dataclass(frozen=True)
class RunContext(RuntimeContext, Generic[DepsT]):
    """The context of one agent run, as middleware hooks, interceptors and tools receive it.

    It is the caller's :class:`RuntimeContext` plus the run's own facts.

    Attributes:
        run_id: the run's id (as in its events).
        agent_name: the running agent's name (as in ``RunStarted.agent``).
        model_name: the name of the agent's model (as in ``ModelCallStarted.model``).
        provider_name: who serves that model (see :func:`rxagent.model.provider_of`), e.g. ``"openai"``.
        state: the session's state, saved when the run ends; middleware may keep its own data in
            ``state.extras`` (under a key of its own), so that work like compression is not redone.
        event_detail: how much of the run's events its caller watches; a tool that runs another agent
            asks that run for as much (see :meth:`rxagent.agent.Agent.as_tool`).
        deps: the dependencies the caller gave the run (``agent.call(..., deps=...)``), typed by the
            agent's ``Deps`` (a database pool, an HTTP client, the user's account): what tools and steps
            use instead of globals. The untyped :attr:`attributes` stay for middleware.
    """

    run_id: str = ""
    agent_name: str = ""
    model_name: str = ""
    provider_name: str = ""
    state: AgentState | None = None
    event_detail: EventDetail = "all"
    deps: DepsT = cast("DepsT", None)  # noqa: RUF009 - a no-op at run time: the default is None


def run_context_of(ctx: RuntimeContext) -> RunContext[object] | None:
    """``ctx`` as the :class:`RunContext` of an agent run, or ``None`` for a caller's plain context (what
    a tool run outside an agent, or a hook handed a caller's context, has)."""
    if isinstance(ctx, RunContext):
        return cast("RunContext[object]", ctx)
    return None
