"""Plan, then execute: a planning turn writes a numbered plan, the ReAct loop works through it item by item,
and a closing turn gives the answer.

::

    Start ─▶ Plan (a text turn: "1. … 2. …") ─▶ NextItem(0) ─▶ Reason ⇄ Act … answer ─▶ NextItem(1) ─▶ …
          ─▶ Conclude (a text turn: the final answer) ─▶ Finish

The plan and its progress live in the session state (``state.extras["plan"]``), so a run that stops to
wait for an approval picks the plan up where it left it when the decision comes; a new request starts a
new plan::

    agent = Agent(model, toolkit, steps=plan_and_execute())
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import JsonValue
from reactivex import Observable

from rxagent.agent.loop import (
    Act,
    AppliedInput,
    CheckOutput,
    Finish,
    Node,
    ReActNode,
    Reason,
    Reprompt,
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

__all__ = ["PLAN", "Conclude", "NextItem", "Plan", "plan_and_execute"]

PLAN = "plan"
"""The ``state.extras`` key holding ``{"items": [...], "done": n}``."""

_PLAN_PROMPT = (
    "Before doing anything, write a short numbered plan for the user's request: one step per line, "
    "'1. ...', '2. ...'. Write only the plan; do not carry it out yet."
)
_CONCLUDE_PROMPT = "Every step of the plan is done. Give the user the final answer to their request."
_ITEM = re.compile(r"^\s*\d+[.)]\s+(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Plan(Node):
    """Write the plan."""


@dataclass(frozen=True, slots=True)
class NextItem(Node):
    """Hand the model the next item of the plan."""


@dataclass(frozen=True, slots=True)
class Conclude(Node):
    """The closing turn, once every item is done."""


def plan_and_execute(max_items: int = 8) -> Steps[ReActNode | Plan | NextItem | Conclude]:
    """The ReAct assembly with a plan first, worked item by item (at most ``max_items``), then concluded."""

    def read_plan(node: Plan, message: Msg | None, run: RunState) -> NextItem | Reason:
        items = _ITEM.findall(message.text if message is not None else "")[:max_items]
        if not items:  # no plan to follow: work on the request directly
            return continue_reasoning(run)
        run.state.extras[PLAN] = {"items": list[JsonValue](items), "done": 0}
        return NextItem()

    def next_item(node: NextItem, run: RunState) -> Observable[StepOutput[Reason]]:
        items, done = _progress(run)
        run.add_messages([Msg.user(f"Step {done + 1} of {len(items)}: {items[done]}\nDo this step now.")])
        note = StepNote(
            **run.head, source="plan", text=f"step {done + 1}: {items[done]}", data=run.state.extras[PLAN]
        )
        return emit(note, then=continue_reasoning(run))

    def after_answer(
        node: Node, message: Msg | None, run: RunState
    ) -> Act | CheckOutput | Finish | Reprompt | NextItem | Conclude:
        decided = after_reasoning(node, message, run)
        if PLAN not in run.state.extras or not (
            isinstance(decided, Finish) and decided.reason == "MODEL_STOP"
        ):
            return decided
        items, done = _progress(run)
        run.state.extras[PLAN] = {"items": list[JsonValue](items), "done": done + 1}
        if done + 1 < len(items):
            return NextItem()
        del run.state.extras[PLAN]
        return Conclude()

    def route(applied: AppliedInput, run: RunState) -> Act | Finish | Reason | Plan:
        history = run.state.messages
        if applied.approved or run.state.pending or not history or history[-1].role != "user":
            return route_input(applied, run)  # answers for waiting calls: carry on with the plan
        run.state.extras.pop(PLAN, None)  # a new request gets a new plan
        return Plan()

    return (
        react_steps()
        .on(Conclude, reason_step(instructions=_CONCLUDE_PROMPT, tools=False))
        .on(NextItem, next_item)
        .on(Reason, reason_step(after_answer))
        .on(Plan, reason_step(read_plan, instructions=_PLAN_PROMPT, tools=False))
        .on(Start, start_step(route))
    )


def _progress(run: RunState) -> tuple[list[str], int]:
    plan = run.state.extras[PLAN]
    if not isinstance(plan, dict) or not isinstance(items := plan.get("items"), list):
        raise ValueError(f"state.extras[{PLAN!r}] is not a plan: {plan!r}")
    done = plan.get("done")
    return [str(i) for i in items], done if isinstance(done, int) else 0
