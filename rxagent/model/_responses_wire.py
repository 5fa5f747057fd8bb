"""The OpenAI Responses API wire format (``POST /v1/responses``): input items out, stream events in.

**Encoding** (:func:`message_to_items`, :func:`encode_options`). The leading system messages become
``instructions``; every other message becomes input items, in the order of its blocks: text as a
``{"role": …, "content": …}`` message, a tool call as a ``function_call`` item, a tool result as a
``function_call_output`` item, and a thinking block that this format signed as the ``reasoning`` item it
came from. A user message with images or documents is one message whose content is a list of
``input_text``, ``input_image`` and ``input_file`` parts (:func:`input_part`); media in a message of any
other role is refused before anything is sent. Each message's items are encoded once and reused by every
later request of the conversation (:class:`~rxagent.model._openai_wire.MessageWireCache`, as for chat
completions).

**Reasoning carried between turns.** Requests say ``store: false`` (nothing is kept on the server) and
``include: ["reasoning.encrypted_content"]``, so every reasoning item arrives with its reasoning encrypted.
The item, exactly as ``response.output_item.done`` sent it (id, summary, ``encrypted_content``), becomes the
:attr:`~rxagent.messages.ThinkingBlock.signature` of the thinking block that holds its summary, and goes
back as an input item, unmodified, on the next request, which is how the API continues its reasoning
without state on its side. A thinking block of any other origin (no signature, or another provider's) is
not sent: this API takes reasoning only as its own items. A reasoning item that nothing follows in its
message (an answer cut off after reasoning) is not sent either: the API refuses a reasoning item without
the item it led to.

**Decoding** (:class:`ResponsesParser`, :func:`chunks_from_response`). Each event's JSON is decoded by
msgspec into a struct of the fields rxagent reads; the event's ``type`` says what it carries:

=========================================================  ==================================================
``response.output_text.delta``, ``response.refusal.delta``  text
``response.reasoning_summary_text.delta``,                  thinking (parts of a summary, and reasoning items,
``response.reasoning_text.delta``                           are set apart by a blank line)
``response.output_item.added`` (``function_call``)          the call's id (``call_id``) and name
``response.function_call_arguments.delta``                  an argument fragment of that call
``response.output_item.done``                               what the deltas left out (a server that sends
                                                            only whole items), and a reasoning item's
                                                            signature
``response.completed`` / ``response.incomplete``            the finish reason (``stop``, ``tool_calls``, or
                                                            ``length`` / ``content_filter`` by
                                                            ``incomplete_details.reason``), then the usage
``response.failed``, ``error``                              a :class:`~rxagent.model.errors.ModelError`
                                                            (retryable for ``rate_limit_exceeded`` and
                                                            ``server_error`` before anything streamed)
=========================================================  ==================================================

Other events (``response.created``, content-part and annotation events, built-in tools' progress) carry
nothing rxagent keeps. The stream ends with ``response.completed``, ``response.incomplete`` or
``response.failed``; one that ends without any of them is cut short, never a silently short answer. A
whole (non-streamed) response is read as a stream of one terminal event.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import Any, Final, cast

import msgspec
from pydantic import JsonValue

from rxagent.chunks import ChatChunk, FinishReason, Usage
from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.model._json import SHAPE_ERRORS, call_fragment, delta_chunk, dumps, is_object, lazy_raw, loads
from rxagent.model._openai_wire import WireDict, call_arguments, document_text, result_text
from rxagent.model.errors import MalformedStreamError, ModelError, ModelStreamError, UnsupportedContentError
from rxagent.model.sse import SSEEvent
from rxagent.requests import ChatRequest, ForceTool, JsonSchemaFormat, ToolSchema

__all__ = [
    "ENCRYPTED_REASONING",
    "ResponsesParser",
    "chunks_from_response",
    "encode_options",
    "input_part",
    "instructions_of",
    "message_to_items",
    "reasoning_item_of",
    "tool_to_item",
]

ENCRYPTED_REASONING: Final = "reasoning.encrypted_content"
"""What ``include`` asks for, so that reasoning can be carried to the next turn without ``store``."""

_CODE_STATUS: Final = {"rate_limit_exceeded": 429, "server_error": 500}
"""The HTTP status an error event's code stands for (any other code: 400, the request's fault)."""

_PART_BREAK: Final = "\n\n"
"""Between two parts of a reasoning summary, and between two reasoning items, in the thinking text."""


# ---- encoding: Msg → input items ---------------------------------------------------------------------


_WIRE = "OpenAI Responses"
"""This format's name in errors."""


