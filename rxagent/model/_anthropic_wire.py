"""The Anthropic Messages wire format: request bodies out, stream events in.

Two layers, as for chat completions (:mod:`rxagent.model._openai_wire`):

* **Encoding** (:class:`RequestEncoder`). The system messages that open the conversation become the
  top-level ``system``; a system message later in it (a hint, a closing instruction) becomes user text in
  its place, since the API has no system role among messages and moving it to the top would change the
  cached prefix. ``tool`` messages become user turns of ``tool_result`` blocks; consecutive turns of one
  role are merged into one (the API wants roles to alternate), with the tool results first in a merged
  user turn, as the API requires. Signed thinking blocks and withheld (``redacted_thinking``) ones go back
  exactly as they came; thinking without a signature (from another provider) is left out, since the API
  refuses it. A tool call whose arguments never parsed goes back as ``{"INVALID_JSON": <its text>}``
  (pydantic-ai's spelling), so the model sees what it wrote. Images and documents of a user message become
  ``image`` and ``document`` blocks in their place among its text (:func:`media_block`); in a message of
  any other role they are refused with :class:`~rxagent.model.errors.UnsupportedContentError` before
  anything is sent. Prompt caching marks up to three cut points (``cache_control``): the last system
  block, the last tool definition, and the last block of the last message (an image or a document too),
  as :class:`PromptCache` says. Each message's blocks are encoded once per message object and
  reused by every later request of the conversation.
* **Decoding** (:class:`StreamParser`, :func:`chunks_from_message`): each event's JSON is decoded by
  msgspec straight into typed structs holding only the fields rxagent reads. ``text_delta``,
  ``thinking_delta`` and ``input_json_delta`` become chunks; a thinking block's signature is held until
  the block stops and then closes it (``ChatChunk.thinking_signature``); a ``redacted_thinking`` block is
  passed on whole; ``tool_use`` blocks are numbered in order of appearance (the index of their
  :class:`~rxagent.model.types.ToolCallDelta`), and the input deltas of other blocks (a server tool's)
  are not tool calls. ``stop_reason`` becomes the finish reason; usage is the ``message_start`` counts
  updated by ``message_delta``'s (cumulative, as the API documents), emitted once at the end. ``ping`` and
  event types this client does not know are skipped, as the API asks of clients; an ``error`` event
  is a :class:`~rxagent.model.errors.ModelStreamError` classified by the status the API documents for its
  type. Anything that is not an event of the documented shape is a
  :class:`~rxagent.model.errors.MalformedStreamError` naming its line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import msgspec
from pydantic import JsonValue

from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    MessageMemo,
    Msg,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.model._json import SHAPE_ERRORS, call_fragment, delta_chunk, dumps, is_object, lazy_raw, reread
from rxagent.model.errors import MalformedStreamError, ModelError, ModelStreamError, UnsupportedContentError
from rxagent.model.sse import SSEEvent
from rxagent.model.types import (
    ChatChunk,
    ChatRequest,
    FinishReason,
    ForceTool,
    JsonSchemaFormat,
    ToolCallDelta,
    ToolSchema,
    Usage,
)

__all__ = [
    "ERROR_STATUSES",
    "PromptCache",
    "RequestEncoder",
    "StreamParser",
    "chunks_from_message",
    "finish_reason_of",
    "media_block",
    "message_blocks",
]


@dataclass(frozen=True, slots=True)
class PromptCache:
    """Where :class:`~rxagent.model.anthropic.AnthropicModel` marks the request for Anthropic's prompt cache.

    Each cut point is a ``cache_control`` mark: the API caches the request's prefix up to it (tools, then
    system, then messages), and a later request that begins with the same prefix reads it from the cache
    (``Usage.cache_read_tokens``) instead of paying for it in full; writing it costs a little more
    (``Usage.cache_write_tokens``). The API allows four marks; these use at most three.

    Attributes:
        system: mark the last block of the system prompt.
        tools: mark the last tool definition (the cache then holds every tool).
        messages: mark the last block of the last message, so the next turn of the conversation reads
            the whole history so far from the cache.
        ttl: how long an entry lives: ``"5m"`` (the API's default) or ``"1h"`` (costs more to write).

    Example:
        >>> PromptCache(tools=False)
        PromptCache(system=True, tools=False, messages=True, ttl='5m')
    """

    system: bool = True
    tools: bool = True
    messages: bool = True
    ttl: Literal["5m", "1h"] = "5m"

    def __post_init__(self) -> None:
        if self.ttl not in ("5m", "1h"):
            raise ValueError(f'PromptCache.ttl must be "5m" or "1h", got {self.ttl!r}')

    def mark(self) -> bytes:
        """The encoded ``cache_control`` value."""
        return b'{"type":"ephemeral"}' if self.ttl == "5m" else b'{"type":"ephemeral","ttl":"1h"}'


# ---- encoding: Msg → wire ----------------------------------------------------------------------------

_INVALID_JSON = "INVALID_JSON"
"""The key under which a tool call's unparsable argument text goes back (``input`` must be an object)."""


class _Encoded(NamedTuple):
    """One message's blocks, encoded once per message object."""

    user: bool
    """The wire role: user (user and tool messages, and system messages after the first turn) or assistant."""
    results: tuple[bytes, ...]
    """Its ``tool_result`` blocks: they lead a user turn's content."""
    others: tuple[bytes, ...]
    """Every other block, in order."""
    markable: int
    """The index in ``others`` of the last block that may carry a cache mark (thinking may not); -1: none."""


def _tool_use_to_wire(block: ToolUseBlock) -> bytes:
    arguments: JsonValue
    if block.state == "complete" and block.input is not None:
        arguments = block.input
    else:
        # The API wants an object; the model's own text goes back inside one, so it sees its mistake.
        arguments = {_INVALID_JSON: block.raw_arguments}
    return dumps({"type": "tool_use", "id": block.id, "name": block.name, "input": arguments})


def _tool_result_to_wire(block: ToolResultBlock) -> bytes:
    text = block.text
    if block.status != "ok" and not text:
        text = f"(tool call {block.status})"
    wire: dict[str, JsonValue] = {"type": "tool_result", "tool_use_id": block.tool_use_id}
    if text:
        wire["content"] = text
    if block.status != "ok":
        wire["is_error"] = True
    return dumps(wire)


_WIRE = "Anthropic Messages"
"""This format's name in errors."""


def media_block(block: ImageBlock | DocumentBlock) -> dict[str, JsonValue]:
    """The API's block for an image or a document (the shapes of Anthropic's vision and PDF guides).

    ============================  ==================================================================
    block                         API block
    ============================  ==================================================================
    image, inline                 ``{"type": "image", "source": {"type": "base64", "media_type":
                                  "image/png", "data": "iVBOR…"}}``
    image, by URL                 ``{"type": "image", "source": {"type": "url", "url": "https://…"}}``
    PDF, inline                   ``{"type": "document", "source": {"type": "base64", "media_type":
                                  "application/pdf", "data": "JVBER…"}}``
    PDF, by URL                   ``{"type": "document", "source": {"type": "url", "url": "https://…"}}``
    text document                 ``{"type": "document", "source": {"type": "text", "media_type":
                                  "text/plain", "data": "…"}}``
    ============================  ==================================================================

    A named document carries its name as ``title``. An image's ``detail`` is OpenAI's and is not sent.
    """
    source: dict[str, JsonValue]
    if block.url is not None:
        source = {"type": "url", "url": block.url}
    elif block.media_type == "text/plain":
        source = {"type": "text", "media_type": "text/plain", "data": (block.data or b"").decode()}
    else:
        source = {"type": "base64", "media_type": block.media_type, "data": block.data_base64()}
    if isinstance(block, ImageBlock):
        return {"type": "image", "source": source}
    wire: dict[str, JsonValue] = {"type": "document", "source": source}
    if block.name:
        wire["title"] = block.name
    return wire


def message_blocks(msg: Msg) -> _Encoded:
    """``msg``'s content as the API's blocks (see the module for what is sent and what is left out).

    Raises:
        UnsupportedContentError: an image or a document in a message that is not a user message.
    """
    results: list[bytes] = []
    others: list[bytes] = []
    markable = -1
    for block in msg.content:
        if isinstance(block, TextBlock):
            if block.text:  # the API refuses empty text blocks
                others.append(dumps({"type": "text", "text": block.text}))
                markable = len(others) - 1
        elif isinstance(block, ToolUseBlock):
            others.append(_tool_use_to_wire(block))
            markable = len(others) - 1
        elif isinstance(block, ToolResultBlock):
            results.append(_tool_result_to_wire(block))
        elif isinstance(block, ImageBlock | DocumentBlock):
            if msg.role != "user":
                # The API answers 400 ("'image' blocks are not permitted within assistant turns"): say so
                # before sending; a system message would have to move it into a user turn it is not part of.
                raise UnsupportedContentError.outside_user_message(_WIRE, msg.role)
            others.append(dumps(media_block(block)))
            markable = len(others) - 1  # images and documents may carry a cache mark
        elif block.redacted_data is not None:
            others.append(dumps({"type": "redacted_thinking", "data": block.redacted_data}))
        elif block.signature:
            wire = {"type": "thinking", "thinking": block.thinking, "signature": block.signature}
            others.append(dumps(wire))
    return _Encoded(msg.role != "assistant", tuple(results), tuple(others), markable)


def _with_mark(block: bytes, mark: bytes) -> bytes:
    """``block`` (an encoded JSON object) with ``"cache_control": mark`` added at its end."""
    return b"".join((block[:-1], b',"cache_control":', mark, b"}"))


def _turn(user: bool, content: list[bytes]) -> bytes:
    role = b'{"role":"user","content":[' if user else b'{"role":"assistant","content":['
    return b"".join((role, b",".join(content), b"]}"))


def _turns(encoded: Sequence[_Encoded], mark: bytes | None) -> list[bytes]:
    """The ``messages`` array's items: consecutive messages of one wire role merged into one turn, the last
    turn's last markable block marked with ``mark`` (``None``: no mark)."""
    encoded = [message for message in encoded if message.results or message.others]  # sent nothing: gone
    turns: list[bytes] = []
    start = 0
    count = len(encoded)
    while start < count:
        user = encoded[start].user
        end = start + 1
        while end < count and encoded[end].user is user:
            end += 1
        group = encoded[start:end]
        results = [block for message in group for block in message.results]
        others = [block for message in group for block in message.others]
        if mark is not None and end == count:
            _mark_last(group, results, others, mark)
        turns.append(_turn(user, results + others))
        start = end
    return turns


def _mark_last(group: Sequence[_Encoded], results: list[bytes], others: list[bytes], mark: bytes) -> None:
    """Put the cache mark on the last block of a turn that may carry one."""
    position = len(others)
    for message in reversed(group):
        position -= len(message.others)
        if message.markable >= 0:
            others[position + message.markable] = _with_mark(others[position + message.markable], mark)
            return
    if results:
        results[-1] = _with_mark(results[-1], mark)


def tool_to_wire(tool: ToolSchema) -> dict[str, JsonValue]:
    """A tool schema as an entry of the API's ``tools``."""
    return {"name": tool.name, "description": tool.description, "input_schema": dict(tool.parameters)}


class RequestEncoder:
    """Encodes requests for one model: its defaults, its cache marks, and each message's blocks, cached.

    Args:
        model: the model name.
        max_tokens: the output limit sent when a request sets none (the API requires one).
        thinking_budget: tokens of extended thinking per answer (``None``: thinking off).
        cache: the cut points to mark (``None``: no prompt caching).
    """

    __slots__ = ("_blocks", "_cache", "_max_tokens", "_model", "_thinking", "_tools_key", "_tools_wire")

    def __init__(
        self, model: str, *, max_tokens: int, thinking_budget: int | None, cache: PromptCache | None
    ) -> None:
        self._model = model
        self._max_tokens = max_tokens
        self._thinking = thinking_budget
        self._cache = cache
        self._blocks: MessageMemo[_Encoded] = MessageMemo()
        self._tools_key: tuple[ToolSchema, ...] | None = None  # the tuple whose encoding is cached
        self._tools_wire = b""

    def encode(self, request: ChatRequest) -> bytes:
        """The JSON body for ``request``.

        Raises:
            ValueError: the request asks for a response format the API does not take (JSON mode, a JSON
                schema), or for a thinking budget with a too small ``max_tokens``.
        """
        messages = request.messages
        cache = self._cache
        mark = cache.mark() if cache is not None else None
        first = 0
        system: list[bytes] = []
        while first < len(messages) and messages[first].role == "system":
            if messages[first].media:  # the top-level system prompt is text only: nothing is dropped
                raise UnsupportedContentError.outside_user_message(_WIRE, "system")
            system.extend(
                dumps({"type": "text", "text": block.text})
                for block in messages[first].content
                if isinstance(block, TextBlock) and block.text
            )
            first += 1
        if system and cache is not None and cache.system and mark is not None:
            system[-1] = _with_mark(system[-1], mark)
        encoded = self._blocks.get_all(messages[first:], message_blocks)
        turns = _turns(encoded, mark if cache is not None and cache.messages else None)
        tools = self._tools(request.tools) if request.tools else None
        options = self._options(request)
        if "system" in options or "messages" in options or (tools is not None and "tools" in options):
            # `extra` replaces a field spliced in below: fall back to one plain dictionary.
            body: dict[str, object] = {"messages": json.loads(b"[" + b",".join(turns) + b"]")}
            if system:
                body["system"] = json.loads(b"[" + b",".join(system) + b"]")
            if tools is not None:
                body["tools"] = json.loads(tools)
            body.update(options)
            return dumps(body)
        parts = [b'{"messages":[', b",".join(turns), b"]"]
        if system:
            parts += [b',"system":[', b",".join(system), b"]"]
        if tools is not None:
            parts += [b',"tools":', tools]
        parts += [b",", dumps(options)[1:]]
        return b"".join(parts)

    def _tools(self, tools: tuple[ToolSchema, ...]) -> bytes:
        if tools is not self._tools_key:
            wire = [dumps(tool_to_wire(tool)) for tool in tools]
            cache = self._cache
            if cache is not None and cache.tools:
                wire[-1] = _with_mark(wire[-1], cache.mark())
            self._tools_wire = b"[" + b",".join(wire) + b"]"
            self._tools_key = tools
        return self._tools_wire

    def _options(self, request: ChatRequest) -> dict[str, JsonValue]:
        max_tokens = request.max_tokens if request.max_tokens is not None else self._max_tokens
        options: dict[str, JsonValue] = {"model": self._model, "max_tokens": max_tokens}
        if request.stream:
            options["stream"] = True
        if self._thinking is not None:
            if self._thinking >= max_tokens:
                raise ValueError(
                    f"the thinking budget ({self._thinking} tokens) must be below max_tokens ({max_tokens}): "
                    "the API counts thinking inside the output limit"
                )
            options["thinking"] = {"type": "enabled", "budget_tokens": self._thinking}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.top_p is not None:
            options["top_p"] = request.top_p
        if request.stop:
            options["stop_sequences"] = list[JsonValue](request.stop)
        # `seed` is not part of the API (which refuses fields it does not know): it is not sent.
        if request.tools:
            choice = _tool_choice(request)
            if choice is not None:
                options["tool_choice"] = choice
        response_format = request.response_format
        if response_format is not None and response_format != "text":
            what = "a JSON schema" if isinstance(response_format, JsonSchemaFormat) else "JSON mode"
            raise ValueError(
                f"the Anthropic Messages API takes no response format ({what} was asked for); "
                "use structured output through a tool (an agent's output_type does so for this model)"
            )
        options.update(request.extra)
        return options


def _tool_choice(request: ChatRequest) -> dict[str, JsonValue] | None:
    choice = request.tool_choice
    wire: dict[str, JsonValue]
    if isinstance(choice, ForceTool):
        wire = {"type": "tool", "name": choice.name}
    elif choice == "required":
        wire = {"type": "any"}
    elif choice == "none":
        return {"type": "none"}
    elif choice == "auto" or request.parallel_tool_calls is False:
        wire = {"type": "auto"}
    else:
        return None
    if request.parallel_tool_calls is False:
        wire["disable_parallel_tool_use"] = True
    return wire


# ---- decoding: wire → ChatChunk ----------------------------------------------------------------------
#
# What rxagent reads of an event. msgspec decodes each event's JSON straight into these, skipping every
# field not named here without building it; a field of the wrong type is a ValidationError naming its
# place (`$.delta.text`).


class _Wire(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True, gc=False):
    """A decoded JSON object of the wire format (see :class:`rxagent.model._openai_wire._Wire`)."""


class _Delta(_Wire):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    partial_json: str | None = None
    stop_reason: str | None = None


class _Block(_Wire):
    type: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | None = None
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None


class _Usage(_Wire):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Message(_Wire):
    """A ``message_start``'s message, or a whole (not streamed) response."""

    type: str | None = None
    content: list[_Block] | None = None
    stop_reason: str | None = None
    usage: _Usage | None = None
    error: Any = None


class _Event(_Wire):
    type: str | None = None
    index: int | None = None
    delta: _Delta | None = None
    content_block: _Block | None = None
    message: _Message | None = None
    usage: _Usage | None = None
    error: Any = None


_decode_event = msgspec.json.Decoder(_Event).decode


_STOP_REASONS: Mapping[str, FinishReason] = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "refusal": "content_filter",
}

