"""Plan, then execute: a planning turn writes a numbered plan, the ReAct loop works through it item by item,
and a closing turn gives the answer.

::

    Start ─▶ Plan (a text turn: "1. … 2. …") ─▶ NextItem ─▶ Reason ⇄ Act … answer ─▶ NextItem ─▶ …
          ─▶ Conclude (a text turn: the final answer) ─▶ Finish

The plan and its progress live in the session state (``state.extras["plan"]``), so a run that stops to
wait for an approval picks the plan up where it left it when the decision comes; a new request starts a
new plan.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, cast

from reactivex import Observable

from rxagent.agent import (
    Finish,
    ReActAgent,
    Reason,
    RunState,
    Start,
    StepOutput,
    after_reasoning,
    continue_reasoning,
    emit,
    reason_step,
    route_input,
    start_step,
)
from rxagent.events import StepNote
from rxagent.messages import Msg, ToolUseBlock
from rxagent.model import ChatModel

__all__ = ["Conclude", "NextItem", "Plan", "plan_and_execute"]

PLAN = "plan"
"""The ``state.extras`` key holding ``{"items": [...], "done": n}``."""

_PLAN_PROMPT = (
    "Before doing anything, write a short numbered plan for the user's request: one step per line, "
    "'1. ...', '2. ...'. Write only the plan; do not carry it out yet."
)
_CONCLUDE_PROMPT = "Every step of the plan is done. Give the user the final answer to their request."
_ITEM = re.compile(r"^\s*\d+[.)]\s+(.+?)\s*$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Plan:
    """Write the plan."""


@dataclass(frozen=True, slots=True)
class NextItem:
    """Hand the model the next item of the plan."""


@dataclass(frozen=True, slots=True)
class Conclude:
    """The closing turn, once every item is done."""


def plan_and_execute(model: ChatModel, *args: Any, max_items: int = 8, **kwargs: Any) -> ReActAgent:
    """A :class:`~rxagent.agent.ReActAgent` (same arguments) that plans first and then works the plan.

    Args:
        model: the chat model.
        max_items: the most plan items worked through (the rest are dropped).
        args, kwargs: passed to ``ReActAgent``.
    """

    def read_plan(node: Any, message: Msg | None, run: RunState) -> Any:
        items = _ITEM.findall(message.text if message is not None else "")[:max_items]
        if not items:  # no plan to follow: work on the request directly
            return continue_reasoning(run)
        run.state.extras[PLAN] = {"items": items, "done": 0}
        return NextItem()

    def next_item(node: NextItem, run: RunState) -> Observable[StepOutput]:
        plan = _plan(run)
        items, done = plan["items"], plan["done"]
        run.add_messages([Msg.user(f"Step {done + 1} of {len(items)}: {items[done]}\nDo this step now.")])
        note = StepNote(
            **run.head, source="plan", text=f"step {done + 1}: {items[done]}", data=run.state.extras[PLAN]
        )
        return emit(note, then=continue_reasoning(run))

    def after_answer(node: Any, message: Msg | None, run: RunState) -> Any:
        decided = after_reasoning(node, message, run)
        if PLAN not in run.state.extras or not (
            isinstance(decided, Finish) and decided.reason == "MODEL_STOP"
        ):
            return decided
        plan = _plan(run)
        plan["done"] += 1
        if plan["done"] < len(plan["items"]):
            return NextItem()
        del run.state.extras[PLAN]
        return Conclude()

    def route(approved: tuple[ToolUseBlock, ...], run: RunState) -> Any:
        history = run.state.messages
        if approved or run.state.pending or not history or history[-1].role != "user":
            return route_input(approved, run)  # answers for waiting calls: carry on with the plan
        run.state.extras.pop(PLAN, None)  # a new request gets a new plan
        return Plan()

    steps = {
        Start: start_step(route),
        Plan: reason_step(read_plan, instructions=_PLAN_PROMPT, tools=False),
        NextItem: next_item,
        Reason: reason_step(after_answer),
        Conclude: reason_step(instructions=_CONCLUDE_PROMPT, tools=False),
        **kwargs.pop("steps", {}),
    }
    return ReActAgent(model, *args, steps=steps, **kwargs)


def _plan(run: RunState) -> dict[str, Any]:
    return cast("dict[str, Any]", run.state.extras[PLAN])
