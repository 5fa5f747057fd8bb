"""The server: the aiohttp app over one agent, started and stopped cleanly (:class:`AgentServer`).

**Connections.** What aiohttp does, it does: a connection has ``header_timeout`` seconds to send a whole
request head (aiohttp's ``keepalive_timeout``, which also runs from the moment a connection opens, so a
client that sends part of a head and stops is closed then), and header lines and counts have aiohttp's
limits (8190 bytes, 128 headers: 400 past them). What it does not, the server adds: at most
``max_connections`` connections at once (one more is answered ``503`` with ``Retry-After`` and closed
before anything of it is read), the send buffer of each connection (``send_buffer``, set on the listening
socket, whose connections take it), and a deadline for the body (:func:`~rxagent.serve.http.bodies`).
"""

from __future__ import annotations

import asyncio
import logging
import socket
from types import TracebackType
from typing import Self

from aiohttp import web

from rxagent.agent import ReActAgent
from rxagent.serve import agui, dashboard, harness_api, health, session_api, session_list, trace, vercel_ai
from rxagent.serve.cors import allow_cross_origin
from rxagent.serve.http import bodies, json_errors
from rxagent.serve.hub import HUB, SessionHub
from rxagent.serve.security import RedactedAccessLogger, behind_proxies, guard
from rxagent.serve.settings import ServeSettings
from rxagent.session import check_store

__all__ = ["AgentServer", "create_app"]

ACCESS_LOG = logging.getLogger("rxagent.serve.access")
"""One line per request (path without its query string)."""


def create_app(agent: ReActAgent, settings: ServeSettings | None = None) -> web.Application:
    """The aiohttp application serving ``agent``'s sessions: the session API, AG-UI, the AI SDK's chat
    route (:mod:`rxagent.serve.vercel_ai`) and the dashboard page at ``/`` (:mod:`rxagent.serve.dashboard`),
    behind the guard (host, token, origin) and the body limit (see :mod:`rxagent.serve`); front ends on the
    origins the settings allow may call it (:mod:`rxagent.serve.cors`).

    Other routes (a page) may be added to it before it starts; they pass the same guard.
    """
    settings = settings or ServeSettings()
    hub = SessionHub(agent, settings)
    middlewares = [
        json_errors,
        *([behind_proxies(settings)] if settings.trusted_proxies else []),
        dashboard.sign_in,
        guard(settings),
        bodies(settings.max_body, settings.body_timeout, agent.clock),
        hub.scope(),
    ]
    app = web.Application(middlewares=middlewares, client_max_size=settings.max_body)
    app[HUB] = hub
    app.add_routes(session_api.routes())
    app.add_routes(harness_api.routes())
    app.add_routes(agui.routes())
    app.add_routes(vercel_ai.routes())
    allow_cross_origin(app, settings.allow_origins)  # preflights first; pages of listed origins let in
    app.add_routes(dashboard.routes())
    app.add_routes(health.routes())
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
        settings = self.settings
        runner = web.AppRunner(
            self.app,
            handle_signals=False,
            handler_cancellation=True,  # a client that leaves stops its stream's watcher at once
            access_log=ACCESS_LOG,
            access_log_class=RedactedAccessLogger,
            shutdown_timeout=1.0,
            keepalive_timeout=settings.header_timeout,  # from the connection's start too (see the module)
        )
        await runner.setup()
        site = _Site(runner, settings.host, settings.port, settings.max_connections, settings.send_buffer)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self.hub.start()
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


class _Site(web.BaseSite):
    """A TCP site that holds at most ``max_connections`` connections at once (one more gets
    :data:`_BUSY` and is closed) and gives each the send buffer ``send_buffer`` (see the module)."""

    __slots__ = ("_host", "_max_connections", "_port", "_send_buffer")

    def __init__(
        self, runner: web.AppRunner, host: str, port: int, max_connections: int, send_buffer: int | None
    ) -> None:
        super().__init__(runner)
        self._host = host
        self._port = port
        self._max_connections = max_connections
        self._send_buffer = send_buffer

    @property
    def name(self) -> str:
        """Where it listens (as asked)."""
        return f"http://{self._host}:{self._port}"

    async def start(self) -> None:
        """Listen."""
        await super().start()
        server = self._runner.server
        assert server is not None
        limit = self._max_connections

        def connection() -> asyncio.BaseProtocol:
            return server() if len(server.connections) < limit else _Refused()

        self._server = listening = await asyncio.get_running_loop().create_server(
            connection, self._host, self._port, backlog=self._backlog
        )
        if self._send_buffer is not None:
            for sock in listening.sockets:  # accepted connections take the listening socket's
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self._send_buffer)


_BUSY_BODY = b'{"error":"the server has as many connections as it takes: try again in a moment"}'
_BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nCache-Control: no-store\r\n"
    b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
    + str(len(_BUSY_BODY)).encode()
    + b"\r\n\r\n"
    + _BUSY_BODY
)
"""The answer to a connection past ``max_connections``."""


class _Refused(asyncio.Protocol):
    """A connection past the limit: answered :data:`_BUSY` and closed, before anything of it is read."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.WriteTransport)
        transport.write(_BUSY)
        transport.close()
