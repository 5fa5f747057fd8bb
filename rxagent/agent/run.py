"""Everything one run knows: :class:`RunState`, the value every step receives.

A run's steps (see :mod:`rxagent.agent.steps`) are functions of a node and a ``RunState``. The state holds
the session's :class:`~rxagent.state.AgentState` (saved when the run ends), the run's identity and
context, its tools (a per-run view and executor), its counters (iteration, usage, retry budget) and the
helpers every step shares: building event headers, changing phase, closing a batch of tool results, the
repaired history a request sends. It is created per subscription, so runs never share it.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import JsonValue

from rxagent.agent.control import RunControl
from rxagent.agent.transcript import repair_transcript
from rxagent.context import RunContext, RuntimeContext
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
from rxagent.model.types import provider_of
from rxagent.retry import RetryBudget
from rxagent.session import FactKind, Recorder
from rxagent.state import AgentState, SessionKey
from rxagent.tools import ToolExecutor, Toolkit, ToolView, result_of

if TYPE_CHECKING:
    from rxagent.agent.react import ReActAgent

__all__ = ["RunState", "tool_view"]


@dataclass(eq=False)
class RunState:
    """One run's state, shared by its steps.

    Attributes:
        agent: the agent running (its model, toolkit, options, middleware, permissions, output type).
        caller: the context the caller passed in.
        key: the session's ``(user_id, session_id)``.
        state: the session's conversation and pending calls; saved when the run ends.
        control: interrupts the run; the loop checks it between steps.
        save: records how the run ended with everything it changed (the finish step calls it before the
            result; an error passed to it gets a failing save attached as a note instead of replaced).
        recorder: writes the run's changes to the session's log (``None``: nothing is recorded); it is
            also the executor's journal, so tool calls are recorded as they are dispatched and finish.
        run_id: the run's id, in every event.
        iteration: reasoning steps taken.
        usage: token totals over the run's model calls.
        last_message: the last assistant message folded in this run.
        vars: free per-run data for custom steps (a plan and its progress, say); never saved.
        inbox: messages delivered mid-run, taken in before the next model turn.
        quiet: nobody watches the per-step events (``call`` with no hook): steps skip building them.
        deltas: per-token events are wanted.
        ctx: the context hooks, interceptors and tools receive (the caller's plus the run id and state).
        view: the tools this run may use (the toolkit narrowed by ``caller.tools`` and active groups).
        executor: runs batches of tool calls for this run.
        budget: model-call retries left, shared by every call of the run.
        head: the header fields every event of the run carries (``Event(**run.head, ...)``), with
            ``parent_run_id`` when the run is nested in another.
    """

    agent: ReActAgent
    caller: RuntimeContext
    key: SessionKey
    state: AgentState
    control: RunControl
    save: Callable[[RunReason, Exception | None], Awaitable[None]]
    recorder: Recorder | None = None
    run_id: str = field(default_factory=lambda: new_id("run"))
    iteration: int = 0
    usage: UsageTotals = field(default_factory=UsageTotals)
    last_message: Msg | None = None
    vars: dict[str, Any] = field(default_factory=lambda: {})
    inbox: deque[tuple[Msg, bool]] = field(default_factory=lambda: deque())
    """Messages delivered into the running run (a session handle's ``steer`` and ``inject``), added to the
    history at the next reasoning boundary; the flag says whether one left over starts the next run."""
    quiet: bool = False
    deltas: bool = True
    phase: Phase | None = None
    """The phase last announced (:meth:`phase_to` emits a change only)."""
    ended: bool = False
    """The AgentResult was emitted: nothing that fails later may produce another."""
    reprompted: bool = False
    """The model was already asked once more for an answer after a reply without one."""
    structured_attempts: int = 0
    """Structured answers refused so far."""
    tool_choice_rung: int = 0
    """How far down the forced-tool-choice ladder the model's refusals have pushed this run."""
    repeat_key: tuple[str, str, str] | None = None
    repeat_count: int = 0
    deferred_input: list[Msg] = field(default_factory=lambda: [])
    """New messages that came with decisions: they join the history after the results they follow."""
    finished_calls: dict[str, ToolResultBlock] = field(default_factory=lambda: {})
    """Results of the batch in flight, as its calls finish: an interrupt or a cancel keeps them."""
    failure: str | None = None
    """Why the tools' infrastructure failed (a ``ToolSystemError``): the run ends with reason ERROR."""
    repair_cache: tuple[int, list[Msg]] = field(default_factory=lambda: (0, []))
    budget: RetryBudget = field(init=False)
    head: dict[str, Any] = field(init=False)
    ctx: RunContext = field(init=False)
    view: ToolView = field(init=False)
    executor: ToolExecutor = field(init=False)

    def __post_init__(self) -> None:
        caller, agent = self.caller, self.agent
        self.ctx = RunContext(
            user_id=caller.user_id,
            session_id=self.key[1],
            trace_id=caller.trace_id,
            attributes=caller.attributes,
            tools=caller.tools,
            parent_run_id=caller.parent_run_id,
            parent_span_id=caller.parent_span_id,
            trace_sampled=caller.trace_sampled,
            run_id=self.run_id,
            agent_name=agent.name,
            model_name=agent.model.model_name,
            provider_name=provider_of(agent.model),
            state=self.state,
            event_detail="result" if self.quiet else "all" if self.deltas else "folded",
        )
        self.budget = RetryBudget(max_retries=agent.options.retry_budget)
        self.head = {
            "run_id": self.run_id,
            "session_id": self.key[1],
            "trace_id": self.ctx.trace_id,
            "seq": 0,
        }
        if caller.parent_run_id is not None:  # a nested run; top-level events keep the field's default
            self.head["parent_run_id"] = caller.parent_run_id
        self.view = tool_view(agent.toolkit, caller, self.state)
        self.executor = ToolExecutor(
            parallel=agent.options.parallel_tools,
            max_concurrency=agent.options.max_tool_concurrency,
            permissions=agent.permissions,
            interceptors=agent.tool_interceptors(),
            default_timeout=agent.options.tool_timeout,
            journal=self.recorder,
            clock=agent.clock,
        )

    # ---- events ------------------------------------------------------------------------------------

    def phase_to(self, phase: Phase) -> list[AgentEvent]:
        """Move to ``phase``: the :class:`PhaseChanged` to emit, if the phase changed and anyone looks."""
        if phase == self.phase:
            return []
        self.phase = phase
        if self.quiet:
            return []
        return [PhaseChanged(**self.head, phase=phase, iteration=self.iteration)]

    # ---- the conversation ----------------------------------------------------------------------------

    def history(self) -> list[Msg]:
        """The history as a request sends it: repaired (see :mod:`rxagent.agent.transcript`), incrementally.

        Repair carries state only across an assistant message with tool calls, so the repaired form of
        a prefix that does not end in one is final; within a run the history only grows, so each step
        repairs just what was appended since the last stable point instead of the whole conversation.
        """
        history = self.state.messages
        stable, done = self.repair_cache
        if stable > len(history):  # the history was replaced: start over
            stable, done = 0, []
        end = len(history)
        while end > stable and history[end - 1].role == "assistant" and history[end - 1].tool_calls:
            end -= 1
        if end > stable:
            done = done + repair_transcript(history[stable:end])
            stable = end
        self.repair_cache = (stable, done)
        return done + repair_transcript(history[stable:])

    def close_tool_batch(self) -> list[AgentEvent]:
        """Send the finished batch's results as one tool message, in the order of the calls.

        Returns the events to emit (the ``OBSERVING`` phase, the tool message); nothing when no result
        is waiting.
        """
        message = self.state.close_batch()
        if message is None:
            return []
        closing = self.phase_to("OBSERVING")
        if not self.quiet:
            closing.append(MessageCompleted(**self.head, message=message))
        return closing

    def add_result(self, result: ToolResultBlock) -> list[AgentEvent]:
        """Add to the batch a result no tool execution reported (a human's denial, an external result, a
        reviewer's rejection, a call cut short): returns its :class:`~rxagent.events.ToolResult` event to
        emit (none when nobody watches), so every outcome is an event, as an executed call's is."""
        partial = self.state.partial_results
        if all(r.tool_use_id != result.tool_use_id for r in partial):  # the recorder may hold it already
            partial.append(result)
        if self.quiet:
            return []
        return [ToolResult(**self.head, result=result, duration_s=0.0)]

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
            finished = self.finished_calls.get(call.id)
            if finished is not None:  # it ran to its end (its result recorded already), untold till now
                told += self.add_result(finished)
            elif call.id in answered or (call.id in waiting and not answer_waiting):
                continue
            elif call.id in waiting:
                told += self.add_result(result_of(call, "Interrupted by the user.", "interrupted"))
            else:
                told += self.add_result(result_of(call, unfinished, status))
        self.finished_calls.clear()
        if answer_waiting:
            for pending in self.state.pending:  # waiting calls outside that message (a damaged state)
                if pending.call.id not in answered and all(c.id != pending.call.id for c in dangling):
                    interrupted = result_of(pending.call, "Interrupted by the user.", "interrupted")
                    told += self.add_result(interrupted)
            self.state.pending = []
        return told if self.state.pending else told + self.close_tool_batch()

    def note(self, kind: FactKind, data: dict[str, JsonValue]) -> None:
        """Note a fact for the session's log (written with the next flush; nothing without a recorder)."""
        if self.recorder is not None:
            self.recorder.note(kind, data)

    def add_messages(self, messages: Sequence[Msg]) -> None:
        """Append ``messages`` to the conversation (what custom steps use to say something to the model)."""
        self.state.messages.extend(messages)


def tool_view(toolkit: Toolkit, caller: RuntimeContext, state: AgentState) -> ToolView:
    """The tools a run of ``caller`` on a session in ``state`` may use: the toolkit narrowed by the
    caller's :class:`~rxagent.context.ToolScope` and the session's active groups (the scope's groups for a
    session that activated none)."""
    scope = caller.tools
    groups = state.active_groups
    if groups is None and scope is not None:
        groups = scope.groups
    return toolkit.view(
        allow=scope.allow if scope is not None else None,
        active_groups=groups,
        presets=scope.presets if scope is not None else None,
        shared_presets=scope.shared_presets if scope is not None else None,
    )
