"""rxagent: LLM agents as compositions of ``reactivex`` observables.

The names a user reaches for first are here: the agent and its inputs, tools, messages, events and
results, the models. Everything else is reachable by module (``rxagent.operators``, ``rxagent.agent``,
``rxagent.model``, …). The agent, the tools, the model contract and the backends load on first use, and the
messages build their pydantic validators when first used, so ``import rxagent`` stays light: it loads the
plain data and pydantic, and neither reactivex nor asyncio, jsonschema, the notebook or any backend
(``tests/test_startup.py`` holds this; ``bench/startup.py`` measures it).

This facade is the top of the package's layers (``tests/test_layers.py``; the README's "Layout"): it may
name any module, and nothing in the package imports it. It is also where the rich displays are wired:
:mod:`rxagent.display` is handed a loader that imports :mod:`rxagent.notebook` (which registers them) on
the first lookup, so a ``Msg`` that is the value of a notebook cell renders as HTML without the data ever
importing the notebook package.

Example:
    >>> from rxagent import ReActAgent, ScriptedModel, Toolkit, tool
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rxagent import display
from rxagent.chunks import ChatChunk, Usage
from rxagent.context import RuntimeContext, ToolScope
from rxagent.events import AgentEvent, AgentResult, event_from_json, event_to_json
from rxagent.messages import (
    ContentBlock,
    DocumentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.requests import ChatRequest, ToolSchema
from rxagent.retry import RetryBudget, RetryPolicy

if TYPE_CHECKING:
    from rxagent.agent import (
        Agent,
        AgentOptions,
        ExternalResult,
        ReActAgent,
        RunControl,
        ToolDecision,
    )
    from rxagent.model.anthropic import AnthropicModel
    from rxagent.model.fallback import FallbackModel
    from rxagent.model.llama_cpp import LlamaCppModel
    from rxagent.model.openai import OpenAIChatModel, Timeouts
    from rxagent.model.openai_responses import OpenAIResponsesModel
    from rxagent.model.scripted import FunctionModel, ScriptedModel, ScriptedResponse, ScriptedToolCall
    from rxagent.model.types import ChatModel
    from rxagent.tools import Permissions, Toolkit, tool

__version__ = "0.1.0"

__all__ = [
    "Agent",
    "AgentEvent",
    "AgentOptions",
    "AgentResult",
    "AnthropicModel",
    "ChatChunk",
    "ChatModel",
    "ChatRequest",
    "ContentBlock",
    "DocumentBlock",
    "ExternalResult",
    "FallbackModel",
    "FunctionModel",
    "ImageBlock",
    "LlamaCppModel",
    "Msg",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "Permissions",
    "ReActAgent",
    "RetryBudget",
    "RetryPolicy",
    "RunControl",
    "RuntimeContext",
    "ScriptedModel",
    "ScriptedResponse",
    "ScriptedToolCall",
    "TextBlock",
    "ThinkingBlock",
    "Timeouts",
    "ToolDecision",
    "ToolResultBlock",
    "ToolSchema",
    "ToolScope",
    "ToolUseBlock",
    "Toolkit",
    "Usage",
    "event_from_json",
    "event_to_json",
    "tool",
]

_LAZY = {
    "Agent": "rxagent.agent",
    "AgentOptions": "rxagent.agent",
    "ExternalResult": "rxagent.agent",
    "ReActAgent": "rxagent.agent",
    "RunControl": "rxagent.agent",
    "ToolDecision": "rxagent.agent",
    "Permissions": "rxagent.tools",
    "Toolkit": "rxagent.tools",
    "tool": "rxagent.tools",
    "ChatModel": "rxagent.model",
    "AnthropicModel": "rxagent.model",
    "FallbackModel": "rxagent.model",
    "LlamaCppModel": "rxagent.model",
    "OpenAIChatModel": "rxagent.model",
    "OpenAIResponsesModel": "rxagent.model",
    "Timeouts": "rxagent.model",
    "FunctionModel": "rxagent.model",
    "ScriptedModel": "rxagent.model",
    "ScriptedResponse": "rxagent.model",
    "ScriptedToolCall": "rxagent.model",
}


def _notebook_displays() -> object:
    from rxagent import notebook  # importing the package registers its displays

    return notebook


display.load_on_first_lookup(_notebook_displays)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rxagent' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
