"""The Vercel AI SDK's chat route: ``POST /api/chat`` runs the agent for a ``useChat`` request and answers
with the AI SDK's UI message stream, which ``useChat`` (``DefaultChatTransport``) and
``readUIMessageStream`` read.

``/api/chat`` is the route ``useChat`` posts to by default; a front end on another server points its
transport at ``<server>/api/chat`` (``new DefaultChatTransport({api, headers: {Authorization: …}})``).

The request
===========

``useChat``'s body: ``{"id", "messages": [UIMessage, …], "trigger", "messageId"?, …}`` (more fields, the
transport's ``body``, are allowed and not used). ``id`` is the session id. The session's log holds the
conversation, so of ``messages`` only **the last one** counts:

- a **user** message is the new input: its ``text`` parts, and its ``file`` parts as images (PNG, JPEG,
  GIF, WebP) and documents (PDF, plain text), given inline as ``data:`` URLs or by ``http(s)`` URL. The
  message keeps its id, so sending the same message twice runs once: a message the session has already
  is refused with 409 ("nothing to run"), unless it is the session's last user message, nothing answered
  it yet (its run failed or was stopped: ``regenerate()`` after an error), no run is going and no call
  waits, when its turn runs again from where it stopped (the rule AG-UI follows too:
  :mod:`rxagent.serve.retry`);
- an **assistant** message (``useChat`` continuing after ``addToolApprovalResponse`` or ``addToolOutput``)
  answers the calls the session waits on: a tool part in state ``approval-responded`` approves or denies
  its call (``approval.approved``; ``approval.reason`` is shown to the model on a denial), and a tool part
  in state ``output-available`` or ``output-error`` whose call waits for an external result gives that
  result (``output``, as text: a string as it is, anything else as JSON; ``errorText`` for an error).
  Other tool parts (calls that ran) are left alone. An answer for a call that took one already (another
  tab, the dashboard) is refused with 409, naming the call and the answer taken, as ``POST …/respond``
  does.

``trigger: "regenerate-message"`` reads the same way: the session keeps every answer, so only a turn that
has none runs again.

The answer
==========

SSE, one ``data: <JSON chunk>`` per chunk, ending with ``data: [DONE]``, with the header
``x-vercel-ai-ui-message-stream: v1``. Translated from the run's events by :class:`UIMessageTranslator`:

=====================================  ============================================================
rxagent event                          UI message chunks
=====================================  ============================================================
(the run's first event)                ``start`` (``messageId``: the message continued, or a new one)
``ModelCallStarted``                   ``finish-step`` for the step before (if any), ``start-step``: one
                                       step per model call, its tool results inside it
``ThinkingDelta``                      ``reasoning-start`` (first), ``reasoning-delta``; closed
                                       (``reasoning-end``) by what follows the thinking
``TextDelta``                          ``text-start`` (first), ``text-delta``; ``text-end`` when the
                                       message completes or a tool call starts
``ToolCallStarted`` / ``…ArgumentsDelta``  ``tool-input-start`` / ``tool-input-delta``
``ToolCallCompleted``                  ``tool-input-available`` (``input``: the parsed arguments), or
                                       ``tool-input-error`` for arguments that are not a JSON object
``ToolPermissionAsked``                ``tool-approval-request`` (``approvalId`` = ``toolCallId`` = the
                                       call's id; ``reason``: the permission rule's)
``ToolSuspended``                      nothing more: the call's ``tool-input-available`` is the client's
                                       cue (``onToolCall``) to give its output
``ToolResult``                         ``tool-output-available`` (``output``: the result's text),
                                       ``tool-output-denied`` (a denial), ``tool-output-error`` (an
                                       error or an interrupted call; ``errorText``: the result's text)
``AgentResult``                        ``finish-step``, then ``finish`` (``finishReason``: ``stop``;
                                       ``tool-calls`` for calls waiting for approval or an external
                                       result; ``interrupted``; ``other`` for the iteration limit, no
                                       answer, or a middleware's stop); a failed run: ``error``
                                       (``errorText``) before ``finish`` (``finishReason: "error"``)
=====================================  ============================================================

Every text and reasoning part opened is closed before ``finish``; a tool call's result comes after its
input (a call the client has no part for, such as one run again after a crash, gets its
``tool-input-available`` first). Other events are not sent (the session's feed has them all). A run
whose end does not reach the stream (it failed before it started, was cancelled, or the server stops)
ends with ``error`` and ``finish``.

Input errors are answered before the stream opens, as JSON (see the contract in :mod:`rxagent.serve`):
400 a body that is not a chat request (no ``id``, no messages, a last message that is neither a user's nor
an assistant's, a part that is neither text nor a file, an empty message, a file that is not an image or
a document we take), 404 an assistant message for a session that does not exist, 409 input that does not
fit the session (nothing to run, a new message while calls wait for answers or while calls are uncertain,
answers while a run is going). A client that disconnects stops only its stream: the run goes on.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, cast

from aiohttp import web
from pydantic import JsonValue

from rxagent.agent import (
    AgentInput,
    ExternalResult,
    InvalidInputError,
    PendingToolCallsError,
    SessionHandle,
    ToolDecision,
)
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    ModelCallStarted,
    RunReason,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolResult,
    ToolSuspended,
)
from rxagent.media import DOCUMENT_MEDIA_TYPES, IMAGE_MEDIA_TYPES
from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    InvalidMediaError,
    Msg,
    ToolResultBlock,
    ToolUseBlock,
    UserContent,
)
from rxagent.serve.http import ApiError, JsonObject, read_json
from rxagent.serve.hub import HUB, SessionHub, refusal
from rxagent.serve.retry import retries_turn
from rxagent.serve.run_stream import stream_run

__all__ = [
    "DONE",
    "ROUTE",
    "STREAM_HEADERS",
    "ChatRequest",
    "StreamItem",
    "UIChunk",
    "UIMessageTranslator",
    "encode",
    "parse_chat_request",
    "routes",
]

ROUTE: Final = "/api/chat"
"""Where the chat route is: ``useChat``'s default ``api``."""

