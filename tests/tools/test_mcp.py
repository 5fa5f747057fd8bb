"""MCP tools through the public API, against a real MCP server (``tests/tools/mcp_server.py``).

Every behaviour runs over stdio (the server is a subprocess that ``add_mcp_server`` starts) and over
streamable HTTP (a server process started here); the protocol-level ones also run against a server that
speaks only the 2025-era protocol, as most deployed servers do (the SDK falls back to ``initialize``).
Calls go through :class:`ToolExecutor`, as an agent's would.

Nothing waits by sleeping: the server prints its port once it listens, a slow call announces itself with a
progress notification, and the server's ``cancelled`` tool waits until it has seen a cancellation.

Starting a server process costs most of a second, so the tests that only call tools share one connection per
transport and era (opened on first use, closed at the end of the module; the module runs in one event loop).
Tests that change a connection (flags, closing, killing the server) open their own.

Secrets of a server's URL (its password, a ``?token=``, the Basic token made of them) are checked in
every log record of every logger at DEBUG, in the errors and their tracebacks, and in the reprs, while a
server behind Basic authentication (``--basic``) answers, refuses with 401 (quoting the credentials it
got), is not there, or goes away mid-session. Bad inputs tried there: a wrong password, a user name
holding ``:``, credentials bound for ``Proxy-Authorization`` when ``headers`` set it too, URLs that are
not absolute http(s) URLs or cannot be parsed (each with a password in it).
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import traceback
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from mcp.types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from reactivex import Observable
from reactivex import operators as ops
from yarl import URL

from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.messages import ToolResultBlock, ToolUseBlock
from rxagent.redaction import MASK
from rxagent.tools import (
    Permissions,
    ToolBatchFinished,
    ToolBodyStarted,
    ToolCallProgress,
    ToolCallSettled,
    ToolContext,
    ToolEvent,
    ToolExecutor,
    Toolkit,
    ToolSystemError,
    tool,
)
from rxagent.tools.mcp import HttpServer, MCPConnection, StdioServer, add_mcp_server
from tests.streams import expect
from tests.tools.mcp_server import TOOLS

pytestmark = pytest.mark.asyncio(loop_scope="module")

SCRIPT = Path(__file__).with_name("mcp_server.py")
WAIT = 10.0
"""Upper bound for awaiting something that happens in milliseconds (a bound, never a pause)."""

Server = StdioServer | HttpServer


# ---- the server, over both transports ----------------------------------------------------------------


def stdio(*, legacy: bool = False, env: dict[str, str] | None = None) -> StdioServer:
    return StdioServer(sys.executable, [str(SCRIPT), "stdio", *(["--legacy"] if legacy else [])], env=env)


class HttpServerProcess:
    """The test server on a free port of 127.0.0.1, as a subprocess; ready once constructed."""

    def __init__(self, *, legacy: bool = False, basic: str | None = None) -> None:
        command = [sys.executable, str(SCRIPT), "http", "0", *(["--legacy"] if legacy else [])]
        command += ["--basic", basic] if basic is not None else []
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            self.port = self._announced_port()
            _connect_once(self.port)
        except BaseException:
            self.stop()
            raise
        self.config = HttpServer(f"http://127.0.0.1:{self.port}/mcp")

    def _announced_port(self) -> int:
        stdout = self.process.stdout
        assert stdout is not None
        readable, _, _ = select.select([stdout], [], [], WAIT)
        line = stdout.readline() if readable else ""
        if not line.startswith("listening on "):
            raise RuntimeError(f"the MCP test server did not start (said {line!r})")
        return int(line.rsplit(":", 1)[1])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(WAIT)
        if self.process.stdout is not None:
            self.process.stdout.close()


def _connect_once(port: int) -> None:
    """The socket was listening before the port was printed, so a few connect attempts suffice."""
    for _ in range(20):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return
        except OSError:
            continue
    raise RuntimeError(f"nothing accepts connections on 127.0.0.1:{port}")


@pytest.fixture(scope="module")
def http_server() -> Iterator[HttpServer]:
    server = HttpServerProcess()
    yield server.config
    server.stop()


@pytest.fixture(scope="module")
def legacy_http_server() -> Iterator[HttpServer]:
    server = HttpServerProcess(legacy=True)
    yield server.config
    server.stop()


@pytest.fixture
def own_http_server() -> Iterator[HttpServerProcess]:
    """A server process of its own, for a test that kills it."""
    server = HttpServerProcess()
    yield server
    server.stop()


USER = "agent"
PASSWORD = "pw-3f9a-DO-NOT-LEAK"
"""The password of the server behind Basic authentication."""
WRONG_PASSWORD = "wrong-pw-81c4-DO-NOT-LEAK"
QUERY_TOKEN = "qt-6e0b-DO-NOT-LEAK"
"""A secret in the URL's query, which has to travel in the URL."""


