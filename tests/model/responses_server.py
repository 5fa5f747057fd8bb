"""Scripts for the loopback server (tests/model/openai_server.py) speaking OpenAI's Responses API.

:class:`ResponseStream` writes the semantic event stream of ``POST /v1/responses`` with ``stream: true`` as
OpenAI documents it: each event an ``event: <type>`` line and a ``data:`` line holding the JSON with the
same ``type`` and a ``sequence_number``; the response's ``created`` and ``in_progress`` events; for each
output item its ``output_item.added``, its content events (content or summary parts, deltas, their
``done`` events) and ``output_item.done`` with the whole item; then ``response.completed`` (or
``incomplete`` / ``failed``) carrying the whole response, its output and usage. The frames are bytes the
server writes one ``write`` each; tests split, pause and interleave them to be hostile.
"""

from __future__ import annotations

import json
from typing import Any, Self

from rxagent.model.openai_responses import OpenAIResponsesModel
from tests.model.openai_server import API_KEY, FAST_RETRY, Frame, OpenAIServer, Reply

__all__ = [
    "ResponseStream",
    "encrypted",
    "error_event",
    "make_responses_model",
    "sse_event",
]


def sse_event(kind: str, sequence: int, **fields: Any) -> bytes:
    """One Responses event: ``event: kind`` and its JSON data (``type`` and ``sequence_number`` first)."""
    data = json.dumps({"type": kind, "sequence_number": sequence, **fields})
    return f"event: {kind}\ndata: {data}\n\n".encode()


def error_event(sequence: int, message: str, code: str | None = None) -> bytes:
    """The ``error`` event OpenAI sends mid-stream."""
    return sse_event("error", sequence, code=code, message=message, param=None)


def encrypted(name: str) -> str:
    """An opaque stand-in for the encrypted reasoning OpenAI sends (a Fernet token, in real life)."""
    return f"gAAAAAB-{name}-" + "x" * 40


