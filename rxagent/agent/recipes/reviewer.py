"""A reviewer that approves or rejects each batch of tool calls the model asks for, before it runs.

::

    Reason ─▶ Review(calls) ─▶ Verdicts(calls, verdicts) ─▶ Act(approved calls) ─▶ Reason …
                                                    └─(none approved)─▶ Reason

Rejected calls get ``denied`` results carrying the reviewer's reason (the model reads them; a
``ToolResult`` event tells each, after the reviewer's ``StepNote``). Calls a human approved go from
``Start`` straight to ``Act``: they are not reviewed again. The review is a step: a function of yours
(:func:`function_reviewer`) or a side turn of a model (:func:`model_reviewer`)::

    agent = Agent(model, toolkit, steps=reviewing(model_reviewer(reviewer_model)))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass

from pydantic import BaseModel, Field, TypeAdapter
from reactivex import Observable

from rxagent.agent.loop import (
    Act,
    CheckOutput,
    Finish,
    Next,
    Node,
    ReActNode,
    Reason,
    Reprompt,
    RunState,
    StepOutput,
    Steps,
    after_reasoning,
    after_tools,
    emit,
    model_turn,
    react_steps,
    reason_step,
)
from rxagent.agent.structured import extract_json
from rxagent.events import AgentEvent, StepNote
from rxagent.messages import Msg, ToolUseBlock
from rxagent.model import ChatModel, ChatRequest
from rxagent.operators import from_async_iterable
from rxagent.tools import result_of

__all__ = ["Review", "Verdict", "Verdicts", "function_reviewer", "model_reviewer", "reviewing"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reviewer's answer for one call (a call without one is rejected)."""

    call_id: str
    approve: bool
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Review(Node):
    """Review the batch ``calls`` the model asked for."""

    calls: tuple[ToolUseBlock, ...]


@dataclass(frozen=True, slots=True)
class Verdicts(Node):
    """Apply the reviewer's ``verdicts`` to ``calls``: run the approved ones, reject the others."""

    calls: tuple[ToolUseBlock, ...]
    verdicts: tuple[Verdict, ...]


ReviewStep = Callable[[Review, RunState], Observable[StepOutput[Verdicts]]]
"""A step that reviews a batch: a :func:`function_reviewer` or a :func:`model_reviewer`."""


def reviewing(review: ReviewStep) -> Steps[ReActNode | Review | Verdicts]:
    """The ReAct assembly with every batch the model asks for reviewed by ``review`` before it runs."""

    def to_review(node: Node, message: Msg | None, run: RunState) -> Finish | CheckOutput | Reprompt | Review:
        decided = after_reasoning(node, message, run)
        return Review(decided.calls) if isinstance(decided, Act) else decided

    return react_steps().on(Verdicts, apply_verdicts).on(Review, review).on(Reason, reason_step(to_review))


def apply_verdicts(node: Verdicts, run: RunState) -> Observable[StepOutput[Act | Finish | Reason]]:
    """Tell each verdict (a ``StepNote``), answer each rejected call, then run the approved ones."""
    given = {v.call_id: v for v in node.verdicts}
    told: list[AgentEvent] = []
    for call in node.calls:
        verdict = given.get(
            call.id, Verdict(call_id=call.id, approve=False, reason="the reviewer gave no verdict")
        )
        said = f"{'approved' if verdict.approve else 'rejected'} {call.name}"
        told.append(
            StepNote(**run.head, source="reviewer", text=said, data={"tool": call.name, **asdict(verdict)})
        )
        if not verdict.approve:
            why = f"Rejected by the reviewer: {verdict.reason or 'no reason given'}"
            told += run.add_result(result_of(call, why, "denied"))
    kept = tuple(c for c in node.calls if c.id in given and given[c.id].approve)
    return (
        emit(*told, then=Act(kept)) if kept else emit(*told, *run.close_tool_batch(), then=after_tools(run))
    )


def function_reviewer(
    decide: Callable[[Sequence[ToolUseBlock], RunState], Awaitable[Sequence[Verdict]]],
) -> ReviewStep:
    """A review step that awaits ``decide(calls, run)`` for the verdicts."""

    def step(node: Review, run: RunState) -> Observable[StepOutput[Verdicts]]:
        async def verdicts() -> AsyncIterator[StepOutput[Verdicts]]:
            yield Next(Verdicts(node.calls, tuple(await decide(node.calls, run))))

        return from_async_iterable(verdicts)

    return step


_ASK = (
    "You review tool calls before they run. Approve a call only if it is safe and serves the user's "
    'request. Answer with only a JSON object: {"<call id>": {"approve": true or false, "reason": "..."}}.'
)


def model_reviewer(model: ChatModel, instructions: str = _ASK) -> ReviewStep:
    """A review step that shows the batch to ``model`` in a side turn of the run (its usage counted, its
    ``model_call`` middleware applied) and reads its JSON verdicts; an answer it cannot read rejects
    every call, saying why."""

    def step(node: Review, run: RunState) -> Observable[StepOutput[Verdicts]]:
        listing = "\n".join(f"- {c.id}: {c.name}({c.raw_arguments})" for c in node.calls)
        request = ChatRequest((Msg.system(instructions), Msg.user(f"Calls to review:\n{listing}")))
        return model_turn(
            run, request, model=model, then=lambda answer: Verdicts(node.calls, _read(answer, node.calls))
        )

    return step


class _Said(BaseModel):
    approve: bool = Field(default=False, strict=True)  # only a JSON true approves
    reason: str = ""


_ANSWERS = TypeAdapter(dict[str, _Said])


def _read(answer: Msg, calls: Sequence[ToolUseBlock]) -> tuple[Verdict, ...]:
    try:
        found = _ANSWERS.validate_python(extract_json(answer.text))
    except ValueError as error:  # no JSON object, or not verdicts (pydantic's ValidationError)
        why = f"the review could not be read: {error}"
        return tuple(Verdict(c.id, False, why) for c in calls)
    return tuple(Verdict(c.id, found[c.id].approve, found[c.id].reason) for c in calls if c.id in found)