def instructions_of(messages: Sequence[Msg]) -> tuple[str | None, int]:
    """``(instructions, count)``: the text of the leading system messages (joined by blank lines), sent
    as ``instructions``, and how many messages that took (``None, 0`` when the first is not a system
    message).

    Raises:
        UnsupportedContentError: one of them holds an image or a document (``instructions`` is text).
    """
    count = 0
    while count < len(messages) and messages[count].role == "system":
        if messages[count].media:
            raise UnsupportedContentError.outside_user_message(_WIRE, "system")
        count += 1
    if not count:
        return None, 0
    return "\n\n".join(message.text for message in messages[:count]), count


def reasoning_item_of(block: ThinkingBlock) -> dict[str, Any] | None:
    """The reasoning item a thinking block was folded from (its signature), or ``None`` when the block
    is not one of this format's: no signature, another provider's, or an item without encrypted content
    (which a server that stores nothing cannot continue from)."""
    signature = block.signature
    if not signature or not signature.startswith("{"):
        return None
    try:
        item = loads(signature)
    except ValueError:
        return None
    if not is_object(item) or item.get("type") != "reasoning":
        return None
    content = item.get("encrypted_content")
    return item if isinstance(content, str) and content else None


def input_part(block: ImageBlock | DocumentBlock) -> WireDict:
    """The Responses input content part for an image or a document (OpenAI's documented shapes).

    ============================  ==================================================================
    block                         part
    ============================  ==================================================================
    image, inline                 ``{"type": "input_image", "image_url": "data:image/png;base64,…",
                                  "detail": "auto"}``
    image, by URL                 ``{"type": "input_image", "image_url": "https://…", "detail": …}``
    PDF, inline                   ``{"type": "input_file", "filename": "a.pdf", "file_data":
                                  "data:application/pdf;base64,…"}``
    PDF, by URL                   ``{"type": "input_file", "file_url": "https://…"}``
    text document                 ``{"type": "input_text", "text": "name:\n…"}``
    ============================  ==================================================================

    ``detail`` is always sent (the API's schema requires it). A PDF without a name is sent as
    ``document.pdf`` (the API wants a file name with ``file_data``).
    """
    if isinstance(block, ImageBlock):
        url = block.url if block.url is not None else block.data_url()
        return {"type": "input_image", "image_url": url, "detail": block.detail}
    if block.media_type == "text/plain":
        return {"type": "input_text", "text": document_text(block)}
    if block.url is not None:
        return {"type": "input_file", "file_url": block.url}
    return {"type": "input_file", "filename": block.name or "document.pdf", "file_data": block.data_url()}


def message_to_items(msg: Msg) -> list[WireDict]:
    """The input items of ``msg``, in the order of its blocks (see the module: what goes and what not).

    A system message here is one that does not lead the conversation (those are ``instructions``). A user
    message with images or documents is one message item whose content is a list of parts, its text as
    ``input_text`` parts and its media as :func:`input_part` gives them, in the order of its blocks.

    Raises:
        UnsupportedContentError: an image or a document in a message that is not a user message.
    """
    items: list[WireDict] = []
    texts: list[str] = []
    parts: list[JsonValue] = []  # the content of a message item with media, text parts included
    role = msg.role if msg.role != "tool" else "user"

    def flush_text() -> None:
        if parts:
            if texts:
                parts.append({"type": "input_text", "text": "".join(texts)})
            items.append({"role": role, "content": list(parts)})
            parts.clear()
        elif texts:
            items.append({"role": role, "content": "".join(texts)})
        texts.clear()

    for block in msg.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
            continue
        if isinstance(block, ImageBlock | DocumentBlock):
            if msg.role != "user":
                raise UnsupportedContentError.outside_user_message(_WIRE, msg.role)
            if texts:
                parts.append({"type": "input_text", "text": "".join(texts)})
                texts.clear()
            parts.append(input_part(block))
            continue
        flush_text()
        if isinstance(block, ToolUseBlock):
            items.append(
                {
                    "type": "function_call",
                    "call_id": block.id,
                    "name": block.name,
                    "arguments": call_arguments(block),
                }
            )
        elif isinstance(block, ToolResultBlock):
            items.append(
                {"type": "function_call_output", "call_id": block.tool_use_id, "output": result_text(block)}
            )
        elif msg.role == "assistant":
            item = reasoning_item_of(block)
            if item is not None:
                items.append(cast("WireDict", item))
    flush_text()
    while items and items[-1].get("type") == "reasoning":
        items.pop()  # a reasoning item must lead to something: the API refuses one left last
    return items