class ResponseStream:
    """Builds one streamed response, item by item, then :meth:`completed` (or ``incomplete``/``failed``)
    gives the frames, or the :class:`Reply`."""

    def __init__(self, response_id: str = "resp_1") -> None:
        self.response_id = response_id
        self.frames: list[Frame] = []
        self.output: list[dict[str, Any]] = []
        self._sequence = 0
        self.emit("response.created", response=self._response("in_progress", output=[]))
        self.emit("response.in_progress", response=self._response("in_progress", output=[]))

    def emit(self, kind: str, **fields: Any) -> Self:
        """Append one event."""
        self.frames.append(sse_event(kind, self._sequence, **fields))
        self._sequence += 1
        return self

    def raw(self, *frames: Frame) -> Self:
        """Append frames as they are (comments, pauses, broken bytes)."""
        self.frames.extend(frames)
        return self

    @property
    def next_sequence(self) -> int:
        """The sequence number the next event gets."""
        return self._sequence

    def _response(self, status: str, **fields: Any) -> dict[str, Any]:
        return {
            "id": self.response_id,
            "object": "response",
            "created_at": 1_760_000_000,
            "status": status,
            "model": "test-model",
            "error": None,
            "incomplete_details": None,
            "usage": None,
            **fields,
        }

    # ---- output items -------------------------------------------------------------------------------

    def text(self, *pieces: str, item_id: str | None = None) -> Self:
        """A ``message`` item whose text streams as ``pieces``."""
        index = len(self.output)
        item_id = item_id or f"msg_{index}"
        text = "".join(pieces)
        self.emit(
            "response.output_item.added",
            output_index=index,
            item={
                "id": item_id,
                "type": "message",
                "status": "in_progress",
                "role": "assistant",
                "content": [],
            },
        )
        part = {"type": "output_text", "text": "", "annotations": []}
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        self.emit("response.content_part.added", **where, part=part)
        for piece in pieces:
            self.emit("response.output_text.delta", **where, delta=piece, logprobs=[], obfuscation="Zx9")
        self.emit("response.output_text.done", **where, text=text, logprobs=[])
        whole = {"type": "output_text", "text": text, "annotations": []}
        self.emit("response.content_part.done", **where, part=whole)
        item = {
            "id": item_id,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [whole],
        }
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    def reasoning(
        self, *summary: list[str], encrypted_content: str | None = None, item_id: str | None = None
    ) -> Self:
        """A ``reasoning`` item: each argument one summary part, streamed as its pieces; the item carries
        ``encrypted_content`` (as ``include: ["reasoning.encrypted_content"]`` asks)."""
        index = len(self.output)
        item_id = item_id or f"rs_{index}"
        added: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
        if encrypted_content is not None:
            added["encrypted_content"] = encrypted_content
        self.emit("response.output_item.added", output_index=index, item=added)
        parts: list[dict[str, Any]] = []
        for number, pieces in enumerate(summary):
            where = {"item_id": item_id, "output_index": index, "summary_index": number}
            self.emit(
                "response.reasoning_summary_part.added", **where, part={"type": "summary_text", "text": ""}
            )
            for piece in pieces:
                self.emit("response.reasoning_summary_text.delta", **where, delta=piece, obfuscation="q")
            text = "".join(pieces)
            self.emit("response.reasoning_summary_text.done", **where, text=text)
            part = {"type": "summary_text", "text": text}
            self.emit("response.reasoning_summary_part.done", **where, part=part)
            parts.append(part)
        item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": parts}
        if encrypted_content is not None:
            item["encrypted_content"] = encrypted_content
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    def call(self, call_id: str, name: str, *fragments: str, item_id: str | None = None) -> Self:
        """A ``function_call`` item whose arguments stream as ``fragments``."""
        index = len(self.output)
        item_id = item_id or f"fc_{index}"
        arguments = "".join(fragments)
        head = {"id": item_id, "type": "function_call", "call_id": call_id, "name": name}
        self.emit(
            "response.output_item.added",
            output_index=index,
            item={**head, "status": "in_progress", "arguments": ""},
        )
        for fragment in fragments:
            self.emit(
                "response.function_call_arguments.delta",
                item_id=item_id,
                output_index=index,
                delta=fragment,
                obfuscation="k",
            )
        self.emit(
            "response.function_call_arguments.done",
            item_id=item_id,
            output_index=index,
            name=name,
            arguments=arguments,
        )
        item = {**head, "status": "completed", "arguments": arguments}
        self.emit("response.output_item.done", output_index=index, item=item)
        self.output.append(item)
        return self

    # ---- the end --------------------------------------------------------------------------------------

    def completed(
        self, input_tokens: int = 12, output_tokens: int = 7, *, cached: int = 0, reasoning: int = 0
    ) -> Reply:
        """``response.completed`` with the whole output and its usage: the reply."""
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning},
            "total_tokens": input_tokens + output_tokens,
        }
        self.emit("response.completed", response=self._response("completed", output=self.output, usage=usage))
        return Reply.sse(*self.frames)

    def incomplete(self, reason: str) -> Reply:
        """``response.incomplete`` for ``reason`` (``max_output_tokens``, ``content_filter``): the reply."""
        response = self._response("incomplete", output=self.output, incomplete_details={"reason": reason})
        self.emit("response.incomplete", response=response)
        return Reply.sse(*self.frames)

    def failed(self, code: str, message: str) -> Reply:
        """``response.failed`` with its error: the reply."""
        response = self._response("failed", output=self.output, error={"code": code, "message": message})
        self.emit("response.failed", response=response)
        return Reply.sse(*self.frames)

    def whole(self, input_tokens: int = 12, output_tokens: int = 7) -> dict[str, Any]:
        """The response as a non-streamed request gets it: one JSON object."""
        usage = {
            "input_tokens": input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": input_tokens + output_tokens,
        }
        return self._response("completed", output=self.output, usage=usage)


def make_responses_model(server: OpenAIServer | str, **options: Any) -> OpenAIResponsesModel:
    """A Responses model talking to ``server`` (or a base URL) with quick retries and :data:`API_KEY`."""
    base_url = server if isinstance(server, str) else server.base_url
    settings: dict[str, Any] = {"base_url": base_url, "api_key": API_KEY, "retry": FAST_RETRY}
    settings.update(options)
    return OpenAIResponsesModel("test-model", **settings)
