"""The health checks a load balancer or an orchestrator calls: ``GET /healthz`` and ``GET /readyz``.

=============  ==========================================================================================
``/healthz``   ``200 {"status": "ok"}`` when the session store answers (a read of one session's head),
               ``503 {"status": "unavailable", "error"}`` when it does not within 5 s: the server cannot
               work without it (a liveness check that restarts the server would not help; an alert may).
``/readyz``    ``200 {"status": "ready"}`` when the server takes work: it is not stopping and its store
               answers; ``503 {"status": "stopping" | "unavailable", "error"}`` otherwise (a load balancer
               sends no new work there).
=============  ==========================================================================================

Neither needs the token (a load balancer calls them without one; see :mod:`rxagent.serve.security`), and
neither says why the store failed (the server's log does: an error could carry a database's address).
"""

from __future__ import annotations

import logging

from aiohttp import web

from rxagent.serve.http import json_response
from rxagent.serve.hub import HUB
from rxagent.session import check_store

__all__ = ["STORE_TIMEOUT", "routes"]

STORE_TIMEOUT = 5.0
"""Seconds the store has to answer a health check."""

_log = logging.getLogger("rxagent.serve")


def routes() -> list[web.RouteDef]:
    """The health checks' routes."""
    return [web.get("/healthz", get_health), web.get("/readyz", get_ready)]


async def get_health(request: web.Request) -> web.Response:
    """``GET /healthz``: whether the session store answers."""
    if not await _store_answers(request):
        return _unavailable()
    return json_response({"status": "ok"})


async def get_ready(request: web.Request) -> web.Response:
    """``GET /readyz``: whether the server takes work (not stopping, its store answering)."""
    if request.app[HUB].stopping:
        return json_response({"status": "stopping", "error": "the server is stopping"}, 503)
    if not await _store_answers(request):
        return _unavailable()
    return json_response({"status": "ready"})


async def _store_answers(request: web.Request) -> bool:
    agent = request.app[HUB].agent
    try:
        async with agent.clock.timeout(STORE_TIMEOUT):
            await check_store(agent.store)
    except Exception as error:  # TimeoutError included: a database that does not answer
        _log.warning("health check: the session store does not answer: %s: %s", type(error).__name__, error)
        return False
    return True


def _unavailable() -> web.Response:
    return json_response(
        {"status": "unavailable", "error": "the session store does not answer (the server's log says why)"},
        503,
    )
