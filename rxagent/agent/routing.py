"""The start step: route a run's input by what the session waits for.

New text with nothing pending joins the history and goes to the model. When calls are pending, the input
must answer them: approvals (possibly with edited arguments), denials and external results are checked as
a whole before anything changes (a refused input leaves no trace), then applied; approved calls run next
(:func:`~rxagent.agent.decisions.route_input`); an approval that says ``always`` adds a permission rule to
the session, which answers its tool's other waiting calls at once (:mod:`rxagent.agent.grants`). New text
while calls wait is refused, unless
``AgentOptions.recover_pending`` answers the waiting calls as interrupted (never running an asking call).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence

import reactivex
from pydantic import JsonValue
from reactivex import Observable
from typing_extensions import TypeVar

from rxagent.agent.decisions import route_input
from rxagent.agent.grants import allow_always, allowed_tools
from rxagent.agent.inputs import AppliedInput, ExternalResult, PendingToolCallsError, RunInput, ToolDecision
from rxagent.agent.nodes import Node, Start, StepOutput
from rxagent.agent.run import RunState
from rxagent.agent.shared_state import SHARED_STATE_KEY
from rxagent.agent.steps import emit
from rxagent.events import AgentEvent, RunStarted
from rxagent.messages import Msg, ToolUseBlock
from rxagent.operators import sync_of
from rxagent.state import PendingCall
from rxagent.tools import ToolArgumentError, ToolView, Unavailable, result_of

__all__ = ["EDITED_CALLS", "RouteDecision", "apply_input", "check_answers", "start_step"]

_To = TypeVar("_To", bound=Node)

RouteDecision = Callable[[AppliedInput, RunState], _To]
"""``(applied input, run) -> next node``: where a run goes once its input is applied."""

EDITED_CALLS = "rxagent_edited_calls"
"""The assistant message's metadata key mapping edited call ids to the model's original argument text."""


def start_step(
    route: RouteDecision[_To] = route_input,
) -> Callable[[Start, RunState], Observable[StepOutput[_To]]]:
    """The step for :class:`~rxagent.agent.nodes.Start`: ``RunStarted``, the input applied, then
    ``Next(route(applied, run))``.

    Args:
        route: picks the first node once the input is applied (a planning agent starts with its
            ``Plan`` node here).
    """

    def step(node: Start, run: RunState) -> Observable[StepOutput[_To]]:
        opening: list[AgentEvent] = (
            []
            if run.quiet
            else [RunStarted(**run.head, agent=run.deps.name, input=list(node.input.messages))]
        )
        try:
            applied, closing = apply_input(node.input, run)
        except PendingToolCallsError as refused:  # after RunStarted, so the run's events stay well formed
            return reactivex.concat(sync_of(*opening), reactivex.throw(refused))
        return emit(*opening, *closing, then=route(applied, run))

    return step


def apply_input(run_input: RunInput, run: RunState) -> tuple[AppliedInput, list[AgentEvent]]:
    """Apply ``run_input`` to the session: returns what to run next (the calls a human approved, the
    messages that follow their results) and the events to emit (a ``ToolResult`` for each denial,
    external result or call answered as interrupted, then the tool message when the batch is complete).
    The input's shared state, if any, replaces the session's once the rest fits (see
    :mod:`rxagent.agent.shared_state`).

    Raises:
        PendingToolCallsError: the input does not fit the pending calls (nothing was changed).
    """
    applied = _apply(run_input, run)
    if run_input.state is not None:
        run.state.extras[SHARED_STATE_KEY] = dict(run_input.state)
    return applied


def _apply(run_input: RunInput, run: RunState) -> tuple[AppliedInput, list[AgentEvent]]:
    state = run.state
    retries = tuple(p.call for p in state.pending if p.kind == "retry")
    if retries:
        return _retry(run, retries, run_input)
    if state.pending:
        if run_input.decisions:
            return _resume(run, run_input.decisions, run_input.messages)
        if not run.deps.options.recover_pending:
            waiting = ", ".join(f"{p.call.name} ({p.call.id}, {p.kind})" for p in state.pending)
            raise PendingToolCallsError(
                f"this session has tool calls waiting for a decision or a result: {waiting}. Send "
                "ToolDecision / ExternalResult values, or enable AgentOptions.recover_pending"
            )
        told: list[AgentEvent] = []
        for pending in state.pending:
            text = "The user moved on without deciding on this call; it was not run."
            told += run.add_result(result_of(pending.call, text, "interrupted"))
        state.pending.clear()
        closing = run.close_tool_batch()
        state.messages.extend(run_input.messages)
        return AppliedInput(), told + closing
    if run_input.decisions:
        raise PendingToolCallsError("this session has no tool calls waiting; there is nothing to decide")
    state.messages.extend(run_input.messages)
    return AppliedInput(), []


def _retry(
    run: RunState, retries: tuple[ToolUseBlock, ...], run_input: RunInput
) -> tuple[AppliedInput, list[AgentEvent]]:
    """Calls to run again (their outcome was lost, and running them is safe or was reconciled) run first;
    answers for other waiting calls are applied as usual, and new messages follow the batch."""
    state = run.state
    others = [p for p in state.pending if p.kind != "retry"]
    if run_input.decisions and not others:
        raise PendingToolCallsError(
            "this session has no tool calls waiting for a decision; there is nothing to decide"
        )
    state.pending = others
    if not run_input.decisions:
        return AppliedInput(retries, run_input.messages), []
    applied, told = _resume(run, run_input.decisions, run_input.messages, more_to_run=True)
    return AppliedInput((*retries, *applied.approved), applied.follow), told


def _resume(
    run: RunState,
    decisions: Sequence[ToolDecision | ExternalResult],
    messages: Sequence[Msg],
    *,
    more_to_run: bool = False,
) -> tuple[AppliedInput, list[AgentEvent]]:
    state = run.state
    by_id = {p.call.id: p for p in state.pending}
    edits = check_answers(decisions, by_id, run.deps.view)  # everything is checked before anything changes
    approved: list[ToolUseBlock] = []
    told: list[AgentEvent] = []  # a ToolResult for each answer that is a result: every outcome is an event
    for decision in decisions:
        call = by_id.pop(decision.call_id).call
        run.note("decision", _decision_record(decision, edits.get(call.id)))
        if isinstance(decision, ExternalResult):
            told += run.add_result(result_of(call, decision.output, decision.status))
        elif decision.allow:
            edited = edits.get(call.id)
            approved.append(_record_edit(run, call, edited) if edited is not None else call)
            if decision.always:
                allow_always(state, call, decision.reason)
        else:
            why = f": {decision.reason}" if decision.reason else ""
            told += run.add_result(result_of(call, f"The user denied this call{why}.", "denied"))
    # Calls still asking whose tool a rule of the session now allows (one just made) need no answer; in
    # the order of the calls, as the rest of the batch.
    allowed = allowed_tools(state)
    for pending in [p for p in by_id.values() if p.kind == "ask" and p.call.name in allowed]:
        call = by_id.pop(pending.call.id).call
        why = f"a rule of this session allows {call.name} without asking"
        run.note("decision", {**_decision_record(ToolDecision(call.id, True, why), None), "by": "rule"})
        approved.append(call)
    state.pending = list(by_id.values())
    if approved or state.pending or more_to_run:  # the messages join the history after the results
        return AppliedInput(tuple(approved), tuple(messages)), told
    closing = run.close_tool_batch()
    state.messages.extend(messages)
    return AppliedInput(), told + closing


def _decision_record(
    decision: ToolDecision | ExternalResult, edited: dict[str, JsonValue] | None
) -> dict[str, JsonValue]:
    if isinstance(decision, ExternalResult):
        return {"call_id": decision.call_id, "kind": "external_result", "status": decision.status}
    record: dict[str, JsonValue] = {
        "call_id": decision.call_id,
        "kind": "approval" if decision.allow else "denial",
        "reason": decision.reason,
        "arguments": edited,
    }
    if decision.always:
        record["always"] = True
    return record


def check_answers(
    decisions: Sequence[ToolDecision | ExternalResult], pending: Mapping[str, PendingCall], view: ToolView
) -> dict[str, dict[str, JsonValue]]:
    """Refuse answers that do not fit the pending calls; return the checked edits of approvals by call id.

    Each answer must name a pending call, once, with the right kind of answer (a decision for a call that
    asks, a result for an external one); edited arguments come with an approval and must pass the tool's
    schema in ``view``. Nothing changes either way: this only reads.

    Raises:
        PendingToolCallsError: what does not fit, and why.
    """
    seen: set[str] = set()
    edits: dict[str, dict[str, JsonValue]] = {}
    for decision in decisions:
        call_id = decision.call_id
        waiting = pending.get(call_id)
        if waiting is None:
            known = ", ".join(repr(i) for i in pending) or "none"
            raise PendingToolCallsError(f"no pending tool call with id {call_id!r} (pending: {known})")
        if call_id in seen:
            raise PendingToolCallsError(f"two answers for tool call {call_id!r}: send one per call")
        seen.add(call_id)
        if isinstance(decision, ExternalResult):
            if waiting.kind != "external":
                raise PendingToolCallsError(f"call {call_id!r} asks for permission, not a result")
            continue
        if waiting.kind != "ask":
            raise PendingToolCallsError(f"call {call_id!r} is external: send an ExternalResult")
        if decision.always and not decision.allow:
            raise PendingToolCallsError(f"call {call_id!r}: 'always' comes with an approval, not a denial")
        if decision.arguments is not None:
            if not decision.allow:
                raise PendingToolCallsError(
                    f"call {call_id!r}: edited arguments come with an approval, not a denial"
                )
            edits[call_id] = _checked_edit(view, waiting.call, decision.arguments)
    return edits


def _checked_edit(
    view: ToolView, call: ToolUseBlock, arguments: Mapping[str, JsonValue]
) -> dict[str, JsonValue]:
    resolved = view.resolve(call.name)
    if isinstance(resolved, Unavailable):
        raise PendingToolCallsError(f"call {call.id!r}: {resolved.message}")
    edited = dict(arguments)
    try:
        resolved.tool.prepare(edited, resolved.presets)
    except ToolArgumentError as error:
        refused = f"call {call.id!r}: the edited arguments were refused: {error}"
        raise PendingToolCallsError(refused) from None
    return edited


def _record_edit(run: RunState, call: ToolUseBlock, arguments: dict[str, JsonValue]) -> ToolUseBlock:
    """The history keeps the edited call (same id) in place of the model's, noting the original text."""
    edited = call.model_copy(
        update={
            "input": arguments,
            "raw_arguments": json.dumps(arguments),
            "state": "complete",
            "error": None,
        }
    )
    messages = run.state.messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.role == "assistant" and any(c.id == call.id for c in message.tool_calls):
            content = tuple(
                edited if getattr(block, "id", None) == call.id and block.type == "tool_use" else block
                for block in message.content
            )
            recorded = message.metadata.get(EDITED_CALLS)
            originals: dict[str, JsonValue] = dict(recorded) if isinstance(recorded, dict) else {}
            originals[call.id] = call.raw_arguments
            metadata = {**message.metadata, EDITED_CALLS: originals}
            messages[index] = message.model_copy(update={"content": content, "metadata": metadata})
            break
    return edited