def tool_to_item(tool: ToolSchema) -> WireDict:
    """A tool schema as a Responses ``tools`` entry (``strict`` always given: the API's default is on)."""
    return {
        "type": "function",
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
        "strict": tool.strict,
    }


def encode_options(request: ChatRequest, reasoning: WireDict | None) -> WireDict:
    """The fields after ``input`` and ``tools``: streaming, storage, sampling, tool choice, output format,
    ``reasoning`` (effort, summary), then the request's ``extra``.

    Raises:
        ValueError: the request asks for stop sequences or a seed, which this API does not take.
    """
    if request.stop:
        raise ValueError(
            "the OpenAI Responses API takes no stop sequences; leave ChatRequest.stop empty "
            "(or use OpenAIChatModel, whose chat-completions API takes them)"
        )
    if request.seed is not None:
        raise ValueError("the OpenAI Responses API takes no seed; leave ChatRequest.seed unset")
    options: WireDict = {"stream": request.stream, "store": False, "include": [ENCRYPTED_REASONING]}
    if reasoning:
        options["reasoning"] = reasoning
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.top_p is not None:
        options["top_p"] = request.top_p
    if request.max_tokens is not None:
        options["max_output_tokens"] = request.max_tokens
    choice = request.tool_choice
    if isinstance(choice, ForceTool):
        options["tool_choice"] = {"type": "function", "name": choice.name}
    elif choice is not None:
        options["tool_choice"] = choice
    if request.parallel_tool_calls is not None:
        options["parallel_tool_calls"] = request.parallel_tool_calls
    response_format = request.response_format
    if isinstance(response_format, JsonSchemaFormat):
        options["text"] = {
            "format": {
                "type": "json_schema",
                "name": response_format.name,
                "schema": dict(response_format.schema),
                "strict": response_format.strict,
            }
        }
    elif response_format is not None:
        options["text"] = {"format": {"type": response_format}}
    options.update(request.extra)
    return options


# ---- decoding: events → ChatChunk --------------------------------------------------------------------
#
# What rxagent reads of an event, a response and an output item. msgspec skips every other field
# (sequence numbers, logprobs, obfuscation padding, annotations, …) without building it. Fields whose type
# a server may get wrong are `Any`, checked where used; containers are typed, so a container of the wrong
# type is a ValidationError naming its place (`$.item.summary[0]`).


class _Wire(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True, gc=False):
    """A decoded JSON object of the wire format (see :class:`rxagent.model._openai_wire._Wire`)."""


class _Details(_Wire):
    cached_tokens: Any = None
    reasoning_tokens: Any = None


class _Usage(_Wire):
    input_tokens: Any = None
    output_tokens: Any = None
    input_tokens_details: _Details | None = None
    output_tokens_details: _Details | None = None


class _Part(_Wire):
    """A content part of a message (``output_text``, ``refusal``) or of a reasoning item."""

    type: Any = None
    text: Any = None
    refusal: Any = None


class _Item(_Wire):
    """An output item: ``message``, ``function_call``, ``reasoning`` (others are not read)."""

    type: Any = None
    id: Any = None
    call_id: Any = None
    name: Any = None
    arguments: Any = None
    encrypted_content: Any = None
    summary: list[_Part] | None = None
    content: list[_Part] | None = None


class _Incomplete(_Wire):
    reason: Any = None