STREAM_HEADERS: Final = {"x-vercel-ai-ui-message-stream": "v1"}
"""The header that tells the AI SDK the answer is a UI message stream, and which version."""

UIChunk: TypeAlias = dict[str, JsonValue]
"""One chunk of the UI message stream: a JSON object with a ``type``."""

DONE: Final = "[DONE]"
"""The stream's last ``data:`` line."""

StreamItem: TypeAlias = UIChunk | Literal["[DONE]"]
"""What the translator makes: chunks, then :data:`DONE`."""

_FINISH: Final[dict[RunReason, str]] = {
    "MODEL_STOP": "stop",
    "TOOL_RETURN_DIRECT": "stop",
    "STRUCTURED_OUTPUT": "stop",
    "PERMISSION_ASKING": "tool-calls",
    "TOOL_SUSPENDED": "tool-calls",
    "INTERRUPTED": "interrupted",
    "MAX_ITERATIONS": "other",
    "NO_ANSWER": "other",
    "STOPPED": "other",
    "ERROR": "error",
}
"""The ``finishReason`` of each way a run ends (the AI SDK's ``FinishReason``)."""

_TRIGGERS: Final = ("submit-message", "regenerate-message")


def routes() -> list[web.RouteDef]:
    """The chat route."""
    return [web.post(ROUTE, run_chat)]


