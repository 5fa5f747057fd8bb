"""The acting step: run one batch of tool calls through the ``acting`` cut point and the executor.

:func:`act_step` builds the step for :class:`~rxagent.agent.nodes.Act` nodes. It passes the batch through
the ``acting`` cut point to the run's :class:`~rxagent.tools.ToolExecutor` (permissions, validation,
``tool_call`` interceptors, parallel and sequential stretches), publishes progress and the events of
runs nested in the calls (agents used as tools; their results' usage counts in this run's) as they
happen, records each call's result as it finishes (so an interrupt or a cancel keeps it), then sends
the batch's results as one tool message in the order of the calls, applies the repeat guard, and names
the next node with its ``decide`` function (:func:`~rxagent.agent.decisions.after_acting` by default).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from pydantic import JsonValue
from reactivex import Observable, abc
from typing_extensions import TypeVar

from rxagent.agent.decisions import after_acting
from rxagent.agent.grants import approved_by_rules
from rxagent.agent.nodes import Act, Finish, Next, Node, StepOutput
from rxagent.agent.run import RunState
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    RepeatGuardTriggered,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolProgress,
    ToolResult,
    ToolSuspended,
)
from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock
from rxagent.operators import Frame, Source, sync_of
from rxagent.state import PendingCall
from rxagent.tools import (
    ToolBatchFinished,
    ToolBodyStarted,
    ToolCallNested,
    ToolCallProgress,
    ToolCallSettled,
    ToolEvent,
    ToolPermissionRequired,
    ToolRecordingError,
    ToolSystemError,
)

__all__ = ["ActingDecision", "act_step"]

_To = TypeVar("_To", bound=Node)

ActingDecision = Callable[[ToolBatchFinished, RunState], _To]
"""``(batch, run) -> next node``: what follows a batch that ran (see ``after_acting``)."""

_REPEAT_HINT = "repeat_guard"
"""The metadata value (under ``"rxagent"``) of the hint the repeat guard adds."""


def act_step(
    decide: ActingDecision[_To] = after_acting,
) -> Callable[[Act, RunState], Observable[StepOutput[_To | Finish]]]:
    """The step that runs an :class:`~rxagent.agent.nodes.Act` node's batch, ending with
    ``Next(decide(batch, run))``, or ``Next(Finish("ERROR"))`` when the tools' infrastructure failed
    (a :class:`~rxagent.tools.ToolSystemError`: no decision can mend that).

    Args:
        decide: picks the node after the batch.
    """

    def step(node: Act, run: RunState) -> Observable[StepOutput[_To | Finish]]:
        return _acting(run, node, decide)

    return step


def _acting(run: RunState, node: Act, decide: ActingDecision[_To]) -> Observable[StepOutput[_To | Finish]]:
    deps = run.deps
    opening = [*run.phase_to("TOOL_PENDING"), *run.phase_to("TOOL_EXECUTING")]
    # Calls of tools the session's rules allow skip the gate's "ask", as calls a person approved do.
    approved = node.approved | approved_by_rules(run.state, node.calls)
    tools = deps.executor.execute(node.calls, deps.view, run.ctx, approved=approved)
    until = deps.control.on_interrupt

    def subscribe(
        observer: abc.ObserverBase[StepOutput[_To | Finish]], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        acting = _Acting(observer, scheduler, run, node, decide)
        return acting.attach(tools, before=opening.__iter__, until=until)

    return Source(subscribe)


class _Acting(Frame[ToolEvent, StepOutput[_To | Finish]]):
    """One batch of the acting step as it runs: what its tools' events become, and what follows it.

    A :class:`~rxagent.operators.Frame` with methods, not ``frame`` with closures: a run waiting for its
    tools keeps it alive, and the garbage collector walks every object a run keeps (see
    ``rxagent/operators/_source.py``).
    """

    __slots__ = ("_decide", "_durations", "_node", "_outcome", "_run")

    def __init__(
        self,
        observer: abc.ObserverBase[StepOutput[_To | Finish]],
        scheduler: abc.SchedulerBase | None,
        run: RunState,
        node: Act,
        decide: ActingDecision[_To],
    ) -> None:
        super().__init__(observer, scheduler)
        self._run = run
        self._node = node
        self._decide = decide
        self._durations: dict[str, float] | None = None
        self._outcome: ToolBatchFinished | None = None

    def each(self, value: ToolEvent) -> Sequence[AgentEvent]:
        """A tool event as the run's events (none for those only the batch's end needs)."""
        run, event = self._run, value
        if isinstance(event, ToolCallSettled):
            if self._durations is None:
                self._durations = {}
            self._durations[event.call.id] = event.duration_s
            run.in_flight[event.call.id] = event.result
            return ()
        if isinstance(event, ToolBatchFinished):
            if self._outcome is None:
                self._outcome = event
            return ()
        if isinstance(event, ToolCallNested):
            return _nested(run, event.event)
        deps = run.deps
        if deps.quiet:
            return ()
        head = deps.head
        if isinstance(event, ToolBodyStarted):
            return [ToolExecutionStarted(**head, call=event.call)]
        if isinstance(event, ToolCallProgress):
            update = event.update
            return [
                ToolProgress(
                    **head,
                    call_id=event.call.id,
                    name=event.call.name,
                    message=update.message,
                    fraction=update.fraction,
                    data=update.data,
                )
            ]
        if isinstance(event, ToolPermissionRequired):
            return [ToolPermissionAsked(**head, call=event.call, reason=event.decision.reason)]
        return [ToolSuspended(**head, call=event.call)]

    def after(self) -> list[StepOutput[_To | Finish]]:
        """The batch's results, the repeat guard, and the node after it."""
        run, batch = self._run, self._outcome
        if batch is None:
            if run.deps.control.interrupted:  # cut short: the loop goes to Interrupt, which settles the calls
                return []
            raise RuntimeError("the tool executor completed without finishing the batch")
        events = _batch_done(run, self._node, batch, self._durations or {})
        closing: list[StepOutput[_To | Finish]] = [*events]
        closing.append(Next(self._decide(batch, run)))
        return closing

    def recover(self, error: Exception) -> Observable[StepOutput[_To | Finish]] | None:
        """The tools' infrastructure failed: the run finishes with an error (a tool's errors are results)."""
        if not isinstance(error, ToolSystemError):
            return None
        run = self._run
        head = run.deps.head
        report: list[StepOutput[_To | Finish]] = [
            ErrorEvent(**head, error_type=type(error).__name__, message=str(error))
        ]
        if not isinstance(error, ToolRecordingError):
            # Calls that finished before the failure keep their results, as under an interrupt. Not when
            # the log could not be written: what it lacks stays unknown (a call without a recorded
            # result is uncertain), and no guess is recorded in its place.
            cut_short = "The tools failed before this call finished."
            report.extend(run.settle(cut_short, "error", answer_waiting=False))
        report.append(Next(Finish("ERROR", None, detail=f"tool system error: {error}")))
        return sync_of(*report)


