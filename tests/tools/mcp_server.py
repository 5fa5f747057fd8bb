"""A real MCP server for the MCP tool tests, built on the SDK's low-level ``Server``.

Run it over stdio (``python tests/tools/mcp_server.py stdio``) or streamable HTTP on 127.0.0.1
(``python tests/tools/mcp_server.py http PORT``; port 0 picks a free one); add ``--legacy`` to make it
speak only the 2025-era protocol (clients then fall back to the ``initialize`` handshake), as most
deployed servers do.

``--basic USER:PASSWORD`` (HTTP only) puts the server behind Basic authentication, as behind an
authenticating proxy: a request without ``Authorization: Basic`` and those credentials is refused with
401 and a JSON-RPC error that quotes the credentials it got (servers do quote what they refuse).

In HTTP mode the listening socket is bound before anything else happens and the line
``listening on 127.0.0.1:PORT`` is printed then, so a client may connect as soon as it has read it.

The tools are listed three per page (clients must follow ``nextCursor``):

- ``add(a, b)``, ``echo(text)``: ordinary results.
- ``divide(a, b)``: ``b = 0`` is answered with a JSON-RPC error (``INVALID_PARAMS``).
- ``fail(message)``: an ``isError`` result.
- ``picture()``: a text block, an image block and a resource link.
- ``slow(seconds)``: reports progress ``started``, then sleeps; a cancelled call is counted.
- ``calls()``: how many ``tools/call`` requests reached this server (``calls`` itself not counted).
- ``cancelled(more_than, wait)``: waits (at most ``wait`` seconds) until more than ``more_than`` calls
  of ``slow`` were cancelled, then returns the count — the test's way to await the server's view of a
  cancellation without sleeping.
- ``text.upper(text)``: a name rxagent must rewrite (``text_upper``) while calling the original.
- ``broken()``: its input schema is invalid (``"type": "strang"``); clients should not offer it.
- ``header(name)``: the value of an HTTP header of this request (``""`` over stdio).
- ``pid()``: the server's process id.
- ``crash()``: the process exits at once, in the middle of the call (the server "dies").

The tool schemas are written out by hand so that the tests know exactly what the client must enforce.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["TOOLS", "build_server"]

_PAGE_SIZE = 3

TOOLS: list[types.Tool] = [
    types.Tool(
        name="add",
        description="Add two integers.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    ),
    types.Tool(
        name="echo",
        description="Return the text unchanged.",
        input_schema={
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        },
    ),
    types.Tool(
        name="divide",
        description="Divide a by b; b = 0 is answered with a JSON-RPC error, not an isError result.",
        input_schema={
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            "required": ["a", "b"],
        },
    ),
    types.Tool(
        name="fail",
        description="Always fails, with the given message.",
        input_schema={"type": "object", "properties": {"message": {"type": "string"}}},
    ),
    types.Tool(
        name="picture",
        description="A text, an image and a resource link.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="slow",
        description="Report progress, then sleep for the given seconds.",
        input_schema={
            "type": "object",
            "properties": {"seconds": {"type": "number", "minimum": 0}},
            "required": ["seconds"],
        },
    ),
    types.Tool(
        name="calls",
        description="How many tool calls reached this server.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="cancelled",
        description="Wait until more than `more_than` slow calls were cancelled; return the count.",
        input_schema={
            "type": "object",
            "properties": {"more_than": {"type": "integer"}, "wait": {"type": "number"}},
            "required": ["more_than"],
        },
    ),
    types.Tool(
        name="text.upper",
        description="Upper-case the text (a name with a dot, which rxagent tool names cannot hold).",
        input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
    ),
    types.Tool(
        name="broken",
        description="A tool whose input schema is not a valid JSON Schema.",
        input_schema={"type": "object", "properties": {"x": {"type": "strang"}}},
    ),
    types.Tool(
        name="header",
        description="The value of an HTTP header of this request ('' over stdio or when absent).",
        input_schema={"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    ),
    types.Tool(
        name="pid",
        description="The server's process id.",
        input_schema={"type": "object", "properties": {}},
    ),
    types.Tool(
        name="crash",
        description="Exit the server process immediately.",
        input_schema={"type": "object", "properties": {}},
    ),
]


class _State:
    def __init__(self) -> None:
        self.calls = 0
        self.cancelled = 0
        self.cancelled_changed = anyio.Event()


def _text(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)])


def build_server() -> Server[Any]:
    """The server with the tools described in the module docstring."""
    state = _State()

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        start = int(params.cursor) if params is not None and params.cursor else 0
        end = start + _PAGE_SIZE
        next_cursor = str(end) if end < len(TOOLS) else None
        return types.ListToolsResult(tools=TOOLS[start:end], next_cursor=next_cursor)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        arguments: dict[str, Any] = params.arguments or {}
        if params.name != "calls":
            state.calls += 1
        match params.name:
            case "add":
                return _text(str(arguments["a"] + arguments["b"]))
            case "echo":
                return _text(arguments["text"])
            case "divide":
                if arguments["b"] == 0:
                    raise MCPError(code=types.INVALID_PARAMS, message="division by zero")
                return _text(str(arguments["a"] / arguments["b"]))
            case "fail":
                message = arguments.get("message", "it failed")
                return types.CallToolResult(content=[types.TextContent(text=message)], is_error=True)
            case "picture":
                return types.CallToolResult(
                    content=[
                        types.TextContent(text="a red dot"),
                        types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                        types.ResourceLink(name="dot", uri="file:///dot.png", mime_type="image/png"),
                    ]
                )
            case "slow":
                try:
                    await ctx.session.report_progress(0.0, 1.0, "started")
                    await anyio.sleep(float(arguments["seconds"]))
                except anyio.get_cancelled_exc_class():
                    state.cancelled += 1
                    state.cancelled_changed.set()
                    state.cancelled_changed = anyio.Event()
                    raise
                return _text("slept")
            case "text.upper":
                return _text(arguments["text"].upper())
            case "header":
                headers = getattr(ctx.request, "headers", None)
                value = headers.get(arguments["name"]) if headers is not None else None
                return _text(str(value or ""))
            case "pid":
                return _text(str(os.getpid()))
            case "calls":
                return _text(str(state.calls))
            case "cancelled":
                with anyio.move_on_after(float(arguments.get("wait", 5.0))):
                    while state.cancelled <= arguments["more_than"]:
                        await state.cancelled_changed.wait()
                return _text(str(state.cancelled))
            case "crash":
                os._exit(3)
            case _:
                return types.CallToolResult(
                    content=[types.TextContent(text=f"unknown tool {params.name}")], is_error=True
                )

    return Server("rxagent-test", version="1.0", on_list_tools=list_tools, on_call_tool=call_tool)


async def _serve_stdio(legacy: bool) -> None:
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    server = build_server()
    options = server.create_initialization_options()
    async with stdio_server() as (read_stream, write_stream):
        if not legacy:
            await server.run(read_stream, write_stream, options)
            return
        # The handshake-only loop: `server/discover` is unknown there, as on a 2025-era server.
        async with server.lifespan(server) as state:
            await serve_loop(server, read_stream, write_stream, lifespan_state=state, init_options=options)


def _refusing_the_2026_protocol(app: ASGIApp) -> ASGIApp:
    """Answer requests of a 2026-era protocol version as a 2025-era server would: with an error."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        headers = dict(scope.get("headers", []))
        if headers.get(b"mcp-protocol-version", b"").decode() in MODERN_PROTOCOL_VERSIONS:
            error = {"code": types.METHOD_NOT_FOUND, "message": "unknown protocol version"}
            body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return guarded