# ---- the request -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """What a ``useChat`` request asks for (see the module).

    Attributes:
        chat_id: the chat's id: the session id (not checked yet).
        trigger: ``submit-message`` or ``regenerate-message``.
        message_id: the id of the request's last message.
        role: its role: ``user`` (new input) or ``assistant`` (answers for waiting calls).
        user: the user message as rxagent's (``None`` for an assistant message).
        decisions: the assistant message's approvals and denials (its ``approval-responded`` tool parts).
        outputs: its tool parts with an output (``output-available``, ``output-error``): results for the
            calls among them that wait for an external result.
        calls: the ids of the calls it has tool parts for.
    """

    chat_id: str
    trigger: Literal["submit-message", "regenerate-message"]
    message_id: str
    role: Literal["user", "assistant"]
    user: Msg | None = None
    decisions: tuple[ToolDecision, ...] = ()
    outputs: tuple[JsonObject, ...] = ()
    calls: tuple[str, ...] = ()


def parse_chat_request(body: JsonObject) -> ChatRequest:
    """The body of a ``useChat`` request, checked whole (nothing is run or recorded here).

    Raises:
        ApiError: 400, saying what is wrong and where (never repeating the values).
    """
    chat_id = body.get("id")
    if not isinstance(chat_id, str):
        raise ApiError(400, "the body needs 'id', the chat's id (a string): it names the session")
    trigger = body.get("trigger", "submit-message")
    if trigger not in _TRIGGERS:
        raise ApiError(400, "'trigger' must be 'submit-message' or 'regenerate-message'")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "the body needs 'messages', a list of UI messages ending with the new one")
    listed = cast("list[Any]", messages)
    for index, message in enumerate(listed):
        _check_message(message, f"messages[{index}]")
    last = cast("JsonObject", listed[-1])
    where = f"messages[{len(listed) - 1}]"
    message_id, role = cast("str", last["id"]), last["role"]
    parts = cast("list[JsonObject]", last["parts"])
    checked: Literal["submit-message", "regenerate-message"] = trigger
    if role == "user":
        return ChatRequest(chat_id, checked, message_id, "user", _user_message(message_id, parts, where))
    if role == "assistant":
        tool_parts = [p for p in parts if _is_tool_part(p)]
        for index, part in enumerate(tool_parts):
            if not isinstance(part.get("toolCallId"), str) or not isinstance(part.get("state"), str):
                raise ApiError(400, f"{where}: tool part {index} needs 'toolCallId' and 'state' (strings)")
        return ChatRequest(
            chat_id,
            checked,
            message_id,
            "assistant",
            decisions=tuple(_decision(p) for p in tool_parts if p["state"] == "approval-responded"),
            outputs=tuple(p for p in tool_parts if p["state"] in ("output-available", "output-error")),
            calls=tuple(cast("str", p["toolCallId"]) for p in tool_parts),
        )
    raise ApiError(
        400, f"{where}: the last message must be the user's new message (or the assistant's, answering calls)"
    )


def _check_message(message: Any, where: str) -> None:
    if not isinstance(message, dict):
        raise ApiError(400, f"{where} must be a UI message: an object with 'id', 'role' and 'parts'")
    fields = cast("JsonObject", message)
    if not isinstance(fields.get("id"), str) or not fields["id"]:
        raise ApiError(400, f"{where} needs an 'id' (a non-empty string)")
    if fields.get("role") not in ("system", "user", "assistant"):
        raise ApiError(400, f"{where}: 'role' must be 'system', 'user' or 'assistant'")
    parts = fields.get("parts")
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(cast("JsonObject", p).get("type"), str)
        for p in cast("list[Any]", parts)
    ):
        raise ApiError(400, f"{where}: 'parts' must be a list of objects, each with a 'type'")


def _is_tool_part(part: JsonObject) -> bool:
    kind = cast("str", part["type"])
    return kind.startswith("tool-") or kind == "dynamic-tool"


def _user_message(message_id: str, parts: list[JsonObject], where: str) -> Msg:
    content: list[UserContent] = []
    said = False
    for index, part in enumerate(parts):
        kind = part["type"]
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise ApiError(400, f"{where}.parts[{index}]: a text part needs 'text' (a string)")
            if text:
                content.append(text)
                said = said or bool(text.strip())
        elif kind == "file":
            content.append(_file_block(part, f"{where}.parts[{index}]"))
            said = True
        else:
            raise ApiError(
                400, f"{where}.parts[{index}]: a user message takes text and file parts, not {kind!r}"
            )
    if not said:
        raise ApiError(400, f"user message {message_id!r} has no text and no file")
    return Msg.user(content, id=message_id)


def _file_block(part: JsonObject, where: str) -> ImageBlock | DocumentBlock:
    """A file part as an image or a document: inline from a ``data:`` URL, else by its ``http(s)`` URL."""
    url, media_type, name = part.get("url"), part.get("mediaType"), part.get("filename")
    if not isinstance(url, str) or not isinstance(media_type, str):
        raise ApiError(400, f"{where}: a file part needs 'url' and 'mediaType' (strings)")
    if name is not None and not isinstance(name, str):
        raise ApiError(400, f"{where}: 'filename' must be a string")
    kind = media_type.split(";", 1)[0].strip().lower()
    try:
        if url.startswith("data:"):
            data = _data_url_bytes(url, where)
            if kind in IMAGE_MEDIA_TYPES:
                return ImageBlock.from_bytes(data, kind)
            if kind in DOCUMENT_MEDIA_TYPES:
                return DocumentBlock.from_bytes(data, kind, name=name)
        elif kind in IMAGE_MEDIA_TYPES:
            return ImageBlock.from_url(url, kind)
        elif kind == "application/pdf":
            return DocumentBlock.from_url(url, kind, name=name)
    except InvalidMediaError as error:
        raise ApiError(400, f"{where}: {error}") from None
    taken = ", ".join((*IMAGE_MEDIA_TYPES, *DOCUMENT_MEDIA_TYPES))
    raise ApiError(400, f"{where}: a file of type {kind!r} is not taken ({taken}; text/plain inline only)")


def _data_url_bytes(url: str, where: str) -> bytes:
    header, comma, payload = url.partition(",")
    if not comma or not header.endswith(";base64"):
        raise ApiError(400, f"{where}: a data: URL must be base64 ('data:<type>;base64,<data>')")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, f"{where}: the data: URL's base64 is not valid") from None


def _decision(part: JsonObject) -> ToolDecision:
    """An ``approval-responded`` tool part as the approval or denial it gives."""
    call_id, approval = cast("str", part["toolCallId"]), part.get("approval")
    fields = cast("JsonObject", approval) if isinstance(approval, dict) else {}
    allowed, reason = fields.get("approved"), fields.get("reason", "")
    if not isinstance(allowed, bool) or not isinstance(reason, str):
        raise ApiError(
            400,
            f"tool part {call_id!r}: an approval-responded part needs 'approval': "
            '{"approved": bool, "reason"?: str}',
        )
    return ToolDecision(call_id, allowed, reason)


def _answers(request: ChatRequest, waiting: dict[str, str]) -> list[ToolDecision | ExternalResult]:
    """The answers the assistant message gives (see the module): its decisions, and the outputs of the
    calls that wait for an external result (``waiting`` maps the calls the session waits on to their
    kind: ``ask``, ``external``). Other outputs are of calls that ran here, and are left alone.

    Raises:
        ApiError: 400, an output part of a waiting call that does not say its output.
    """
    answers: list[ToolDecision | ExternalResult] = list(request.decisions)
    for part in request.outputs:
        call_id = cast("str", part["toolCallId"])
        if waiting.get(call_id) == "external":
            answers.append(_external_result(call_id, part))
    return answers


def _external_result(call_id: str, part: JsonObject) -> ExternalResult:
    if part["state"] == "output-error":
        error = part.get("errorText")
        if not isinstance(error, str):
            raise ApiError(400, f"tool part {call_id!r}: an output-error part needs 'errorText' (a string)")
        return ExternalResult(call_id, error, "error")
    if "output" not in part:
        raise ApiError(400, f"tool part {call_id!r}: an output-available part needs 'output'")
    output = part["output"]
    return ExternalResult(call_id, output if isinstance(output, str) else json.dumps(output))


# ---- the endpoint ------------------------------------------------------------------------------------------


async def run_chat(request: web.Request) -> web.StreamResponse:
    """``POST /api/chat``: run the agent on the chat's session and stream the run as the AI SDK's UI
    message stream (see the module)."""
    hub = request.app[HUB]
    chat = parse_chat_request(await read_json(request, hub.settings.max_body))
    session_id = hub.session_id(chat.chat_id)
    hub.refuse_while_stopping()
    handle = await hub.existing(session_id) if chat.role == "assistant" else hub.handle(session_id)
    feed = await handle.open_feed()  # before the checks: nothing is awaited from them to the submission
    if chat.role == "assistant":
        carried = await _answering(hub, handle, chat)
        message_id = chat.message_id  # the client goes on with the message it holds
    else:
        carried, message_id = await _asking(hub, handle, chat), None
    after = feed.durable_head  # the run's facts come after it
    try:
        if chat.role == "assistant":
            run = await hub.submit_answers(handle, carried, request)  # 409 when another answer came first
        else:
            run = hub.submit(handle, carried, request)
    except InvalidInputError as error:  # media the model does not take, or over the cap
        raise ApiError(400, str(error)) from None
    message_id = message_id or f"{run.id}.message"
    translator = UIMessageTranslator(run.id, message_id, known_calls=chat.calls)
    return await stream_run(request, run, feed, after, translator, encode, headers=STREAM_HEADERS)


async def _answering(hub: SessionHub, handle: SessionHandle, chat: ChatRequest) -> AgentInput:
    """The answers an assistant message gives, checked against the session (see the module).

    Raises:
        ApiError: 409, they do not fit (nothing answered, a call not waiting or answered already, the wrong
            kind of answer, calls to reconcile first, a run going).
    """
    status = await handle.read_status()
    if status.state == "uncertain":
        hub.refuse_while_waiting(status, "these answers")
    waiting = {p.call.id: p.kind for p in status.pending}
    answers = _answers(chat, waiting)
    if not answers:
        raise ApiError(
            409,
            "nothing to run: the last message is the assistant's, and none of its tool parts answers a "
            "call the session waits on (approval-responded, or an output for an external call)",
        )
    try:
        await handle.check(answers)
        handle.refuse_taken(a.call_id for a in answers)  # again: nothing is awaited from here on
    except PendingToolCallsError as refused:
        raise refusal(refused) from None
    if handle.status().state in ("running", "queued"):
        raise ApiError(409, "a run of this session is going or queued: answer once it has ended")
    return answers


async def _asking(hub: SessionHub, handle: SessionHandle, chat: ChatRequest) -> AgentInput:
    """The new user message, or ``None`` to run its turn again (see the module).

    Raises:
        ApiError: 409, nothing to run, or calls wait for answers (or to be reconciled).
    """
    state = await hub.agent.sessions.state(handle.ctx)
    status = await handle.read_status()
    if retries_turn(handle, chat.message_id, state.messages, status, noun="session", hint=_RETRY_HINT):
        return None
    hub.refuse_while_waiting(status, "a new message (answer the calls that wait first)")
    return chat.user


_RETRY_HINT = " (the log keeps every answer: send a new message, with a new id)"


def encode(items: Sequence[StreamItem]) -> bytes:
    """``items`` as SSE: ``data: <JSON>`` each (``data: [DONE]`` for :data:`DONE`). Text with a lone
    surrogate (from a log written before such input was refused) is sent ``\\u``-escaped instead of failing
    the stream."""
    try:
        return _sse(items, ascii_only=False).encode()
    except UnicodeEncodeError:
        return _sse(items, ascii_only=True).encode()


def _sse(items: Sequence[StreamItem], *, ascii_only: bool) -> str:
    lines: list[str] = []
    for item in items:
        if not isinstance(item, str):
            item = json.dumps(item, ensure_ascii=ascii_only, separators=_COMPACT)
        lines.append(f"data: {item}\n\n")
    return "".join(lines)


_COMPACT: Final = (",", ":")


# ---- the translation ---------------------------------------------------------------------------------------


class UIMessageTranslator:
    """Turns one run's rxagent events into UI message chunks, in an order ``useChat`` accepts (see the
    module).

    Args:
        rx_run_id: the run's id (ids of the parts made here start with it).
        message_id: the id of the assistant message the chunks build (``start``'s ``messageId``).
        known_calls: the calls the client has tool parts for already (the message it continues).
    """

    def __init__(self, rx_run_id: str, message_id: str, *, known_calls: Iterable[str] = ()) -> None:
        self.rx_run_id = rx_run_id
        self.message_id = message_id
        self.closed = False
        """The run's last word (``finish``, then :data:`DONE`) has been made: nothing follows."""
        self._started = False
        self._count = 0
        self._step: int | None = None
        """The iteration of the model call whose step is open (``-1``: a step opened for output that came
        before any model call), or ``None``."""
        self._text: str | None = None
        self._reasoning: str | None = None
        self._streaming: set[str] = set()
        """Calls whose input is streaming (``tool-input-start`` sent, not yet complete)."""
        self._known: set[str] = set(known_calls)
        """Calls the client has a tool part for."""
        self._calls: dict[str, ToolUseBlock] = {}
        """Calls seen in this run, by id (to make a part for a result of a call the client does not have)."""
        self._results: set[str] = set()
        self._last_error: ErrorEvent | None = None

    def translate(self, event: AgentEvent) -> list[StreamItem]:
        """The chunks for one event of the run (none after the run's end)."""
        if self.closed:
            return []
        items: list[StreamItem] = []
        if not self._started:
            self._started = True
            items.append({"type": "start", "messageId": self.message_id})
        match event:
            case TextDelta():
                self._text_delta(event.text, items)
            case ToolCallArgumentsDelta():
                call_id = event.call_id
                if call_id is not None and call_id in self._streaming:
                    delta = event.fragment
                    items.append({"type": "tool-input-delta", "toolCallId": call_id, "inputTextDelta": delta})
            case ThinkingDelta():
                self._thinking(event, items)
            case ModelCallStarted():
                self._model_call_started(event, items)
            case ToolCallStarted():
                self._call_started(event, items)
            case ToolCallCompleted():
                self._call_completed(event.call, items)
            case MessageCompleted():
                self._message_completed(event.message, items)
            case ToolExecutionStarted():
                self._calls.setdefault(event.call.id, event.call)
            case ToolResult():
                self._told(event.result, items)
            case ToolPermissionAsked():
                self._part_for(event.call, items)
                approval: UIChunk = {"type": "tool-approval-request", "approvalId": event.call.id}
                approval["toolCallId"] = event.call.id
                if event.reason:
                    approval["reason"] = event.reason
                items.append(approval)
            case ToolSuspended():
                self._part_for(event.call, items)
            case ErrorEvent():
                self._last_error = event
            case AgentResult():
                self._result(event, items)
            case _:  # the session's feed has the rest
                pass
        return items

    def fail(self, message: str, code: str | None = None) -> list[StreamItem]:
        """``error`` and ``finish`` for a run whose own end will not come (it failed before it started, was
        cancelled, or the server stops); ``code`` is not sent (the AI SDK's error chunk has text only)."""
        if self.closed:
            return []
        self.closed = True
        items: list[StreamItem] = []
        if not self._started:
            self._started = True
            items.append({"type": "start", "messageId": self.message_id})
        items.append({"type": "error", "errorText": message})
        items.append({"type": "finish", "finishReason": "error"})
        items.append(DONE)
        return items

    # ---- helpers ----------------------------------------------------------------------------------------

    def _id(self, what: str) -> str:
        self._count += 1
        return f"{self.rx_run_id}.{what}.{self._count}"

    def _in_step(self, items: list[StreamItem]) -> None:
        if self._step is None:
            self._step = -1
            items.append({"type": "start-step"})

    def _end_reasoning(self, items: list[StreamItem]) -> None:
        if self._reasoning is not None:
            items.append({"type": "reasoning-end", "id": self._reasoning})
            self._reasoning = None

    def _end_text(self, items: list[StreamItem]) -> None:
        if self._text is not None:
            items.append({"type": "text-end", "id": self._text})
            self._text = None

    def _end_step(self, items: list[StreamItem]) -> None:
        self._end_reasoning(items)
        self._end_text(items)
        if self._step is not None:
            items.append({"type": "finish-step"})
            self._step = None

    def _input(self, call: ToolUseBlock) -> UIChunk:
        """The chunk that gives a call's whole input: available, or an error for arguments that are not a
        JSON object."""
        if call.input is None:
            return {
                "type": "tool-input-error",
                "toolCallId": call.id,
                "toolName": call.name,
                "input": call.raw_arguments,
                "errorText": call.error or "the arguments are not a JSON object",
            }
        return {
            "type": "tool-input-available",
            "toolCallId": call.id,
            "toolName": call.name,
            "input": call.input,
        }

    def _part_for(self, call: ToolUseBlock, items: list[StreamItem]) -> None:
        """Make sure the client has a tool part for ``call`` before anything refers to it."""
        self._calls.setdefault(call.id, call)
        if call.id not in self._known:
            self._known.add(call.id)
            items.append(self._input(call))

    # ---- one handler per event type ------------------------------------------------------------------

    def _model_call_started(self, event: ModelCallStarted, items: list[StreamItem]) -> None:
        if self._step == event.iteration:  # the same turn asked again (a forced tool choice stepped down)
            return
        self._end_step(items)
        self._step = event.iteration
        items.append({"type": "start-step"})

    def _thinking(self, event: ThinkingDelta, items: list[StreamItem]) -> None:
        if not event.text:
            return
        self._in_step(items)
        if self._reasoning is None:
            self._end_text(items)
            self._reasoning = self._id("reasoning")
            items.append({"type": "reasoning-start", "id": self._reasoning})
        items.append({"type": "reasoning-delta", "id": self._reasoning, "delta": event.text})

    def _text_delta(self, text: str, items: list[StreamItem]) -> None:
        if not text:
            return
        self._in_step(items)
        self._end_reasoning(items)
        if self._text is None:
            self._text = self._id("text")
            items.append({"type": "text-start", "id": self._text})
        items.append({"type": "text-delta", "id": self._text, "delta": text})

    def _call_started(self, event: ToolCallStarted, items: list[StreamItem]) -> None:
        self._in_step(items)
        self._end_reasoning(items)
        self._end_text(items)
        call_id, name = event.call_id, event.name
        if call_id and name and call_id not in self._known:
            self._known.add(call_id)
            self._streaming.add(call_id)
            items.append({"type": "tool-input-start", "toolCallId": call_id, "toolName": name})
        # A call with no id or name yet is told whole when it completes.

    def _call_completed(self, call: ToolUseBlock, items: list[StreamItem]) -> None:
        self._in_step(items)
        self._end_reasoning(items)
        self._end_text(items)
        self._calls[call.id] = call
        self._streaming.discard(call.id)
        self._known.add(call.id)
        items.append(self._input(call))

    def _message_completed(self, message: Msg, items: list[StreamItem]) -> None:
        if message.role == "assistant":
            self._end_reasoning(items)
            self._end_text(items)
            return
        # Results no ToolResult told (a custom step's that added one without its event) are told here.
        for result in message.tool_results:
            if result.tool_use_id not in self._results:
                self._told(result, items)

    def _told(self, result: ToolResultBlock, items: list[StreamItem]) -> None:
        call_id = result.tool_use_id
        self._results.add(call_id)
        call = self._calls.get(call_id) or ToolUseBlock(id=call_id, name=result.name, input={})
        self._part_for(call, items)
        if result.status == "ok":
            items.append({"type": "tool-output-available", "toolCallId": call_id, "output": result.text})
        elif result.status == "denied":
            items.append({"type": "tool-output-denied", "toolCallId": call_id})
        else:
            error = result.text or f"the call ended {result.status}"
            items.append({"type": "tool-output-error", "toolCallId": call_id, "errorText": error})

    def _result(self, event: AgentResult, items: list[StreamItem]) -> None:
        self._end_step(items)
        if event.reason == "TOOL_RETURN_DIRECT" and event.text:
            # The tools' results are the answer, and no model call streamed it: it is told as the last
            # step's text (else a client sending again once every call has its output would never stop).
            self._step = -1
            items.append({"type": "start-step"})
            self._text_delta(event.text, items)
            self._end_step(items)
        self.closed = True
        if event.reason == "ERROR":
            error = self._last_error
            message = event.detail or (error.message if error is not None else "the run failed")
            items.append({"type": "error", "errorText": message})
        items.append({"type": "finish", "finishReason": _FINISH[event.reason]})
        items.append(DONE)
