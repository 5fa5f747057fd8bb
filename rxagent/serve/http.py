"""What every endpoint shares: errors as JSON, JSON bodies read within the size limit, JSON answers.

An endpoint refuses bad input by raising :class:`ApiError`; :func:`json_errors` (the outermost middleware)
turns it, and aiohttp's own HTTP errors (unknown route, wrong method, body over the limit), into
``{"error": "<message>"}`` with the status (and, where a client has something to do, fields saying
what). Refusals happen before anything changes.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

__all__ = ["ApiError", "JsonObject", "json_errors", "json_response", "read_json"]

JsonObject = dict[str, Any]
"""A decoded JSON object (a request body)."""

_log = logging.getLogger("rxagent.serve")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """A request refused: ``status`` (4xx, or 503 while stopping) and a message for whoever sent it.

    The message must not repeat secrets; it may name what was wrong with the input.
    """

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details
        """More fields of the answer, beside ``error``: what a client needs to act on it (JSON values)."""


def json_response(data: Mapping[str, Any], status: int = 200) -> web.Response:
    """``data`` as a compact JSON answer (never cached: it is a session's current state)."""
    return web.Response(
        text=json.dumps(data, separators=(",", ":"), ensure_ascii=False),
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


async def read_json(request: web.Request, limit: int) -> JsonObject:
    """The request's body: a JSON object sent as ``application/json``, at most ``limit`` bytes (the app's
    ``client_max_size``, which aiohttp enforces while reading).

    Raises:
        ApiError: 415 another content type (a cross-site form cannot send JSON without asking first);
            413 a body over the limit; 400 a body that is not JSON, or not an object.
    """
    if request.content_type != "application/json":
        raise ApiError(415, f"send the body as application/json, not {request.content_type or 'nothing'}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"the body is over the limit of {limit} bytes") from None
    try:
        body: Any = json.loads(raw)
    except ValueError as error:  # UnicodeDecodeError included
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(body).__name__}")
    return body  # pyright: ignore[reportUnknownVariableType]


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer refusals (:class:`ApiError`, aiohttp's HTTP errors) as ``{"error": ...}``; an unexpected
    failure as a 500 that says nothing of its cause (the log has it)."""
    try:
        return await handler(request)
    except ApiError as error:
        return json_response({"error": error.message, **error.details}, error.status)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        answer = json_response({"error": error.text or error.reason}, error.status)
        if "Allow" in error.headers:
            answer.headers["Allow"] = error.headers["Allow"]
        return answer
    except Exception:
        _log.exception("rxagent serve: %s %s failed", request.method, request.path)
        return json_response({"error": "the server failed to answer this request (see its log)"}, 500)