def basic_token(password: str) -> str:
    return base64.b64encode(f"{USER}:{password}".encode()).decode()


SECRETS = (PASSWORD, WRONG_PASSWORD, QUERY_TOKEN, basic_token(PASSWORD), basic_token(WRONG_PASSWORD))
"""What no log record, error or repr may contain."""


def credentialed(port: int, password: str = PASSWORD) -> str:
    return f"http://{USER}:{password}@127.0.0.1:{port}/mcp?token={QUERY_TOKEN}"


@pytest.fixture
def basic_http_server() -> Iterator[HttpServerProcess]:
    """A server behind Basic authentication (``USER``, ``PASSWORD``), of its own."""
    server = HttpServerProcess(basic=f"{USER}:{PASSWORD}")
    yield server
    server.stop()


@pytest.fixture
def every_log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record of every logger, from DEBUG up (the SDK's and its HTTP library's among them)."""
    caplog.set_level(logging.DEBUG)
    return caplog


def assert_hidden(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def assert_logs_hidden(caplog: pytest.LogCaptureFixture) -> None:
    """No record shows a secret: not its formatted line, nor its exception (however a handler formats it)."""
    assert caplog.records  # the SDK did log (at DEBUG it logs every request)
    for record in caplog.records:
        assert_hidden(caplog.handler.format(record))
        assert_hidden(record.getMessage())
        if record.exc_info is not None and record.exc_info[1] is not None:
            assert_hidden("".join(traceback.format_exception(record.exc_info[1])))


def assert_error_hidden(error: BaseException) -> None:
    """Neither ``error`` nor any exception of its traceback shows a secret."""
    assert_hidden("".join(traceback.format_exception(error)))
    link: BaseException | None = error
    while link is not None:
        assert_hidden(str(link))
        assert_hidden(repr(link))
        link = link.__cause__


KINDS = ("stdio", "http", "stdio-legacy", "http-legacy")


@dataclass(frozen=True)
class Connected:
    """A toolkit holding one server's tools, and the connection they came from."""

    kind: str
    toolkit: Toolkit
    connection: MCPConnection


class SharedConnections:
    """One connection per kind of server, opened on first use and closed by :meth:`aclose`."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._open: dict[str, Connected] = {}

    async def get(self, kind: str) -> Connected:
        if kind not in self._open:
            toolkit = Toolkit()
            connection = await add_mcp_server(toolkit, server_of(self._request, kind))
            self._open[kind] = Connected(kind, toolkit, connection)
        return self._open[kind]

    async def aclose(self) -> None:
        for connected in self._open.values():
            await connected.toolkit.aclose()


def server_of(request: pytest.FixtureRequest, kind: str) -> Server:
    match kind:
        case "stdio":
            return stdio()
        case "stdio-legacy":
            return stdio(legacy=True)
        case "http":
            return request.getfixturevalue("http_server")
        case _:
            return request.getfixturevalue("legacy_http_server")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[SharedConnections]:
    connections = SharedConnections(request)
    yield connections
    await connections.aclose()


@pytest_asyncio.fixture(loop_scope="module", params=KINDS[:2])
async def connected(request: pytest.FixtureRequest, shared: SharedConnections) -> Connected:
    """The shared connection over each transport (2026-era protocol)."""
    return await shared.get(request.param)


@pytest_asyncio.fixture(loop_scope="module", params=KINDS)
async def any_era(request: pytest.FixtureRequest, shared: SharedConnections) -> Connected:
    """The shared connection over each transport, in both protocol eras."""
    return await shared.get(request.param)


@pytest.fixture(params=KINDS[:2])
def server(request: pytest.FixtureRequest) -> Server:
    """Where the server is, over each transport, for a test that opens its own connection."""
    return server_of(request, request.param)


# ---- running calls -----------------------------------------------------------------------------------

_ids = iter(range(1_000_000))


def call(name: str, /, **arguments: Any) -> ToolUseBlock:
    return ToolUseBlock(
        id=f"call_{next(_ids)}", name=name, input=arguments, raw_arguments=json.dumps(arguments)
    )


async def run(
    toolkit: Toolkit, *calls: ToolUseBlock, executor: ToolExecutor | None = None
) -> list[ToolEvent]:
    stream = (executor or ToolExecutor()).execute(calls, toolkit.view())
    events: list[ToolEvent] = await stream.pipe(ops.to_list())
    return events


def results(events: list[ToolEvent]) -> tuple[ToolResultBlock, ...]:
    last = events[-1]
    assert isinstance(last, ToolBatchFinished)
    return last.results


async def text_of(toolkit: Toolkit, name: str, /, **arguments: Any) -> str:
    (result,) = results(await run(toolkit, call(name, **arguments)))
    assert result.status == "ok", result.text
    return result.text


async def server_calls(toolkit: Toolkit) -> int:
    """How many tool calls reached the server so far (the server counts them)."""
    return int(await text_of(toolkit, "calls"))


async def cancelled_after(toolkit: Toolkit, count: int) -> int:
    """The server's count of cancelled ``slow`` calls, once it exceeds ``count`` (or after WAIT s)."""
    return int(await text_of(toolkit, "cancelled", more_than=count, wait=WAIT))