ERROR_STATUSES: Mapping[str, int] = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "billing_error": 402,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "timeout_error": 504,
    "overloaded_error": 529,
}
"""The HTTP status Anthropic documents for each error type; a type not listed counts as ``api_error``."""


def finish_reason_of(stop_reason: str | None) -> FinishReason:
    """Our :data:`FinishReason` for an Anthropic ``stop_reason``; one we do not know becomes ``"stop"``."""
    return _STOP_REASONS.get(stop_reason, "stop") if stop_reason is not None else "stop"


def _stream_error(error: Any, redact: Callable[[str], str]) -> ModelStreamError:
    """The error for an ``{"type": "error", "error": {...}}`` event or body."""
    kind = error.get("type") if is_object(error) else None
    message = error.get("message") if is_object(error) else error
    if not isinstance(message, str):
        message = json.dumps(error, ensure_ascii=False, default=str)
    kind = kind if isinstance(kind, str) and kind else "api_error"
    return ModelStreamError(kind, redact(message), ERROR_STATUSES.get(kind, 500))


class _Counts:
    """The call's usage so far: ``message_start``'s counts, updated by ``message_delta``'s."""

    __slots__ = ("cache_read", "cache_write", "input", "output")

    def __init__(self) -> None:
        self.input = self.output = self.cache_read = self.cache_write = 0

    def update(self, usage: _Usage) -> None:
        # Each count the event carries replaces the one before (they are cumulative); absent ones stay.
        if usage.input_tokens is not None:
            self.input = usage.input_tokens
        if usage.output_tokens is not None:
            self.output = usage.output_tokens
        if usage.cache_creation_input_tokens is not None:
            self.cache_write = usage.cache_creation_input_tokens
        if usage.cache_read_input_tokens is not None:
            self.cache_read = usage.cache_read_input_tokens

    def usage(self) -> Usage:
        # Anthropic's input_tokens leaves out the cached tokens; rxagent's Usage counts them in.
        total = self.input + self.cache_read + self.cache_write
        return Usage(total, self.output, self.cache_read, 0, self.cache_write)


