"""Middleware: operator insertion at the agent's named cut points.

A middleware overrides any of six hooks. Each hook receives the cut point's input, the run's context and
``next`` (the rest of the pipeline from that point inwards), and returns an observable, so it can
rewrite the input, pipe operators onto ``next(input)``, short-circuit without calling ``next``, call
``next`` again to retry, or stop the run by failing with :class:`StopRun`.

=============  ==========================  ==========================================================
cut point      input                       output
=============  ==========================  ==========================================================
``agent``      :class:`RunInput`           every event of the run
``reasoning``  :class:`ReasoningStep`      the events of one reasoning step
``request``    the final ``ChatRequest``   the request to send (the last ``ChatRequest`` emitted; events
                                           emitted before it are published; the context budget lives here)
``model_call`` the ``ChatRequest``         the model's ``ChatChunk`` stream
``acting``     :class:`ActingStep`         the events of one batch of tool calls
``tool_call``  ``ToolInvocation``          the tool events of one call
=============  ==========================  ==========================================================

A hook's failure fails the run (an ``ErrorEvent``, the ``ERROR`` result, then the error), and the run
keeps what it did, its input included; an error whose ``rolls_back`` attribute is true (see
:func:`rolls_back`) drops first what the run changed that the session's log does not have yet.

Every hook's ``ctx`` is the run's :class:`~rxagent.context.RunContext`: the caller's context plus the
run id and the session state (``ctx.state``), where middleware may keep data between runs.

What a hook watches: ``call`` builds the per-step events (deltas, phases, messages) only when someone
looks at them. A middleware whose ``agent``, ``reasoning`` or ``acting`` hooks need only the run's
:class:`~rxagent.events.AgentResult`, its errors and its :class:`~rxagent.events.ErrorEvent` s (what
every run emits) sets ``watches_events = False`` and leaves ``call`` on its quiet path.

Order: the agent's middleware list is an onion, first = outermost. For the same cut point, the first
middleware sees the input first and the output last.

What a rewrite changes: the assistant message is folded from the ``model_call`` output, so text
rewritten at ``model_call`` is what the history keeps and the next request sends. The ``reasoning`` and
``agent`` outputs are events for subscribers; rewriting them changes only what subscribers see.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Never, Protocol, TypeAlias, TypeVar, cast, overload, runtime_checkable

from reactivex import Observable

from rxagent.agent.inputs import RunInput
from rxagent.context import RunContext, RuntimeContext
from rxagent.events import AgentEvent
from rxagent.messages import ToolUseBlock
from rxagent.model.types import ChatChunk, ChatRequest
from rxagent.operators import Operator
from rxagent.tools import ToolEvent, ToolInvocation

__all__ = [
    "ActingStep",
    "AnyMiddleware",
    "CutPoint",
    "Middleware",
    "ReasoningStep",
    "RequestHook",
    "StopRun",
    "chain",
    "has_hooks",
    "insert",
    "rolls_back",
    "watches_events",
]

CutPoint: TypeAlias = Literal["agent", "reasoning", "request", "model_call", "acting", "tool_call"]
"""The names of the places middleware can wrap."""

_I = TypeVar("_I")
_O = TypeVar("_O")


class StopRun(Exception):
    """Fail a hook's stream with this to end the run with reason ``STOPPED`` (and ``detail=reason``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def rolls_back(error: BaseException) -> bool:
    """Whether a run failing with ``error`` keeps nothing half-done: its ``rolls_back`` attribute is true.

    Such a run drops the changes to the session's state that its log does not have yet (its input, a
    summary its context budget wrote) before it records how it ended, so the session is as the log had it;
    what was recorded (a tool call that ran) stays. The harness's context budget fails runs this way
    (:class:`~rxagent.memory.ContextBudgetExceeded` with ``rolls_back`` set).
    """
    return getattr(error, "rolls_back", False) is True


@dataclass(frozen=True, slots=True)
class ReasoningStep:
    """The ``reasoning`` cut point's input: which step, and whether it is the tool-less summarising turn."""

    iteration: int
    summarising: bool = False


@dataclass(frozen=True, slots=True)
class ActingStep:
    """The ``acting`` cut point's input: the calls of one assistant message."""

    iteration: int
    calls: tuple[ToolUseBlock, ...]