class _Response(_Wire):
    status: Any = None
    output: list[_Item] | None = None
    usage: _Usage | None = None
    error: Any = None
    incomplete_details: _Incomplete | None = None


class _Event(_Wire):
    """One streamed event (its ``type`` says which fields it has), or an ``{"error": …}`` object."""

    type: Any = None
    delta: Any = None
    item_id: Any = None
    output_index: Any = None
    summary_index: Any = None
    content_index: Any = None
    item: _Item | None = None
    arguments: Any = None
    response: _Response | None = None
    code: Any = None
    message: Any = None
    error: Any = None


_decode_event = msgspec.json.Decoder(_Event).decode

_TERMINAL: Final = frozenset({"response.completed", "response.incomplete", "response.failed"})

_INCOMPLETE_REASONS: Final[dict[str, FinishReason]] = {
    "max_output_tokens": "length",
    "content_filter": "content_filter",
}


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage_of(raw: _Usage) -> Usage:
    """Usage from a response's ``usage``: input tokens (cached ones among them), output tokens
    (reasoning ones among them)."""
    cached = raw.input_tokens_details.cached_tokens if raw.input_tokens_details is not None else None
    reasoning = raw.output_tokens_details.reasoning_tokens if raw.output_tokens_details is not None else None
    return Usage(
        input_tokens=_count(raw.input_tokens),
        output_tokens=_count(raw.output_tokens),
        cache_read_tokens=_count(cached),
        reasoning_tokens=_count(reasoning),
    )


def _call_chunk(call: _Call, name: str | None, fragment: str, raw: str | dict[str, Any]) -> ChatChunk:
    return delta_chunk("", "", (call_fragment(call.index, call.call_id, name, fragment),), None, raw)


def _string(value: Any, what: str) -> str:
    if type(value) is not str:
        raise TypeError(f"`{what}` is not a string")
    return value


def _provider_error(code: Any, message: Any, redact: Callable[[str], str]) -> ModelError:
    """The error for an ``error`` event or a failed response, classified by the HTTP status its code stands
    for (``rate_limit_exceeded`` 429, ``server_error`` 500, any other 400): retryable when that status is
    (before anything streamed, the call is then tried again)."""
    text = message if isinstance(message, str) else dumps(message).decode()
    kind = code if isinstance(code, str) and code else "an error"
    return ModelStreamError(kind, redact(text), _CODE_STATUS.get(kind, 400))


def _error_of(value: Any, redact: Callable[[str], str]) -> ModelError:
    """The error for an ``error`` object (``{"code", "message"}``, or ``{"type", "message"}``)."""
    if is_object(value):
        code = value.get("code") or value.get("type")
        return _provider_error(code, value.get("message", value), redact)
    return _provider_error(None, value if value is not None else "no details given", redact)


class _Call:
    """A function call being streamed: where its fragments go and how much of its arguments arrived."""

    __slots__ = ("call_id", "index", "streamed")

    def __init__(self, index: int, call_id: str | None) -> None:
        self.index = index
        self.call_id = call_id
        self.streamed = 0


