"""The model contract: a :class:`ChatModel` turns a :class:`ChatRequest` into a stream of :class:`ChatChunk`.

What goes in and what streams out are plain data of the bottom layer (:mod:`rxagent.requests`,
:mod:`rxagent.chunks`), which tools, memory, operators and events use without importing this layer; they
are re-exported here, so ``from rxagent.model import ChatRequest`` works as well. This module holds what is
the model's own: the protocol, what a model accepts (:class:`ModelCapabilities`) and who serves it
(:func:`provider_of`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from rxagent.chunks import ChatChunk, FinishReason, ToolCallDelta, Usage
from rxagent.messages import DocumentBlock, ImageBlock, MediaBlock, MessageMemo
from rxagent.model.errors import UnsupportedContentError
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
    "check_content",
    "provider_of",
    "refusal_of",
]


@dataclass(frozen=True, slots=True)
class ModelCapabilities:
    """What a model accepts, so callers pick the right path (for example for structured output).

    Attributes:
        tools: tool schemas (else structured output is prompted).
        forced_tool_choice: ``tool_choice`` naming a tool, or ``"required"``.
        json_schema_output: a JSON-schema ``response_format``.
        thinking: it streams its reasoning.
        images: images in user messages (:class:`~rxagent.messages.ImageBlock`).
        documents: documents in user messages (:class:`~rxagent.messages.DocumentBlock`).
    """

    tools: bool = True
    forced_tool_choice: bool = True
    json_schema_output: bool = False
    thinking: bool = False
    images: bool = True
    documents: bool = True


def refusal_of(block: ImageBlock | DocumentBlock, model: ChatModel) -> str | None:
    """Why ``model`` cannot take ``block`` by its capabilities, or ``None`` when it can."""
    capabilities = model.capabilities
    if capabilities.images if block.type == "image" else capabilities.documents:
        return None
    what = "images" if block.type == "image" else "documents"
    return (
        f"model {model.model_name!r} does not take {what} ({type(model).__name__}'s capabilities.{what} is "
        f"False), and this is {block.media_type} {block.type}"
    )


def check_content(request: ChatRequest, model: ChatModel) -> None:
    """Refuse ``request`` when it holds images or documents ``model``'s capabilities say it cannot take.

    Every backend calls this before it sends (or generates) anything, so such a request fails at once,
    with the model and the first offending block named, instead of reaching a server that rejects it
    or a local model that would silently ignore it. (An agent refuses such input earlier still, before it
    saves anything: see :mod:`rxagent.agent.inputs`.)

    Raises:
        UnsupportedContentError: the first image or document the model cannot take.
    """
    capabilities = model.capabilities
    if capabilities.images and capabilities.documents:
        return
    media = _MEDIA.get_all(request.messages, _media_of)
    if not any(media):
        return
    for position, blocks in enumerate(media):
        for block in blocks:
            refusal = refusal_of(block, model)
            if refusal is not None:
                raise UnsupportedContentError(
                    f"{refusal} (message {position} of the request); nothing was sent: use a model that "
                    "takes them, or leave them out"
                )


# A request repeats the whole conversation: each message's media is found once, not at every request.
_MEDIA: MessageMemo[tuple[MediaBlock, ...]] = MessageMemo()
_media_of = operator.attrgetter("media")


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