class StreamParser:
    """Turns one streamed response's SSE events into chunks. One parser per attempt.

    Attributes:
        done: ``message_stop`` arrived.
        finished: always ``False``: the API always ends a stream with ``message_stop``, so a stream that
            ends without it was cut short, even after its ``stop_reason``.
    """

    __slots__ = ("_counts", "_redact", "_signatures", "_tools", "done", "finished")

    ending = "message_stop"
    """What a stream must end with (one that does not is an error naming this)."""

    def __init__(self, redact: Callable[[str], str] = str) -> None:
        self._redact = redact
        self._counts: _Counts | None = None
        # Keyed by content block index (an event without one looks up None, which is no block's).
        self._tools: dict[int | None, int] = {}  # tool_use block → the tool call's number
        self._signatures: dict[int | None, list[str]] = {}  # thinking block → its signature's parts
        self.done = False
        self.finished = False

    def feed(self, event: SSEEvent) -> ChatChunk | None:
        """The chunk carried by ``event``, or ``None`` for events that carry no delta.

        Raises:
            MalformedStreamError: the data is not JSON, not an object, or not of an event's shape (the
                message says which, and where).
            ModelStreamError: the event is an ``error`` event.
        """
        data = event.data
        try:
            wire = _decode_event(data)
        except msgspec.DecodeError:
            wire = None  # read again below, outside this block (see `_reread`)
        if wire is None:
            return self._reread(event)
        try:
            return self._chunk(wire, data)
        except SHAPE_ERRORS as error:
            problem = f"unexpected event shape ({type(error).__name__}: {self._redact(str(error))})"
        raise MalformedStreamError(problem, line=event.line, data=self._redact(data))

    def feed_all(self, events: Iterable[SSEEvent], into: list[ChatChunk]) -> ModelError | None:
        """Append the chunks of ``events`` to ``into``, stopping at ``message_stop``.

        Returns:
            The error that stopped it at a bad event (``into`` holds the chunks before it), else ``None``.
        """
        try:
            for event in events:
                chunk = self.feed(event)
                if chunk is not None:
                    into.append(chunk)
                elif self.done:
                    break
        except ModelError as error:
            return error
        return None

    def feed_tail(self, tail: SSEEvent) -> ChatChunk | None:
        """The chunk of the event the body ended in without its closing blank line.

        Raises:
            MalformedStreamError: the event is cut off.
            ModelStreamError: the event is an ``error`` event.
        """
        return self.feed(tail)

    def usage_chunk(self) -> ChatChunk | None:
        """The call's usage as a chunk of its own, if the server sent any."""
        counts = self._counts
        return ChatChunk(usage=counts.usage()) if counts is not None else None

    def _reread(self, event: SSEEvent) -> ChatChunk | None:
        return reread(
            event,
            lambda decoded: self._chunk(msgspec.convert(decoded, _Event), decoded),
            self._redact,
            "event",
        )

    def _chunk(self, wire: _Event, raw: str | dict[str, Any]) -> ChatChunk | None:
        """The chunk of ``wire``; ``raw`` is its JSON text, or the object when it was read the slow way."""
        # Runs once per streamed token: the deltas first, plain attribute reads and string comparisons.
        kind = wire.type
        if kind == "content_block_delta":
            delta = wire.delta
            if delta is None:
                raise TypeError("a content_block_delta without its delta")
            step = delta.type
            if step == "text_delta":
                text = delta.text
                if text is None:
                    raise TypeError("a text_delta without its text")
                return delta_chunk(text, "", (), None, raw)
            if step == "input_json_delta":
                number = self._tools.get(wire.index)
                if number is None or not delta.partial_json:
                    return None  # a server tool's input, or an empty fragment
                fragment = (call_fragment(number, None, None, delta.partial_json),)
                return delta_chunk("", "", fragment, None, raw)
            if step == "thinking_delta":
                thinking = delta.thinking
                if thinking is None:
                    raise TypeError("a thinking_delta without its thinking")
                return delta_chunk("", thinking, (), None, raw) if thinking else None
            if step == "signature_delta":
                parts = self._signatures.get(wire.index)
                if parts is None or delta.signature is None:
                    raise TypeError("a signature_delta outside a thinking block, or without its signature")
                parts.append(delta.signature)
            return None  # citations_delta, and delta types added later
        if kind == "content_block_start":
            return self._started(wire, raw)
        if kind == "content_block_stop":
            parts = self._signatures.pop(wire.index, None)
            # A thinking block is closed by its signature ("" for none), which the fold keeps with it.
            return ChatChunk(thinking_signature="".join(parts)) if parts is not None else None
        if kind == "message_delta":
            if wire.usage is not None:
                self._count(wire.usage)
            delta = wire.delta
            if delta is not None and delta.stop_reason is not None:
                return ChatChunk(finish_reason=finish_reason_of(delta.stop_reason))
            return None
        if kind == "message_start":
            message = wire.message
            if message is not None and message.usage is not None:
                self._count(message.usage)
            return None
        if kind == "message_stop":
            self.done = True
            return None
        if kind == "error":
            raise _stream_error(wire.error, self._redact)
        if kind is None:
            raise TypeError("an event without its type")
        return None  # ping, and event types added later: the API asks clients to skip what they don't know

    def _started(self, wire: _Event, raw: str | dict[str, Any]) -> ChatChunk | None:
        block = wire.content_block
        index = wire.index
        if block is None or index is None:
            raise TypeError("a content_block_start without its index or its content_block")
        lazy = lazy_raw(raw)
        kind = block.type
        if kind == "text":
            return ChatChunk(block.text, raw=lazy) if block.text else None
        if kind == "tool_use":
            number = len(self._tools)
            self._tools[index] = number
            # The input streams as input_json_delta fragments; a start that carries it whole sends it here.
            arguments = json.dumps(block.input, ensure_ascii=False) if block.input else ""
            return ChatChunk(tool_calls=(ToolCallDelta(number, block.id, block.name, arguments),), raw=lazy)
        if kind == "thinking":
            self._signatures[index] = [block.signature] if block.signature else []
            return ChatChunk(thinking=block.thinking, raw=lazy) if block.thinking else None
        if kind == "redacted_thinking":
            if block.data is None:
                raise TypeError("a redacted_thinking block without its data")
            return ChatChunk(redacted_thinking=block.data, raw=lazy)
        return None  # server tool use and its results, and block types added later

    def _count(self, usage: _Usage) -> None:
        counts = self._counts
        if counts is None:
            counts = self._counts = _Counts()
        counts.update(usage)


