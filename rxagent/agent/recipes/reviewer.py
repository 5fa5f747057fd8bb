"""A reviewer that approves or rejects each batch of tool calls the model asks for, before it runs.

::

    Reason ─▶ Review(calls) ─▶ Verdicts(calls, verdicts) ─▶ Act(approved calls) ─▶ Reason …
                                                    └─(none approved)─▶ Reason

The review is a step: a function of yours (:func:`function_reviewer`) or a side turn of a model
(:func:`model_reviewer`: its usage counted and its call traced, nothing of it in the history). Either
gives a :class:`Verdict` per call id; a call without one is rejected (every call, when a model's answer
cannot be read). The decision is told first, call by
call: a ``StepNote`` (``approved shout`` / ``rejected shout``, the verdict as its data), and for a
rejected call right after it the call's ``denied`` result (a ``ToolResult`` with the reviewer's reason,
which the model reads); then the approved calls run, still through the permission gate, and their
results follow. Calls a human approved go from ``Start`` straight to ``Act``: they are not reviewed
again::

    agent = Agent(model, toolkit, steps=reviewing(model_reviewer(reviewer_model)))
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import Annotated

from pydantic import AfterValidator, BaseModel, StrictBool, TypeAdapter
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
    Step,
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

__all__ = ["Review", "Reviewer", "Verdict", "Verdicts", "function_reviewer", "model_reviewer", "reviewing"]


class Verdict(BaseModel, frozen=True):
    """A reviewer's answer for one call: ``approve`` it (only a JSON ``true`` does), or not, saying why
    (an empty reason reads ``"no reason given"``)."""

    approve: StrictBool
    reason: Annotated[str, AfterValidator(lambda reason: reason or "no reason given")] = "no reason given"


@dataclass(frozen=True, slots=True)
class Review(Node):
    """Review the batch ``calls`` the model asked for."""

    calls: tuple[ToolUseBlock, ...]


@dataclass(frozen=True, slots=True)
class Verdicts(Review):
    """The reviewed batch with the reviewer's ``verdicts`` by call id: tell them, run the approved calls."""

    verdicts: Mapping[str, Verdict]


Reviewer = Callable[[Review, RunState], Awaitable[Mapping[str, Verdict]]]
"""``async (review, run) -> {call id: Verdict}``: a review of yours, for :func:`function_reviewer`."""
_ASK = 'Approve only safe calls. Answer only with {"<call id>": {"approve": true or false, "reason": "..."}}'


def reviewing(review: Step[Review, Verdicts]) -> Steps[ReActNode | Review | Verdicts]:
    """The ReAct assembly with every batch the model asks for reviewed by ``review`` before it runs."""

    def to_review(node: Node, message: Msg | None, run: RunState) -> Finish | CheckOutput | Reprompt | Review:
        return Review(act.calls) if isinstance(act := after_reasoning(node, message, run), Act) else act

    return react_steps().on(Verdicts, apply_verdicts).on(Review, review).on(Reason, reason_step(to_review))


def apply_verdicts(node: Verdicts, run: RunState) -> Observable[StepOutput[Act | Finish | Reason]]:
    """Tell each verdict (a ``StepNote``, then a rejected call's result), then run the approved calls."""
    out: list[AgentEvent] = []
    for call in node.calls:
        verdict = node.verdicts.get(call.id) or Verdict(approve=False, reason="the reviewer gave no verdict")
        said = f"{'approved' if verdict.approve else 'rejected'} {call.name}"
        data = {"call_id": call.id, "tool": call.name, **verdict.model_dump()}
        out.append(StepNote(**run.head, source="reviewer", text=said, data=data))
        if not verdict.approve:
            out += run.add_result(result_of(call, f"Rejected by the reviewer: {verdict.reason}", "denied"))
    kept = tuple(c for c in node.calls if c.id in node.verdicts and node.verdicts[c.id].approve)
    return emit(*out, then=Act(kept)) if kept else emit(*out, *run.close_tool_batch(), then=after_tools(run))


def function_reviewer(decide: Reviewer) -> Step[Review, Verdicts]:
    """A review step that awaits ``decide(review, run)`` for the verdicts (``{call id: Verdict}``)."""

    async def verdicts(node: Review, run: RunState) -> AsyncIterator[StepOutput[Verdicts]]:
        yield Next(Verdicts(node.calls, await decide(node, run)))

    return lambda node, run: from_async_iterable(partial(verdicts, node, run))


def model_reviewer(model: ChatModel, instructions: str = _ASK) -> Step[Review, Verdicts]:
    """A review step that shows the batch to ``model`` in a side turn of the run and reads its JSON
    verdicts (``{"<call id>": {"approve": true, "reason": "..."}}``); an answer it cannot read (no JSON
    object, or not verdicts of that shape) gives no verdict, so every call is rejected."""
    return lambda node, run: model_turn(run, _ask(node, instructions), model=model, then=partial(_read, node))


def _ask(node: Review, instructions: str) -> ChatRequest:
    listing = "\n".join(f"- {c.id}: {c.name}({c.raw_arguments})" for c in node.calls)
    return ChatRequest((Msg.system(instructions), Msg.user(f"Calls to review:\n{listing}")))


def _read(node: Review, said: Msg) -> Verdicts:
    with suppress(ValueError):  # no JSON object, or not verdicts (pydantic's ValidationError): none read
        return Verdicts(node.calls, TypeAdapter(dict[str, Verdict]).validate_python(extract_json(said.text)))
    return Verdicts(node.calls, {})
