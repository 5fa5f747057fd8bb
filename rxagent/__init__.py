"""rxagent: LLM agents as compositions of ``reactivex`` observables.

The names a user needs are re-exported here; everything else is reachable by module
(``rxagent.operators``, ``rxagent.model``, …).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rxagent.messages import (
    ContentBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.model.types import ChatChunk, ChatModel, ChatRequest, ToolSchema, Usage
from rxagent.retry import RetryBudget, RetryPolicy

if TYPE_CHECKING:
    from rxagent.model.llama_cpp import LlamaCppModel
    from rxagent.model.openai import OpenAIChatModel, Timeouts
    from rxagent.model.scripted import FunctionModel, ScriptedModel, ScriptedResponse, ScriptedToolCall

__version__ = "0.1.0"

__all__ = [
    "ChatChunk",
    "ChatModel",
    "ChatRequest",
    "ContentBlock",
    "FunctionModel",
    "LlamaCppModel",
    "Msg",
    "OpenAIChatModel",
    "RetryBudget",
    "RetryPolicy",
    "ScriptedModel",
    "ScriptedResponse",
    "ScriptedToolCall",
    "TextBlock",
    "ThinkingBlock",
    "Timeouts",
    "ToolResultBlock",
    "ToolSchema",
    "ToolUseBlock",
    "Usage",
]


def __getattr__(name: str) -> Any:
    # Backends load on first use so that `import rxagent` stays light.
    if name in {
        "LlamaCppModel",
        "OpenAIChatModel",
        "Timeouts",
        "FunctionModel",
        "ScriptedModel",
        "ScriptedResponse",
        "ScriptedToolCall",
    }:
        import rxagent.model

        return getattr(rxagent.model, name)
    raise AttributeError(f"module 'rxagent' has no attribute {name!r}")
