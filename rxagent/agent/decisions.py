"""The decisions between steps: plain functions from what just happened to the next node.

They read the run's state and return a node; they emit nothing and run no stream, so a test calls them
directly and a custom assembly replaces one by passing its own to a step factory
(``reason_step(decide=...)``, ``act_step(decide=...)``, ``start_step(route=...)``)::

    tool calls              → Act(calls)
    no answer text          → Reprompt() once, then Finish(NO_ANSWER)
    iteration limit reached → Reason(summarising=True), then Finish(MAX_ITERATIONS)
    an answer               → Finish(MODEL_STOP), or CheckOutput(message) when an output type is set
    approved calls          → Act(approved) when a run starts from a human's decisions
    after tools             → Finish(PERMISSION_ASKING | TOOL_SUSPENDED) while calls wait,
                              Finish(TOOL_RETURN_DIRECT) for return-direct results, else reason again
"""

from __future__ import annotations

from typing import Any

from rxagent.agent.nodes import Act, CheckOutput, Finish, Reason, Reprompt
from rxagent.agent.run import RunState
from rxagent.agent.structured import OUTPUT_TOOL
from rxagent.messages import Msg, ToolUseBlock
from rxagent.tools import ToolBatchFinished

__all__ = ["after_acting", "after_reasoning", "after_tools", "continue_reasoning", "route_input"]


def continue_reasoning(run: RunState) -> Reason:
    """The next model turn: the tool-less summarising one once ``max_iters`` turns were taken."""
    return Reason(summarising=run.iteration >= run.agent.options.max_iters)


def route_input(approved: tuple[ToolUseBlock, ...], run: RunState) -> Any:
    """Where a run goes once the start step applied its input: to the calls a human just approved, to
    the end while calls still wait for answers, else to the model."""
    if approved:
        return Act(approved, frozenset(c.id for c in approved))
    return after_tools(run)


def after_reasoning(node: Any, message: Msg | None, run: RunState) -> Any:
    """Where a run goes after a model turn that produced ``message``.

    Args:
        node: the node of the turn (a :class:`Reason`; ``summarising`` turns always finish).
        message: the folded assistant message (``None`` if the turn produced none).
        run: the run's state.
    """
    if message is None:
        return Finish("NO_ANSWER", None, detail="the reasoning step produced no message")
    if isinstance(node, Reason) and node.summarising:
        return Finish("MAX_ITERATIONS", message)
    output = run.agent.output
    calls = message.tool_calls
    if output is not None and any(c.name == OUTPUT_TOOL for c in calls):
        return CheckOutput(message)
    if calls:
        return Act(calls)
    if not message.has_answer_text:
        if run.reprompted:
            return Finish("NO_ANSWER", message, detail="the model gave no answer text twice")
        return Reprompt()
    if output is None:
        return Finish("MODEL_STOP", message)
    return CheckOutput(message)


def after_tools(run: RunState) -> Any:
    """Where a run goes once a batch has results (or the input answered waiting calls)."""
    if run.failure is not None:
        return Finish("ERROR", None, detail=f"tool system error: {run.failure}")
    if run.state.pending:
        asking = any(p.kind == "ask" for p in run.state.pending)
        return Finish("PERMISSION_ASKING" if asking else "TOOL_SUSPENDED")
    return continue_reasoning(run)


def after_acting(batch: ToolBatchFinished | None, run: RunState) -> Any:
    """Where a run goes after an :class:`Act` step; ``batch`` is ``None`` when the tools' infrastructure
    failed before the batch finished. Return-direct results end the run with their text as the answer."""
    if batch is not None and batch.return_direct and run.failure is None:
        text = "\n".join(r.text for r in batch.results)
        return Finish("TOOL_RETURN_DIRECT", Msg.assistant(text, metadata={"rxagent": "return_direct"}))
    return after_tools(run)
