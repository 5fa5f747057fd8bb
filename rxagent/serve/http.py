"""What every endpoint shares: errors as JSON, JSON bodies read within the size limit, JSON answers.

An endpoint refuses bad input by raising :class:`ApiError`; :func:`json_errors` (the outermost middleware)
turns it, and aiohttp's own HTTP errors (unknown route, wrong method, body over the limit), into
``{"error": "<message>"}`` with the status (and, where a client has something to do, fields saying
what). Refusals happen before anything changes.

A body is read whole before any endpoint sees the request (:func:`bodies`): refused with 413 from its
``Content-Length`` alone when that is over the limit (nothing of it is read), and while it is read when it
comes without one (chunked); refused with 408 when it does not arrive within ``body_timeout``. Either
answer closes the connection (a body left unread cannot be told from the next request). So a request
refused for its body never reaches an endpoint, and changes nothing.

A body is checked before it is believed (:func:`read_json`): its size while it is read (413 past the app's
``client_max_size``), its nesting before it is parsed (400 deeper than
:data:`~rxagent.agent.inputs.MAX_NESTING`, so no parser recursion is ever at stake), and its text after
(400 for a string with a lone surrogate, ``"\\udc80"``, which JSON can spell but UTF-8 cannot encode: it
would make the session's log unreadable). A session whose log holds a fact that cannot be read is answered
409, naming the fact (:class:`~rxagent.session.UnreadableFactError`), never 500.
"""

from __future__ import annotations

import json
import logging
import re
from array import array
from collections.abc import Awaitable, Callable, Mapping
from itertools import accumulate
from typing import Any, cast

from aiohttp import web

from rxagent.agent.inputs import MAX_NESTING, InvalidInputError, check_input_value
from rxagent.clock import Clock
from rxagent.session import UnreadableFactError

__all__ = ["ApiError", "JsonObject", "bodies", "json_errors", "json_response", "read_json"]

JsonObject = dict[str, Any]
"""A decoded JSON object (a request body)."""

_log = logging.getLogger("rxagent.serve")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiError(Exception):
    """A request refused: ``status`` (4xx, or 503 while stopping) and a message for whoever sent it.

    The message must not repeat secrets; it may name what was wrong with the input. ``details`` are more
    fields of the answer beside ``"error"`` (the call and the answer taken, for a second answer).
    """

    def __init__(self, status: int, message: str, **details: Any) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.details = details
        """More fields of the answer, beside ``error``: what a client needs to act on it (JSON values)."""


def json_response(data: Mapping[str, Any], status: int = 200) -> web.Response:
    """``data`` as a compact JSON answer (never cached: it is a session's current state). Text with a lone
    surrogate (from a log written before such input was refused) is sent ``\\u``-escaped, as JSON allows,
    instead of failing the answer."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    try:
        body = text.encode()
    except UnicodeEncodeError:
        body = json.dumps(data, separators=(",", ":")).encode()
    return web.Response(
        body=body,
        status=status,
        content_type="application/json",
        headers={"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"},
    )


async def read_json(request: web.Request, limit: int) -> JsonObject:
    """The request's body: a JSON object sent as ``application/json``, at most ``limit`` bytes (the app's
    ``client_max_size``, which aiohttp enforces while reading).

    Raises:
        ApiError: 415 another content type (a cross-site form cannot send JSON without asking first);
            413 a body over the limit; 400 a body that is not JSON, or not an object, nests deeper than
            :data:`~rxagent.agent.inputs.MAX_NESTING`, or holds text that is not valid Unicode (a lone
            surrogate).
    """
    if request.content_type != "application/json":
        raise ApiError(415, f"send the body as application/json, not {request.content_type or 'nothing'}")
    try:
        raw = await request.read()
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, _over(limit)) from None
    shallow = _shallow(raw, MAX_NESTING)  # before parsing: the parser recurses once per level
    try:
        body: Any = json.loads(raw)
    except RecursionError:  # the parser's own limit, far past ours: refused before it could go deeper
        raise ApiError(400, f"the body nests lists and objects deeper than {MAX_NESTING} levels") from None
    except ValueError as error:  # UnicodeDecodeError included
        raise ApiError(400, f"the body is not valid JSON: {error}") from None
    if not shallow and _depth(raw) > MAX_NESTING:
        raise ApiError(400, f"the body nests lists and objects deeper than {MAX_NESTING} levels")
    if not isinstance(body, dict):
        raise ApiError(400, f"the body must be a JSON object, not {type(body).__name__}")
    if _SURROGATE_ESCAPE.search(raw) is not None:  # only an escape can spell a lone surrogate in UTF-8 JSON
        try:
            check_input_value(cast("dict[str, object]", body), "body")
        except InvalidInputError as error:
            raise ApiError(400, str(error)) from None
    return body  # pyright: ignore[reportUnknownVariableType]


_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
_MARKS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")
_NOT_BRACKETS = bytes(c for c in range(256) if c not in b"[]{}")
_BRACKET_OUTSIDE_STRINGS = re.compile(rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|([\[\]{}])')


def _deepest(marks: bytes) -> int:
    """The deepest nesting a sequence of brackets reaches (C speed: no loop in Python)."""
    signed = array("b", marks.translate(_MARKS))  # +1 opens, -1 closes
    return max(accumulate(signed), default=0)


def _shallow(raw: bytes, limit: int) -> bool:
    """Whether ``raw`` surely nests no deeper than ``limit``: counting every bracket, inside strings too
    (the usual case, decided without parsing; ``False`` means "look closer", see :func:`_depth`)."""
    marks = raw.translate(None, _NOT_BRACKETS)
    return len(marks) <= limit or _deepest(marks) <= limit


def _depth(raw: bytes) -> int:
    """How deep the *valid* JSON text ``raw`` nests (strings skipped whole; on text that is not JSON an
    unclosed string could make the scan slow, so it runs only after the parser accepted ``raw``)."""
    return _deepest(b"".join(_BRACKET_OUTSIDE_STRINGS.findall(raw)))


def bodies(max_body: int, timeout: float, clock: Clock) -> Any:
    """The middleware that reads a request's body whole before the endpoint runs (see the module):
    at most ``max_body`` bytes (413 at once from a larger ``Content-Length``), within ``timeout`` seconds
    on ``clock`` (408)."""

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.body_exists:
            length = request.content_length
            if length is not None and length > max_body:
                raise ApiError(413, _over(max_body))
            try:
                async with clock.timeout(timeout):
                    await request.read()  # kept by the request: the endpoint's read returns it
            except TimeoutError:
                raise ApiError(408, f"the body did not arrive whole within {timeout:g} s") from None
            except web.HTTPRequestEntityTooLarge:
                raise ApiError(413, _over(max_body)) from None
        return await handler(request)

    return middleware


def _over(limit: int) -> str:
    return f"the body is over the limit of {limit} bytes"


@web.middleware
async def json_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Answer refusals (:class:`ApiError`, aiohttp's HTTP errors) as ``{"error": ...}``; an unexpected
    failure as a 500 that says nothing of its cause (the log has it). An answer given before the body
    was read whole closes the connection."""
    response = await _answer(request, handler)
    if not request.content.is_eof() and not response.prepared:
        response.force_close()  # what is left of the body cannot be told from a next request
    return response


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except ApiError as error:
        return json_response({**error.details, "error": error.message}, error.status)
    except UnreadableFactError as error:  # the session can say where its log broke: no 500 on every read
        return json_response(
            {
                "error": f"the session cannot be read: {error}; fork it before that fact to go on",
                "unreadable_fact": error.seq,
            },
            409,
        )
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
