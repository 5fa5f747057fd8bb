"""The dashboard: one page at ``/``, shipped in the package, that watches and drives the sessions.

The page (``dashboard.html`` beside this module: inline CSS and JavaScript, SVG for the charts; no build
step, nothing loaded from another site) reads only the public HTTP API of :mod:`rxagent.serve`: the
sessions list, each session's status, its feed (``EventSource``, so a reconnect resumes with
``Last-Event-ID``; the page drops any fact whose ``seq`` it has rendered), its background tasks
(``tasks``), and the ``runs``, ``steer``, ``respond`` and ``interrupt`` endpoints. It shows the answer as it
streams, a timeline of model and tool calls, the tokens of each model call, the calls waiting for approval
(approve, deny, approve with edited arguments), the todo list (from the feed's ``extras`` facts), the
background tasks with their status and a link to each one's session (shown read-only), and plays a session
back from its log (replay never runs anything).

Routes, behind the same guard as the rest (:func:`rxagent.serve.security.guard`):

``GET /``
    The page. Sent with a ``Content-Security-Policy`` that allows only its own inline script and style
    (by hash) and connections to this server: even text that escaped the page's escaping could not run.
``GET /?token=<token>``
    With a server token, a browser opens this once: the guard checks the token, and the answer is a
    ``303`` to ``/`` that sets the ``rxagent_token_<port>`` cookie (``HttpOnly``, ``SameSite=Lax``, ``Secure``
    over HTTPS), so the token leaves the address bar and the history and no script of the page can read
    it; the page and its ``EventSource`` then authenticate with the cookie. The page itself never
    contains the token. (A server without a token redirects to ``/`` and sets nothing.)
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from importlib import resources

from aiohttp import web

from rxagent.serve.hub import HUB
from rxagent.serve.security import TOKEN_QUERY, token_cookie

__all__ = ["PAGE", "page", "routes"]

PAGE = "dashboard.html"
"""The page's file name in the ``rxagent.serve`` package."""

_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
}


def routes() -> list[web.RouteDef]:
    """The dashboard's route (``GET /``)."""
    return [web.get("/", get_page)]


@functools.cache
def page() -> tuple[bytes, str]:
    """The page's bytes and the ``Content-Security-Policy`` that lets only its own script and style run.

    Raises:
        FileNotFoundError: the package was installed without its page (a broken wheel).
    """
    text = resources.files("rxagent.serve").joinpath(PAGE).read_text("utf-8")
    scripts = " ".join(_digest(body) for body in re.findall(r"<script>(.*?)</script>", text, re.S))
    styles = " ".join(_digest(body) for body in re.findall(r"<style>(.*?)</style>", text, re.S))
    policy = (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
        "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )
    return text.encode(), policy


def _digest(body: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode()).digest()).decode() + "'"


async def get_page(request: web.Request) -> web.Response:
    """``GET /``: the page; with a ``token`` query parameter (checked by the guard already), a redirect to
    ``/`` that keeps the token in an HttpOnly cookie instead."""
    if TOKEN_QUERY in request.query:
        answer = web.Response(status=303, headers={**_HEADERS, "Location": "/", "Cache-Control": "no-store"})
        token = request.app[HUB].settings.token
        given = request.query[TOKEN_QUERY]
        # The guard let the request in, but by its header if it had one: the parameter is checked here.
        if token is not None and hmac.compare_digest(given.encode(), token.encode()):
            answer.set_cookie(
                token_cookie(request),
                token,
                path="/",
                httponly=True,
                samesite="Lax",
                secure=request.secure or None,
            )
        return answer
    body, policy = page()
    return web.Response(
        body=body,
        content_type="text/html",
        charset="utf-8",
        headers={**_HEADERS, "Content-Security-Policy": policy},
    )
