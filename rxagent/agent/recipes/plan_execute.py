"""Plan, then execute: a planning turn writes a numbered plan, the ReAct loop works through it item by item,
and a closing turn gives the answer.

::

    Start ─▶ Plan (a text turn: "1. … 2. …") ─▶ NextItem ─▶ Reason ⇄ Act … answer ─▶ NextItem ─▶ …
          ─▶ Conclude (a text turn: the final answer) ─▶ Finish

Each item is handed to the model as a user message (``Step 1 of 2: …``) and told as a ``StepNote``
(source ``"plan"``, the plan's :class:`Progress` as its data). The plan and its progress live in the
session state (``state.extras["plan"]``), so a run that stops to wait for an approval picks the plan up
where it left it when the decision comes; a new request starts a new plan, and a planning reply without
numbered items works on the request directly (``extras["plan"]`` is then ``None``)::

    agent = Agent(model, toolkit, steps=plan_and_execute())
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel
from reactivex import Observable

from rxagent.agent.loop import (
    Act,
    AppliedInput,
    Finish,
    Node,
    ReActNode,
    Reason,
    RunState,
    Start,
    StepOutput,
    Steps,
    after_reasoning,
    continue_reasoning,
    emit,
    react_steps,
    reason_step,
    route_input,
    start_step,
)
from rxagent.events import StepNote
from rxagent.messages import Msg

__all__ = ["PLAN", "Conclude", "NextItem", "Plan", "Progress", "plan_and_execute"]

PLAN = "plan"
"""The ``state.extras`` key holding the plan's :class:`Progress` (as JSON) while it is worked through."""
_PLAN = "Write a short numbered plan for the request ('1. ...', '2. ...', one per line); do not do it yet."
_CONCLUDE = "Every step of the plan is done. Give the user the final answer to their request."
_ITEM = re.compile(r"^\s*\d+[.)]\s+(.+?)\s*$", re.MULTILINE)


class Progress(BaseModel):
    """A plan's ``items``, and how many of them were handed to the model (``started``)."""

    items: list[str]
    started: int = 0


@dataclass(frozen=True, slots=True)
class Plan(Node):
    """Write the plan."""


@dataclass(frozen=True, slots=True)
class NextItem(Node):
    """Hand the model the next item of the plan (the one before it is done), or conclude after the last."""


@dataclass(frozen=True, slots=True)
class Conclude(Node):
    """The closing turn, once every item is done."""


def plan_and_execute(max_items: int = 8) -> Steps[ReActNode | Plan | NextItem | Conclude]:
    """The ReAct assembly with a plan first, worked item by item (at most ``max_items``), then concluded."""

    def read_plan(node: Plan, message: Msg | None, run: RunState) -> NextItem | Reason:
        items = _ITEM.findall(message.text if message is not None else "")[:max_items]
        run.state.extras[PLAN] = Progress(items=items).model_dump() if items else None
        return NextItem() if items else continue_reasoning(run)  # no plan: work on the request directly

    def next_item(node: NextItem, run: RunState) -> Observable[StepOutput[Reason | Conclude]]:
        plan = Progress.model_validate(run.state.extras.pop(PLAN))
        if plan.started == len(plan.items):
            return emit(then=Conclude())  # the plan is done, and cleared
        step = f"Step {plan.started + 1} of {len(plan.items)}: {plan.items[plan.started]}"
        plan.started += 1
        run.state.extras[PLAN] = progress = plan.model_dump()
        run.add_messages([Msg.user(f"{step}\nDo this step now.")])
        note = StepNote(**run.head, source="plan", text=step, data=progress)
        return emit(note, then=continue_reasoning(run))

    def after_answer(node: Node, message: Msg | None, run: RunState) -> ReActNode | NextItem:
        decided = after_reasoning(node, message, run)
        answered = isinstance(decided, Finish) and decided.reason == "MODEL_STOP"
        return NextItem() if answered and run.state.extras.get(PLAN) else decided

    def route(applied: AppliedInput, run: RunState) -> Act | Finish | Reason | Plan:
        new_request = not applied.approved and bool(run.messages) and run.messages[-1].role == "user"
        return Plan() if new_request else route_input(applied, run)  # answers for waiting calls: carry on

    steps = react_steps().on(Conclude, reason_step(instructions=_CONCLUDE, tools=False))
    steps = steps.on(NextItem, next_item).on(Reason, reason_step(after_answer))
    steps = steps.on(Plan, reason_step(read_plan, instructions=_PLAN, tools=False))
    return steps.on(Start, start_step(route))