def chunks_from_message(obj: Any, redact: Callable[[str], str] = str) -> list[ChatChunk]:
    """The chunks for a whole (not streamed) response: its blocks in order, the finish reason, the usage.

    Raises:
        MalformedStreamError: the body is not a message (the message says what is wrong, and where).
        ModelStreamError: the body is an ``{"type": "error", …}`` object.
    """
    if not is_object(obj):
        raise MalformedStreamError("the response body is not a JSON object", data=redact(str(obj)))
    try:
        message = msgspec.convert(obj, _Message)
    except msgspec.ValidationError as error:
        problem = f"unexpected message shape ({redact(str(error))})"
    else:
        if message.type == "error":
            raise _stream_error(message.error, redact)
        if message.content is None:
            problem = "the response has no content"
        else:
            return _message_chunks(message)
    raise MalformedStreamError(problem, data=redact(json.dumps(obj)[:200]))


def _message_chunks(message: _Message) -> list[ChatChunk]:
    chunks: list[ChatChunk] = []
    calls = 0
    for block in message.content or ():
        if block.type == "text" and block.text:
            chunks.append(ChatChunk(block.text))
        elif block.type == "thinking":
            chunks.append(ChatChunk(thinking=block.thinking or "", thinking_signature=block.signature or ""))
        elif block.type == "redacted_thinking" and block.data is not None:
            chunks.append(ChatChunk(redacted_thinking=block.data))
        elif block.type == "tool_use":
            arguments = json.dumps(block.input if block.input is not None else {}, ensure_ascii=False)
            chunks.append(ChatChunk(tool_calls=(ToolCallDelta(calls, block.id, block.name, arguments),)))
            calls += 1
    chunks.append(ChatChunk(finish_reason=finish_reason_of(message.stop_reason)))
    if message.usage is not None:
        counts = _Counts()
        counts.update(message.usage)
        chunks.append(ChatChunk(usage=counts.usage()))
    return chunks