class Watch:
    """A subscription that records events and lets a test await the first progress report."""

    def __init__(self, source: Observable[ToolEvent]) -> None:
        self.events: list[ToolEvent] = []
        self.error: Exception | None = None
        self.progressed = asyncio.Event()
        self.finished = asyncio.Event()
        self.subscription = source.subscribe(self._next, self._error)

    def _next(self, event: ToolEvent) -> None:
        self.events.append(event)
        if isinstance(event, ToolCallProgress):
            self.progressed.set()
        if isinstance(event, ToolBatchFinished):
            self.finished.set()

    def _error(self, error: Exception) -> None:
        self.error = error

    async def until_running(self) -> None:
        """Return once the server has started the call (it reported progress)."""
        await asyncio.wait_for(self.progressed.wait(), WAIT)

    async def until_finished(self) -> None:
        """Return once the batch has finished."""
        await asyncio.wait_for(self.finished.wait(), WAIT)


def alive(pid: int) -> bool:
    """Whether the process exists and is not a zombie (exited but not reaped)."""
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


# ---- listing -----------------------------------------------------------------------------------------


async def test_every_page_of_tools_is_registered_with_its_schema(any_era: Connected) -> None:
    connection = any_era.connection

    offered = [t for t in TOOLS if t.name != "broken"]
    assert [t.name for t in connection.tools] == [t.name.replace(".", "_") for t in offered]
    assert any_era.toolkit.names == tuple(t.name for t in connection.tools)
    for registered, remote in zip(connection.tools, offered, strict=True):
        schema = registered.schema()
        assert schema.parameters == remote.input_schema
        assert schema.description == remote.description
    assert connection.name == "rxagent-test"
    eras = HANDSHAKE_PROTOCOL_VERSIONS if any_era.kind.endswith("legacy") else MODERN_PROTOCOL_VERSIONS
    assert connection.protocol_version in eras
    assert not connection.closed


async def test_a_tool_with_an_invalid_schema_is_skipped_and_said_so(connected: Connected) -> None:
    assert "broken" not in connected.toolkit.names
    assert set(connected.connection.skipped) == {"broken"}
    assert "strang" in connected.connection.skipped["broken"]


async def test_prefix_flags_rewritten_names_and_parallel_calls(server: Server) -> None:
    async with Toolkit() as toolkit:
        toolkit.create_group("remote")
        connection = await add_mcp_server(
            toolkit, server, prefix="srv", concurrency_safe=True, timeout=7.5, groups=["remote"]
        )

        assert all(t.name.startswith("srv_") for t in connection.tools)
        assert {(t.traits.concurrency_safe, t.traits.timeout, t.traits.groups) for t in connection.tools} == {
            (True, 7.5, frozenset({"remote"}))
        }
        assert toolkit.view().schemas() == ()  # the group is inactive by default
        view = toolkit.view(active_groups=["remote"])
        assert {s.name for s in view.schemas()} == {t.name for t in connection.tools}
        calls = [call("srv_text_upper", text="shout"), *(call("srv_echo", text=f"#{i}") for i in range(12))]
        executor = ToolExecutor(parallel=True, max_concurrency=13)

        events = await executor.execute(calls, view).pipe(ops.to_list())

        # one session answers concurrent requests, each to its caller; "text.upper" was called by that name
        assert [r.text for r in results(events)] == ["SHOUT", *(f"#{i}" for i in range(12))]


