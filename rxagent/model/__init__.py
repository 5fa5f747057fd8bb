"""Model layer: the :class:`ChatModel` contract, its request/chunk types, errors, and the backends.

Backends are imported lazily so that ``import rxagent`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rxagent.model.errors import (
    MalformedStreamError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamError,
    ModelStreamInterrupted,
    ModelTimeoutError,
    UnsupportedContentError,
)
from rxagent.model.types import (
    ChatChunk,
    ChatModel,
    ChatRequest,
    FinishReason,
    ForceTool,
    JsonSchemaFormat,
    ModelCapabilities,
    ResponseFormat,
    ToolCallDelta,
    ToolChoice,
    ToolSchema,
    Usage,
    check_content,
    provider_of,
)

if TYPE_CHECKING:
    from rxagent.model.anthropic import AnthropicModel, PromptCache
    from rxagent.model.fallback import AllModelsFailed, FallbackModel
    from rxagent.model.llama_cpp import LlamaCppModel
    from rxagent.model.openai import OpenAIChatModel, Timeouts, list_models
    from rxagent.model.openai_responses import OpenAIResponsesModel
    from rxagent.model.scripted import FunctionModel, ScriptedModel, ScriptedResponse, ScriptedToolCall

__all__ = [
    "AllModelsFailed",
    "AnthropicModel",
    "ChatChunk",
    "ChatModel",
    "ChatRequest",
    "FallbackModel",
    "FinishReason",
    "ForceTool",
    "FunctionModel",
    "JsonSchemaFormat",
    "LlamaCppModel",
    "MalformedStreamError",
    "ModelCapabilities",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelStreamError",
    "ModelStreamInterrupted",
    "ModelTimeoutError",
    "OpenAIChatModel",
    "OpenAIResponsesModel",
    "PromptCache",
    "ResponseFormat",
    "ScriptedModel",
    "ScriptedResponse",
    "ScriptedToolCall",
    "Timeouts",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSchema",
    "UnsupportedContentError",
    "Usage",
    "check_content",
    "list_models",
    "provider_of",
]

_LAZY = {
    "AnthropicModel": "rxagent.model.anthropic",
    "PromptCache": "rxagent.model.anthropic",
    "AllModelsFailed": "rxagent.model.fallback",
    "FallbackModel": "rxagent.model.fallback",
    "LlamaCppModel": "rxagent.model.llama_cpp",
    "OpenAIChatModel": "rxagent.model.openai",
    "OpenAIResponsesModel": "rxagent.model.openai_responses",
    "Timeouts": "rxagent.model.openai",
    "list_models": "rxagent.model.openai",
    "FunctionModel": "rxagent.model.scripted",
    "ScriptedModel": "rxagent.model.scripted",
    "ScriptedResponse": "rxagent.model.scripted",
    "ScriptedToolCall": "rxagent.model.scripted",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rxagent.model' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