class ResponsesParser:
    """Turns one streamed Responses answer's SSE events into chunks. One parser per attempt.

    Follows :class:`~rxagent.model._chat_endpoint.ChunkParser`: usage is held back for :meth:`usage_chunk`,
    emitted after the chunk with the finish reason, as the chat-completions client emits it.

    Attributes:
        done: a terminal event arrived (``response.completed`` or ``response.incomplete``).
        finished: the same (the answer is complete).
    """

    ending = "response.completed"
    """What a stream must end with (one that does not is an error naming this)."""

    __slots__ = (
        "_calls",
        "_part",
        "_redact",
        "_settled",
        "_streamed",
        "_thinking_open",
        "_usage",
        "_used_tools",
        "done",
        "finished",
    )

    def __init__(self, redact: Callable[[str], str] = str) -> None:
        self._redact = redact
        self._usage: Usage | None = None
        self._calls: dict[str, _Call] = {}  # by item id
        self._streamed: dict[str, int] = {}  # characters streamed per item id (text or thinking)
        self._settled: set[str] = set()  # items whose output_item.done was read
        self._part: tuple[Any, Any] | None = None  # the reasoning part thinking last streamed from
        self._thinking_open = False  # thinking streamed since the last signature
        self._used_tools = False
        self.done = False
        self.finished = False

    def feed_all(self, events: Iterable[SSEEvent], into: list[ChatChunk]) -> ModelError | None:
        """Append the chunks of ``events`` to ``into``, stopping at the terminal event.

        Returns:
            The error that stopped it (``into`` holds the chunks before it), else ``None``:
            :class:`~rxagent.model.errors.MalformedStreamError` for an event that is not JSON or not of an
            event's shape (naming the line, the text and the place), a
            :class:`~rxagent.model.errors.ModelError` for ``error`` and ``response.failed``.
        """
        streamed = self._streamed
        try:
            for event in events:
                data = event.data
                try:
                    wire = _decode_event(data)
                except msgspec.DecodeError:
                    wire = None  # read again by `_feed`, outside this block (see `_reread`)
                else:
                    delta = wire.delta
                    if wire.type == "response.output_text.delta" and type(delta) is str:
                        # A text delta, as `_text` takes it, inline: this runs once per streamed token,
                        # and four calls less per token are a fifth of the parser's time.
                        item_id = wire.item_id
                        if type(item_id) is str:
                            streamed[item_id] = streamed.get(item_id, 0) + len(delta)
                        if delta:
                            into.append(delta_chunk(delta, "", (), None, data))
                        continue
                self._feed(event, wire, into)
                if self.done:
                    break
        except ModelError as error:
            return error
        return None

    def feed_tail(self, tail: SSEEvent) -> ChatChunk | None:
        """The chunk of the event the body ended in without its closing blank line.

        An event that settles several items at once (a ``response.completed`` whose items never streamed)
        gives them as one chunk, which the fold reads as it would read them one by one.

        Raises:
            MalformedStreamError: the event is cut off (not JSON).
            ModelError: the event reports an error, or it settles more than one signed reasoning item,
                which one chunk cannot carry.
        """
        chunks: list[ChatChunk] = []
        try:
            wire = _decode_event(tail.data)
        except msgspec.DecodeError:
            wire = None  # read again by `_feed`, outside this block
        self._feed(tail, wire, chunks)
        if len(chunks) <= 1:
            return chunks[0] if chunks else None
        return _merged(chunks, tail)

    def usage_chunk(self) -> ChatChunk | None:
        """The usage of ``response.completed``, as a chunk of its own (``None``: the server sent none)."""
        return ChatChunk(usage=self._usage) if self._usage is not None else None

    def whole(self, response: dict[str, Any]) -> list[ChatChunk]:
        """The chunks of a whole response object, read as the one terminal event of a stream: its items,
        the finish reason, then the usage.

        Raises:
            msgspec.ValidationError: the object is not of a response's shape.
            ModelError: the response failed.
        """
        chunks: list[ChatChunk] = []
        wire = msgspec.convert(response, _Response)
        self._finish("response.completed", wire, partial(_itself, response), response, chunks)
        usage = self.usage_chunk()
        if usage is not None:
            chunks.append(usage)
        return chunks

    # ---- one event ------------------------------------------------------------------------------------

    def _feed(self, event: SSEEvent, wire: _Event | None, into: list[ChatChunk]) -> None:
        """The chunks of ``event``, which msgspec decoded as ``wire`` (``None``: it refused it)."""
        data = event.data
        if wire is None:
            self._reread(event, into)
            return
        try:
            self._take(wire, data, event.event, into)
            return
        except SHAPE_ERRORS as error:
            problem = f"unexpected event shape ({type(error).__name__}: {self._redact(str(error))})"
        raise MalformedStreamError(problem, line=event.line, data=self._redact(data))

    def _reread(self, event: SSEEvent, into: list[ChatChunk]) -> None:
        # What msgspec refused, read the slow way: the standard library takes a lone surrogate escape,
        # and otherwise says what is wrong. Raised outside the `except` blocks: a decoder's exception may
        # hold the server's text (which may quote the API key) and would ride along as __context__.
        data = event.data
        try:
            decoded = loads(data)
        except ValueError as error:
            if not data.strip() or data == "[DONE]":
                return  # an event without content; a [DONE] some servers add after the terminal event
            problem = f"malformed JSON in the event stream ({error})"
            if event.event == "error":  # an `error` event whose data is plain text: raised below
                problem = None
        else:
            if not is_object(decoded):
                problem = "stream data is not a JSON object"
            else:
                try:
                    self._take(msgspec.convert(decoded, _Event), decoded, event.event, into)
                    return
                except msgspec.ValidationError as error:
                    problem = f"unexpected event shape ({self._redact(str(error))})"
                except SHAPE_ERRORS as error:
                    problem = f"unexpected event shape ({type(error).__name__}: {self._redact(str(error))})"
        if problem is None:
            raise _provider_error(None, data, self._redact)
        raise MalformedStreamError(problem, line=event.line, data=self._redact(data))

    def _take(self, wire: _Event, raw: str | dict[str, Any], sse_type: str, into: list[ChatChunk]) -> None:
        """The chunks of one decoded event; ``raw`` is its JSON text, or the object read the slow way."""
        kind = wire.type
        if kind is None:
            if wire.error is not None:  # an `{"error": {...}}` object sent instead of an event
                raise _error_of(wire.error, self._redact)
            kind = sse_type  # a server that names the event only on its `event:` line
        # The deltas first, in the order of how often they come: this runs once per streamed token.
        if kind == "response.output_text.delta":
            self._text(wire, raw, into)
        elif kind == "response.function_call_arguments.delta":
            call = self._call_of(wire)
            delta = _string(wire.delta, "delta")
            call.streamed += len(delta)
            if delta:
                into.append(_call_chunk(call, None, delta, raw))
        elif kind == "response.reasoning_summary_text.delta":
            self._thinking(wire, wire.summary_index, raw, into)
        elif kind == "response.reasoning_text.delta":
            self._thinking(wire, wire.content_index, raw, into)
        elif kind == "response.refusal.delta":
            self._text(wire, raw, into)
        elif kind == "response.output_item.added":
            self._item_added(wire, raw, into)
        elif kind == "response.output_item.done":
            item = wire.item
            if item is None:
                raise KeyError("`item` is missing")
            index = wire.output_index if type(wire.output_index) is int else None
            self._settle(item, index, partial(_member, raw, "item"), raw, into)
        elif kind == "response.function_call_arguments.done":
            call = self._call_of(wire)
            self._rest_of_arguments(call, wire.arguments, raw, into)
        elif kind in _TERMINAL:
            self._finish(kind, wire.response, partial(_member, raw, "response"), raw, into)
        elif kind == "error":
            if wire.error is not None:
                raise _error_of(wire.error, self._redact)
            raise _provider_error(wire.code, wire.message, self._redact)

    def _text(self, wire: _Event, raw: str | dict[str, Any], into: list[ChatChunk]) -> None:
        delta = _string(wire.delta, "delta")
        item_id = wire.item_id
        if type(item_id) is str:
            self._streamed[item_id] = self._streamed.get(item_id, 0) + len(delta)
        if delta:
            into.append(delta_chunk(delta, "", (), None, raw))

    def _thinking(self, wire: _Event, part: Any, raw: str | dict[str, Any], into: list[ChatChunk]) -> None:
        delta = _string(wire.delta, "delta")
        item_id = wire.item_id
        own = len(delta)  # what the item's own text (as `output_item.done` repeats it) grows by
        key = (item_id, part)
        if key != self._part:
            # A new part of a summary, or a new reasoning item: set apart from the thinking before it.
            same_item = self._part is not None and self._part[0] == item_id
            self._part = key
            if self._thinking_open:
                delta = _PART_BREAK + delta
                if same_item:
                    own += len(_PART_BREAK)  # the item's summary parts are joined by this break too
        if type(item_id) is str:
            self._streamed[item_id] = self._streamed.get(item_id, 0) + own
        if delta:
            self._thinking_open = True
            into.append(delta_chunk("", delta, (), None, raw))

    def _call_of(self, wire: _Event) -> _Call:
        item_id = wire.item_id
        call = self._calls.get(item_id) if type(item_id) is str else None
        if call is not None:
            return call
        index = wire.output_index
        if type(index) is not int:
            raise KeyError(f"arguments for a function call that was never announced (item {item_id!r})")
        # A fragment before its `output_item.added`: the call goes by its place until its id comes.
        call = _Call(index, None)
        if type(item_id) is str:
            self._calls[item_id] = call
        return call

    def _item_added(self, wire: _Event, raw: str | dict[str, Any], into: list[ChatChunk]) -> None:
        item = wire.item
        if item is None:
            raise KeyError("`item` is missing")
        if item.type != "function_call":
            return
        self._used_tools = True
        index = wire.output_index if type(wire.output_index) is int else len(self._calls)
        call_id = item.call_id if isinstance(item.call_id, str) and item.call_id else None
        call = self._calls.get(item.id) if isinstance(item.id, str) else None
        if call is None:
            call = _Call(index, call_id)
            if isinstance(item.id, str):
                self._calls[item.id] = call
        elif call.call_id is None:
            call.call_id = call_id
        name = item.name if isinstance(item.name, str) and item.name else None
        arguments = item.arguments if isinstance(item.arguments, str) else ""
        call.streamed += len(arguments)
        into.append(_call_chunk(call, name, arguments, raw))

    def _rest_of_arguments(
        self, call: _Call, arguments: Any, raw: str | dict[str, Any], into: list[ChatChunk]
    ) -> None:
        """What the fragments of ``call`` left out of its whole ``arguments`` (all of them, from a server
        that sends no fragments)."""
        if not isinstance(arguments, str) or len(arguments) <= call.streamed:
            return
        rest = arguments[call.streamed :]
        call.streamed = len(arguments)
        into.append(_call_chunk(call, None, rest, raw))

    def _settle(
        self,
        item: _Item,
        index: int | None,
        verbatim: Callable[[], Any],
        raw: str | dict[str, Any],
        into: list[ChatChunk],
    ) -> None:
        """A finished output item: what its deltas left out, and for a reasoning item its signature.

        Args:
            item: the item as decoded.
            index: its place in the response's output, if known.
            verbatim: the item's JSON object as the server sent it (read only for a reasoning item).
            raw: the JSON of the event that carried it.
            into: where the chunks go.
        """
        item_id = item.id if isinstance(item.id, str) else None
        if item_id is not None:
            if item_id in self._settled:
                return
            self._settled.add(item_id)
        kind = item.type
        if kind == "function_call":
            call = self._calls.get(item_id) if item_id is not None else None
            if call is None:  # never announced: the whole call arrives here
                wire = _Event(type="response.output_item.added", item=item, output_index=index)
                self._item_added(wire, raw, into)
                call = self._calls.get(item_id) if item_id is not None else None
                if call is None:
                    return  # no id: `_item_added` sent it whole
            self._used_tools = True
            self._rest_of_arguments(call, item.arguments, raw, into)
        elif kind == "message":
            text = "".join(_part_text(part) for part in item.content or ())
            self._rest_of(item_id, text, False, raw, into)
        elif kind == "reasoning":
            parts = item.summary or item.content or ()
            self._rest_of(item_id, _PART_BREAK.join(_part_text(part) for part in parts), True, raw, into)
            encrypted = item.encrypted_content
            if isinstance(encrypted, str) and encrypted:
                signature = dumps(verbatim()).decode()
                self._thinking_open = False
                self._part = None
                into.append(ChatChunk("", "", (), None, None, lazy_raw(raw), signature))

    def _rest_of(
        self,
        item_id: str | None,
        whole: str,
        thinking: bool,
        raw: str | dict[str, Any],
        into: list[ChatChunk],
    ) -> None:
        streamed = self._streamed.get(item_id, 0) if item_id is not None else 0
        if len(whole) <= streamed:
            return
        rest = whole[streamed:]
        if item_id is not None:
            self._streamed[item_id] = len(whole)
        if thinking:
            if not streamed and self._thinking_open:
                rest = _PART_BREAK + rest
            self._thinking_open = True
            into.append(ChatChunk("", rest, (), None, None, lazy_raw(raw)))
        else:
            into.append(ChatChunk(rest, "", (), None, None, lazy_raw(raw)))

    def _finish(
        self,
        kind: str,
        response: _Response | None,
        verbatim: Callable[[], Any],
        raw: str | dict[str, Any],
        into: list[ChatChunk],
    ) -> None:
        """A terminal event (or a whole response): items not yet settled, then the finish reason."""
        if response is None:
            response = _Response()
        if kind == "response.failed" or response.status == "failed":
            raise _error_of(response.error, self._redact)
        if response.usage is not None:
            self._usage = _usage_of(response.usage)
        unseen = not (self._settled or self._streamed or self._calls)
        for position, item in enumerate(response.output or ()):
            # Items the stream did not finish (a server that sends only the whole response at the end).
            if isinstance(item.id, str) or unseen:
                self._settle(item, position, partial(_output_item, verbatim, position), raw, into)
        reason: FinishReason = "tool_calls" if self._used_tools else "stop"
        if kind == "response.incomplete" or response.status == "incomplete":
            details = response.incomplete_details
            cause = details.reason if details is not None else None
            reason = _INCOMPLETE_REASONS.get(cause, "length") if isinstance(cause, str) else "length"
        self.done = self.finished = True
        into.append(ChatChunk("", "", (), None, reason, lazy_raw(raw)))


