"""The parts an agent's loop is assembled from: nodes, steps, decisions, the run's state, the loop itself.

Read this to build a loop of your own (see :mod:`rxagent.agent.steps` for the contract every assembly
gets, and ``rxagent.agent.recipes`` for three short ones)::

    from rxagent.agent import Agent
    from rxagent.agent.loop import Node, Reason, Finish, react_steps, model_turn, emit

    @dataclass(frozen=True, slots=True)
    class Critique(Node): ...

    steps = react_steps().on(Critique, critique_step).on(Reason, reason_step(decide=critique_answers))
    agent = Agent(model, tools, steps=steps)

:func:`react_steps` is the ReAct assembly; ``on`` adds or replaces a step, and the type checker verifies
that each step fits its node and goes only to nodes the assembly handles. :func:`run_loop` runs an
assembly on a :class:`RunState` from :func:`new_run`, with no agent object at all.
"""

from __future__ import annotations

from rxagent.agent.acting import ActingDecision, act_step
from rxagent.agent.decisions import (
    after_acting,
    after_reasoning,
    after_tools,
    continue_reasoning,
    route_input,
)
from rxagent.agent.inputs import AppliedInput, RunInput
from rxagent.agent.middleware import ActingStep, ReasoningStep
from rxagent.agent.nodes import (
    Act,
    CheckOutput,
    Finish,
    Interrupt,
    Next,
    Node,
    ReActNode,
    Reason,
    Reprompt,
    Start,
    Step,
    StepOutput,
    Steps,
)
from rxagent.agent.output import check_output_step
from rxagent.agent.reasoning import ReasoningDecision, build_request, model_turn, reason_step
from rxagent.agent.routing import RouteDecision, start_step
from rxagent.agent.run import RunDeps, RunState, new_run
from rxagent.agent.steps import StepGate, emit, finish_step, interrupt_step, reprompt_step, run_loop

__all__ = [
    "Act",
    "ActingDecision",
    "ActingStep",
    "AppliedInput",
    "CheckOutput",
    "Finish",
    "Interrupt",
    "Next",
    "Node",
    "ReActNode",
    "Reason",
    "ReasoningDecision",
    "ReasoningStep",
    "Reprompt",
    "RouteDecision",
    "RunDeps",
    "RunInput",
    "RunState",
    "Start",
    "Step",
    "StepGate",
    "StepOutput",
    "Steps",
    "act_step",
    "after_acting",
    "after_reasoning",
    "after_tools",
    "build_request",
    "check_output_step",
    "continue_reasoning",
    "emit",
    "finish_step",
    "interrupt_step",
    "model_turn",
    "new_run",
    "react_steps",
    "reason_step",
    "reprompt_step",
    "route_input",
    "run_loop",
    "start_step",
]


def react_steps() -> Steps[ReActNode]:
    """The ReAct assembly: a step for each of its nodes, ready to extend with ``on``.

    ::

        Start → Reason ⇄ Act … → CheckOutput (with an output type) → Finish
                  └→ Reprompt (a reply without answer text, once)     Interrupt → Finish

    Example:
        >>> steps = react_steps().on(Reprompt, my_reprompt_step)  # doctest: +SKIP
    """
    return (
        Steps()
        .widen(Reason)  # Act goes to Reason and Reason to Act: one of them is announced first
        .on(Finish, finish_step)
        .on(Interrupt, interrupt_step)
        .on(Act, act_step())
        .on(Reprompt, reprompt_step)
        .on(CheckOutput, check_output_step)
        .on(Reason, reason_step())
        .on(Start, start_step())
    )
