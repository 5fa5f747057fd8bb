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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import reactivex
from pydantic import JsonValue
from reactivex import Observable

from rxagent.agent.decisions import after_acting
from rxagent.agent.middleware import ActingStep, chain, has_hooks
from rxagent.agent.nodes import Act, Next, StepOutput
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
from rxagent.operators import frame, sync_of
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

ActingDecision = Callable[[ToolBatchFinished | None, RunState], Any]
"""``(batch, run) -> next node``: what follows a batch (see ``after_acting``)."""


def act_step(decide: ActingDecision = after_acting) -> Callable[[Act, RunState], Observable[StepOutput]]:
    """The step that runs an :class:`~rxagent.agent.nodes.Act` node's batch, ending with
    ``Next(decide(batch, run))``.

    Args:
        decide: picks the node after the batch (``batch`` is ``None`` when the tools' infrastructure
            failed, or an interrupt cut the batch short).
    """

    def step(node: Act, run: RunState) -> Observable[StepOutput]:
        turn = ActingStep(run.iteration, node.calls)
        outcome: list[ToolBatchFinished] = []

        def then() -> Next:
            return Next(decide(outcome[0] if outcome else None, run))

        middleware = run.agent.middleware
        if not has_hooks(middleware, "acting"):
            return _acting(run, turn, node.approved, outcome, then)

        def inner(hooked_turn: ActingStep) -> Observable[Any]:
            return _acting(run, hooked_turn, node.approved, outcome, None)

        events: Observable[StepOutput] = chain(middleware, "acting", run.ctx, inner)(turn)
        return reactivex.concat(events, reactivex.defer(lambda _: sync_of(then())))

    return step


def _acting(
    run: RunState,
    turn: ActingStep,
    approved: frozenset[str],
    outcome: list[ToolBatchFinished],
    then: Callable[[], Next] | None,
) -> Observable[Any]:
    head = run.head
    durations: dict[str, float] = {}

    def on_tool_event(event: ToolEvent) -> list[AgentEvent]:
        if isinstance(event, ToolCallSettled):
            durations[event.call.id] = event.duration_s
            run.finished_calls[event.call.id] = event.result
            return []
        if isinstance(event, ToolBatchFinished):
            outcome.append(event)
            return []
        if isinstance(event, ToolCallNested):
            return _nested(run, event.event)
        if run.quiet:
            return []
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

    def done() -> list[Any]:
        closing: list[Any] = _batch_done(run, turn, outcome[0], durations) if outcome else []
        if then is not None:
            closing.append(then())
        return closing

    def system_error(error: Exception) -> Observable[Any] | None:
        if not isinstance(error, ToolSystemError):
            return None
        run.failure = str(error)
        report: list[Any] = [ErrorEvent(**head, error_type=type(error).__name__, message=str(error))]
        if not isinstance(error, ToolRecordingError):
            # Calls that finished before the failure keep their results, as under an interrupt. Not when
            # the log could not be written: what it lacks stays unknown (a call without a recorded
            # result is uncertain), and no guess is recorded in its place.
            cut_short = "The tools failed before this call finished."
            report.extend(run.settle(cut_short, "error", answer_waiting=False))
        if then is not None:
            report.append(then())
        return sync_of(*report)

    opening = [*run.phase_to("TOOL_PENDING"), *run.phase_to("TOOL_EXECUTING")]
    return run.executor.execute(turn.calls, run.view, run.ctx, approved=approved).pipe(
        frame(
            on_tool_event,
            before=lambda: opening,
            after=done,
            recover=system_error,
            until=run.control.on_interrupt,
        )
    )


def _nested(run: RunState, event: AgentEvent) -> list[AgentEvent]:
    """An event of a run nested in a call (an agent used as a tool): forwarded as it is, and the usage
    of a direct child's result counted in this run's (a grandchild's is in its parent's already)."""
    if type(event) is AgentResult and event.parent_run_id == run.run_id:
        run.usage.include(event.usage)
    return [] if run.quiet else [event]


def _batch_done(
    run: RunState, turn: ActingStep, batch: ToolBatchFinished, durations: Mapping[str, float]
) -> list[Any]:
    head = run.head
    run.finished_calls.clear()
    events: list[Any] = (
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
    events.extend(_repeat_guard(run, turn.calls, batch.results))
    run.state.messages.extend(run.deferred_input)  # new messages that came with the decisions
    run.deferred_input = []
    return events


def _repeat_guard(
    run: RunState, calls: Sequence[ToolUseBlock], results: Sequence[ToolResultBlock]
) -> list[Any]:
    threshold = run.agent.options.repeat_guard
    if threshold == 0:
        return []
    by_id = {r.tool_use_id: r for r in results}
    events: list[Any] = []
    for call in calls:
        result = by_id.get(call.id)
        if result is None:
            continue
        key = (call.name, call.raw_arguments, result.text)  # the same text: no need to re-encode
        run.repeat_count = run.repeat_count + 1 if key == run.repeat_key else 1
        run.repeat_key = key
        if run.repeat_count >= threshold:
            hint = (
                f"You have called `{call.name}` with the same arguments {run.repeat_count} times in a "
                "row and got the same result each time. Repeating it will not help: change your "
                "approach, use another tool, or answer with what you know."
            )
            run.state.messages.append(Msg.system(hint, metadata={"rxagent": "repeat_guard"}))
            arguments: JsonValue = call.input
            events.append(
                RepeatGuardTriggered(**run.head, tool=call.name, arguments=arguments, count=run.repeat_count)
            )
            run.repeat_count = 0
            run.repeat_key = None
    return events
