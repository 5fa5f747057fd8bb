"""MCP tools: the tools of a Model Context Protocol server, registered as ordinary rxagent tools.

:func:`add_mcp_server` connects to a server over **stdio** (:class:`StdioServer`: the server runs as a
subprocess) or **streamable HTTP** (:class:`HttpServer`), lists its tools (every page), and registers
each one in a :class:`~rxagent.tools.Toolkit` as a :class:`~rxagent.tools.SchemaTool` whose parameters
are the server's ``inputSchema``. From there an MCP tool is like any other: the executor validates the
model's arguments against that schema before anything is sent, the permission gate decides on it by
name and arguments, timeouts and cancellation apply. Needs the extra: ``pip install 'rxagent[mcp]'``
(the official ``mcp`` SDK, 2.x).

What a call returns:
    The text blocks of the MCP result, joined with newlines; other blocks are summarised
    (``[image: image/png]``, ``[audio: audio/wav]``, ``[resource: file:///a.txt, text/plain]``), an
    embedded text resource gives its text, and a result with only structured content gives that as JSON.
    An ``isError`` result, or a JSON-RPC error the server answers with, raises :class:`MCPToolError`, which
    the executor turns into an ``error`` result the model can read. A connection that is closed or broken
    (the server process died, the HTTP server went away) raises
    :class:`~rxagent.tools.ToolSystemError`: the infrastructure is down, which is not the model's to fix.

Lifecycle:
    The SDK's transports and session are anyio context managers that must be entered and exited by one
    task, so each connection has a dedicated task that opens them, waits until it is told to stop, and
    closes them. Tool calls are sent from the callers' own tasks (the SDK correlates concurrent requests
    on one session by id). ``await toolkit.aclose()`` (or :meth:`MCPConnection.aclose`) unregisters the
    connection's tools and stops that task, which ends the session: a stdio server gets its stdin
    closed and is terminated if it does not exit, an HTTP session is deleted. Close the toolkit before
    the event loop ends (``async with Toolkit() as toolkit:``): a connection task cancelled by the loop's
    shutdown cannot be relied on to stop a subprocess.

Cancellation:
    Disposing a running call (or its timeout) cancels the task that awaits the SDK's request; the SDK
    then tells the server (``notifications/cancelled`` on stdio and 2025-era HTTP sessions; on 2026-era
    HTTP sessions, by closing the request's response stream) and drops the late response. The session
    stays open for the next call.

Secrets of an HTTP server's URL:
    Its user name and password (``http://user:password@host/mcp``) never reach the SDK: the SDK is given
    the URL without them and they travel as HTTP Basic credentials in a header, by
    :func:`rxagent.redaction.split_credentials` as the model client sends its own (``Authorization``,
    or ``Proxy-Authorization`` when ``headers`` hold an ``Authorization``). A query secret
    (``?token=…``) cannot be moved out of the URL, and the SDK and its HTTP library log the URL (at DEBUG
    and INFO: ``Connecting to StreamableHTTP endpoint: …``, ``HTTP Request: POST …``), the server's
    redirects and messages (a ``Location``, an error quoting what it refused), and the exceptions they
    carry: while a session is open, a :class:`~rxagent.redaction.RedactingFilter` on the loggers of the
    SDK (``mcp.*`` and its session's ``client``) and of its HTTP library (``httpx2``, ``httpcore2``)
    masks the URL's secrets, the Basic token and the credentials in ``headers`` in their records. The
    same secrets are masked in the errors raised here, whose cause is left out when its traceback would
    show one.

Also:
    Progress notifications of a call become :class:`~rxagent.tools.ToolCallProgress` events. The tool
    list is read once, at connect (``notifications/tools/list_changed`` is not followed). Requests from
    the server (sampling, elicitation, roots) are answered with the SDK's default refusal.

Example:
    >>> from rxagent.tools.mcp import StdioServer
    >>> StdioServer("uvx", ["mcp-server-fetch"]).args
    ('mcp-server-fetch',)
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import traceback
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, cast

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from yarl import URL

from rxagent.redaction import (
    RedactingFilter,
    header_secrets,
    mask_url,
    redact,
    split_credentials,
    url_secrets,
)
from rxagent.tools._tool import SchemaTool, ToolContext, ToolSystemError, ToolTraits
from rxagent.tools.toolkit import Toolkit

try:
    import anyio
    import httpx2
    from mcp import Client, StdioServerParameters, types
    from mcp.client.stdio import stdio_client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import MCPError
except ImportError as error:  # the extra is missing, or an mcp 1.x is installed
    raise ImportError(
        "rxagent.tools.mcp needs the official MCP SDK (mcp 2.x): pip install 'rxagent[mcp]'"
    ) from error

__all__ = ["HttpServer", "MCPConnection", "MCPToolError", "StdioServer", "add_mcp_server"]

_log = logging.getLogger("rxagent")

_MAX_PAGES = 1000
"""A server that keeps returning a next cursor cannot keep the connection listing forever."""

_TRANSPORT_ERRORS = (OSError, httpx2.TransportError, anyio.BrokenResourceError, anyio.ClosedResourceError)
"""Failures below the protocol (a pipe or socket gone): the connection is lost, not the call wrong."""

_SDK_LOGGER_FAMILIES = frozenset({"mcp", "httpx2", "httpcore2", "client"})
"""Where the SDK's HTTP client logs: ``mcp.*``, its session's ``client``, and its HTTP library's loggers."""

