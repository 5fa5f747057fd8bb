"""The agent: the ReAct loop assembled from operators, its middleware cut points, structured output."""

from __future__ import annotations

from rxagent.agent.middleware import (
    ActingStep,
    CutPoint,
    Middleware,
    ReasoningStep,
    RunInput,
    StopRun,
    insert,
)
from rxagent.agent.react import (
    AgentInput,
    AgentOptions,
    ExternalResult,
    PendingToolCallsError,
    ReActAgent,
    RunControl,
    ToolDecision,
)
from rxagent.agent.structured import OUTPUT_TOOL
from rxagent.agent.transcript import repair_transcript

__all__ = [
    "OUTPUT_TOOL",
    "ActingStep",
    "AgentInput",
    "AgentOptions",
    "CutPoint",
    "ExternalResult",
    "Middleware",
    "PendingToolCallsError",
    "ReActAgent",
    "ReasoningStep",
    "RunControl",
    "RunInput",
    "StopRun",
    "ToolDecision",
    "insert",
    "repair_transcript",
]
