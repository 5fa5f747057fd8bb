"""What goes into a model call: :class:`ChatRequest` and its parts, in the bottom layer of rxagent.

Tools describe themselves as :class:`ToolSchema`, the context window counts and trims a
:class:`ChatRequest`, the loop builds one per model call: all of them use these plain frozen values
without importing the model layer. :mod:`rxagent.model` (the :class:`~rxagent.model.ChatModel` contract,
the backends) re-exports them. Middleware derives new versions of a request with
:func:`dataclasses.replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from pydantic import JsonValue

from rxagent.messages import Msg
from rxagent.retry import RetryBudget

__all__ = [
    "ChatRequest",
    "ForceTool",
    "JsonSchemaFormat",
    "ResponseFormat",
    "ToolChoice",
    "ToolSchema",
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