# ---- calling -----------------------------------------------------------------------------------------


async def test_http_headers_are_sent_with_every_request(http_server: HttpServer) -> None:
    headers = {"Authorization": "Bearer t0k3n", "X-Tenant": "acme"}
    async with Toolkit() as toolkit:
        await add_mcp_server(toolkit, HttpServer(http_server.url, headers=headers))

        assert await text_of(toolkit, "header", name="authorization") == "Bearer t0k3n"
        assert await text_of(toolkit, "header", name="x-tenant") == "acme"


async def test_a_call_returns_the_text_of_the_result(any_era: Connected) -> None:
    toolkit = any_era.toolkit
    events = await run(toolkit, call("add", a=2, b=3), call("echo", text="héllo ✓\nnext line"))

    assert [(r.status, r.text) for r in results(events)] == [("ok", "5"), ("ok", "héllo ✓\nnext line")]
    started = [e for e in events if isinstance(e, ToolBodyStarted)]
    assert [e.arguments for e in started] == [{"a": 2, "b": 3}, {"text": "héllo ✓\nnext line"}]
    finished = [e for e in events if isinstance(e, ToolCallSettled)]
    assert [e.value for e in finished] == ["5", "héllo ✓\nnext line"]


async def test_non_text_content_is_summarised(connected: Connected) -> None:
    toolkit = connected.toolkit
    assert (
        await text_of(toolkit, "picture")
        == "a red dot\n[image: image/png]\n[resource: file:///dot.png, image/png]"
    )


async def test_an_is_error_result_becomes_an_error_result(any_era: Connected) -> None:
    toolkit = any_era.toolkit
    events = await run(toolkit, call("fail", message="disk full"), call("add", a=1, b=1))

    assert [(r.status, r.text) for r in results(events)] == [
        ("error", "Error: MCPToolError: disk full"),
        ("ok", "2"),
    ]


async def test_an_error_response_becomes_an_error_result(any_era: Connected) -> None:
    toolkit = any_era.toolkit
    events = await run(toolkit, call("divide", a=1, b=0), call("divide", a=1, b=4))

    assert [(r.status, r.text) for r in results(events)] == [
        ("error", "Error: MCPToolError: the MCP server failed the call (error -32602): division by zero"),
        ("ok", "0.25"),
    ]


async def test_invalid_arguments_are_refused_before_the_server_sees_them(connected: Connected) -> None:
    toolkit = connected.toolkit
    before = await server_calls(toolkit)

    events = await run(
        toolkit,
        call("add", a="two", b=1),  # wrong type (and not a number a model could have meant)
        call("add", a=1),  # missing required
        call("add", a=1, b=2, c=3),  # additionalProperties: false
        call("echo", text=["not", "a", "string"]),  # wrong type
        call("slow", seconds=-1),  # minimum
        call("echo"),  # no arguments at all
    )

    checked = results(events)
    assert [r.status for r in checked] == ["error"] * 6
    assert all(r.text.startswith("Invalid arguments for tool ") for r in checked)
    assert "a: 'two' is not of type 'integer' (rule: type)" in checked[0].text
    assert "b: is required but missing (rule: required)" in checked[1].text
    assert "rule: additionalProperties" in checked[2].text
    assert "text: ['not', 'a', 'string'] is not of type 'string' (rule: type)" in checked[3].text
    assert "seconds: -1 is less than the minimum of 0 (rule: minimum)" in checked[4].text
    assert "text: is required but missing" in checked[5].text
    assert not [e for e in events if isinstance(e, ToolBodyStarted)]
    assert await server_calls(toolkit) == before


async def test_numeric_strings_are_coerced_by_the_schema_before_sending(connected: Connected) -> None:
    toolkit = connected.toolkit
    assert await text_of(toolkit, "add", a="2", b="40") == "42"


