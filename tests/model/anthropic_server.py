"""A scriptable Anthropic Messages server on 127.0.0.1 for the Anthropic client's tests.

It is the OpenAI test server (:mod:`tests.model.openai_server`: scripted replies made of frames, split
writes with :class:`Pause`, :class:`Cut`, :class:`Stall`, :class:`Hold`, every request recorded) answering
``POST /v1/messages`` too. The helpers below write the stream exactly as Anthropic documents it
("Streaming Messages"): every event is an ``event:`` line naming its type and a ``data:`` line holding a
JSON object with the same ``type``, then a blank line — ``message_start``, then for each content block
``content_block_start``, its ``content_block_delta`` events and ``content_block_stop``, then
``message_delta`` (``stop_reason`` and cumulative usage) and ``message_stop``; ``ping`` events anywhere;
an ``error`` event in place of the rest when the API fails mid-stream.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.messages import Msg
from rxagent.model.anthropic import AnthropicModel
from rxagent.model.types import ChatRequest
from rxagent.retry import RetryPolicy
from tests.model.openai_server import API_KEY, OpenAIServer, Reply

__all__ = [
    "API_KEY",
    "FAST_RETRY",
    "AnthropicServer",
    "ask",
    "error_body",
    "error_event",
    "event",
    "make_model",
    "message_delta",
    "message_start",
    "message_stop",
    "ping",
    "redacted_block",
    "reply",
    "text_block",
    "thinking_block",
    "tool_block",
]

FAST_RETRY = RetryPolicy(max_attempts=3, base_delay=0.01, jitter=0)


class AnthropicServer(OpenAIServer):
    """The loopback server answering ``POST /v1/messages`` (and the OpenAI routes) with scripted replies."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK) -> None:
        super().__init__(clock)
        self._server.app.router.add_post("/v1/messages", self._handle)


def event(kind: str, payload: dict[str, Any] | None = None) -> bytes:
    """One event as the API writes it: ``event: {kind}``, ``data: {"type": kind, …}``, a blank line."""
    data = {"type": kind, **(payload or {})}
    return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()


def message_start(
    input_tokens: int = 25, *, cache_write: int | None = None, cache_read: int | None = None
) -> bytes:
    """``message_start``: the empty assistant message with the input usage (cache counts when given)."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_write is not None:
        usage["cache_creation_input_tokens"] = cache_write
    if cache_read is not None:
        usage["cache_read_input_tokens"] = cache_read
    message = {
        "id": "msg_01test",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "claude-test",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return event("message_start", {"message": message})


def _block(index: int, block: dict[str, Any], deltas: Sequence[dict[str, Any]]) -> list[bytes]:
    return [
        event("content_block_start", {"index": index, "content_block": block}),
        *(event("content_block_delta", {"index": index, "delta": delta}) for delta in deltas),
        event("content_block_stop", {"index": index}),
    ]


def text_block(index: int, *pieces: str) -> list[bytes]:
    """A text block streamed as ``text_delta`` events, one per piece."""
    return _block(index, {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces])


def thinking_block(index: int, *pieces: str, signature: str) -> list[bytes]:
    """A thinking block: ``thinking_delta`` events, then its ``signature_delta`` just before the stop."""
    deltas: list[dict[str, Any]] = [{"type": "thinking_delta", "thinking": p} for p in pieces]
    deltas.append({"type": "signature_delta", "signature": signature})
    return _block(index, {"type": "thinking", "thinking": ""}, deltas)


def redacted_block(index: int, data: str) -> list[bytes]:
    """A ``redacted_thinking`` block: whole in its start, no deltas."""
    return _block(index, {"type": "redacted_thinking", "data": data}, [])


def tool_block(index: int, call_id: str, name: str, *fragments: str) -> list[bytes]:
    """A ``tool_use`` block (``input: {}`` in its start) whose input streams as ``input_json_delta``
    fragments; the API's first fragment is often empty, and so it is here."""
    deltas = [{"type": "input_json_delta", "partial_json": f} for f in ("", *fragments)]
    return _block(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}, deltas)


def message_delta(stop_reason: str = "end_turn", output_tokens: int = 15, **usage: int) -> bytes:
    """``message_delta``: the stop reason and the cumulative usage."""
    return event(
        "message_delta",
        {
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": output_tokens, **usage},
        },
    )


def message_stop() -> bytes:
    """``message_stop``: the end of the stream."""
    return event("message_stop")


def ping() -> bytes:
    """A ``ping`` event (the API sends them to keep the connection alive)."""
    return event("ping")


def error_event(kind: str = "overloaded_error", message: str = "Overloaded") -> bytes:
    """An ``error`` event, as the API sends one when it fails after the stream began."""
    return event("error", {"error": {"type": kind, "message": message}})


def reply(
    *parts: bytes | list[bytes], stop: str = "end_turn", input_tokens: int = 25, output_tokens: int = 15
) -> Reply:
    """A streamed answer: ``message_start``, a ``ping``, the blocks, ``message_delta``, ``message_stop``."""
    frames: list[bytes] = [message_start(input_tokens), ping()]
    for part in parts:
        frames.extend(part if isinstance(part, list) else [part])
    frames += [message_delta(stop, output_tokens), message_stop()]
    return Reply.sse(*frames)


def error_body(kind: str, message: str) -> dict[str, Any]:
    """An error response body as the API writes it."""
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_01test"}


def make_model(server: OpenAIServer | str, **options: Any) -> AnthropicModel:
    """A model talking to ``server`` (or a base URL) with quick retries and :data:`API_KEY`; ``options``
    override the constructor's arguments."""
    base_url = server if isinstance(server, str) else server.base_url
    settings: dict[str, Any] = {"base_url": base_url, "api_key": API_KEY, "retry": FAST_RETRY}
    settings.update(options)
    return AnthropicModel("claude-test", **settings)


def ask(text: str = "hi", **options: Any) -> ChatRequest:
    """A one-message request."""
    return ChatRequest((Msg.user(text),), **options)
