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

from rxagent.agent.inputs import AppliedInput
from rxagent.agent.nodes import Act, CheckOutput, Finish, Node, Reason, Reprompt
from rxagent.agent.run import RunState
from rxagent.agent.structured import OUTPUT_TOOL
from rxagent.messages import Msg
from rxagent.tools import ToolBatchFinished

__all__ = ["after_acting", "after_reasoning", "after_tools", "continue_reasoning", "route_input"]


def continue_reasoning(run: RunState, *, reprompted: bool = False, attempts: int = 0) -> Reason:
    """The next model turn: the tool-less summarising one once ``max_iters`` turns were taken.

    ``reprompted`` and ``attempts`` carry what the turn must know of the turns before it (an answer was
    asked for once more; structured answers were refused so many times).
    """
    return Reason(
        summarising=run.iteration >= run.deps.options.max_iters, reprompted=reprompted, attempts=attempts
    )


def route_input(applied: AppliedInput, run: RunState) -> Act | Finish | Reason:
    """Where a run goes once the start step applied its input: to the calls a human just approved (or
    that are safe to run again), to the end while calls still wait for answers, else to the model."""
    if applied.approved:
        return Act(applied.approved, frozenset(c.id for c in applied.approved), then=applied.follow)
    return after_tools(run)


def after_reasoning(node: Node, message: Msg | None, run: RunState) -> Finish | CheckOutput | Act | Reprompt:
    """Where a run goes after a model turn that produced ``message``.

    Args:
        node: the node of the turn (a :class:`Reason`'s ``summarising`` turn always finishes; any other
            node is a turn with nothing carried over).
        message: the folded assistant message (``None`` if the turn produced none).
        run: the run's state.
    """
    if message is None:
        return Finish("NO_ANSWER", None, detail="the reasoning step produced no message")
    turn = node if isinstance(node, Reason) else Reason()
    if turn.summarising:
        return Finish("MAX_ITERATIONS", message)
    output = run.deps.output
    calls = message.tool_calls
    if output is not None and any(c.name == OUTPUT_TOOL for c in calls):
        return CheckOutput(message, turn.attempts)
    if calls:
        return Act(calls)
    if not message.has_answer_text:
        if turn.reprompted:
            return Finish("NO_ANSWER", message, detail="the model gave no answer text twice")
        return Reprompt()
    if output is None:
        return Finish("MODEL_STOP", message)
    return CheckOutput(message, turn.attempts)


def after_tools(run: RunState) -> Finish | Reason:
    """Where a run goes once a batch has results (or the input answered waiting calls)."""
    if run.state.pending:
        asking = any(p.kind == "ask" for p in run.state.pending)
        return Finish("PERMISSION_ASKING" if asking else "TOOL_SUSPENDED")
    return continue_reasoning(run)


def after_acting(batch: ToolBatchFinished, run: RunState) -> Finish | Reason:
    """Where a run goes after an :class:`Act` step's batch. Return-direct results end the run with their
    text as the answer. (A batch the tools' infrastructure failed ends the run with reason ``ERROR``
    before any decision.)"""
    if batch.return_direct:
        text = "\n".join(r.text for r in batch.results)
        return Finish("TOOL_RETURN_DIRECT", Msg.assistant(text, metadata={"rxagent": "return_direct"}))
    return after_tools(run)