def _merged(chunks: list[ChatChunk], event: SSEEvent) -> ChatChunk:
    """``chunks`` as one chunk that folds into the same message: the fold puts thinking, text and tool
    calls in blocks of their own kinds, so only the thinking must stay before its signature."""
    signed = [chunk for chunk in chunks if chunk.thinking_signature is not None]
    last = chunks.index(signed[-1]) if signed else -1
    if len(signed) > 1 or any(chunk.thinking for chunk in chunks[last + 1 :] if last >= 0):
        raise ModelError(
            f"the stream's last event (line {event.line}), which ends without its blank line, settles "
            "several reasoning items at once; send it with its blank line"
        )
    return ChatChunk(
        "".join(chunk.text for chunk in chunks),
        "".join(chunk.thinking for chunk in chunks),
        tuple(delta for chunk in chunks for delta in chunk.tool_calls),
        None,
        next((chunk.finish_reason for chunk in chunks if chunk.finish_reason is not None), None),
        chunks[-1].raw,
        signed[0].thinking_signature if signed else None,
    )


def _itself(value: dict[str, Any]) -> dict[str, Any]:
    return value


def _part_text(part: _Part) -> str:
    if part.type == "refusal":
        return part.refusal if isinstance(part.refusal, str) else ""
    text = part.text
    if text is None:
        return ""
    return _string(text, "text")