async def test_the_permission_gate_applies_to_mcp_tools(connected: Connected) -> None:
    toolkit = connected.toolkit
    before = await server_calls(toolkit)
    gate = Permissions().deny("ech*", reason="no echoes here").deny("add", a="666", reason="not that number")

    events = await run(
        toolkit,
        call("echo", text="hi"),
        call("add", a=666, b=1),
        call("add", a=1, b=1),
        executor=ToolExecutor(permissions=gate),
    )

    assert [(r.status, r.text) for r in results(events)] == [
        ("denied", "Permission denied for tool 'echo': no echoes here"),
        ("denied", "Permission denied for tool 'add': not that number"),
        ("ok", "2"),
    ]
    assert await server_calls(toolkit) == before + 1  # only the allowed call reached the server


# ---- cancellation ------------------------------------------------------------------------------------


async def test_dispose_cancels_the_call_on_the_server_and_the_session_survives(any_era: Connected) -> None:
    toolkit = any_era.toolkit
    before = await cancelled_after(toolkit, -1)
    watch = Watch(ToolExecutor().execute([call("slow", seconds=60)], toolkit.view()))
    await watch.until_running()

    watch.subscription.dispose()

    assert await cancelled_after(toolkit, before) == before + 1  # the server saw the cancellation
    assert await text_of(toolkit, "add", a=20, b=22) == "42"
    progress = [e.update for e in watch.events if isinstance(e, ToolCallProgress)]
    assert [(p.message, p.fraction) for p in progress] == [("started", 0.0)]
    assert not [e for e in watch.events if isinstance(e, ToolCallSettled)]
    assert watch.error is None


async def test_a_timeout_cancels_the_call_on_the_server_and_the_session_survives(
    connected: Connected,
) -> None:
    toolkit = connected.toolkit
    before = await cancelled_after(toolkit, -1)
    clock = VirtualClock()  # the server runs in real time; the executor's deadline is ours to move

    watch = Watch(
        ToolExecutor(default_timeout=30, clock=clock).execute([call("slow", seconds=60)], toolkit.view())
    )
    await watch.until_running()
    await clock.advance(30)
    await watch.until_finished()

    assert [(r.status, r.text) for r in results(watch.events)] == [
        ("error", "Tool 'slow' timed out after 30 s.")
    ]
    assert await cancelled_after(toolkit, before) == before + 1
    assert await text_of(toolkit, "echo", text="still here") == "still here"


# ---- closing -----------------------------------------------------------------------------------------


async def test_aclose_ends_the_session_and_stops_the_stdio_server() -> None:
    toolkit = Toolkit()
    connection = await add_mcp_server(toolkit, stdio())
    pid = int(await text_of(toolkit, "pid"))
    running = Watch(ToolExecutor().execute([call("slow", seconds=60)], toolkit.view()))
    await running.until_running()
    echo = next(t for t in connection.tools if t.name == "echo")

    await toolkit.aclose()

    assert not alive(pid)
    assert connection.closed
    assert toolkit.names == ()
    assert isinstance(running.error, ToolSystemError)
    assert "is closed" in str(running.error)
    with pytest.raises(ToolSystemError, match="is closed"):  # a run still holding the tool
        await echo.invoke({"text": "late"}, ToolContext("late", echo.name, RuntimeContext()))
    await toolkit.aclose()  # closing again is harmless


async def test_aclose_ends_the_http_session_and_its_calls(
    http_server: HttpServer, shared: SharedConnections
) -> None:
    observer = (await shared.get("http")).toolkit  # another session with the same server process
    before = await cancelled_after(observer, -1)
    toolkit = Toolkit()
    connection = await add_mcp_server(toolkit, http_server)
    running = Watch(ToolExecutor().execute([call("slow", seconds=60)], toolkit.view()))
    await running.until_running()

    await toolkit.aclose()

    assert connection.closed
    assert toolkit.names == ()
    assert isinstance(running.error, ToolSystemError)
    # deleting the session ended the call running in it
    assert await cancelled_after(observer, before) == before + 1


