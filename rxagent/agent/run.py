"""One run: what it depends on (:class:`RunDeps`, frozen) apart from what it changes (:class:`RunState`).

A run's steps (see :mod:`rxagent.agent.steps`) are functions of a node and a ``RunState``. The state is
small and mutable: the session's :class:`~rxagent.state.AgentState` (its messages and pending calls,
saved when the run ends), the iteration, the usage, the last assistant message, and the little the loop
itself needs. Everything else a step reads is in ``run.deps``: the model, the run's tools, the options,
the middleware, the clock, the recorder, the context (with the caller's typed ``deps``), the control
that interrupts the run. A step's own scratch lives in the node values it passes on (``Reason.attempts``,
``Act.then``), never here. :func:`new_run` builds both, so a loop runs with no agent object at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NotRequired, TypedDict, TypeVar

from pydantic import BaseModel, JsonValue

from rxagent.agent.control import RunControl
from rxagent.agent.middleware import AnyMiddleware, Middleware, has_hooks
from rxagent.agent.options import AgentOptions
from rxagent.agent.structured import OutputSpec
from rxagent.agent.transcript import RepairedHistory
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.context import RunContext, RuntimeContext, run_context_of
from rxagent.events import (
    AgentEvent,
    MessageCompleted,
    Phase,
    PhaseChanged,
    RunReason,
    ToolResult,
    UsageTotals,
)
from rxagent.messages import Msg, ToolResultBlock, ToolResultStatus, new_id
from rxagent.model.types import ChatModel, provider_of
from rxagent.retry import RetryBudget
from rxagent.session import FactKind, Recorder
from rxagent.state import DEFAULT_SESSION, AgentState, PendingCall, SessionKey
from rxagent.tools import Permissions, ToolExecutor, ToolInterceptor, Toolkit, ToolView, result_of

__all__ = ["EventHead", "RunDeps", "RunState", "SaveRun", "new_run", "tool_view"]

_D = TypeVar("_D")


class EventHead(TypedDict):
    """The header fields of every event of one run: ``Event(**run.head, ...)`` (see
    :class:`~rxagent.events.EventHeader`; ``parent_run_id`` only in a nested run's)."""

    run_id: str
    session_id: str | None
    trace_id: str
    seq: int
    parent_run_id: NotRequired[str | None]


SaveRun = Callable[[RunReason, Exception | None], Awaitable[None]]
"""``async (reason, failure)``: records how a run ended with everything it changed (the finish step
calls it before the result)."""


async def _save_nothing(reason: RunReason, failure: Exception | None) -> None:
    del reason, failure


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDeps:
    """What one run depends on and never changes: built once per run (:func:`new_run`), read by every step.

    Attributes:
        name: the agent's name (in ``RunStarted``).
        model: the chat model.
        system: the fixed head of every request (the system message, if any).
        options: loop behaviour.
        middleware: hooks at the cut points (first = outermost).
        output: the structured output wanted (``None``: plain text).
        view: the tools this run may use (the toolkit narrowed by the caller's scope and active groups).
        executor: runs batches of tool calls for this run (permissions, interceptors, journal).
        budget: model-call retries left, shared by every call of the run.
        clock: what the run's waits run on.
        recorder: writes the run's changes to the session's log (``None``: nothing is recorded); it is
            also the executor's journal.
        control: interrupts the run and delivers messages into it (``steer``); the loop checks it.
        save: records how the run ended (see :data:`SaveRun`).
        ctx: the context hooks, interceptors and tools receive (the caller's, the run's id and state,
            and the caller's typed ``deps``).
        key: the session's ``(user_id, session_id)``.
        head: the header fields every event of the run carries (``Event(**deps.head, ...)``).
        quiet: nobody watches the per-step events (``call`` with no hook): steps skip building them.
        deltas: per-token events are wanted.
    """

    name: str
    model: ChatModel
    system: tuple[Msg, ...]
    options: AgentOptions
    middleware: tuple[AnyMiddleware, ...]
    output: OutputSpec | None
    view: ToolView
    executor: ToolExecutor
    budget: RetryBudget
    clock: Clock
    recorder: Recorder | None
    control: RunControl
    save: SaveRun
    ctx: RunContext[object]
    key: SessionKey
    head: EventHead
    quiet: bool
    deltas: bool

    @property
    def run_id(self) -> str:
        """The run's id, in every event."""
        return self.ctx.run_id


@dataclass(eq=False, slots=True)
class RunState:
    """What one run changes, shared by its steps (see the module; ``deps`` is what it reads).

    Attributes:
        deps: what the run depends on (frozen).
        state: the session's conversation and pending calls; saved when the run ends.
        iteration: reasoning steps taken.
        usage: token totals over the run's model calls (side turns included).
        last_message: the last assistant message of a reasoning step in this run.
        phase: the phase last announced (:meth:`phase_to` emits a change only).
        ended: the :class:`~rxagent.events.AgentResult` was emitted: nothing that fails later may produce
            another.
        in_flight: results of the batch in flight, as its calls finish: an interrupt or a cancel keeps
            them.
        tool_choice_rung: how far down the forced-tool-choice ladder the model's refusals have pushed
            this run (a model that refused a forced choice once is not asked again).
        repaired: the history's repaired form, kept between requests (the session keeps it between runs).
    """

    deps: RunDeps
    state: AgentState
    iteration: int = 0
    usage: UsageTotals = field(default_factory=UsageTotals)
    last_message: Msg | None = None
    phase: Phase | None = None
    ended: bool = False
    in_flight: dict[str, ToolResultBlock] = field(default_factory=lambda: {})
    tool_choice_rung: int = 0
    repaired: RepairedHistory = field(default_factory=RepairedHistory)

    # ---- shortcuts -------------------------------------------------------------------------------------

    @property
    def messages(self) -> list[Msg]:
        """The session's conversation (append to it to tell the model something)."""
        return self.state.messages

    @property
    def pending(self) -> list[PendingCall]:
        """The calls waiting for a human's decision or an external result."""
        return self.state.pending

    @property
    def head(self) -> EventHead:
        """The header fields every event of the run carries (``StepNote(**run.head, ...)``)."""
        return self.deps.head

    @property
    def quiet(self) -> bool:
        """Nobody watches the per-step events: a step may skip building them."""
        return self.deps.quiet

    @property
    def ctx(self) -> RunContext[object]:
        """The run's context (as hooks and tools receive it)."""
        return self.deps.ctx

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.deps.ctx.run_id

    def deps_of(self, kind: type[_D]) -> _D:
        """The caller's typed dependencies (``agent.call(..., deps=...)``), checked to be a ``kind``.

        Raises:
            TypeError: the run carries no dependencies of that type.
        """
        value = self.deps.ctx.deps
        if not isinstance(value, kind):
            raise TypeError(f"this run's deps are {type(value).__name__}, not {kind.__name__}")
        return value

    # ---- events ------------------------------------------------------------------------------------

    def phase_to(self, phase: Phase) -> list[AgentEvent]:
        """Move to ``phase``: the :class:`PhaseChanged` to emit, if the phase changed and anyone looks."""
        if phase == self.phase:
            return []
        self.phase = phase
        if self.deps.quiet:
            return []
        return [PhaseChanged(**self.deps.head, phase=phase, iteration=self.iteration)]

    # ---- the conversation ----------------------------------------------------------------------------

    def history(self) -> list[Msg]:
        """The history as a request sends it: repaired (see :mod:`rxagent.agent.transcript`), in a new list.

        Only what was appended since the last request is repaired (see :class:`RepairedHistory`).
        """
        prefix, rest = self.repaired.parts(self.state.messages)
        return [*prefix, *rest]

    def request_messages(self, *closing: Msg) -> tuple[Msg, ...]:
        """The messages of a request of this run: the system head, the repaired history, then ``closing``.

        The same as ``(*run.deps.system, *run.history(), *closing)``, built with one copy of the history
        (into the tuple) and a repair of what is new since the last request.
        """
        prefix, rest = self.repaired.parts(self.state.messages)
        return (*self.deps.system, *prefix, *rest, *closing)

    def add_messages(self, messages: Sequence[Msg]) -> None:
        """Append ``messages`` to the conversation (what custom steps use to say something to the model)."""
        self.state.messages.extend(messages)

    def close_tool_batch(self) -> list[AgentEvent]:
        """Send the finished batch's results as one tool message, in the order of the calls.

        Returns the events to emit (the ``OBSERVING`` phase, the tool message); nothing when no result
        is waiting.
        """
        message = self.state.close_batch()
        if message is None:
            return []
        closing = self.phase_to("OBSERVING")
        if not self.deps.quiet:
            closing.append(MessageCompleted(**self.deps.head, message=message))
        return closing

    def add_result(self, result: ToolResultBlock) -> list[AgentEvent]:
        """Add to the batch a result no tool execution reported (a human's denial, an external result, a
        reviewer's rejection, a call cut short): returns its :class:`~rxagent.events.ToolResult` event to
        emit (none when nobody watches), so every outcome is an event, as an executed call's is."""
        partial = self.state.partial_results
        if all(r.tool_use_id != result.tool_use_id for r in partial):  # the recorder may hold it already
            partial.append(result)
        if self.deps.quiet:
            return []
        return [ToolResult(**self.deps.head, result=result, duration_s=0.0)]

    def settle(self, unfinished: str, status: ToolResultStatus, *, answer_waiting: bool) -> list[AgentEvent]:
        """Answer the calls of the last assistant message that ran or were running; close the batch if done.

        Calls that finished keep their real results (a charge that went through stays recorded as done,
        so the model does not charge again); calls still running get ``unfinished`` with ``status``.
        Calls waiting for a decision or a result are answered as interrupted when ``answer_waiting``
        (an interrupt: the user moved on), else they stay pending (a cancel or a failure changes no
        decision the caller still has to make). Returns the events to emit: a ``ToolResult`` for each
        result added, then the batch's closing events.
        """
        answered = {r.tool_use_id for r in self.state.partial_results}
        waiting = {p.call.id for p in self.state.pending}
        last = self.state.messages[-1] if self.state.messages else None
        dangling = last.tool_calls if last is not None and last.role == "assistant" else ()
        told: list[AgentEvent] = []
        for call in dangling:
            finished = self.in_flight.get(call.id)
            if finished is not None:  # it ran to its end (its result recorded already), untold till now
                told += self.add_result(finished)
            elif call.id in answered or (call.id in waiting and not answer_waiting):
                continue
            elif call.id in waiting:
                told += self.add_result(result_of(call, "Interrupted by the user.", "interrupted"))
            else:
                told += self.add_result(result_of(call, unfinished, status))
        self.in_flight.clear()
        if answer_waiting:
            for pending in self.state.pending:  # waiting calls outside that message (a damaged state)
                if pending.call.id not in answered and all(c.id != pending.call.id for c in dangling):
                    interrupted = result_of(pending.call, "Interrupted by the user.", "interrupted")
                    told += self.add_result(interrupted)
            self.state.pending = []
        return told if self.state.pending else told + self.close_tool_batch()

    def roll_back(self) -> None:
        """Drop what this run changed in the state that its recorder has not recorded yet: the session goes
        back to what its log has. A run failing with an error that
        :func:`~rxagent.agent.middleware.rolls_back` does this before it is saved. Without a recorder
        nothing is recorded, and nothing is dropped."""
        recorder = self.deps.recorder
        if recorder is not None:
            recorder.discard_unrecorded()
        self.last_message = None

    def note(self, kind: FactKind, data: dict[str, JsonValue]) -> None:
        """Note a fact for the session's log (written with the next flush; nothing without a recorder)."""
        recorder = self.deps.recorder
        if recorder is not None:
            recorder.note(kind, data)


def new_run(
    model: ChatModel,
    toolkit: Toolkit | None = None,
    *,
    name: str = "agent",
    system_prompt: str | None = None,
    options: AgentOptions | None = None,
    middleware: Sequence[AnyMiddleware] = (),
    output_type: type[BaseModel] | Mapping[str, JsonValue] | OutputSpec | None = None,
    ctx: RuntimeContext | None = None,
    deps: object = None,
    state: AgentState | None = None,
    control: RunControl | None = None,
    save: SaveRun = _save_nothing,
    recorder: Recorder | None = None,
    permissions: Permissions | None = None,
    clock: Clock = SYSTEM_CLOCK,
    run_id: str | None = None,
    quiet: bool = False,
    deltas: bool = True,
) -> RunState:
    """A fresh run's state and dependencies: what :func:`~rxagent.agent.loop.run_loop` needs, with no
    agent object (an agent builds its runs with this too).

    Args:
        model: the chat model.
        toolkit: the tools (``None``: none); narrowed by ``ctx.tools`` and the session's active groups.
        name, system_prompt, options, middleware, output_type, clock: as for ``Agent``.
        ctx: who the run is for (default: the session ``"default"``).
        deps: the caller's typed dependencies (``ctx.deps`` for tools and steps).
        state: the conversation to continue (default: a new one).
        control: the run's control (default: a new one; bind it to the loop to interrupt from a thread).
        save: called with how the run ended before its result (default: nothing is saved).
        recorder: the session's recorder (default: nothing is recorded).
        permissions: the gate every tool call passes (default: every call allowed).
        run_id: the run's id (default: a fresh one).
        quiet: nobody watches the per-step events. deltas: per-token events are wanted.
    """
    caller = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
    session = caller.session_id or DEFAULT_SESSION
    settings = options or AgentOptions()
    hooks = tuple(middleware)
    conversation = state if state is not None else AgentState()
    identity = run_id or new_id("run")
    context: RunContext[object] = RunContext(
        user_id=caller.user_id,
        session_id=session,
        trace_id=caller.trace_id,
        attributes=caller.attributes,
        tools=caller.tools,
        parent_run_id=caller.parent_run_id,
        parent_span_id=caller.parent_span_id,
        trace_sampled=caller.trace_sampled,
        run_id=identity,
        agent_name=name,
        model_name=model.model_name,
        provider_name=provider_of(model),
        state=conversation,
        event_detail="result" if quiet else "all" if deltas else "folded",
        deps=deps if deps is not None else _deps_of(caller),
    )
    head = EventHead(run_id=identity, session_id=session, trace_id=context.trace_id, seq=0)
    if caller.parent_run_id is not None:  # a nested run; top-level events keep the field's default
        head["parent_run_id"] = caller.parent_run_id
    executor = ToolExecutor(
        parallel=settings.parallel_tools,
        permissions=permissions or Permissions(),
        max_concurrency=settings.max_tool_concurrency,
        interceptors=tool_interceptors(hooks),
        default_timeout=settings.tool_timeout,
        journal=recorder,
        clock=clock,
    )
    output = (
        output_type if isinstance(output_type, OutputSpec) or output_type is None else OutputSpec(output_type)
    )
    deps_ = RunDeps(
        name=name,
        model=model,
        system=(Msg.system(system_prompt),) if system_prompt else (),
        options=settings,
        middleware=hooks,
        output=output,
        view=tool_view(toolkit or Toolkit(), caller, conversation),
        executor=executor,
        budget=RetryBudget(max_retries=settings.retry_budget),
        clock=clock,
        recorder=recorder,
        control=control or RunControl(),
        save=save,
        ctx=context,
        key=(caller.user_id, session),
        head=head,
        quiet=quiet,
        deltas=deltas,
    )
    return RunState(deps_, conversation)


def _deps_of(caller: RuntimeContext) -> object:
    run = run_context_of(caller)
    return run.deps if run is not None else None


def tool_interceptors(middleware: Sequence[AnyMiddleware]) -> tuple[ToolInterceptor, ...]:
    """The ``tool_call`` hooks of ``middleware``, as executor interceptors (outermost first; a tuple: none
    is the empty tuple, no list per run)."""
    return tuple(m.tool_call for m in middleware if isinstance(m, Middleware) and has_hooks([m], "tool_call"))


def tool_view(toolkit: Toolkit, caller: RuntimeContext, state: AgentState) -> ToolView:
    """The tools a run of ``caller`` on a session in ``state`` may use: the toolkit narrowed by the
    caller's :class:`~rxagent.context.ToolScope` and the session's active groups (the scope's groups for a
    session that activated none), and the scope's caller tools beside them.

    Raises:
        ValueError: a caller tool is named as a tool of the toolkit (see :meth:`Toolkit.view`).
    """
    scope = caller.tools
    groups = state.active_groups
    if groups is None and scope is not None:
        groups = scope.groups
    return toolkit.view(
        allow=scope.allow if scope is not None else None,
        active_groups=groups,
        presets=scope.presets if scope is not None else None,
        shared_presets=scope.shared_presets if scope is not None else None,
        caller_tools=scope.caller_tools if scope is not None else (),
    )