def _member(raw: str | dict[str, Any], name: str) -> Any:
    """``name`` of the event whose JSON is ``raw``, as the server sent it (decoded whole, only when a
    reasoning item's signature needs it)."""
    decoded = loads(raw) if isinstance(raw, str) else raw
    if not is_object(decoded):
        raise TypeError("the event is not a JSON object")
    return decoded[name]


def _output_item(response: Callable[[], Any], position: int) -> Any:
    return response()["output"][position]


def chunks_from_response(obj: Any, redact: Callable[[str], str] = str) -> list[ChatChunk]:
    """The chunks of a whole (non-streamed) response: its items, the finish reason, then its usage.

    Raises:
        MalformedStreamError: the body is not a response (the message says what is wrong, and where).
        ModelError: the body is an ``{"error": …}`` object or a failed response.
    """
    if not is_object(obj):
        raise MalformedStreamError("the response body is not a JSON object", data=redact(str(obj)[:200]))
    if obj.get("object") != "response" and obj.get("error") and "output" not in obj:
        raise _error_of(obj["error"], redact)
    try:
        return ResponsesParser(redact).whole(obj)
    except msgspec.ValidationError as error:
        problem = f"unexpected response shape ({redact(str(error))})"
    except SHAPE_ERRORS as error:
        problem = f"unexpected response shape ({type(error).__name__}: {redact(str(error))})"
    raise MalformedStreamError(problem, data=redact(dumps(obj)[:200].decode("utf-8", "replace")))