# ---- the server going away ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["stdio", "http", "http-legacy"])
async def test_the_server_dying_mid_call_is_a_tool_system_error(kind: str) -> None:
    process = HttpServerProcess(legacy=kind == "http-legacy") if kind.startswith("http") else None
    try:
        async with Toolkit() as toolkit:
            connection = await add_mcp_server(toolkit, process.config if process is not None else stdio())

            crashed = await expect(ToolExecutor().execute([call("crash")], toolkit.view()))
            after = await expect(ToolExecutor().execute([call("add", a=1, b=2)], toolkit.view()))

            assert isinstance(crashed.error, ToolSystemError)
            assert "the connection to MCP server 'rxagent-test' was lost" in str(crashed.error)
            assert isinstance(after.error, ToolSystemError)
            assert connection.closed
    finally:
        if process is not None:
            process.stop()


async def test_a_stdio_server_killed_between_calls_is_a_tool_system_error() -> None:
    async with Toolkit() as toolkit:
        connection = await add_mcp_server(toolkit, stdio())
        pid = int(await text_of(toolkit, "pid"))
        os.kill(pid, signal.SIGKILL)

        seen = await expect(ToolExecutor().execute([call("add", a=1, b=2)], toolkit.view()))

        assert isinstance(seen.error, ToolSystemError)
        assert connection.closed


async def test_an_http_server_gone_between_calls_is_a_tool_system_error(
    own_http_server: HttpServerProcess,
) -> None:
    async with Toolkit() as toolkit:
        connection = await add_mcp_server(toolkit, own_http_server.config)
        assert await text_of(toolkit, "add", a=1, b=2) == "3"
        own_http_server.stop()

        seen = await expect(ToolExecutor().execute([call("add", a=1, b=2)], toolkit.view()))

        assert isinstance(seen.error, ToolSystemError)
        assert "the connection to MCP server 'rxagent-test' was lost" in str(seen.error)
        assert connection.closed


# ---- bad configurations ------------------------------------------------------------------------------


async def test_servers_that_cannot_be_reached_raise_connection_error(tmp_path: Path) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    not_mcp = tmp_path / "not_mcp.py"
    not_mcp.write_text("print('hello, I am not an MCP server')\n")
    unreachable: list[Server] = [
        StdioServer(str(tmp_path / "no-such-command")),
        StdioServer(sys.executable, [str(not_mcp)]),
        HttpServer(f"http://127.0.0.1:{closed_port}/mcp"),
    ]
    for server in unreachable:
        async with Toolkit() as toolkit:
            with pytest.raises(ConnectionError, match="could not connect to MCP server"):
                await add_mcp_server(toolkit, server)
            assert toolkit.names == ()


async def test_a_credentialed_url_never_shows_in_errors_or_reprs() -> None:
    password = "pw-mcp-DO-NOT-LEAK"
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    server = HttpServer(
        f"http://agent:{password}@127.0.0.1:{closed_port}/mcp?token={password}",
        headers={"Authorization": f"Bearer {password}"},
    )
    assert server.label == f"http://agent:**********@127.0.0.1:{closed_port}/mcp?token=**********"
    assert repr(server) == f"HttpServer(url={server.label!r}, headers=['Authorization'])"
    async with Toolkit() as toolkit:
        with pytest.raises(ConnectionError, match="could not connect to MCP server") as caught:
            await add_mcp_server(toolkit, server)
    assert server.label in str(caught.value)
    assert password not in str(caught.value)
    with pytest.raises(ValueError, match="http:// or https://") as refused:
        HttpServer(f"ftp://agent:{password}@127.0.0.1/mcp")
    assert password not in str(refused.value)


# ---- secrets in the URL ------------------------------------------------------------------------------


async def test_url_credentials_travel_as_basic_auth_and_no_log_shows_a_secret(
    basic_http_server: HttpServerProcess, every_log: pytest.LogCaptureFixture
) -> None:
    port = basic_http_server.port
    server = HttpServer(credentialed(port))
    async with Toolkit() as toolkit:
        connection = await add_mcp_server(toolkit, server)  # the server refuses anything but the password

        assert await text_of(toolkit, "header", name="authorization") == f"Basic {basic_token(PASSWORD)}"
        no_header = await text_of(toolkit, "header", name="proxy-authorization")
        assert no_header == "(no output)"  # the tool's empty answer: the header was not sent
        events = await run(toolkit, call("add", a=2, b=3), call("divide", a=1, b=0))
        assert [r.status for r in results(events)] == ["ok", "error"]
        shown = (repr(connection), str(connection), repr(vars(connection)), repr(server), connection.name)
        for text in (*shown, *map(repr, events)):
            assert_hidden(text)

    assert_logs_hidden(every_log)
    # The SDK and its HTTP library were given the URL without the credentials, and its query secret is
    # masked in what they logged.
    masked = f"http://127.0.0.1:{port}/mcp?token={MASK}"
    sdk_log = [r.getMessage() for r in every_log.records if r.name == "mcp.client.streamable_http"]
    assert f"Connecting to StreamableHTTP endpoint: {masked}" in sdk_log
    http_log = [r.getMessage() for r in every_log.records if r.name == "httpx2"]
    assert f'HTTP Request: POST {masked} "HTTP/1.1 200 OK"' in http_log
    every_log.clear()
    logging.getLogger("httpx2").debug("after %s", QUERY_TOKEN)
    assert every_log.records[-1].getMessage() == f"after {QUERY_TOKEN}"  # released with the session


