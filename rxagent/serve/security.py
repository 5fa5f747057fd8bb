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

The health checks (``GET /healthz``, ``GET /readyz``) need no token: a load balancer calls them without
one, and they say nothing but whether the server can work.

**Behind a reverse proxy** (:func:`behind_proxies`, with ``ServeSettings.trusted_proxies``). A proxy that
ends TLS talks plain HTTP to the server, so the page's origin (``https://agents.example``) is not the
connection's (``http://127.0.0.1:8765``). From a listed proxy's address, and from no other, the request's
scheme, host and client are those its ``X-Forwarded-Proto``, ``X-Forwarded-Host`` (else ``Host``) and
``X-Forwarded-For`` say (of a list, the last entry: the one the listed proxy wrote). The origin check, the
cookie's ``Secure`` flag and the access log then see the request as the browser sent it. Anyone else's
``X-Forwarded-*`` headers are ignored, so a client that reaches the server directly cannot claim another
origin.

Bodies are limited by the app (``client_max_size``: 413), and JSON bodies must say ``application/json``
(415), which a cross-site form cannot send without asking first.

The access log (:class:`RedactedAccessLogger`) writes the path without its query string, so a token sent
as a query parameter never reaches a log line; nothing else the server logs carries request data.

**Front ends on other origins.** The origins ``ServeSettings.allow_origins`` lists (``--allow-origin``) pass
the origin check, and their preflights are answered (:mod:`rxagent.serve.cors`); they still need the token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import re
from typing import Any

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger

from rxagent.serve.cors import listed_origin, normal_origin
from rxagent.serve.http import ApiError, Handler
from rxagent.serve.settings import ProxyNetwork, ServeSettings, is_loopback, proxy_networks

__all__ = [
    "HEALTH_PATHS",
    "TOKEN_COOKIE",
    "TOKEN_QUERY",
    "RedactedAccessLogger",
    "behind_proxies",
    "guard",
    "token_cookie",
]

TOKEN_QUERY = "token"
"""The query parameter that may carry the token (for ``EventSource`` and page loads)."""
TOKEN_COOKIE = "rxagent_token"
"""The start of the name of the cookie that may carry the token (see :func:`token_cookie`)."""

HEALTH_PATHS = frozenset({"/healthz", "/readyz"})
"""The health checks, which need no token (see :mod:`rxagent.serve.health`)."""

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
        elif not _carries(request, token) and not (
            request.path in HEALTH_PATHS and request.method in ("GET", "HEAD")
        ):
            raise ApiError(
                401,
                "this server needs its token: send 'Authorization: Bearer <token>' "
                "(a browser: open /?token=<token> once, and the dashboard keeps it in a cookie)",
            )
        if request.method not in _SAFE_METHODS:
            _check_origin(request, origins)
        return await handler(request)

    return middleware


def behind_proxies(settings: ServeSettings) -> Any:
    """The middleware that takes the scheme, host and client of a request from its ``X-Forwarded-*``
    headers when, and only when, it comes from a trusted proxy (see the module); it runs before
    :func:`guard`."""
    networks = proxy_networks(settings.trusted_proxies)

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        if _from(request.remote, networks):
            changes: dict[str, str] = {}
            proto = _last(request.headers.get("X-Forwarded-Proto")).lower()
            if proto in ("http", "https"):
                changes["scheme"] = proto
            host = _last(request.headers.get("X-Forwarded-Host"))
            if _HOST.fullmatch(host):
                changes["host"] = host
            client = _last(request.headers.get("X-Forwarded-For"))
            if client:
                changes["remote"] = client
                request[_FORWARDED_FOR] = client  # for the access log, which sees the request unchanged
            if changes:
                request = request.clone(**changes)  # pyright: ignore[reportArgumentType]
        return await handler(request)

    return middleware


_FORWARDED_FOR = web.RequestKey("rxagent.forwarded_for", str)
"""Where a request from a trusted proxy keeps the client the proxy names."""

_HOST = re.compile(r"(?:[A-Za-z0-9](?:[A-Za-z0-9.-]{0,252})|\[[0-9A-Fa-f:.]{2,45}\])(?::[0-9]{1,5})?")
"""A host as ``X-Forwarded-Host`` may name it (a name or an address, and a port); anything else is ignored."""


def _from(remote: str | None, networks: tuple[ProxyNetwork, ...]) -> bool:
    """Whether the peer address ``remote`` is in one of ``networks``."""
    if remote is None:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped  # a dual-stack socket's view of an IPv4 proxy
    return any(address in network for network in networks)


def _last(value: str | None) -> str:
    """The last entry of a comma-separated header (the one the nearest proxy wrote), trimmed."""
    return value.rsplit(",", 1)[-1].strip() if value else ""


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
    if normal_origin(origin) != own:
        raise ApiError(403, f"requests from another origin may not change anything here{_LET_IN}")


class RedactedAccessLogger(AbstractAccessLogger):
    """One line per request: client (the one a trusted proxy names, behind one), method, path (never the
    query string: it may carry the token), status and time."""

    def log(self, request: web.BaseRequest, response: web.StreamResponse, time: float) -> None:
        """Write the request's line."""
        client = request.get(_FORWARDED_FOR) or request.remote
        self.logger.info(
            "%s %s %s %d %.3fs", client or "-", request.method, request.path, response.status, time
        )

    @property
    def enabled(self) -> bool:
        """Whether the logger writes anything (it skips the work when not)."""
        return self.logger.isEnabledFor(logging.INFO)