class Middleware:
    """Base class: override the hooks you need; the others pass through untouched (and cost nothing)."""

    watches_events: ClassVar[bool] = True
    """Whether the ``agent``, ``reasoning`` and ``acting`` hooks look at the per-step events; ``False``
    (they need only the result, errors and error events) lets ``call`` skip building them."""

    def agent(
        self, run: RunInput, ctx: RunContext, next: Callable[[RunInput], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        """Wrap a whole run."""
        return next(run)

    def reasoning(
        self,
        step: ReasoningStep,
        ctx: RunContext,
        next: Callable[[ReasoningStep], Observable[AgentEvent]],
    ) -> Observable[AgentEvent]:
        """Wrap one reasoning step (request, model call, fold)."""
        return next(step)

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        """Rewrite the final request before it is sent; events emitted before it are published."""
        return next(request)

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        """Wrap one model call's chunk stream."""
        return next(request)

    def acting(
        self, step: ActingStep, ctx: RunContext, next: Callable[[ActingStep], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        """Wrap one batch of tool calls."""
        return next(step)

    def tool_call(
        self,
        invocation: ToolInvocation,
        ctx: RuntimeContext,
        next: Callable[[ToolInvocation], Observable[ToolEvent]],
    ) -> Observable[ToolEvent]:
        """Wrap one tool call (the executor's interceptor chain; in a run, ``ctx`` is its RunContext)."""
        return next(invocation)


@runtime_checkable
class RequestHook(Protocol):
    """Any object with a ``request`` hook works as middleware, without subclassing :class:`Middleware`.

    That is how lower layers provide middleware without importing the agent: memory's ``ContextWindow``
    is one.
    """

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        """Rewrite the final request before it is sent; events emitted before it are published."""
        ...


AnyMiddleware: TypeAlias = Middleware | RequestHook
"""What an agent's ``middleware`` list holds: :class:`Middleware` subclasses, or structural hooks."""


def _overrides(middleware: AnyMiddleware, cut_point: CutPoint) -> bool:
    hook = getattr(type(middleware), cut_point, None)
    return hook is not None and hook is not getattr(Middleware, cut_point)


def has_hooks(middlewares: Sequence[AnyMiddleware], cut_point: CutPoint) -> bool:
    """True when any of ``middlewares`` overrides the ``cut_point`` hook (else the agent skips the cut)."""
    return bool(middlewares) and any(_overrides(m, cut_point) for m in middlewares)


def watches_events(middlewares: Sequence[AnyMiddleware]) -> bool:
    """True when a hook of ``middlewares`` at ``agent``, ``reasoning`` or ``acting`` looks at the per-step
    events (so a run whose caller wants only the result must build them anyway)."""
    return any(
        getattr(type(m), "watches_events", True) and _overrides(m, cut)
        for m in middlewares
        for cut in ("agent", "reasoning", "acting")
    )


def chain(
    middlewares: Sequence[AnyMiddleware],
    cut_point: CutPoint,
    ctx: RuntimeContext,
    innermost: Callable[[_I], Observable[_O]],
) -> Callable[[_I], Observable[_O]]:
    """Compose the ``cut_point`` hooks of ``middlewares`` around ``innermost`` (first = outermost)."""
    if not middlewares:  # an agent without middleware: every cut point of every step comes here
        return innermost
    composed = innermost
    for middleware in reversed([m for m in middlewares if _overrides(m, cut_point)]):
        hook = cast(
            "Callable[[_I, RuntimeContext, Callable[[_I], Observable[_O]]], Observable[_O]]",
            getattr(middleware, cut_point),
        )
        composed = _bind(hook, ctx, composed)
    return composed


def _bind(
    hook: Callable[[_I, RuntimeContext, Callable[[_I], Observable[_O]]], Observable[_O]],
    ctx: RuntimeContext,
    inner: Callable[[_I], Observable[_O]],
) -> Callable[[_I], Observable[_O]]:
    return lambda value: hook(value, ctx, inner)


class _Inserted(Middleware):
    def __init__(self, cut_point: CutPoint, operator: Operator[Never, object]) -> None:
        self.cut_point = cut_point
        self.operator = operator

    def __repr__(self) -> str:
        return f"insert({self.cut_point!r}, {self.operator!r})"


@overload
def insert(
    cut_point: Literal["agent", "reasoning", "acting"], operator: Operator[AgentEvent, AgentEvent]
) -> Middleware: ...
@overload
def insert(
    cut_point: Literal["request"], operator: Operator[ChatRequest | AgentEvent, ChatRequest | AgentEvent]
) -> Middleware: ...
@overload
def insert(cut_point: Literal["model_call"], operator: Operator[ChatChunk, ChatChunk]) -> Middleware: ...
@overload
def insert(cut_point: Literal["tool_call"], operator: Operator[ToolEvent, ToolEvent]) -> Middleware: ...
def insert(cut_point: CutPoint, operator: Operator[Never, object]) -> Middleware:
    """A middleware that pipes ``operator`` onto the output of ``cut_point``: the common case.

    The operator takes and gives what the cut point outputs (see the module's table): events at
    ``agent``, ``reasoning`` and ``acting``; the request and the events before it at ``request``; chunks
    at ``model_call``; tool events at ``tool_call``.

    Example:
        >>> from reactivex import operators as ops
        >>> shout = insert("model_call", ops.map(lambda c: replace(c, text=c.text.upper())))  # doctest: +SKIP
    """
    hooks: dict[str, object] = {}

    def hook(
        self: _Inserted, value: object, ctx: RunContext, next: Callable[[object], Observable[Never]]
    ) -> Observable[object]:
        return next(value).pipe(self.operator)

    hooks[cut_point] = hook
    subclass = type(f"Insert_{cut_point}", (_Inserted,), hooks)
    return cast("Middleware", subclass(cut_point, operator))
