"""The dashboard: one page at ``/``, shipped in the package, that watches and drives the sessions.

The page (``dashboard.html`` beside this module: inline CSS and JavaScript, SVG for the token chart; no
build step, nothing loaded from another site) reads only the public HTTP API of :mod:`rxagent.serve`: the
sessions list as it changes (``GET /api/feed``, :mod:`rxagent.serve.session_list`), each session's status
and its feed (read with ``fetch``, so a burst of facts is taken a few milliseconds at a time; a reconnect
resumes with ``Last-Event-ID``, and the page drops any fact whose ``seq`` it has rendered), a model call's
request and a session's state at a step (:mod:`rxagent.serve.trace`), its background tasks (``tasks``),
and the ``runs``, ``steer``, ``respond``, ``reconcile``, ``interrupt`` and ``DELETE`` endpoints.

What it shows, and how it stays fast:

- **The conversation only**: the user's messages and the answers, rendered as Markdown by a small parser
  in the page (elements made one by one, never HTML: a tag is text, code stays text, links only to http(s),
  opening apart with ``rel="noopener noreferrer"``); terminal escapes are removed and other control
  characters and bidirectional overrides shown as visible escapes, as the command line shows them. Each
  error is said once. Deltas are appended to one text node per answer, drawn once per animation frame, and
  the blocks that are complete are rendered then, so a piece costs the same however long the answer; old
  turns fold away behind a button.
- **A trace**: runs, their steps (``StepStarted``), model calls, tool calls and the runs nested in them (an
  agent used as a tool, under the call that started it), each with its duration, tokens and status; a
  model call the run left unanswered is failed, not running. A click on a model call shows its request, on
  a step the session's state there, on a tool call its arguments, progress and result.
- **Approvals for several operators**: a card per waiting call (approve, deny, approve with edited
  arguments, always allow the tool in this session, approve all); a call answered elsewhere (another tab,
  another client, a rule of the session) says who answered, and its buttons go; edited arguments replace
  the shown ones.
- **The sessions list**: titles, states, search, delete; the queued runs of a session, each cancellable;
  a layout for narrow screens; Enter sends, Shift+Enter is a new line; a sign-in form when the server wants
  its token.
- **A harness's todos and tasks**: the todo list (from the feed's ``extras`` facts) and the background
  tasks with their status and a link to each one's session, which is shown read-only.

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

**Signing in.** A browser that opens ``/`` without the token (or with a wrong one) gets a sign-in page
instead of the API's JSON refusal (:func:`sign_in`; still a ``401``): one form that opens ``/?token=…``,
so the token goes the way above, into the cookie, and leaves the address bar at once. The page shows the
same form when the server refuses it later (the cookie was cleared, or the server has a new token).
"""

from __future__ import annotations

import base64
import functools
import hashlib
import hmac
import re
from importlib import resources

from aiohttp import web

from rxagent.serve.http import ApiError, Handler
from rxagent.serve.hub import HUB
from rxagent.serve.security import TOKEN_QUERY, token_cookie

__all__ = ["PAGE", "content_policy", "page", "routes", "sign_in", "sign_in_page"]

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
    return text.encode(), content_policy(text)


def content_policy(text: str) -> str:
    """The ``Content-Security-Policy`` for a page ``text``: its own inline scripts and styles (by hash), and
    connections, forms and images of this server only."""
    scripts = " ".join(_digest(body) for body in re.findall(r"<script>(.*?)</script>", text, re.S))
    styles = " ".join(_digest(body) for body in re.findall(r"<style>(.*?)</style>", text, re.S))
    return (
        f"default-src 'none'; script-src {scripts}; style-src {styles}; connect-src 'self'; "
        "img-src data:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


_SIGN_IN_STYLE = """
body { margin: 0; min-height: 100vh; display: grid; place-items: center; background: #f6f7f9;
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232b; }
main { background: #fff; border: 1px solid #dfe3e8; border-radius: 10px; padding: 24px 28px;
  width: min(380px, 92vw); }
h1 { font-size: 20px; margin: 0 0 6px; }
form { display: grid; gap: 8px; margin: 14px 0; }
input, button { font: inherit; border-radius: 6px; padding: 7px 10px; }
input { border: 1px solid #dfe3e8; }
button { border: 1px solid #2f6fdb; background: #2f6fdb; color: #fff; cursor: pointer; }
.error { color: #d2473c; margin: 0; }
.note { color: #6a7380; font-size: 13px; margin: 0; }
"""

_SIGN_IN = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>rxagent: sign in</title>
<link rel="icon" href="data:,">
<style>{style}</style>
</head>
<body>
<main>
<h1>rxagent</h1>
<p class="note">This server needs its token.</p>
<form id="sign-in" method="get" action="/" autocomplete="off">
<label for="token">Token</label>
<input id="token" name="token" type="password" required autofocus>
<button type="submit">Sign in</button>
</form>
{said}<p class="note">The token is then kept in an HttpOnly cookie for this server, out of the address bar.
A program sends it as <code>Authorization: Bearer &lt;token&gt;</code>; a link can open
<code>/?token=&lt;token&gt;</code> once.</p>
</main>
</body>
</html>
"""


@functools.cache
def sign_in_page(wrong: bool) -> tuple[bytes, str]:
    """The sign-in page (``wrong``: saying the token given was not this server's) and its
    ``Content-Security-Policy``: no script at all, its own style by hash, its form sent here only."""
    said = '<p class="error" role="alert">That is not this server\'s token.</p>\n' if wrong else ""
    text = _SIGN_IN.format(style=_SIGN_IN_STYLE, said=said)
    policy = (
        f"default-src 'none'; style-src {_digest(_SIGN_IN_STYLE)}; img-src data:; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    )
    return text.encode(), policy


@web.middleware
async def sign_in(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The middleware (between the JSON errors and the guard) that answers a browser's ``GET /`` refused
    for want of the token with the sign-in page (still ``401``) instead of the API's JSON."""
    try:
        return await handler(request)
    except ApiError as refused:
        if refused.status != 401 or request.path != "/" or request.method not in ("GET", "HEAD"):
            raise
        body, policy = sign_in_page(TOKEN_QUERY in request.query)
        return web.Response(
            body=body,
            status=401,
            content_type="text/html",
            charset="utf-8",
            headers={**_HEADERS, "Content-Security-Policy": policy, "Cache-Control": "no-store"},
        )


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
