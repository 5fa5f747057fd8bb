"""A reviewer that approves or rejects each batch of tool calls before it runs.

``reviewed(reviewer)`` wraps the act step: the reviewer sees the batch and gives a :class:`Verdict` per
call; rejected calls get ``denied`` results carrying the reviewer's reason (the model reads them; a
``ToolResult`` event tells each, after the reviewer's ``StepNote``), and only the approved ones run.
Calls a human already approved are not reviewed again. A reviewer is any async function of the calls and
the run; :func:`model_reviewer` asks a model for the verdicts::

    agent = ReActAgent(model, toolkit, steps={Act: reviewed(model_reviewer(model))})
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import cast

import reactivex
from pydantic import JsonValue
from reactivex import Observable

from rxagent.agent import Act, Next, RunState, StepOutput, act_step, after_tools, emit, extract_json
from rxagent.agent.middleware import chain
from rxagent.chunks import Usage
from rxagent.events import AgentEvent, StepNote, ToolResult
from rxagent.messages import Msg, ToolUseBlock
from rxagent.model import ChatModel, ChatRequest
from rxagent.operators import deferred, fold_message, from_async_iterable, last_value, map_many
from rxagent.tools import result_of

__all__ = ["ActStep", "Reviewer", "Verdict", "model_reviewer", "reviewed"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """A reviewer's answer for one call."""

    call_id: str
    approve: bool
    reason: str = ""


Reviewer = Callable[[Sequence[ToolUseBlock], RunState], Awaitable[Sequence[Verdict]]]
"""``async (calls, run) -> verdicts``; a call without a verdict is rejected."""


ActStep = Callable[[Act, RunState], Observable[StepOutput]]
"""A step for :class:`~rxagent.agent.Act` nodes."""


def reviewed(reviewer: Reviewer, act: ActStep | None = None) -> ActStep:
    """An act step that runs only what ``reviewer`` approves (``act``: the step it wraps)."""
    run_batch = act or act_step()

    def step(node: Act, run: RunState) -> Observable[StepOutput]:
        if node.approved:  # a human decided already
            return run_batch(node, run)
        kept: list[ToolUseBlock] = []
        rejected: dict[str, list[AgentEvent]] = {}  # each rejection's ToolResult, told in call order

        async def review() -> AsyncIterator[StepOutput]:
            verdicts = {v.call_id: v for v in await reviewer(node.calls, run)}
            for call in node.calls:
                verdict = verdicts.get(call.id, Verdict(call.id, False, "the reviewer gave no verdict"))
                if verdict.approve:
                    kept.append(call)
                else:
                    text = f"Rejected by the reviewer: {verdict.reason or 'no reason given'}"
                    rejected[call.id] = run.add_result(result_of(call, text, "denied"))
                said = "approved" if verdict.approve else "rejected"
                data: dict[str, JsonValue] = {
                    "call_id": call.id,
                    "tool": call.name,
                    "approve": verdict.approve,
                    "reason": verdict.reason,
                }
                yield StepNote(**run.head, source="reviewer", text=f"{said} {call.name}", data=data)

        order = [c.id for c in node.calls]

        def told_before(call_id: str | None) -> list[AgentEvent]:
            """The rejections of calls before ``call_id`` in the batch (``None``: all left), in order."""
            upto = order.index(call_id) if call_id is not None else len(order)
            return [e for i in order[:upto] for e in rejected.pop(i, [])]

        untold: set[str] = set()  # the run calls whose results are not out yet (filled once reviewed)

        def in_call_order(item: StepOutput) -> list[StepOutput]:
            # Results are told in the order of the calls, as the executor tells its own: a rejection just
            # before the result of a later call, the rest once every run call's result is out (or at the
            # step's end, when some wait for approval), before the batch's tool message.
            if isinstance(item, ToolResult) and item.result.tool_use_id in untold:
                untold.discard(item.result.tool_use_id)
                return [*told_before(item.result.tool_use_id), item]
            if rejected and (not untold or isinstance(item, Next)):
                return [*told_before(None), item]
            return [item]

        def rest() -> Observable[StepOutput]:
            if kept:
                untold.update(c.id for c in kept)
                return run_batch(Act(tuple(kept)), run).pipe(map_many(in_call_order))
            return emit(*told_before(None), *run.close_tool_batch(), then=after_tools(run))

        return reactivex.concat(from_async_iterable(review), deferred(rest))

    return step


_ASK = (
    "You review tool calls before they run. Approve a call only if it is safe and serves the user's "
    'request. Answer with only a JSON object: {"<call id>": {"approve": true or false, "reason": "..."}}.'
)


def model_reviewer(model: ChatModel, instructions: str = _ASK) -> Reviewer:
    """A reviewer that shows the batch to ``model`` (through the run's ``model_call`` middleware) and reads
    its JSON verdicts; an answer it cannot read rejects every call, saying why."""

    async def review(calls: Sequence[ToolUseBlock], run: RunState) -> Sequence[Verdict]:
        listing = "\n".join(f"- {c.id}: {c.name}({c.raw_arguments})" for c in calls)
        request = ChatRequest((Msg.system(instructions), Msg.user(f"Calls to review:\n{listing}")))
        call_model = chain(run.agent.middleware, "model_call", run.ctx, model.stream)
        answer = await last_value(call_model(request).pipe(fold_message()))
        run.usage.add(Usage.from_json(answer.metadata.get("usage")))
        try:
            found = extract_json(answer.text)
        except ValueError as error:
            return [Verdict(c.id, False, f"the review could not be read: {error}") for c in calls]
        verdicts: list[Verdict] = []
        for call in calls:
            entry: object = found.get(call.id)
            if not isinstance(entry, dict):
                verdicts.append(Verdict(call.id, False, "no verdict for this call"))
                continue
            verdict = cast("dict[str, object]", entry)
            reason = verdict.get("reason")
            verdicts.append(
                Verdict(call.id, verdict.get("approve") is True, reason if isinstance(reason, str) else "")
            )
        return verdicts

    return review
