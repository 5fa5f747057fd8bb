"""Who may talk to the server: the host it answers to, the token, the origin of changes; and a log that
keeps secrets out.

Every request passes :func:`guard` before it reaches an endpoint (unknown paths included):

1. **Host.** Without a token the server is on loopback, and it answers only requests addressed to a
   loopback name (``Host: 127.0.0.1:…``, ``localhost``, ``[::1]``) or to the host it was bound to: a page on
   another site cannot reach it through DNS rebinding (its requests carry that site's name). 421 otherwise.
2. **Token.** With a token, every request carries it: ``Authorization: Bearer <token>``, or, where a
   browser cannot set headers (``EventSource``, a page load), a ``token`` query parameter or the
   ``rxagent_token_<port>`` cookie (:func:`token_cookie`). Compared in constant time. 401 otherwise (the
   answer never repeats it).
3. **Origin.** A request that changes something (any method but GET, HEAD, OPTIONS) and comes from a
   browser page must come from the server's own origin: an ``Origin`` other than
   ``<scheme>://<Host>`` (``null`` included), or ``Sec-Fetch-Site: cross-site``, is refused with 403.
   Requests without those headers (programs, ``curl``) are not browser pages and pass.

Bodies are limited by the app (``client_max_size``: 413), and JSON bodies must say ``application/json``
(415), which a cross-site form cannot send without asking first.

The access log (:class:`RedactedAccessLogger`) writes the path without its query string, so a token sent
as a query parameter never reaches a log line; nothing else the server logs carries request data.

**Front ends on other origins.** The origins ``ServeSettings.allow_origins`` lists (``--allow-origin``) pass
the origin check, and their preflights are answered (:mod:`rxagent.serve.cors`); they still need the token.
"""

from __future__ import annotations

import hmac
import logging
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from rxagent.serve.cors import listed_origin
from rxagent.serve.http import ApiError, Handler
from rxagent.serve.settings import ServeSettings, is_loopback

__all__ = ["TOKEN_COOKIE", "TOKEN_QUERY", "RedactedAccessLogger", "guard", "token_cookie"]

TOKEN_QUERY = "token"
"""The query parameter that may carry the token (for ``EventSource`` and page loads)."""
TOKEN_COOKIE = "rxagent_token"
"""The start of the name of the cookie that may carry the token (see :func:`token_cookie`)."""

_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def guard(settings: ServeSettings) -> Any:
    """The middleware that checks host, token and origin (see the module); refusals raise
    :class:`~rxagent.serve.http.ApiError`."""
    token = settings.token.encode() if settings.token is not None else None
    bound = settings.host.strip().lower().removeprefix("[").removesuffix("]")
    origins = frozenset(settings.allow_origins)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if token is None:
            name = _host_name(request.host)
            if not (is_loopback(name) or name == bound):
                raise ApiError(421, "this server answers requests addressed to its loopback address only")
        elif not _carries(request, token):
            raise ApiError(
                401,
                "this server needs its token: send 'Authorization: Bearer <token>' "
                "(a browser: open /?token=<token> once, and the dashboard keeps it in a cookie)",
            )
        if request.method not in _SAFE_METHODS:
            _check_origin(request, origins)
        return await handler(request)

    return middleware


def _host_name(host: str) -> str:
    """The name in a ``Host`` header, without the port (``[::1]:80`` → ``::1``)."""
    name = host.strip().lower()
    if name.startswith("["):
        return name[1 : name.find("]")] if "]" in name else name[1:]
    return name.rsplit(":", 1)[0] if name.count(":") == 1 else name


def _carries(request: web.Request, token: bytes) -> bool:
    given: str | None = None
    authorization = request.headers.get("Authorization", "")
    scheme, _, credentials = authorization.partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        given = credentials.strip()
    elif TOKEN_QUERY in request.query:
        given = request.query[TOKEN_QUERY]
    else:
        given = request.cookies.get(token_cookie(request))
    return given is not None and hmac.compare_digest(given.encode(), token)


def token_cookie(request: web.Request) -> str:
    """The name of the cookie that carries this server's token: ``rxagent_token_<port>``, after the port the
    request came to. Browsers keep one host's cookies for all its ports, so two servers on one host (the
    scale-out set-up, with two tokens) would otherwise overwrite each other's cookie."""
    return f"{TOKEN_COOKIE}_{request.url.port}"


_LET_IN = " (a front end's origin is let in with --allow-origin ORIGIN, ServeSettings.allow_origins)"


def _check_origin(request: web.Request, allowed: frozenset[str]) -> None:
    if listed_origin(request, allowed) is not None:  # a front end the operator let in (--allow-origin)
        return
    if request.headers.get("Sec-Fetch-Site", "").lower() == "cross-site":
        raise ApiError(403, f"cross-site requests may not change anything here{_LET_IN}")
    origin = request.headers.get("Origin")
    if origin is None:
        return
    own = f"{request.scheme}://{request.host}".lower()
    if origin.strip().lower().rstrip("/") != own:
        raise ApiError(403, f"requests from another origin may not change anything here{_LET_IN}")


class RedactedAccessLogger(AbstractAccessLogger):
    """One line per request: client, method, path (never the query string: it may carry the token),
    status and time."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Write the request's line."""
        self.logger.info(
            "%s %s %s %d %.3fs", request.remote or "-", request.method, request.path, response.status, time
        )

    @property
    def enabled(self) -> bool:
        """Whether the logger writes anything (it skips the work when not)."""
        return self.logger.isEnabledFor(logging.INFO)