_LOG_MASK = RedactingFilter()
"""Masks the secrets of the open HTTP sessions in the records of the SDK's loggers (see the module)."""

_NAME = re.compile(r"[A-Za-z0-9_-]+")
_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class StdioServer:
    """An MCP server that runs as a subprocess and talks over its stdin and stdout.

    Attributes:
        command: the executable (``"uvx"``, ``"npx"``, ``sys.executable``).
        args: its arguments.
        env: extra environment variables. The subprocess does not inherit the whole environment, only
            the SDK's safe set (``HOME``, ``PATH``, ``SHELL``, ``TERM``, ``USER``, ``LOGNAME``) plus these.
        cwd: working directory (``None``: this process's).
    """

    command: str
    args: Sequence[str] = ()
    env: Mapping[str, str] | None = None
    cwd: str | os.PathLike[str] | None = None

    def __post_init__(self) -> None:
        if not self.command:
            raise ValueError("StdioServer needs a command")
        if isinstance(self.args, str):
            raise TypeError("StdioServer args must be a sequence of strings, not one string")
        object.__setattr__(self, "args", tuple(self.args))

    @property
    def label(self) -> str:
        """How messages name this server before it has told its own name."""
        return " ".join([self.command, *self.args])


@dataclass(frozen=True, slots=True)
class HttpServer:
    """An MCP server reached over streamable HTTP.

    Attributes:
        url: the MCP endpoint (``http://127.0.0.1:8000/mcp``). Credentials in it
            (``http://user:password@host/mcp``) are sent as Basic credentials, never in the URL; messages,
            logs and the repr show it through :func:`~rxagent.redaction.mask_url` (credentials and query
            secrets masked). See the module.
        headers: sent with every request (``{"Authorization": "Bearer …"}``); the repr shows their names.

    Raises:
        ValueError: ``url`` is not an absolute http(s) URL; its user name holds a ``:``; its credentials
            belong in ``Proxy-Authorization`` (``headers`` hold an ``Authorization``) and ``headers`` set
            that header too. The message shows the URL masked.
    """

    url: str
    headers: Mapping[str, str] = field(default_factory=lambda: {})

    def __post_init__(self) -> None:
        _http_request(self)  # refuses a bad URL now rather than at connect

    def __repr__(self) -> str:
        # The URL masked, and only the names of the headers: their values are often credentials.
        return f"HttpServer(url={mask_url(self.url)!r}, headers={sorted(self.headers)!r})"

    @property
    def label(self) -> str:
        """How messages name this server before it has told its own name: its URL, masked."""
        return mask_url(self.url)


@dataclass(frozen=True, slots=True, repr=False)
class _HttpRequest:
    """What an :class:`HttpServer` becomes on the wire: its URL has no credentials, its headers carry them."""

    url: str
    headers: dict[str, str]
    secrets: tuple[str, ...]
    """What is masked in logs and errors: the URL's secrets, the Basic token, credentials in headers."""

    def __repr__(self) -> str:
        # Held by a connection, so shown by repr(vars(connection)): masked as the server's own repr is.
        return f"_HttpRequest(url={mask_url(self.url)!r}, headers={sorted(self.headers)!r})"


