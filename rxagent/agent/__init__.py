"""The agent: the ReAct loop assembled from public steps, its middleware cut points, structured output.

``ReActAgent`` is the lifecycle (session, save, serialisation) around :func:`default_steps`; the steps,
the nodes between them and the decisions that pick the next node are public, so other agents are built
from the same parts (see :mod:`rxagent.agent.steps` and ``rxagent.agent.recipes``). Agents compose
(:mod:`rxagent.agent.compose`): one agent is a tool of another (``as_tool``), and an agent is an operator
over a stream of inputs (``map_runs``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from rxagent.agent.acting import ActingDecision, act_step
from rxagent.agent.compose import ChildSessions, RunContextFactory, RunOutcome, agent_tool, map_runs
from rxagent.agent.control import RunControl, RunStatus
from rxagent.agent.decisions import (
    after_acting,
    after_reasoning,
    after_tools,
    continue_reasoning,
    route_input,
)
from rxagent.agent.inputs import (
    MAX_NESTING,
    AgentInput,
    AnswerTakenError,
    ExternalResult,
    InvalidInputError,
    PendingToolCallsError,
    RunInput,
    SessionBusyError,
    ToolDecision,
    normalise_input,
)
from rxagent.agent.live import RunHandle, SessionActivity, SessionHandle, SessionStatus
from rxagent.agent.middleware import (
    ActingStep,
    AnyMiddleware,
    CutPoint,
    Middleware,
    ReasoningStep,
    RequestHook,
    StopRun,
    insert,
)
from rxagent.agent.nodes import (
    Act,
    CheckOutput,
    Finish,
    Interrupt,
    Next,
    Node,
    Reason,
    Reprompt,
    Start,
    Step,
    StepOutput,
)
from rxagent.agent.options import AgentOptions, StructuredMode
from rxagent.agent.output import check_output_step
from rxagent.agent.react import DEFAULT_SESSION, ReActAgent, default_steps
from rxagent.agent.reasoning import ReasoningDecision, build_request, reason_step, structured_path
from rxagent.agent.routing import RouteDecision, apply_input, start_step
from rxagent.agent.run import RunState
from rxagent.agent.steps import emit, finish_step, interrupt_step, reprompt_step, run_loop
from rxagent.agent.structured import OUTPUT_TOOL, extract_json
from rxagent.agent.transcript import repair_transcript

__all__ = [
    "DEFAULT_SESSION",
    "MAX_NESTING",
    "OUTPUT_TOOL",
    "Act",
    "ActingDecision",
    "ActingStep",
    "AgentInput",
    "AgentOptions",
    "AnswerTakenError",
    "AnyMiddleware",
    "CheckOutput",
    "ChildSessions",
    "CutPoint",
    "ExternalResult",
    "Finish",
    "Interrupt",
    "InvalidInputError",
    "Middleware",
    "Next",
    "Node",
    "PendingToolCallsError",
    "ReActAgent",
    "Reason",
    "ReasoningDecision",
    "ReasoningStep",
    "Reprompt",
    "RequestHook",
    "RouteDecision",
    "RunContextFactory",
    "RunControl",
    "RunHandle",
    "RunInput",
    "RunOutcome",
    "RunState",
    "RunStatus",
    "SessionActivity",
    "SessionBusyError",
    "SessionHandle",
    "SessionStatus",
    "Start",
    "Step",
    "StepOutput",
    "StopRun",
    "StructuredMode",
    "ToolDecision",
    "act_step",
    "after_acting",
    "after_reasoning",
    "after_tools",
    "agent_tool",
    "apply_input",
    "build_request",
    "check_output_step",
    "continue_reasoning",
    "default_steps",
    "emit",
    "extract_json",
    "finish_step",
    "insert",
    "interrupt_step",
    "map_runs",
    "normalise_input",
    "reason_step",
    "repair_transcript",
    "reprompt_step",
    "route_input",
    "run_loop",
    "start_step",
    "structured_path",
]

if TYPE_CHECKING:
    SessionState = SessionActivity
    """Deprecated: the old name of :data:`SessionActivity`, kept one release."""
else:

    def __getattr__(name: str) -> object:
        # Old names stay importable one release: they warn, and give the renamed object.
        if name == "SessionState":
            warnings.warn(
                "rxagent.agent.SessionState is renamed SessionActivity;"
                " the old name goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return SessionActivity
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
