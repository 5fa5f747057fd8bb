"""The agent: a host (:class:`Agent`) running a loop of steps, with sessions, middleware and live handles.

What a user of an agent needs is here: the agent, its options, what a run takes (text, messages, answers
for waiting calls), what it gives back, a run driven step by step (:class:`AgentRun`, from
``agent.iter``), the live session handles, middleware and the errors a run can raise. The parts a loop
is assembled from (nodes, steps, decisions, the run's state) are in :mod:`rxagent.agent.loop`; three
short assemblies are in ``rxagent.agent.recipes``. Agents compose: one agent is a tool of another
(``as_tool``), and an agent is an operator over a stream of inputs (``map_runs``).
"""

from __future__ import annotations

import importlib
import warnings

from rxagent.agent import loop
from rxagent.agent.compose import RunOutcome
from rxagent.agent.control import RunControl
from rxagent.agent.inputs import (
    AgentInput,
    AnswerTakenError,
    ExternalResult,
    InvalidInputError,
    PendingToolCallsError,
    SessionBusyError,
    ToolDecision,
)
from rxagent.agent.iteration import AgentRun
from rxagent.agent.live import RunHandle, SessionActivity, SessionHandle, SessionStatus
from rxagent.agent.middleware import ActingStep, CutPoint, Middleware, ReasoningStep, StopRun, insert
from rxagent.agent.options import AgentOptions
from rxagent.agent.react import Agent, ReActAgent
from rxagent.deprecation import renamed

__all__ = [
    "ActingStep",
    "Agent",
    "AgentInput",
    "AgentOptions",
    "AgentRun",
    "AnswerTakenError",
    "CutPoint",
    "ExternalResult",
    "InvalidInputError",
    "Middleware",
    "PendingToolCallsError",
    "ReActAgent",
    "ReasoningStep",
    "RunControl",
    "RunHandle",
    "RunOutcome",
    "SessionActivity",
    "SessionBusyError",
    "SessionHandle",
    "SessionStatus",
    "StopRun",
    "ToolDecision",
    "insert",
]

# Names this facade exported before the loop's parts moved to rxagent.agent.loop (every name of that
# module's catalogue) and a few internals: still importable from here for one release, with a
# DeprecationWarning naming the new home.
_MOVED = {
    "rxagent.agent.inputs": ("MAX_NESTING", "normalise_input"),
    "rxagent.agent.compose": ("ChildSessions", "RunContextFactory", "agent_tool", "map_runs"),
    "rxagent.agent.control": ("RunStatus",),
    "rxagent.agent.middleware": ("AnyMiddleware", "RequestHook"),
    "rxagent.agent.options": ("StructuredMode",),
    "rxagent.agent.react": ("DEFAULT_SESSION",),
    "rxagent.agent.structured": ("OUTPUT_TOOL", "extract_json"),
    "rxagent.agent.reasoning": ("structured_path",),
    "rxagent.agent.routing": ("apply_input",),
    "rxagent.agent.transcript": ("repair_transcript",),
}
_HOME = {name: module for module, names in _MOVED.items() for name in names}
_HOME.update((name, "rxagent.agent.loop") for name in loop.__all__)
_renamed = renamed(__name__, {"SessionState": ("SessionActivity", SessionActivity)})


def __getattr__(name: str) -> object:
    module = _HOME.get(name)
    if module is None:  # a renamed name warns; any other is missing
        return _renamed(name)
    warnings.warn(f"rxagent.agent.{name} moved: import it from {module}", DeprecationWarning, stacklevel=2)
    return getattr(importlib.import_module(module), name)
