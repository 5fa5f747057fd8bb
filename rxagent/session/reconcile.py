"""Uncertain tool calls, and settling them.

A call is recorded as dispatched before its body runs and its result right after. A call dispatched with no
recorded result is *uncertain*: the process stopped while it ran, and whatever it does (a refund, a mail)
may or may not have happened. A session with uncertain calls refuses to run (:class:`UncertainToolCallsError`
names them) until the caller says, for each, what happened (:class:`Reconcile`): it ``succeeded`` (with the
output the model should see), it ``failed``, or it is to be run again (``retry``: the next run runs it before
anything else). Calls of tools marked idempotent or read-only are retried without asking; calls of the same
batch that never started are run too (they cannot have happened).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rxagent.messages import TextBlock, ToolResultBlock, ToolResultStatus, ToolUseBlock
from rxagent.session.keeper import Claim
from rxagent.session.projection import Projection
from rxagent.state import AgentState, PendingCall

__all__ = ["Reconcile", "ReconcileError", "UncertainToolCallsError", "never_started", "settle_uncertain"]


@dataclass(frozen=True, slots=True)
class Reconcile:
    """What happened to an uncertain call, as the caller found out.

    Attributes:
        call_id: the uncertain call.
        outcome: ``succeeded`` (``output`` is its result for the model), ``failed`` (``output`` says why,
            if known) or ``retry`` (run it again).
        output: the result text to record.
    """

    call_id: str
    outcome: Literal["succeeded", "failed", "retry"]
    output: str = ""


class UncertainToolCallsError(RuntimeError):
    """The session has calls dispatched with no recorded outcome; it runs again once they are reconciled."""

    def __init__(self, calls: Sequence[ToolUseBlock]) -> None:
        listed = "; ".join(f"{c.name} {c.raw_arguments or c.input} (id {c.id})" for c in calls)
        super().__init__(
            f"this session has {len(calls)} tool call(s) whose outcome is unknown (the process stopped while "
            f"they ran): {listed}. Reconcile each (succeeded, failed or retry) before the session runs again"
        )
        self.calls = list(calls)


class ReconcileError(ValueError):
    """A reconciliation that does not fit the session's uncertain calls (nothing was recorded)."""


def never_started(state: AgentState, projection: Projection) -> list[ToolUseBlock]:
    """Calls of the open batch (the newest assistant message, with no tool message after it) that have
    no result, wait for nothing and have no ``tool_dispatched`` fact in the log: they cannot have
    happened. A call the log says was dispatched is never one of them, whatever its batch recorded
    after (it is uncertain, or it has its result)."""
    if not state.messages or state.messages[-1].role != "assistant":
        return []
    known = {r.tool_use_id for r in state.partial_results} | {p.call.id for p in state.pending}
    known |= projection.dispatched
    return [
        c for c in state.messages[-1].tool_calls if c.id not in known and c.id not in projection.uncertain
    ]


def settle_uncertain(claim: Claim, outcomes: Sequence[Reconcile]) -> None:
    """Apply ``outcomes`` to the claimed session (recorded by its next flush).

    Raises:
        ReconcileError: an id that is not uncertain, or one given twice (nothing is changed).
    """
    projection = claim.projection
    seen: set[str] = set()
    for outcome in outcomes:
        if outcome.call_id not in projection.uncertain:
            known = ", ".join(repr(i) for i in projection.uncertain) or "none"
            raise ReconcileError(f"no uncertain call with id {outcome.call_id!r} (uncertain: {known})")
        if outcome.call_id in seen:
            raise ReconcileError(f"call {outcome.call_id!r} is reconciled twice")
        seen.add(outcome.call_id)
    state = projection.state
    for outcome in outcomes:
        call = projection.uncertain.pop(outcome.call_id)
        claim.recorder.note(
            "reconciled", {"call_id": call.id, "outcome": outcome.outcome, "output": outcome.output}
        )
        if outcome.outcome == "retry":
            state.pending.append(PendingCall(call=call, kind="retry", reason="reconciled: run it again"))
            continue
        if outcome.outcome == "succeeded":
            text, status = outcome.output or "(done)", "ok"
        else:
            why = f": {outcome.output}" if outcome.output else ""
            text = f"This call's outcome was lost and it was reconciled as failed{why}."
            status = "error"
        state.partial_results.append(_result(call, text, status))
    if not projection.uncertain and not state.pending and not never_started(state, projection):
        state.close_batch()


def _result(call: ToolUseBlock, text: str, status: ToolResultStatus) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call.id, name=call.name, output=(TextBlock(text=text),), status=status)
