"""The model contract: what goes into a model (:class:`ChatRequest`), what streams out (:class:`ChatChunk`).

The chunk types live in the bottom layer (:mod:`rxagent.chunks`, which operators and events use too) and
are re-exported here; requests are built once per call and are frozen dataclasses that middleware derives
new versions of with :func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeAlias, runtime_checkable

from pydantic import JsonValue
from reactivex import Observable

from rxagent.chunks import ChatChunk, FinishReason, ToolCallDelta, Usage
from rxagent.messages import Msg
from rxagent.retry import RetryBudget

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
class ToolSchema:
    """A tool as a model sees it: name, description and a JSON Schema object for its arguments."""

    name: str
    description: str
    parameters: Mapping[str, JsonValue] = field(default_factory=lambda: {"type": "object", "properties": {}})
    strict: bool = False


@dataclass(frozen=True, slots=True)
class ForceTool:
    """Tool choice that forces a call of the named tool."""

    name: str


ToolChoice: TypeAlias = Literal["auto", "none", "required"] | ForceTool
"""Whether the model may (``auto``), must not (``none``) or must (``required``) call a tool, or which one."""


@dataclass(frozen=True, slots=True)
class JsonSchemaFormat:
    """Ask for output matching a JSON schema (native structured output)."""

    name: str
    schema: Mapping[str, JsonValue]
    strict: bool = True


ResponseFormat: TypeAlias = Literal["text", "json_object"] | JsonSchemaFormat
"""Plain text, any JSON object, or JSON matching a schema."""


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """Everything one model call sends.

    Attributes:
        messages: the conversation, system message(s) first.
        tools: schemas of the tools the model may call.
        temperature, top_p, max_tokens, stop, seed: sampling options (``None``: provider default).
        tool_choice: see :data:`ToolChoice`.
        parallel_tool_calls: whether the model may call several tools at once (``None``: default).
        response_format: see :data:`ResponseFormat`.
        stream: stream the answer (SSE) or fetch it whole; the chunk observable looks the same either way.
        extra: provider-specific fields merged into the request body last.
        retry_budget: the run's shared retry budget; ``None`` gives the call a budget of its own.
    """

    messages: tuple[Msg, ...]
    tools: tuple[ToolSchema, ...] = ()
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    seed: int | None = None
    tool_choice: ToolChoice | None = None
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    stream: bool = True
    extra: Mapping[str, JsonValue] = field(default_factory=lambda: {})
    retry_budget: RetryBudget | None = field(default=None, compare=False)


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