def _http_request(server: HttpServer) -> _HttpRequest:
    """The URL, headers and secrets of requests to ``server``.

    Raises:
        ValueError: see :class:`HttpServer`.
    """
    try:
        given = URL(server.url)
    except ValueError:
        given = None
    if given is None or given.scheme not in ("http", "https") or not given.host:
        raise ValueError(
            f"HttpServer url must be an absolute http:// or https:// URL, got {mask_url(server.url)!r}"
        )
    bare, credentials = split_credentials(given, taken=server.headers, what="HttpServer url")
    headers = dict(server.headers)
    secrets = [*url_secrets(given), *header_secrets(server.headers)]
    if credentials is None:
        return _HttpRequest(server.url, headers, tuple(secrets))
    headers[credentials.name] = credentials.value.get_secret_value()
    secrets.append(credentials.token)
    return _HttpRequest(str(bare), headers, tuple(dict.fromkeys(secrets)))


class MCPToolError(Exception):
    """An MCP tool failed: an ``isError`` result, or an error the server answered the call with.

    Raised from the tool's body, it becomes an ``error`` result carrying the message, for the model to
    read and adapt to (unlike :class:`~rxagent.tools.ToolSystemError`).
    """


class MCPConnection:
    """One session with an MCP server, and the tools registered from it.

    Created by :func:`add_mcp_server`; the toolkit closes it when it closes.

    Attributes:
        server: where the server is.
        name: the server's own name (from its ``serverInfo``), else its command line or URL.
        tools: the tools registered from it, in the server's order.
        skipped: the server's tools that were not registered, and why (an invalid input schema).
    """

    def __init__(self, server: StdioServer | HttpServer, toolkit: Toolkit) -> None:
        self.server = server
        self.name = server.label
        self.tools: tuple[SchemaTool, ...] = ()
        self.skipped: Mapping[str, str] = {}
        self._toolkit = toolkit
        self._client: Client | None = None
        self._protocol_version: str | None = None
        self._stop = asyncio.Event()
        self._abort: anyio.CancelScope | None = None
        self._task: asyncio.Task[None] | None = None
        self._closed_here = False
        self._lost: BaseException | None = None
        self._target = _http_request(server) if isinstance(server, HttpServer) else server
        """What the transport is opened with: the stdio server, or the HTTP server as requests go out."""

    @property
    def protocol_version(self) -> str | None:
        """The MCP protocol version the session negotiated (``None`` until it is open)."""
        return self._protocol_version

    @property
    def closed(self) -> bool:
        """True once the session is over: closed with :meth:`aclose`, or found broken.

        A broken connection is found when a call (or the transport) fails with it: a stdio server that
        exited between two calls is noticed at the next call.
        """
        task = self._task
        return task is None or task.done() or self._closed_here or self._lost is not None

    async def aclose(self) -> None:
        """Unregister this connection's tools and end the session (idempotent; never raises).

        Calls still running get :class:`~rxagent.tools.ToolSystemError`. A stdio server has its stdin
        closed, and is terminated if it does not exit within the SDK's grace period (2 s); an HTTP session
        is deleted on the server.
        """
        for registered in self.tools:
            if self._toolkit.get(registered.name) is registered:
                self._toolkit.unregister(registered.name)
        self._closed_here = True
        await self._stop_task()

    async def _stop_task(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and not task.done():
            # The task owns the SDK's context managers and exits them itself; waiting only orders the
            # shutdown. Were this wait cancelled, the task would still finish the shutdown on its own.
            await asyncio.wait({task})

    # ---- the task that owns the session -------------------------------------------------------------

    async def connect(self) -> None:
        """Start the owning task and wait until the session is open.

        Raises:
            ConnectionError: the server could not be started, reached or initialised.
        """
        loop = asyncio.get_running_loop()
        connected: asyncio.Future[Client] = loop.create_future()
        self._task = loop.create_task(self._own(connected), name=f"rxagent MCP session {self.name}")
        try:
            client = await connected
        except asyncio.CancelledError:
            await self._give_up(connected)
            raise
        except Exception as error:
            await asyncio.wait({self._task})
            reason = self._reason(error)
            raise ConnectionError(
                f"could not connect to MCP server {self.name!r}: {reason}"
            ) from self._cause(error)
        self._client = client
        self._protocol_version = client.protocol_version
        info = client.server_info
        if info is not None and info.name:
            self.name = info.name

    async def _give_up(self, connected: asyncio.Future[Client]) -> None:
        """Stop a session whose opener was cancelled, and wait until it has stopped."""
        self._closed_here = True
        handed_over = connected.done() and not connected.cancelled()
        if not handed_over:  # still connecting: interrupt it
            if self._abort is not None:
                self._abort.cancel()  # an anyio cancel: the stdio transport's shielded shutdown still runs
            elif self._task is not None:
                self._task.cancel()  # it has not started: nothing was opened
        await self._stop_task()

    async def _own(self, connected: asyncio.Future[Client]) -> None:
        """Enter the transport and the session, hand the client over, wait for stop, exit them."""
        _LOG_MASK.hold(self._secrets)  # from the first log line of the transport to its last
        try:
            with anyio.CancelScope() as abort:
                self._abort = abort
                async with AsyncExitStack() as stack:
                    client = await _open_client(stack, self._target)
                    if connected.done():  # the opener went away meanwhile
                        return
                    connected.set_result(client)
                    await self._stop.wait()
        except Exception as error:  # the transport failed (anyio reports it as an exception group)
            if not connected.done():
                connected.set_exception(error)
            else:
                self._lost = self._lost or error
                _log.warning("MCP session with %r ended: %s", self.name, self._reason(error))
        finally:
            _LOG_MASK.release(self._secrets)
            self._abort = None
            if not connected.done():
                connected.cancel()

    # ---- tools --------------------------------------------------------------------------------------

    async def list_tools(self) -> list[types.Tool]:
        """Every page of the server's tools.

        Raises:
            ConnectionError: the server failed to list them, or its pages never end.
        """
        client = self._client
        assert client is not None, "connect first"
        listed: list[types.Tool] = []
        cursor: str | None = None
        seen: set[str] = set()
        for _ in range(_MAX_PAGES):
            try:
                page = await client.list_tools(cursor=cursor)
            except (MCPError, *_TRANSPORT_ERRORS) as error:
                message = f"MCP server {self.name!r} could not list its tools: {self._reason(error)}"
                raise ConnectionError(message) from self._cause(error)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if cursor is None:
                return listed
            if cursor in seen:
                raise ConnectionError(f"MCP server {self.name!r} repeated the tools/list cursor {cursor!r}")
            seen.add(cursor)
        raise ConnectionError(f"MCP server {self.name!r} listed more than {_MAX_PAGES} pages of tools")

    def build_tools(
        self,
        listed: Iterable[types.Tool],
        *,
        prefix: str | None,
        concurrency_safe: bool,
        timeout: float | None,
        groups: tuple[str, ...],
    ) -> tuple[list[SchemaTool], dict[str, str]]:
        """Tools for the listed remote tools, named ``{prefix}_{name}`` when a prefix is given.

        Returns:
            The tools that call this connection (names made safe: other characters become ``_``), and the
            remote tools skipped with the reason why (an input schema that is not a valid JSON schema).
        """
        built: list[SchemaTool] = []
        skipped: dict[str, str] = {}
        traits = ToolTraits(concurrency_safe=concurrency_safe, timeout=timeout, groups=frozenset(groups))
        for remote in listed:
            try:
                Draft202012Validator.check_schema(remote.input_schema)
            except SchemaError as error:
                # Validation would fail on every call; better the model never sees the tool.
                skipped[remote.name] = f"invalid input schema: {error.message}"
                _log.warning("MCP server %r: tool %r skipped: %s", self.name, remote.name, error.message)
                continue
            local_name = _NOT_A_NAME_CHARACTER.sub("_", remote.name)
            built.append(
                SchemaTool(
                    f"{prefix}_{local_name}" if prefix else local_name,
                    remote.description or remote.title or "",
                    remote.input_schema,
                    self._caller(remote.name),
                    traits=traits,
                )
            )
        return built, skipped

    def _caller(self, remote_name: str) -> Callable[[dict[str, Any], ToolContext], Awaitable[str | None]]:
        async def call(arguments: dict[str, Any], context: ToolContext) -> str | None:
            return await self._call(remote_name, arguments, context)

        return call

    async def _call(self, remote_name: str, arguments: dict[str, Any], context: ToolContext) -> str | None:
        """Call the tool in the calling task; see the module docstring for results and errors."""
        client = self._client
        if client is None or self.closed:
            raise ToolSystemError(self._gone())

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            fraction = progress / total if total else None
            context.progress(message or "", fraction=fraction, data={"progress": progress, "total": total})

        try:
            result = await client.call_tool(remote_name, arguments, progress_callback=on_progress)
        except MCPError as error:
            if error.code == types.CONNECTION_CLOSED:
                raise ToolSystemError(self._lose(error)) from self._cause(error)
            # An error response to this call (unknown tool, invalid params, a crash in the server's
            # handler): an answer about the call, which the model may be able to act on.
            message = redact(error.message, self._secrets)
            raise MCPToolError(
                f"the MCP server failed the call (error {error.code}): {message}"
            ) from self._cause(error)
        except _TRANSPORT_ERRORS as error:
            raise ToolSystemError(self._lose(error)) from self._cause(error)
        text = _result_text(result)
        if result.is_error:
            raise MCPToolError(text or "the MCP tool reported an error without a message")
        return text

    def _lose(self, error: BaseException) -> str:
        """Record that the connection is broken, release it, and say so."""
        if not self._closed_here:
            self._lost = self._lost or error
            self._stop.set()  # the owning task exits the session now (a dead stdio server is reaped)
        return self._gone()

    def _gone(self) -> str:
        if self._closed_here:
            return f"the connection to MCP server {self.name!r} is closed"
        detail = f": {self._reason(self._lost)}" if self._lost is not None else ""
        return f"the connection to MCP server {self.name!r} was lost{detail}"

    @property
    def _secrets(self) -> tuple[str, ...]:
        """What this connection masks in its errors and, while open, in the SDK's logs."""
        return self._target.secrets if isinstance(self._target, _HttpRequest) else ()

    def _reason(self, error: BaseException) -> str:
        """What went wrong, for a message: the innermost readable cause, this server's secrets masked."""
        return redact(_reason(error), self._secrets)

    def _cause(self, error: BaseException) -> BaseException | None:
        """``error``, to chain to the error raised for it; ``None`` if its traceback would show a secret.

        The SDK's exceptions carry what the server said (an error quoting the credentials it refused) and
        the HTTP library's the URL: such a cause is left out, its reason being in the message, masked.
        """
        if not self._secrets:
            return error
        text = "".join(traceback.format_exception(error))
        return None if redact(text, self._secrets) != text else error

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return f"<MCPConnection {self.name!r} {state}, {len(self.tools)} tools>"


async def add_mcp_server(
    toolkit: Toolkit,
    server: StdioServer | HttpServer,
    *,
    prefix: str | None = None,
    concurrency_safe: bool = False,
    timeout: float | None = None,  # noqa: ASYNC109 - the tools' timeout, as in @tool(timeout=...)
    groups: Iterable[str] = (),
) -> MCPConnection:
    """Connect to an MCP server and register its tools in ``toolkit``, which closes the session.

    Each tool keeps the server's name (characters other than letters, digits, ``_`` and ``-`` become
    ``_``; calls use the original), description and input schema. Tools whose input schema is not a
    valid JSON Schema are left out with a warning (see :attr:`MCPConnection.skipped`). The list is read
    once: tools the server adds later are not seen.

    Args:
        toolkit: where the tools are registered; :meth:`~rxagent.tools.Toolkit.aclose` closes the session.
        server: a :class:`StdioServer` or an :class:`HttpServer`.
        prefix: registered names become ``{prefix}_{name}`` (for two servers that both have ``search``).
        concurrency_safe: the tools may run alongside other concurrency-safe calls of a batch (the session
            carries concurrent requests).
        timeout: seconds before a call is abandoned and cancelled on the server (``None``: the
            executor's ``default_timeout``).
        groups: tool groups the tools belong to.

    Returns:
        The open connection, holding the registered tools.

    Raises:
        ConnectionError: the server could not be started, reached, initialised or listed.
        ValueError: a bad ``prefix`` or ``timeout``, or a tool name already taken in the toolkit (then
            nothing is registered).
        TypeError: ``server`` is neither a :class:`StdioServer` nor an :class:`HttpServer` (a bare URL).

    Lifecycle:
        On any failure, including cancellation, the tools registered so far are removed and the session
        is closed before the error propagates. The session ends with the toolkit (``await
        toolkit.aclose()``) or :meth:`MCPConnection.aclose`, from any task.

    Example:
        Inside a coroutine::

            async with Toolkit() as toolkit:
                await add_mcp_server(toolkit, StdioServer("uvx", ["mcp-server-fetch"]), prefix="web")
                events = ToolExecutor().execute(calls, toolkit.view())
    """
    if not isinstance(server, StdioServer | HttpServer):  # pyright: ignore[reportUnnecessaryIsInstance]
        raise TypeError(f"server must be a StdioServer or an HttpServer, not {type(server).__name__}")
    if prefix is not None and not _NAME.fullmatch(prefix):
        raise ValueError(f"prefix {prefix!r} must be non-empty letters, digits, '_' or '-'")
    if timeout is not None and timeout <= 0:
        raise ValueError("timeout must be positive")
    connection = MCPConnection(server, toolkit)
    await connection.connect()
    registered: list[SchemaTool] = []
    try:
        listed = await connection.list_tools()
        built, skipped = connection.build_tools(
            listed, prefix=prefix, concurrency_safe=concurrency_safe, timeout=timeout, groups=tuple(groups)
        )
        for tool_ in built:
            toolkit.register(tool_)
            registered.append(tool_)
    except BaseException:
        for tool_ in registered:
            toolkit.unregister(tool_.name)
        await connection.aclose()
        raise
    connection.tools = tuple(registered)
    connection.skipped = skipped
    toolkit.add_closer(connection.aclose)
    return connection


async def _open_client(stack: AsyncExitStack, server: StdioServer | _HttpRequest) -> Client:
    """Enter the transport and the SDK client for ``server`` on ``stack`` (in the calling task)."""
    if isinstance(server, StdioServer):
        parameters = StdioServerParameters(
            command=server.command,
            args=list(server.args),
            env=dict(server.env) if server.env is not None else None,
            cwd=os.fspath(server.cwd) if server.cwd is not None else None,
        )
        transport = stdio_client(parameters)
    else:
        http = await stack.enter_async_context(
            httpx2.AsyncClient(headers=server.headers, timeout=httpx2.Timeout(30.0, read=300.0))
        )
        _mask_sdk_logs()
        transport = streamable_http_client(server.url, http_client=http)
    client = Client(transport, cache=None, client_info=_client_info())
    return await stack.enter_async_context(client)


def _mask_sdk_logs() -> None:
    """Put :data:`_LOG_MASK` on every logger of :data:`_SDK_LOGGER_FAMILIES` that exists now.

    A filter on a logger sees only the records logged to that very logger, not those its children pass
    up, so it goes on each. Called once the HTTP client exists, since making it imports the modules of
    the HTTP library (and creates their loggers); again at each connect, for loggers made since (an
    HTTP/2 or SOCKS module imported later). Adding a filter twice keeps one.
    """
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and name.partition(".")[0] in _SDK_LOGGER_FAMILIES:
            logger.addFilter(_LOG_MASK)


def _client_info() -> types.Implementation:
    try:
        version = metadata.version("rxagent")
    except metadata.PackageNotFoundError:
        version = "0"
    return types.Implementation(name="rxagent", version=version)


def _reason(error: BaseException) -> str:
    """The innermost readable cause (anyio wraps transport failures in exception groups)."""
    while isinstance(error, BaseExceptionGroup):
        error = cast("BaseExceptionGroup[BaseException]", error).exceptions[0]
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def _result_text(result: types.CallToolResult) -> str | None:
    parts = [_block_text(block) for block in result.content]
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    return text or None


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.ImageContent):
        return f"[image: {block.mime_type}]"
    if isinstance(block, types.AudioContent):
        return f"[audio: {block.mime_type}]"
    if isinstance(block, types.ResourceLink):
        return _resource_summary(str(block.uri), block.mime_type)
    contents = block.resource
    if isinstance(contents, types.TextResourceContents):
        return contents.text
    return _resource_summary(str(contents.uri), contents.mime_type)


def _resource_summary(uri: str, mime_type: str | None) -> str:
    return f"[resource: {uri}, {mime_type}]" if mime_type else f"[resource: {uri}]"
