"""The OpenAI chat-completions wire format: request bodies out, chunks in, and compatible servers' quirks.

Two layers, kept apart so each stays small:

* **Encoding** (:class:`MessageWireCache`, :func:`encode_body`): a :class:`~rxagent.messages.Msg` becomes
  one or more wire messages. Messages are frozen, so each message's encoded bytes are computed once and
  reused by every later request of the conversation; and the encoded messages of each conversation's last
  request are kept, so a request that continues it encodes and looks up only what it appends, and joins
  the rest in C: the Python work of a request is proportional to what is new in it. A user message with
  images or documents sends its content as an array of parts (:func:`media_part` maps each one).
* **Decoding** (:class:`StreamParser`, :func:`chunks_from_completion`): each event's JSON is decoded by
  msgspec straight into typed structs holding only the fields rxagent reads (the rest is skipped unbuilt),
  and a :class:`~rxagent.model.types.ChatChunk` is built from them directly (this runs once per streamed
  token). ``ChatChunk.raw`` decodes the whole object only when someone reads it. Provider quirks are small
  functions of their own, called only when the field they fix is present: ``reasoning_content``/
  ``reasoning`` deltas, tool-call fragments without ``index``, ids sent as ``""``, ids and names repeated
  on every fragment, arguments sent as a JSON object, usage on its own final chunk or on every chunk,
  finish-reason spellings, and ``{"error": …}`` objects inside the stream.

Fields whose type varies between servers are decoded as ``Any`` and checked where used (``isinstance`` on
strings and numbers); containers are typed, so one of the wrong type fails with msgspec's
``ValidationError``, which names its place (``$.choices[0].delta``). Text msgspec refuses is read again by
the standard library (which accepts a lone surrogate escape) to tell bad JSON from a bad shape; either
becomes a :class:`~rxagent.model.errors.MalformedStreamError`, so nothing untyped leaves this module.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeAlias

import msgspec
from pydantic import JsonValue

from rxagent.messages import (
    ConversationMemo,
    DocumentBlock,
    ImageBlock,
    MessageMemo,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.model._json import SHAPE_ERRORS, call_fragment, delta_chunk, dumps, is_object, reread
from rxagent.model.errors import MalformedStreamError, ModelError, UnsupportedContentError
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
    "EncodedTools",
    "MessageWireCache",
    "StreamParser",
    "WireDict",
    "arguments_text",
    "call_arguments",
    "call_id_of",
    "chunks_from_completion",
    "document_text",
    "dumps",
    "encode_body",
    "finish_reason_of",
    "join_body",
    "media_part",
    "message_to_wire",
    "result_text",
    "stream_error_of",
    "text_of",
    "thinking_of",
    "tool_to_wire",
    "usage_of",
]

WireDict: TypeAlias = dict[str, JsonValue]
"""One JSON object as sent to the server."""


# ---- encoding: Msg → wire ----------------------------------------------------------------------------


def message_to_wire(msg: Msg, *, send_reasoning: bool = False) -> list[WireDict]:
    """The wire messages for ``msg``: usually one; a tool message gives one ``role: "tool"`` per result.

    Args:
        msg: the message.
        send_reasoning: send thinking blocks back as ``reasoning_content`` on assistant messages (only
            for providers that accept it; most reject or ignore it).

    Raises:
        UnsupportedContentError: an image or a document this wire format cannot carry (see
            :func:`media_part`), or one outside a user message.
    """
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[WireDict] = []
    wire: list[WireDict] = []
    media = False
    for block in msg.content:
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ToolResultBlock):
            wire.append(_tool_result_to_wire(block))
        elif isinstance(block, ToolUseBlock):
            calls.append(_tool_call_to_wire(block))
        elif isinstance(block, ThinkingBlock):
            thinking.append(block.thinking)
        else:
            media = True
    if msg.role == "tool":
        return wire
    if media:
        if msg.role != "user":
            raise UnsupportedContentError.outside_user_message("chat-completions", msg.role)
        parts: list[JsonValue] = [
            {"type": "text", "text": block.text} if isinstance(block, TextBlock) else media_part(block)
            for block in msg.content
            if isinstance(block, TextBlock | ImageBlock | DocumentBlock)
        ]
        with_media: WireDict = {"role": "user", "content": parts}
        if msg.name:
            with_media["name"] = msg.name
        return [with_media]
    text = "".join(texts)
    if msg.role == "assistant":
        # "" rather than null next to tool calls: OpenAI takes either, llama.cpp's server rejects null (500).
        message: WireDict = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = list[JsonValue](calls)
        if send_reasoning and thinking:
            message["reasoning_content"] = "".join(thinking)
    else:
        message = {"role": msg.role, "content": text}
    if msg.name:
        message["name"] = msg.name
    # Results first: a tool answer must directly follow the assistant message that called the tool.
    wire.append(message)
    return wire


def media_part(block: ImageBlock | DocumentBlock) -> WireDict:
    """The chat-completions content part for an image or a document (OpenAI's documented shapes).

    ============================  ==================================================================
    block                         part
    ============================  ==================================================================
    image, inline                 ``{"type": "image_url", "image_url": {"url": "data:image/png;base64,…"}}``
    image, by URL                 ``{"type": "image_url", "image_url": {"url": "https://…"}}``
    PDF, inline                   ``{"type": "file", "file": {"filename": "a.pdf", "file_data": DATA_URL}}``
                                  (``DATA_URL``: ``"data:application/pdf;base64,…"``)
    text document                 ``{"type": "text", "text": "name:\n…"}`` (the format has no text file part)
    ============================  ==================================================================

    An image's ``detail`` is sent when it is not ``auto`` (the API's default). A document without a name
    is sent as ``document.pdf`` (the API wants a file name with ``file_data``).

    Raises:
        UnsupportedContentError: a PDF by URL (chat-completions takes a file's bytes or an uploaded
            file's id, not a URL): pass its bytes (``DocumentBlock.from_bytes``).
    """
    if isinstance(block, ImageBlock):
        image: WireDict = {"url": block.url if block.url is not None else block.data_url()}
        if block.detail != "auto":
            image["detail"] = block.detail
        return {"type": "image_url", "image_url": image}
    if block.media_type == "text/plain":
        return {"type": "text", "text": document_text(block)}
    if block.url is not None:
        raise UnsupportedContentError(
            "the chat-completions format takes a PDF's bytes, not its URL: download it and pass "
            "DocumentBlock.from_bytes(...)"
        )
    return {"type": "file", "file": {"filename": block.name or "document.pdf", "file_data": block.data_url()}}


def document_text(block: DocumentBlock) -> str:
    """A text document as the text part it is sent as where a wire format has no text file of its own:
    its name, a colon and a line break, then its text (the text alone when it has no name).

    Example:
        >>> document_text(DocumentBlock.from_bytes(b"two\\nlines", "text/plain", name="notes.txt"))
        'notes.txt:\\ntwo\\nlines'
    """
    text = (block.data or b"").decode()
    return f"{block.name}:\n{text}" if block.name else text


def call_arguments(block: ToolUseBlock) -> str:
    """The argument text a tool call is sent back with: its parsed input as JSON, or, for arguments that
    never parsed, the text exactly as the model wrote it (so the model sees its mistake)."""
    if block.state == "complete" and block.input is not None:
        return dumps(block.input).decode()
    return block.raw_arguments


def result_text(block: ToolResultBlock) -> str:
    """The text a tool result is sent back as; a result with no text says how the call ended."""
    text = block.text
    if block.status != "ok" and not text:
        text = f"(tool call {block.status})"
    return text


def _tool_call_to_wire(block: ToolUseBlock) -> WireDict:
    return {
        "id": block.id,
        "type": "function",
        "function": {"name": block.name, "arguments": call_arguments(block)},
    }


def _tool_result_to_wire(block: ToolResultBlock) -> WireDict:
    return {"role": "tool", "tool_call_id": block.tool_use_id, "content": result_text(block)}


class MessageWireCache:
    """Encoded wire bytes per message object, computed once and dropped when the message is collected.

    Keyed by ``id(msg)`` with a weak reference whose callback evicts the entry: the cache never keeps a
    message alive and never stores anything on the message itself (pydantic would compare it in ``==``).

    Args:
        send_reasoning: see :func:`message_to_wire`.
        to_wire: the wire objects of one message in another wire format (the Responses API's input
            items); ``None``: chat-completions messages (:func:`message_to_wire`).
    """

    __slots__ = ("_conversations", "_entries", "_send_reasoning", "_to_wire")

    def __init__(
        self, *, send_reasoning: bool = False, to_wire: Callable[[Msg], Iterable[WireDict]] | None = None
    ) -> None:
        self._send_reasoning = send_reasoning
        self._to_wire = to_wire
        self._entries: MessageMemo[bytes] = MessageMemo()
        # Per conversation, the encoded messages of its last request, one entry per message.
        self._conversations: ConversationMemo[tuple[bytes, ...]] = ConversationMemo()

    def __len__(self) -> int:
        return len(self._entries)

    def encoded(self, msg: Msg) -> bytes:
        """The comma-joined JSON of ``msg``'s wire messages (empty for a message that sends nothing)."""
        return self._entries.get(msg, self._encode)

    def encoded_messages(self, messages: Sequence[Msg]) -> tuple[bytes, ...]:
        """:meth:`encoded` for each of a request's ``messages``, in order (for :func:`encode_body`).

        A request that continues a conversation seen before (see
        :class:`~rxagent.messages.ConversationMemo`) looks up and encodes only what it appends; the rest
        is the last request's, copied in C.
        """
        shared, recorded = self._conversations.resume(messages)
        if recorded is not None and shared == len(messages) == len(recorded):
            return recorded  # the same request again (a retry, a re-subscription)
        parts = (*(recorded or ())[:shared], *self._entries.get_all(messages[shared:], self._encode))
        self._conversations.record(messages, parts)
        return parts

    def _encode(self, msg: Msg) -> bytes:
        if self._to_wire is not None:
            return b",".join(dumps(item) for item in self._to_wire(msg))
        return b",".join(dumps(m) for m in message_to_wire(msg, send_reasoning=self._send_reasoning))


def tool_to_wire(tool: ToolSchema) -> WireDict:
    """A tool schema as an OpenAI ``tools`` entry."""
    function: WireDict = {
        "name": tool.name,
        "description": tool.description,
        "parameters": dict(tool.parameters),
    }
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


class EncodedTools:
    """The JSON array of a request's tools, kept while the same tuple of tools comes back (a run sends the
    same tuple with every request, so it is encoded once per run).

    Args:
        to_wire: one tool's entry (:func:`tool_to_wire` for chat completions).
    """

    __slots__ = ("_key", "_to_wire", "_wire")

    def __init__(self, to_wire: Callable[[ToolSchema], WireDict] = tool_to_wire) -> None:
        self._to_wire = to_wire
        self._key: tuple[ToolSchema, ...] | None = None  # the tuple whose encoding is kept
        self._wire = b""

    def encoded(self, tools: tuple[ToolSchema, ...]) -> bytes | None:
        """The encoded ``tools`` array, or ``None`` for no tools."""
        if not tools:
            return None
        if tools is not self._key:
            self._wire = dumps([self._to_wire(tool) for tool in tools])
            self._key = tools
        return self._wire


def _options(request: ChatRequest) -> WireDict:
    options: WireDict = {"stream": request.stream}
    if request.stream:
        options["stream_options"] = {"include_usage": True}
    if request.temperature is not None:
        options["temperature"] = request.temperature
    if request.top_p is not None:
        options["top_p"] = request.top_p
    if request.max_tokens is not None:
        options["max_tokens"] = request.max_tokens
    if request.stop:
        options["stop"] = list[JsonValue](request.stop)
    if request.seed is not None:
        options["seed"] = request.seed
    choice = request.tool_choice
    if isinstance(choice, ForceTool):
        options["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
    elif choice is not None:
        options["tool_choice"] = choice
    if request.parallel_tool_calls is not None:
        options["parallel_tool_calls"] = request.parallel_tool_calls
    response_format = request.response_format
    if isinstance(response_format, JsonSchemaFormat):
        options["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": response_format.name,
                "schema": dict(response_format.schema),
                "strict": response_format.strict,
            },
        }
    elif response_format is not None:
        options["response_format"] = {"type": response_format}
    options.update(request.extra)
    return options


def encode_body(model: str, request: ChatRequest, messages: Iterable[bytes], tools: bytes | None) -> bytes:
    """The request body: ``model``, the messages' cached bytes, the tools' bytes, then the options.

    Args:
        model: model name.
        request: the request (its options and ``extra``; its messages come pre-encoded).
        messages: each message's encoded bytes (:meth:`MessageWireCache.encoded`), in order.
        tools: the encoded ``tools`` array, or ``None`` for no tools.
    """
    return join_body({"model": model}, "messages", messages, tools, _options(request))


def join_body(
    head: WireDict, key: str, messages: Iterable[bytes], tools: bytes | None, options: WireDict
) -> bytes:
    """A request body: the ``head`` fields, ``key`` holding the messages' cached bytes as an array, the
    tools' bytes as ``tools``, then the ``options`` (a request's ``extra`` among them, last).

    Args:
        head: the fields that come first (``model``, and whatever else a format puts before the messages).
        key: the array of the messages (``"messages"``, ``"input"``).
        messages: each message's encoded bytes (comma-joined wire objects; empty for none), in order.
        tools: the encoded ``tools`` array, or ``None`` for no tools.
        options: the fields that come last; one named like a field before it replaces that field.
    """
    items = list(filter(None, messages))  # a message that sends nothing has no part
    if key in options or not options.keys().isdisjoint(head):
        # `extra` replaces a field we would splice in: fall back to one plain dictionary.
        body: dict[str, object] = {**head, key: json.loads(b"[" + b",".join(items) + b"]")}
        if tools is not None:
            body["tools"] = json.loads(tools)
        body.update(options)
        return dumps(body)
    opening = (dumps(head)[:-1] + b"," if head else b"{") + dumps(key) + b":["
    tail = [b"]"]
    if tools is not None and "tools" not in options:
        tail += [b',"tools":', tools]
    tail += [b",", dumps(options)[1:]] if options else [b"}"]
    # One join builds the body: the head and the tail ride on the first and last messages, so the history's
    # bytes are copied once (joining the messages, then the body, copied them twice: ten times slower for
    # a large body, whose second buffer the allocator maps afresh).
    if not items:
        return opening + b"".join(tail)
    items[0] = opening + items[0]
    items[-1] += b"".join(tail)
    return b",".join(items)


# ---- decoding: wire → ChatChunk ----------------------------------------------------------------------
#
# The shapes below are what rxagent reads of a chunk (or of a whole completion: a choice's `message` has
# the fields of a `delta`). msgspec decodes each event's JSON straight into them, skipping every field not
# named here (ids, model names, logprobs, …) without building it. Fields whose type varies between
# servers are `Any` and checked where used, as the quirks need (an `index` that is not a number, ids
# sent as "", arguments sent as an object, a finish reason we do not know); containers are typed, so a
# container of the wrong type is a ValidationError naming its place (`$.choices[0].delta`).


class _Wire(msgspec.Struct, forbid_unknown_fields=False, omit_defaults=True, gc=False):
    """A decoded JSON object of the wire format. Unknown fields are skipped; an absent field has its
    default (``omit_defaults`` keeps it so if one is ever encoded again, for a log say). Decoded JSON
    cannot hold a reference cycle, so the collector need not track these (``gc=False``)."""


class _Function(_Wire):
    name: Any = None
    arguments: Any = ""  # absent in a fragment that names the call only: the empty text, no call to make it


class _ToolCall(_Wire):
    index: Any = None
    id: Any = None
    function: _Function | None = None


class _Part(_Wire):
    """One part of a ``content`` array (``{"type": "text", "text": …}``; other types are skipped)."""

    type: Any = None
    text: Any = None


class _Delta(_Wire):
    """A streamed ``delta``, or a whole completion's ``message``."""

    content: str | list[_Part] | None = ""  # absent in a tool call's fragments: no call to read it
    reasoning_content: Any = None
    reasoning: Any = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(_Wire):
    index: Any = None
    delta: _Delta | None = None
    message: _Delta | None = None
    finish_reason: Any = None


class _Details(_Wire):
    cached_tokens: Any = None
    reasoning_tokens: Any = None


class _Usage(_Wire):
    prompt_tokens: Any = None
    completion_tokens: Any = None
    input_tokens: Any = None
    output_tokens: Any = None
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: _Details | None = None


class _Chunk(_Wire):
    """A streamed chunk or a whole completion, or an ``{"error": …}`` object sent instead of one."""

    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


_FINISH_REASONS: Mapping[str, FinishReason] = {
    "stop": "stop",
    "tool_calls": "tool_calls",
    "length": "length",
    "content_filter": "content_filter",
    "error": "error",
    # Older or other spellings seen from compatible servers.
    "function_call": "tool_calls",
    "tool_use": "tool_calls",
    "eos": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
}


def finish_reason_of(value: object) -> FinishReason:
    """Our :data:`FinishReason` for a provider's; unknown ones become ``"stop"`` (the raw chunk keeps it)."""
    return _FINISH_REASONS.get(value, "stop") if isinstance(value, str) else "stop"


def thinking_of(delta: _Delta) -> str:
    """Reasoning text of a delta or message: ``reasoning_content`` (DeepSeek, vLLM) or ``reasoning``."""
    value = delta.reasoning_content or delta.reasoning
    return value if isinstance(value, str) else ""


def text_of(content: str | list[_Part] | None) -> str:
    """Text of a ``content`` field: a string, ``null``, or a list of ``{"type": "text", "text": …}`` parts.

    Raises:
        TypeError: a text part without a string ``text``.
    """
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    texts: list[str] = []
    for part in content:
        if part.type == "text":
            if not isinstance(part.text, str):
                raise TypeError("a text part of `content` has no string `text`")
            texts.append(part.text)
    return "".join(texts)


def arguments_text(value: Any) -> str:
    """Argument text of a tool-call fragment; a JSON object sent instead of a string is re-encoded."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False)


def call_id_of(value: Any) -> str | None:
    """A tool-call id, with ``""`` (sent by some servers on every fragment) treated as absent."""
    return value if isinstance(value, str) and value else None


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def usage_of(raw: _Usage) -> Usage | None:
    """Usage from an OpenAI ``usage`` object (also accepting ``input_tokens``/``output_tokens``);
    ``None`` for an object that counts nothing at all (``"usage": {}``)."""
    prompt = raw.prompt_tokens if raw.prompt_tokens is not None else raw.input_tokens
    completion = raw.completion_tokens if raw.completion_tokens is not None else raw.output_tokens
    prompt_details = raw.prompt_tokens_details
    completion_details = raw.completion_tokens_details
    if prompt is None and completion is None and prompt_details is None and completion_details is None:
        return None
    return Usage(
        input_tokens=_count(prompt),
        output_tokens=_count(completion),
        cache_read_tokens=_count(prompt_details.cached_tokens) if prompt_details is not None else 0,
        reasoning_tokens=_count(completion_details.reasoning_tokens) if completion_details is not None else 0,
    )


def stream_error_of(error: Any, redact: Callable[[str], str]) -> ModelError:
    """The error for an ``{"error": {...}}`` object sent by the server instead of a chunk."""
    message = error.get("message") if is_object(error) else error
    text = message if isinstance(message, str) else json.dumps(error, ensure_ascii=False, default=str)
    return ModelError(f"the model server reported an error: {redact(text)}")


class StreamParser:
    """Turns one streamed response's SSE events into chunks. One parser per attempt.

    Usage is held back and emitted once, by :meth:`usage_chunk` at the end: OpenAI sends it on a final
    chunk with empty ``choices``, but some servers repeat a running total on every chunk, and summing
    those would count tokens many times over.

    Attributes:
        done: ``[DONE]`` arrived.
        finished: a finish reason arrived (the answer is complete even if ``[DONE]`` never comes).
    """

    __slots__ = ("_names", "_redact", "_usage", "done", "finished")

    ending = "[DONE] or a finish reason"
    """What a stream must end with (one that does not is an error naming this)."""

    def __init__(self, redact: Callable[[str], str] = str) -> None:
        self._redact = redact
        self._usage: Usage | None = None
        self._names: dict[str | int, str] = {}
        self.done = False
        self.finished = False

    def feed(self, event: SSEEvent) -> ChatChunk | None:
        """The chunk carried by ``event``, or ``None`` for events that carry no delta.

        Raises:
            MalformedStreamError: the data is not JSON, not an object, or not of a chunk's shape (the
                message says which, and where: ``$.choices[0].delta``).
            ModelError: the data is an ``{"error": …}`` object.
        """
        chunks: list[ChatChunk] = []
        problem = self.feed_all((event,), chunks)
        if problem is not None:
            raise problem
        return chunks[0] if chunks else None

    def feed_all(self, events: Iterable[SSEEvent], into: list[ChatChunk]) -> ModelError | None:
        """Append the chunks of ``events`` to ``into``, stopping at ``[DONE]``.

        The one loop over events, :meth:`feed` included: it runs once per streamed token, and a call per
        event less is a tenth of the parser's time.

        Returns:
            The error that stopped it at a bad event (``into`` holds the chunks before it), else ``None``:
            the caller passes those chunks on, then raises it.
        """
        chunk_of, append = self._chunk, into.append
        try:
            for event in events:
                data = event.data
                if data == "[DONE]":
                    self.done = True
                    break
                if event.event != "message":
                    if event.event == "error":
                        raise ModelError(f"the model server reported an error: {self._redact(data)}")
                    continue
                try:
                    wire = _decode_chunk(data)
                except msgspec.DecodeError:
                    wire = None  # read again below, outside this block (see `_reread`)
                if wire is None:
                    chunk = self._reread(event)
                else:
                    problem = None
                    try:
                        chunk = chunk_of(wire, data)
                    except SHAPE_ERRORS as error:
                        problem = (
                            f"unexpected chunk shape ({type(error).__name__}: {self._redact(str(error))})"
                        )
                        chunk = None
                    if problem is not None:
                        # Raised outside the `except` block: the error may quote the server's text.
                        raise MalformedStreamError(problem, line=event.line, data=self._redact(data))
                if chunk is not None:
                    append(chunk)
        except ModelError as error:
            return error
        return None

    def feed_tail(self, tail: SSEEvent) -> ChatChunk | None:
        """The chunk of the event the body ended in without its closing blank line (``[DONE]`` too).

        Raises:
            MalformedStreamError: the event is cut off (not JSON).
            ModelError: the event is an ``{"error": …}`` object.
        """
        return self.feed(tail)

    def _reread(self, event: SSEEvent) -> ChatChunk | None:
        return reread(
            event,
            lambda decoded: self._chunk(msgspec.convert(decoded, _Chunk), decoded),
            self._redact,
            "chunk",
        )

    def usage_chunk(self) -> ChatChunk | None:
        """The final usage as a chunk of its own, if the server sent any."""
        return ChatChunk(usage=self._usage) if self._usage is not None else None

    def _chunk(self, wire: _Chunk, raw: str | dict[str, Any]) -> ChatChunk | None:
        """The chunk of ``wire``; ``raw`` is its JSON text, or the object when it was read the slow way."""
        # Runs once per streamed token: plain attribute reads, type checks only where a value is present.
        if wire.usage is not None:
            self._usage = usage_of(wire.usage) or self._usage
        choices = wire.choices
        if not choices:
            if wire.error is not None:
                raise stream_error_of(wire.error, self._redact)
            return None
        choice = choices[0]
        if choice.index not in (0, None):
            return None  # n > 1: rxagent follows the first choice only
        delta = choice.delta
        text = thinking = ""
        deltas: tuple[ToolCallDelta, ...] = ()
        if delta is not None:
            text = delta.content
            if type(text) is not str:
                text = text_of(text)
            if delta.reasoning_content is not None or delta.reasoning is not None:
                thinking = thinking_of(delta)
            if delta.tool_calls:
                deltas = self._tool_call_deltas(delta.tool_calls)
        finish = choice.finish_reason
        reason = None
        if finish is not None:
            reason = finish_reason_of(finish)
            self.finished = True
        if not (text or thinking or deltas or reason):
            return None  # the role-only first delta, keep-alive chunks, usage-only chunks
        return delta_chunk(text, thinking, deltas, reason, raw)

    def _tool_call_deltas(self, calls: list[_ToolCall]) -> tuple[ToolCallDelta, ...]:
        if len(calls) == 1:  # a fragment of one call's arguments: nearly every tool-call chunk
            return (self._fragment(calls[0], 0),)
        return tuple([self._fragment(call, position) for position, call in enumerate(calls)])

    def _fragment(self, call: _ToolCall, position: int) -> ToolCallDelta:
        # Runs once per fragment of a call's arguments, as `_chunk` once per token: the helpers that read
        # a quirk are called only when the field they read is there, or is not a plain string.
        index = call.index
        if not isinstance(index, int):
            index = position  # some servers leave out `index`: the fragment's position stands in
        call_id = call.id
        if call_id is not None:
            call_id = call_id_of(call_id)
        function = call.function
        if function is None:
            return call_fragment(index, call_id, None, "")
        arguments = function.arguments
        if type(arguments) is not str:
            arguments = arguments_text(arguments)
        name = function.name
        name = self._new_name(call_id if call_id is not None else index, name) if name else None
        return call_fragment(index, call_id, name, arguments)

    def _new_name(self, key: str | int, name: Any) -> str | None:
        # Some servers repeat the name on every fragment; pass it on once per call so nothing joins it.
        if not isinstance(name, str) or self._names.get(key) == name:
            return None
        self._names[key] = name
        return name


def chunks_from_completion(obj: Any, redact: Callable[[str], str] = str) -> list[ChatChunk]:
    """The chunks for a whole (non-streamed) completion: the message, then its usage.

    Raises:
        MalformedStreamError: the body is not a completion (the message says what is wrong, and where).
        ModelError: the body is an ``{"error": …}`` object.
    """
    if not is_object(obj):
        raise MalformedStreamError("the response body is not a JSON object", data=redact(str(obj)))
    try:
        return _completion_chunks(msgspec.convert(obj, _Chunk), obj, redact)
    except msgspec.ValidationError as error:
        problem = f"unexpected completion shape ({redact(str(error))})"
    except SHAPE_ERRORS as error:
        problem = f"unexpected completion shape ({type(error).__name__}: {redact(str(error))})"
    raise MalformedStreamError(problem, data=redact(json.dumps(obj)[:200]))


def _completion_chunks(wire: _Chunk, obj: dict[str, Any], redact: Callable[[str], str]) -> list[ChatChunk]:
    choices = wire.choices
    if not choices:
        if wire.error is not None:
            raise stream_error_of(wire.error, redact)
        raise MalformedStreamError("the completion has no choices", data=redact(json.dumps(obj)[:200]))
    choice = choices[0]
    message = choice.message or _Delta()
    calls: list[ToolCallDelta] = []
    for position, call in enumerate(message.tool_calls or ()):
        function = call.function or _Function()
        name = function.name
        calls.append(
            ToolCallDelta(
                position,
                call_id_of(call.id),
                name if isinstance(name, str) and name else None,
                arguments_text(function.arguments),
            )
        )
    chunks = [
        ChatChunk(
            text=text_of(message.content),
            thinking=thinking_of(message),
            tool_calls=tuple(calls),
            finish_reason=finish_reason_of(choice.finish_reason),
            raw=obj,
        )
    ]
    usage = usage_of(wire.usage) if wire.usage is not None else None
    if usage is not None:
        chunks.append(ChatChunk(usage=usage))
    return chunks
