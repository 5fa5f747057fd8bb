"""The server: the aiohttp app over one agent, started and stopped cleanly (:class:`AgentServer`)."""

from __future__ import annotations

import logging
from types import TracebackType
from typing import Self

from aiohttp import web

from rxagent.agent import ReActAgent
from rxagent.serve import agui, dashboard, session_api, session_list, trace
from rxagent.serve.http import json_errors
from rxagent.serve.hub import HUB, SessionHub
from rxagent.serve.security import RedactedAccessLogger, guard
from rxagent.serve.settings import ServeSettings
from rxagent.session import check_store

__all__ = ["AgentServer", "create_app"]

ACCESS_LOG = logging.getLogger("rxagent.serve.access")
"""One line per request (path without its query string)."""


def create_app(agent: ReActAgent, settings: ServeSettings | None = None) -> web.Application:
    """The aiohttp application serving ``agent``'s sessions: the session API, AG-UI and the dashboard
    page at ``/`` (:mod:`rxagent.serve.dashboard`), behind the guard (host, token, origin) and the body
    limit (see :mod:`rxagent.serve`).

    Other routes (a page) may be added to it before it starts; they pass the same guard.
    """
    settings = settings or ServeSettings()
    app = web.Application(
        middlewares=[json_errors, dashboard.sign_in, guard(settings)], client_max_size=settings.max_body
    )
    app[HUB] = SessionHub(agent, settings)
    app.add_routes(session_api.routes())
    app.add_routes(agui.routes())
    app.add_routes(dashboard.routes())
    session_list.install(app)
    trace.install(app, agent)
    return app


class AgentServer:
    """``agent``'s sessions on HTTP: start it, read :attr:`url`, stop it.

    Use ``async with AgentServer(agent, settings) as server`` or :meth:`start` and :meth:`stop`. The agent
    stays its owner's: stopping the server stops the sessions' work, not the agent (close it after).

    Args:
        agent: the agent whose sessions are served.
        settings: how to listen and guard (default: 127.0.0.1, port 8765).
        app: the application to serve (default: :func:`create_app`), for callers that add routes to it.
    """

    def __init__(
        self, agent: ReActAgent, settings: ServeSettings | None = None, *, app: web.Application | None = None
    ) -> None:
        self.settings = settings or ServeSettings()
        self.app = app if app is not None else create_app(agent, self.settings)
        self.hub = self.app[HUB]
        self._runner: web.AppRunner | None = None
        self._url: str | None = None

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` as it listens (the port the system picked for port 0).

        Raises:
            RuntimeError: not started.
        """
        if self._url is None:
            raise RuntimeError("the server has not started")
        return self._url

    async def start(self) -> None:
        """Reach the agent's session store, then listen (on the running loop).

        Raises:
            Exception: the store cannot be used (see :func:`~rxagent.session.check_store`: a database
                that cannot be reached, say), raised before anything listens.
            OSError: the address cannot be listened on (in use, or not this machine's).
        """
        if self._runner is not None:
            raise RuntimeError("the server has started already")
        await check_store(self.hub.agent.store)  # else every request would answer 500
        self.hub.stopping = False  # a server stopped before takes work again
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            handler_cancellation=True,  # a client that leaves stops its stream's watcher at once
            access_log=ACCESS_LOG,
            access_log_class=RedactedAccessLogger,
            shutdown_timeout=1.0,
        )
        await runner.setup()
        site = web.TCPSite(runner, self.settings.host, self.settings.port)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        host, port = runner.addresses[0][:2]
        self._url = f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"

    async def stop(self) -> None:
        """Stop cleanly: take no new connection; cancel queued runs and interrupt running ones (they end
        ``INTERRUPTED``, their sessions saved; after ``stop_timeout`` seconds what still runs is
        cancelled); let AG-UI streams report their runs' ends; end the event streams; close the
        connections. A no-op when not started."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        for site in list(runner.sites):
            await site.stop()
        try:
            await self.hub.stop()
            await self.hub.end_streams(grace=self.settings.stop_timeout)
        finally:
            await runner.cleanup()
            self._url = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