def _behind_basic_auth(app: ASGIApp, credentials: str) -> ASGIApp:
    """Refuse, with 401, every request whose ``Authorization`` is not Basic ``credentials``."""
    expected = f"Basic {base64.b64encode(credentials.encode()).decode()}"

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        given = dict(scope.get("headers", [])).get(b"authorization", b"").decode()
        if given == expected:
            await app(scope, receive, send)
            return
        token = given.removeprefix("Basic ")
        quoted = base64.b64decode(token).decode() if token else "none"
        error = {"code": types.INVALID_REQUEST, "message": f"credentials {quoted} ({token}) refused"}
        body = json.dumps({"jsonrpc": "2.0", "id": None, "error": error}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b"Basic")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return guarded


async def _serve_http(port: int, legacy: bool, basic: str | None) -> None:
    import uvicorn

    # Bind first: once the port is printed, connections queue in the backlog until uvicorn accepts them.
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    print(f"listening on 127.0.0.1:{listener.getsockname()[1]}", flush=True)
    app: ASGIApp = build_server().streamable_http_app()
    if legacy:
        app = _refusing_the_2026_protocol(app)
    if basic is not None:
        app = _behind_basic_auth(app, basic)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve(sockets=[listener])


def main(argv: list[str]) -> None:
    """Entry point: ``stdio [--legacy]`` or ``http PORT [--legacy] [--basic USER:PASSWORD]``."""
    legacy = "--legacy" in argv
    argv = [arg for arg in argv if arg != "--legacy"]
    basic = None
    if "--basic" in argv[:-1]:
        at = argv.index("--basic")
        basic = argv[at + 1]
        del argv[at : at + 2]
    pid_file = os.environ.get("MCP_TEST_PID_FILE")
    if pid_file:  # lets a test find a server it never got a connection to
        with open(pid_file, "w") as file:
            file.write(str(os.getpid()))
    if argv == ["stdio"]:
        anyio.run(_serve_stdio, legacy)
    elif argv[:1] == ["http"] and len(argv) == 2:
        anyio.run(_serve_http, int(argv[1]), legacy, basic)
    else:
        usage = "usage: mcp_server.py stdio [--legacy] | http PORT [--legacy] [--basic USER:PASSWORD]"
        print(usage, file=sys.stderr)
        raise SystemExit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
