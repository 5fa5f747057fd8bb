"""Front ends on other origins: pages served elsewhere (a dev server on ``http://localhost:5173``, an app's
own site) that call the server from the browser, with CORS.

By default the server lets no other origin in: a browser's preflight is refused, and a change a page of
another origin sends is refused by the origin check (:mod:`rxagent.serve.security`). ``ServeSettings
.allow_origins`` (``rxagent serve --allow-origin ORIGIN``, repeatable) names the origins whose pages may
call it:

==================================  =====================================================================
request                             answer
==================================  =====================================================================
preflight (``OPTIONS`` with         ``204`` with ``Access-Control-Allow-Origin: <the origin>``, the methods
``Origin`` and ``Access-Control-    (``GET, POST, DELETE``), the headers (:data:`ALLOWED_HEADERS`) and
Request-Method``) from a listed     ``Access-Control-Max-Age: 600``. No token is asked: a browser never
origin                              sends one with a preflight, and the answer says nothing but this policy
a preflight from another origin     ``403``, naming the option that would allow it
any other request from a listed     as without CORS (the token is still needed, sent as
origin                              ``Authorization: Bearer …``), and its answer, a stream's included,
                                    carries ``Access-Control-Allow-Origin`` and ``Vary: Origin``; a change
                                    passes the origin check
==================================  =====================================================================

Credentials are not allowed across origins (no ``Access-Control-Allow-Credentials``): a browser sends a
listed origin's page no cookie of this server, so the dashboard's token cookie never acts for another site;
the page sends the token itself. An origin is allowed by its exact name (scheme, host, port), never by a
pattern.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from aiohttp import web

from rxagent.serve.http import Handler, json_response

__all__ = ["ALLOWED_HEADERS", "allow_cross_origin", "listed_origin", "normal_origin", "origin_of"]

ALLOWED_HEADERS = "Authorization, Content-Type, Last-Event-ID, traceparent, tracestate"
"""The request headers a listed origin's page may send (what the API reads)."""

_METHODS = "GET, POST, DELETE"
_ORIGIN = re.compile(r"(https?)://(\[[0-9a-f:.]+\]|[a-z0-9](?:[a-z0-9.-]*[a-z0-9])?)(?::([0-9]{1,5}))?")


def origin_of(text: str) -> str:
    """``text`` as a browser writes an origin in its ``Origin`` header: ``scheme://host[:port]``, lowercase,
    without a trailing ``/``.

    Raises:
        ValueError: not an ``http`` or ``https`` origin (a path, a wildcard, another scheme, a port out of
            range).
    """
    origin = normal_origin(text)
    match = _ORIGIN.fullmatch(origin)
    if match is None or (match.group(3) is not None and int(match.group(3)) > 65535):
        raise ValueError(
            f"{text!r} is not an origin: give the scheme, host and port as the browser shows them, such as "
            "http://localhost:5173 (no path, no wildcard)"
        )
    return origin


def normal_origin(text: str) -> str:
    """An origin as compared here: without surrounding space, lowercase, without a trailing ``/``."""
    return text.strip().lower().removesuffix("/")


def listed_origin(request: web.BaseRequest, origins: frozenset[str]) -> str | None:
    """The request's ``Origin`` when it is one of ``origins`` (``None`` otherwise)."""
    origin = request.headers.get("Origin")
    if origin is None or not origins:
        return None
    normal = normal_origin(origin)
    return normal if normal in origins else None


def allow_cross_origin(app: web.Application, origins: Iterable[str]) -> None:
    """Let the pages of ``origins`` call ``app`` (see the module): preflights are answered before any other
    middleware runs, and every answer to a listed origin gets its CORS headers as it is prepared (streams
    too)."""
    allowed = frozenset(origin_of(o) for o in origins)

    @web.middleware
    async def preflights(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return await handler(request)
        origin = request.headers.get("Origin", "")
        if listed_origin(request, allowed) is None:
            return json_response(
                {
                    "error": f"pages of {origin or 'this origin'} may not call this server: start it with "
                    f"--allow-origin {origin or 'ORIGIN'} (ServeSettings.allow_origins) to let them"
                },
                403,
            )
        return web.Response(
            status=204,
            headers={
                "Access-Control-Allow-Methods": _METHODS,
                "Access-Control-Allow-Headers": ALLOWED_HEADERS,
                "Access-Control-Max-Age": "600",
            },
        )

    async def headers(request: web.Request, response: web.StreamResponse) -> None:
        origin = listed_origin(request, allowed)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            vary = response.headers.get("Vary")
            response.headers["Vary"] = f"{vary}, Origin" if vary else "Origin"

    app.middlewares.insert(0, preflights)  # outermost: a preflight carries no token
    app.on_response_prepare.append(headers)
