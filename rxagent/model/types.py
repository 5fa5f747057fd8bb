"""The model contract: a :class:`ChatModel` turns a :class:`ChatRequest` into a stream of :class:`ChatChunk`.

What goes in and what streams out are plain data of the bottom layer (:mod:`rxagent.requests`,
:mod:`rxagent.chunks`), which tools, memory, operators and events use without importing this layer; they
are re-exported here, so ``from rxagent.model import ChatRequest`` works as well. This module holds what is
the model's own: the protocol, what a model accepts (:class:`ModelCapabilities`) and who serves it
(:func:`provider_of`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rxagent.chunks import ChatChunk, FinishReason, ToolCallDelta, Usage
from rxagent.requests import ChatRequest, ForceTool, JsonSchemaFormat, ResponseFormat, ToolChoice, ToolSchema

if TYPE_CHECKING:
    # Only the protocol's annotations name it: reactivex (and asyncio under it) loads with the first
    # backend or operator, not with `import rxagent`.
    from reactivex import Observable

__all__ = [
    "ChatChunk",
    "ChatModel",
    "ChatRequest",
    "FinishReason",
    "ForceTool",
    "JsonSchemaFormat",
    "ModelCapabilities",
    "ResponseFormat",
    "ToolCallDelta",
    "ToolChoice",
    "ToolSchema",
    "Usage",
    "provider_of",
]


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """What a model accepts, so callers pick the right path (for example for structured output)."""

    tools: bool = True
    forced_tool_choice: bool = True
    json_schema_output: bool = False
    thinking: bool = False


@runtime_checkable
class ChatModel(Protocol):
    """A chat model: turns a :class:`ChatRequest` into a cold stream of :class:`ChatChunk`.

    ``stream`` must return a cold observable: nothing is sent until subscription, each subscription is
    one call, subscription happens inside a running asyncio loop, and disposing the subscription cancels
    the call and releases what it holds (HTTP response, connection, worker thread).
    """

    @property
    def model_name(self) -> str:
        """The model's name as the provider knows it."""
        ...

    @property
    def capabilities(self) -> ModelCapabilities:
        """What this model accepts."""
        ...

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        """Emit the answer to ``request`` as chunks, then complete; errors are :class:`ModelError`."""
        ...


def provider_of(model: ChatModel) -> str:
    """Who serves ``model``: its ``provider_name`` attribute when it has one (``"openai"`` for
    :class:`~rxagent.model.openai.OpenAIChatModel`, ``"llama_cpp"`` for the embedded model), else the
    name of its class. What OpenTelemetry spans give as ``gen_ai.provider.name``."""
    name = getattr(model, "provider_name", None)
    return name if isinstance(name, str) and name else type(model).__name__