def _nested(run: RunState, event: AgentEvent) -> list[AgentEvent]:
    """An event of a run nested in a call (an agent used as a tool): forwarded as it is, and the usage
    of a direct child's result counted in this run's (a grandchild's is in its parent's already)."""
    if type(event) is AgentResult and event.parent_run_id == run.run_id:
        run.usage.include(event.usage)
    return [] if run.quiet else [event]


def _batch_done(
    run: RunState, node: Act, batch: ToolBatchFinished, durations: Mapping[str, float]
) -> list[AgentEvent]:
    head = run.head
    run.in_flight.clear()
    events: list[AgentEvent] = (
        []
        if run.quiet
        else [
            ToolResult(**head, result=r, duration_s=durations.get(r.tool_use_id, 0.0)) for r in batch.results
        ]
    )
    partial = run.state.partial_results
    recorded = {r.tool_use_id: i for i, r in enumerate(partial)}
    for result in batch.results:
        # The journal put each call's result in the state as it finished (so the log never loses it);
        # the batch's own is the one the model sees (a tool_call interceptor may have rewritten it).
        at = recorded.get(result.tool_use_id)
        if at is None:
            partial.append(result)
        elif partial[at] is not result:
            partial[at] = result
    for waiting in batch.waiting:
        if isinstance(waiting, ToolPermissionRequired):
            run.state.pending.append(
                PendingCall(call=waiting.call, kind="ask", reason=waiting.decision.reason)
            )
        else:
            run.state.pending.append(PendingCall(call=waiting.call, kind="external"))
    if run.state.pending:
        return events
    events.extend(run.close_tool_batch())
    events.extend(_repeat_guard(run))
    run.add_messages(node.then)  # new messages that came with the decisions follow the results
    return events


def _repeat_guard(run: RunState) -> list[AgentEvent]:
    """The same call with the same arguments and the same result ``repeat_guard`` times in a row (read
    from the history since the last user message or hint): a hint to change strategy, and its event."""
    threshold = run.deps.options.repeat_guard
    if threshold == 0:
        return []
    newest: tuple[ToolUseBlock, ToolResultBlock] | None = None
    text = ""  # the newest result's text, read once a second call matches its name and arguments
    count = 0
    repeated: ToolUseBlock | None = None
    for call, result in _answered_calls_backwards(run.state.messages):
        if newest is None:
            newest = (call, result)
        else:
            first = newest[0]
            if call.name != first.name or call.raw_arguments != first.raw_arguments:
                break
            if count == 1:
                text = newest[1].text
            if result.text != text:  # the same text: no need to re-encode
                break
        count, repeated = count + 1, call
    if repeated is None or count < threshold:
        return []
    hint = (
        f"You have called `{repeated.name}` with the same arguments {count} times in a row and got the "
        "same result each time. Repeating it will not help: change your approach, use another tool, or "
        "answer with what you know."
    )
    run.state.messages.append(Msg.system(hint, metadata={"rxagent": _REPEAT_HINT}))
    arguments: JsonValue = repeated.input
    return [RepeatGuardTriggered(**run.head, tool=repeated.name, arguments=arguments, count=count)]


def _answered_calls_backwards(messages: Sequence[Msg]) -> Iterator[tuple[ToolUseBlock, ToolResultBlock]]:
    """The calls with results since the last user message or repeat hint, newest first, with their
    results: lazily, so the guard reads back only as far as the calls repeat."""
    results: dict[str, ToolResultBlock] = {}
    for message in reversed(messages):
        if message.role == "user" or message.metadata.get("rxagent") == _REPEAT_HINT:
            return
        if message.role == "assistant":
            for call in reversed(message.tool_calls):
                result = results.get(call.id)
                if result is not None:
                    yield call, result
        else:
            for result in message.tool_results:
                results[result.tool_use_id] = result
