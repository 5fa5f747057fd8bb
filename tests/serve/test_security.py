"""Who may talk to the server, and what it never says.

Bad inputs tried: hosts off loopback without a token (``0.0.0.0``, an empty host, a LAN address, a
name), an empty token, requests without the token, with a wrong one, in the wrong header scheme, to every
route (an unknown one included); a ``Host`` header naming another site (DNS rebinding); changes from
another origin (``Origin`` of another site, ``null``, ``Sec-Fetch-Site: cross-site``); bodies over the limit
(with a ``Content-Length`` and chunked without one); and, with a real API key and a token, every endpoint
and error path, with the responses and the logs searched for either secret.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from rxagent import ScriptedModel
from rxagent.agent import ReActAgent
from rxagent.serve import ServeSettings, is_loopback
from tests.model.openai_server import OpenAIServer, Reply, Stall, text_chunk
from tests.serve.conftest import WAIT, serving
from tests.test_cli import call_reply, command_env, finish, start, text_reply

TOKEN = "tok-3c7f1e-NEVER-SHOWN"

ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/api/sessions", None),
    ("GET", "/api/sessions/s", None),
    ("GET", "/api/sessions/s/turns", None),
    ("GET", "/api/sessions/s/feed", None),
    ("POST", "/api/sessions/s/runs", {"input": "hi"}),
    ("POST", "/api/sessions/s/steer", {"message": "hi"}),
    ("POST", "/api/sessions/s/respond", {"decisions": [{"call_id": "c", "allow": True}]}),
    ("POST", "/api/sessions/s/interrupt", None),
    (
        "POST",
        "/ag-ui",
        {"threadId": "s", "runId": "r", "messages": [{"id": "m", "role": "user", "content": "hi"}]},
    ),
    ("GET", "/no/such/route", None),
    ("GET", "/api/sessions/s/messages", None),
    ("GET", "/api/sessions/s/runs/run_x", None),
    ("DELETE", "/api/sessions/s/runs/run_x", None),
    ("DELETE", "/api/sessions/s", None),
]
"""Every route, with a body each would accept (the health checks, open to all, are not here)."""


# ---- where it listens --------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.9", "localhost", "::1", "[::1]"])
def test_loopback_needs_no_token(host: str) -> None:
    assert is_loopback(host)
    assert ServeSettings(host=host).token is None


@pytest.mark.parametrize("host", ["0.0.0.0", "", "::", "192.168.1.20", "example.com"])
def test_any_other_host_needs_a_token(host: str) -> None:
    assert not is_loopback(host)
    with pytest.raises(ValueError, match="needs a token: pass --token"):
        ServeSettings(host=host)
    assert ServeSettings(host=host, token=TOKEN).host == host
    with pytest.raises(ValueError, match="must not be empty"):
        ServeSettings(host=host, token="  ")


async def test_the_command_refuses_to_serve_off_loopback_without_a_token() -> None:
    done = await finish(await start("serve", "--host", "0.0.0.0", "--port", "0", "--tools", "none"))
    assert done.code == 2
    assert done.stdout == ""
    assert "needs a token: pass --token" in done.stderr
    assert "Traceback" not in done.stderr


async def test_the_help_never_shows_the_token_from_the_environment() -> None:
    done = await finish(await start("serve", "--help", env=command_env(RXAGENT_TOKEN=TOKEN)))
    assert done.code == 0
    assert "--token" in done.stdout
    assert TOKEN not in done.stdout + done.stderr


@pytest.mark.llm  # serves the command's default model, the embedded one
async def test_off_loopback_with_a_token_it_serves_and_checks_it() -> None:
    env = command_env(RXAGENT_TOKEN=TOKEN)  # the token from the environment, not the command line
    process = await start("serve", "--host", "0.0.0.0", "--port", "0", "--tools", "none", env=env)
    assert process.stdout is not None
    line = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode()
    assert line.startswith("listening on http://0.0.0.0:")
    port = int(line.rsplit(":", 1)[1])
    async with aiohttp.ClientSession(f"http://127.0.0.1:{port}") as http:
        async with http.get("/api/sessions") as response:
            assert response.status == 401
        async with http.get("/api/sessions", headers={"Authorization": f"Bearer {TOKEN}"}) as response:
            assert response.status == 200
    process.send_signal(signal.SIGTERM)
    done = await finish(process)
    assert done.code == 0, done.stderr


# ---- the token ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body"), ROUTES)
async def test_every_route_needs_the_token(method: str, path: str, body: Any) -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"] * 3)), token=TOKEN) as live:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
            async with live.http.request(method, path, json=body, headers=headers) as response:
                assert response.status == 401, (headers, await response.text())
                text = await response.text()
                assert TOKEN not in text
                assert "needs its token" in text
        assert not await live.agent.sessions.list()  # nothing was made by the refused requests
        async with live.http.request(
            method, path, json=body, headers={"Authorization": f"Bearer {TOKEN}"}
        ) as response:
            assert response.status != 401


async def test_the_page_sets_its_cookie_only_for_the_token_in_the_address() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), token=TOKEN) as live:
        # Let in by its header, with another token in the address: redirected, but no cookie of it.
        async with live.http.get(
            "/?token=not-the-token", headers={"Authorization": f"Bearer {TOKEN}"}, allow_redirects=False
        ) as response:
            assert response.status == 303
            assert "Set-Cookie" not in response.headers
        async with live.http.get(f"/?token={TOKEN}", allow_redirects=False) as response:
            assert response.status == 303
            port = live.url.rsplit(":", 1)[1]
            assert response.cookies[f"rxagent_token_{port}"].value == TOKEN


async def test_the_token_may_come_as_a_query_parameter_or_a_cookie() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), token=TOKEN) as live:
        assert (await live.get(f"/api/sessions?token={TOKEN}"))[0] == 200
        assert (await live.get("/api/sessions?token=nope"))[0] == 401
        port = live.url.rsplit(":", 1)[1]
        assert (await live.get("/api/sessions", cookies={f"rxagent_token_{port}": TOKEN}))[0] == 200
        assert (await live.get("/api/sessions", cookies={f"rxagent_token_{port}": "nope"}))[0] == 401
        # Browsers share a host's cookies across its ports: another server's cookie is not this one's.
        assert (await live.get("/api/sessions", cookies={"rxagent_token_1": TOKEN}))[0] == 401
        assert (await live.get("/api/sessions", cookies={"rxagent_token": TOKEN}))[0] == 401
        status, _ = await live.post("/api/sessions/s/runs?token=" + TOKEN, {"input": "hi"})
        assert status == 202
        async with live.sse(f"/api/sessions/s/feed?token={TOKEN}") as feed:  # as EventSource would
            assert (await feed.next()) is not None


# ---- host and origin ---------------------------------------------------------------------------------------


async def test_requests_for_another_host_are_refused_without_a_token() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"]))) as live:
        port = live.url.rsplit(":", 1)[1]
        for host in ("evil.example", f"evil.example:{port}", "192.168.1.20"):
            status, answer = await live.get("/api/sessions", headers={"Host": host})
            assert status == 421, host
            assert "loopback" in answer["error"]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            assert (await live.get("/api/sessions", headers={"Host": host}))[0] == 200, host


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://127.0.0.1:1"},  # another port is another origin
        {"Sec-Fetch-Site": "cross-site"},
    ],
)
async def test_changes_from_another_origin_are_refused(headers: dict[str, str]) -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"]))) as live:
        for method, path, body in ROUTES:
            if method != "POST":
                continue
            status, answer = await live.post(path, body, headers=headers)
            assert status == 403, (path, answer)
            assert "origin" in answer["error"] or "cross-site" in answer["error"]
        assert not await live.agent.sessions.list()
        status, _ = await live.post("/api/sessions/s/runs", {"input": "hi"}, headers={"Origin": live.url})
        assert status == 202  # the server's own origin may


# ---- body size ---------------------------------------------------------------------------------------------


async def test_oversized_bodies_are_refused_and_change_nothing() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), max_body=2048) as live:
        big = {"input": "x" * 4096}
        status, answer = await live.post("/api/sessions/s/runs", big)
        assert status == 413
        assert "over the limit of 2048 bytes" in answer["error"]

        async def chunked() -> AsyncIterator[bytes]:  # no Content-Length: the limit holds while reading
            yield b'{"input": "'
            for _ in range(8):
                yield b"y" * 1024
            yield b'"}'

        async with live.http.post(
            "/api/sessions/s/runs", data=chunked(), headers={"Content-Type": "application/json"}
        ) as response:
            assert response.status == 413
        status, _ = await live.post("/ag-ui", {**ROUTES[8][2], "forwardedProps": "z" * 4096})
        assert status == 413
        assert not await live.agent.sessions.list()
        assert (await live.post("/api/sessions/s/runs", {"input": "small"}))[0] == 202


# ---- no secret anywhere ------------------------------------------------------------------------------------

API_KEY = "sk-live-9d2a6b-SECRET-KEY"


async def test_no_secret_appears_in_any_response_event_or_log_line(server: OpenAIServer) -> None:
    server.script(
        call_reply("calculator", {"expression": "6*7"}, "c1"),  # asks for approval
        text_reply("It is 42."),
        Reply.json({"error": {"message": "the model is not loaded"}}, status=400),  # a failing run
        Reply.sse(text_chunk("Once upon"), Stall()),  # running when the server stops
    )
    env = command_env(RX_TEST_KEY=API_KEY)
    process = await start(
        "serve", "--port", "0", "--base-url", server.base_url, "--model", "test-model",
        "--api-key-env", "RX_TEST_KEY", "--token", TOKEN, "--tools", "calculator", "--ask", "calc*",
        env=env,
    )  # fmt: skip
    assert process.stdout is not None
    url = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode().split()[-1]
    seen: list[str] = []
    auth = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(url, headers=auth) as http:
        live = _Recorder(http, seen)
        await live.call("POST", "/api/sessions/s/runs", {"input": "6*7?"})
        await live.feed("/api/sessions/s/feed", until='"reason":"PERMISSION_ASKING"')
        await live.call("GET", "/api/sessions")
        await live.call("GET", "/api/sessions/s")
        await live.call(
            "POST", "/api/sessions/s/respond", {"decisions": [{"call_id": "nope", "allow": True}]}
        )
        await live.call("POST", "/api/sessions/s/respond", {"decisions": [{"call_id": "c1", "allow": True}]})
        await live.feed("/api/sessions/s/feed", until='"reason":"MODEL_STOP"')
        await live.call("GET", "/api/sessions/s/turns")
        await live.call("POST", "/api/sessions/s/steer", {"message": "thanks"})  # starts the failing run
        await live.feed("/api/sessions/s/feed", until='"reason":"ERROR"')
        await live.call("POST", "/ag-ui", {"threadId": "s", "runId": "r", "messages": []})
        await live.call("POST", "/api/sessions/s/runs", {"input": "x" * (2 << 20)})
        await live.call("POST", "/api/sessions/s/runs", "not json")
        await live.call("GET", "/api/sessions/missing")
        await live.call("GET", "/no/such/route")
        await live.call("GET", "/api/sessions", headers={"Authorization": "Bearer wrong"})
        await live.call("GET", f"/api/sessions?token={TOKEN}", headers={"Authorization": ""})
        agui_body = {
            "threadId": "t2",
            "runId": "r2",
            "messages": [{"id": "m", "role": "user", "content": "tell"}],
        }
        await live.feed("/ag-ui", until="TEXT_MESSAGE_CONTENT", json=agui_body, keep_open=True)
        await live.call("POST", "/api/sessions/s/interrupt")
    process.send_signal(signal.SIGTERM)
    done = await finish(process)
    assert done.code == 0, done.stderr
    assert len(seen) >= 20
    assert "GET /api/sessions " in done.stderr  # the access log was written, and searched below
    for text in [*seen, done.stdout, done.stderr]:
        assert API_KEY not in text
        assert TOKEN not in text
    assert any(r.headers.get("Authorization") == f"Bearer {API_KEY}" for r in server.requests)  # it was used


class _Recorder:
    """Calls the server and keeps every status line, header and body it answered."""

    def __init__(self, http: aiohttp.ClientSession, seen: list[str]) -> None:
        self.http = http
        self.seen = seen
        self.open: list[aiohttp.ClientResponse] = []

    async def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> None:
        kwargs: dict[str, Any] = {"json": body} if not isinstance(body, str) else {"data": body}
        async with self.http.request(method, path, headers=headers, **kwargs) as response:
            self.seen.append(f"{response.status} {dict(response.headers)} {await response.text()}")

    async def feed(self, path: str, until: str, json: Any = None, keep_open: bool = False) -> None:
        method = "POST" if json is not None else "GET"
        response = await self.http.request(method, path, json=json, timeout=aiohttp.ClientTimeout(total=None))
        self.seen.append(f"{response.status} {dict(response.headers)}")
        async with asyncio.timeout(WAIT):
            while True:
                line = (await response.content.readline()).decode()
                assert line, f"the stream ended before {until}"
                self.seen.append(line)
                if until in line:
                    break
        if keep_open:  # a stream the stopping server ends
            self.open.append(response)
            return
        response.close()