async def test_url_credentials_go_to_proxy_authorization_beside_an_authorization_header(
    http_server: HttpServer, every_log: pytest.LogCaptureFixture
) -> None:
    port = URL(http_server.url).port
    assert port is not None
    headers = {"Authorization": "Bearer t0k3n"}
    async with Toolkit() as toolkit:
        await add_mcp_server(toolkit, HttpServer(credentialed(port), headers=headers))

        # One header cannot carry two credentials: the server's keep Authorization.
        assert await text_of(toolkit, "header", name="authorization") == "Bearer t0k3n"
        proxy = await text_of(toolkit, "header", name="proxy-authorization")
        assert proxy == f"Basic {basic_token(PASSWORD)}"
    assert_logs_hidden(every_log)


async def test_connection_failures_show_no_secret(
    basic_http_server: HttpServerProcess, every_log: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        closed_port = unused.getsockname()[1]
    refused = HttpServer(credentialed(basic_http_server.port, WRONG_PASSWORD))
    nobody = HttpServer(credentialed(closed_port))

    errors: list[ConnectionError] = []
    for server in (refused, nobody):
        async with Toolkit() as toolkit:
            with pytest.raises(ConnectionError, match="could not connect to MCP server") as caught:
                await add_mcp_server(toolkit, server)
            assert toolkit.names == ()
        errors.append(caught.value)

    # The 401's JSON-RPC error quoted the credentials it got: the message keeps the rest of its text.
    assert str(errors[0]) == (
        f"could not connect to MCP server 'http://{USER}:{MASK}@127.0.0.1:{basic_http_server.port}"
        f"/mcp?token={MASK}': MCPError: credentials {USER}:{MASK} ({MASK}) refused"
    )
    assert f"http://{USER}:{MASK}@127.0.0.1:{closed_port}/mcp?token={MASK}" in str(errors[1])
    for error in errors:
        assert_error_hidden(error)
    assert_logs_hidden(every_log)


async def test_a_server_gone_mid_session_shows_no_secret(every_log: pytest.LogCaptureFixture) -> None:
    process = HttpServerProcess(basic=f"{USER}:{PASSWORD}")
    try:
        async with Toolkit() as toolkit:
            connection = await add_mcp_server(toolkit, HttpServer(credentialed(process.port)))
            assert await text_of(toolkit, "add", a=1, b=2) == "3"
            process.stop()

            seen = await expect(ToolExecutor().execute([call("add", a=1, b=2)], toolkit.view()))

            assert isinstance(seen.error, ToolSystemError)
            assert "the connection to MCP server 'rxagent-test' was lost" in str(seen.error)
            assert connection.closed
            assert_error_hidden(seen.error)
    finally:
        process.stop()
    assert_logs_hidden(every_log)


@pytest.mark.parametrize(
    ("url", "headers", "message"),
    [
        (
            f"http://a%3Ab:{PASSWORD}@127.0.0.1:1/mcp",
            {},
            "the user name in HttpServer url .* holds a ':', which Basic credentials cannot carry",
        ),
        (
            f"http://{USER}:{PASSWORD}@127.0.0.1:1/mcp",
            {"Authorization": "Bearer t", "proxy-authorization": "Basic other"},
            "headers set Proxy-Authorization too",
        ),
        (f"ftp://{USER}:{PASSWORD}@127.0.0.1/mcp", {}, "absolute http:// or https:// URL"),
        (f"http://{USER}:{PASSWORD}@/mcp", {}, "absolute http:// or https:// URL"),
        (f"http://{USER}:{PASSWORD}@127.0.0.1:99999/mcp", {}, "absolute http:// or https:// URL"),
        (f"http://{USER}:{PASSWORD}@[::1/mcp", {}, "absolute http:// or https:// URL"),
    ],
    ids=["colon_in_user", "proxy_header_twice", "ftp", "no_host", "bad_port", "bad_ipv6"],
)
async def test_a_bad_credentialed_url_is_refused_without_showing_the_password(
    url: str, headers: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        HttpServer(url, headers=headers)
    assert_error_hidden(caught.value)


async def test_a_wrong_http_path_raises_connection_error(http_server: HttpServer) -> None:
    async with Toolkit() as toolkit:
        with pytest.raises(ConnectionError):
            await add_mcp_server(toolkit, HttpServer(http_server.url.replace("/mcp", "/nope")))
        assert toolkit.names == ()


async def test_bad_arguments_are_refused_before_connecting() -> None:
    toolkit = Toolkit()
    never_started = StdioServer("/nonexistent/never-started")
    with pytest.raises(ValueError, match="prefix 'my tools' must be"):
        await add_mcp_server(toolkit, never_started, prefix="my tools")
    with pytest.raises(ValueError, match="prefix '' must be"):
        await add_mcp_server(toolkit, never_started, prefix="")
    with pytest.raises(ValueError, match="timeout must be positive"):
        await add_mcp_server(toolkit, never_started, timeout=0)
    with pytest.raises(TypeError, match="not str"):
        await add_mcp_server(toolkit, "http://127.0.0.1:8000/mcp")  # pyright: ignore[reportArgumentType]
    assert toolkit.names == ()


async def test_server_configurations_are_checked() -> None:
    with pytest.raises(ValueError, match="needs a command"):
        StdioServer("")
    with pytest.raises(TypeError, match="sequence of strings"):
        StdioServer("python", "server.py")
    with pytest.raises(ValueError, match="http:// or https://"):
        HttpServer("127.0.0.1:8000/mcp")
    assert StdioServer("python", ["a", "b"]).args == ("a", "b")


async def test_a_taken_name_registers_nothing_and_stops_the_server(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"

    @tool
    def echo(text: str) -> str:
        """A local echo that was here first."""
        return text

    async with Toolkit([echo]) as toolkit:
        with pytest.raises(ValueError, match="'echo' is already registered"):
            await add_mcp_server(toolkit, stdio(env={"MCP_TEST_PID_FILE": str(pid_file)}))

        assert toolkit.names == ("echo",)
        assert not alive(int(pid_file.read_text()))


async def test_cancelling_add_mcp_server_stops_the_server(tmp_path: Path) -> None:
    started = tmp_path / "started"
    os.mkfifo(started)
    silent = tmp_path / "silent.py"  # starts, says its pid through the fifo, then never answers
    silent.write_text(
        "import os, sys\n"
        "with open(sys.argv[1], 'w') as fifo:\n"
        "    fifo.write(str(os.getpid()))\n"
        "sys.stdin.read()\n"
    )
    toolkit = Toolkit()
    adding = asyncio.ensure_future(
        add_mcp_server(toolkit, StdioServer(sys.executable, [str(silent), str(started)]))
    )
    pid = int(await asyncio.wait_for(asyncio.to_thread(started.read_text), WAIT))
    assert not adding.done()  # still waiting for the server's answer

    adding.cancel()
    with pytest.raises(asyncio.CancelledError):
        await adding

    assert not alive(pid)
    assert toolkit.names == ()


# ---- the extra ---------------------------------------------------------------------------------------


async def python(code: str) -> tuple[int, str, str]:
    """Run ``python -c code`` in a fresh interpreter: exit status, stdout, stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(process.communicate(), WAIT)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def test_rxagent_tools_does_not_import_the_mcp_sdk() -> None:
    status, out, err = await python(
        "import sys, rxagent.tools; print('mcp' in sys.modules, 'mcp_types' in sys.modules)"
    )
    assert (status, out.split()) == (0, ["False", "False"]), err


async def test_without_the_extra_the_import_error_names_it() -> None:
    status, _, err = await python("import sys; sys.modules['mcp'] = None; import rxagent.tools.mcp")
    assert status != 0
    assert (
        "ImportError: rxagent.tools.mcp needs the official MCP SDK (mcp 2.x): pip install 'rxagent[mcp]'"
        in err
    )
