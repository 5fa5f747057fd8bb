"""A server on the open internet behind a proxy: slow and oversized requests, too many connections,
clients that stop reading, forwarded headers, and a token kept out of ``ps``. Real servers on 127.0.0.1,
raw sockets where a client must misbehave.

Bad inputs tried: a request head that never ends (slowloris), a connection that sends nothing, a
``Content-Length`` of 10 GB (with and without the token), a body that stops half-way, one connection past
the cap, 200 feed clients that never read, ``X-Forwarded-*`` headers from an address that is not a listed
proxy and from a server that lists none, a forwarded host that is not a host, trusted proxies without a
token, that are not addresses, or given as one string, timeouts and limits out of range, and token files
that are missing or empty, or given with ``--token`` too.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import socket
import tracemalloc
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxagent import ScriptedModel, ScriptedResponse
from rxagent.agent import ReActAgent
from rxagent.clock import VirtualClock
from rxagent.serve import ServeSettings
from rxagent.session import MemoryStore
from tests.model.openai_server import OpenAIServer
from tests.serve.conftest import WAIT, Live, ValveModel, is_result_of, serving
from tests.test_cli import command_env, finish, start, text_reply

TOKEN = "tok-hardening-7f3a-NEVER-SHOWN"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


# ---- raw connections ---------------------------------------------------------------------------------------


def _address(live: Live) -> tuple[str, int]:
    host, port = live.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


async def _connect(live: Live) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection(*_address(live))


async def _answer(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP answer off ``reader``: its status, headers (names in lower case) and body."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), WAIT)
    status_line, *lines = head.decode().split("\r\n")
    headers = {
        name.strip().lower(): value.strip() for name, _, value in (h.partition(":") for h in lines if h)
    }
    body = await asyncio.wait_for(reader.readexactly(int(headers.get("content-length", "0"))), WAIT)
    return int(status_line.split()[1]), headers, body


def _get(path: str, live: Live, *more: str) -> bytes:
    host, port = _address(live)
    return "\r\n".join([f"GET {path} HTTP/1.1", f"Host: {host}:{port}", *more, "", ""]).encode()


async def _closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Whether the server closes the connection (without answering anything first)."""
    return await asyncio.wait_for(reader.read(), WAIT) == b""


# ---- slow requests -----------------------------------------------------------------------------------------


async def test_a_request_head_that_never_ends_is_closed_at_the_header_timeout() -> None:
    model = ValveModel(ScriptedResponse(text="ab", chunk_size=1))
    async with serving(ReActAgent(model), header_timeout=0.2) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "go"})
        async with live.sse("/api/sessions/s/feed") as feed:  # a stream outlives the header timeout
            slow_reader, slow = await _connect(live)
            slow.write(_get("/api/sessions", live).removesuffix(b"\r\n\r\n") + b"\r\nX-Slow: ")
            silent_reader, silent = await _connect(live)  # a connection that sends nothing at all
            try:
                assert await _closed_by_server(slow_reader)
                assert await _closed_by_server(silent_reader)
                # Both waited past the timeout after the stream opened: the stream still goes on.
                model.open()
                events = await feed.until(is_result_of(answer["run_id"]))
                assert events[-1].json()["data"]["message"]["content"][0]["text"] == "ab"
            finally:
                slow.close()
                silent.close()
        # A request that comes whole is served as ever.
        assert (await live.get("/api/sessions"))[0] == 200


async def test_a_body_that_stops_half_way_is_answered_408_when_the_body_timeout_passes() -> None:
    clock = VirtualClock()
    async with serving(ReActAgent(ScriptedModel(["ok"]), clock=clock), body_timeout=30) as live:
        reader, writer = await _connect(live)
        try:
            head = _get("/api/sessions/s/runs", live, "Content-Type: application/json", "Content-Length: 100")
            writer.write(head.replace(b"GET", b"POST", 1) + b'{"input": "hal')
            await clock.advance(0)  # the server has the head and waits for the rest of the body
            assert 30.0 in clock.pending()
            await clock.advance(30)
            status, headers, body = await _answer(reader)
        finally:
            writer.close()
        assert status == 408
        assert headers["connection"] == "close"
        assert json.loads(body) == {"error": "the body did not arrive whole within 30 s"}
        assert not await live.agent.sessions.list()
        assert live.server.hub.in_memory == 0


# ---- oversized requests ------------------------------------------------------------------------------------


@pytest.mark.parametrize("token", [None, TOKEN])
async def test_a_10_gb_content_length_is_refused_at_once_before_any_body_is_read(token: str | None) -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), token=token) as live:
        answers: list[int] = []
        for authorization in ([f"Authorization: Bearer {token}"] if token else []) + [""]:
            reader, writer = await _connect(live)
            try:
                lines = ["Content-Type: application/json", "Content-Length: 10737418240"]
                head = _get("/api/sessions/s/runs", live, *lines, *([authorization] if authorization else []))
                writer.write(head.replace(b"GET", b"POST", 1))  # and not a byte of the body
                status, headers, body = await _answer(reader)
            finally:
                writer.close()
            answers.append(status)
            assert headers["connection"] == "close"
            if status == 413:
                assert json.loads(body)["error"] == "the body is over the limit of 1048576 bytes"
        assert answers == ([413, 401] if token else [413])  # without the token: refused for that first
        assert not await live.agent.sessions.list()
        assert live.server.hub.in_memory == 0


# ---- connections -------------------------------------------------------------------------------------------


async def test_one_connection_past_the_cap_is_answered_503_and_closed() -> None:
    async with serving(ReActAgent(ScriptedModel(["ok"])), max_connections=2) as live:
        held: list[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = []
        try:
            for _ in range(2):  # two keep-alive connections, each answered once: they hold the places
                reader, writer = await _connect(live)
                held.append((reader, writer))
                writer.write(_get("/healthz", live))
                assert (await _answer(reader))[0] == 200
            reader, writer = await _connect(live)
            held.append((reader, writer))
            status, headers, body = await _answer(reader)
            assert (status, headers["retry-after"], headers["connection"]) == (503, "1", "close")
            assert "as many connections as it takes" in json.loads(body)["error"]
            assert await _closed_by_server(reader)
            # One of the two leaves: a place is free again.
            reader, writer = held[0]
            writer.write(_get("/healthz", live, "Connection: close"))
            assert (await _answer(reader))[0] == 200
            assert await _closed_by_server(reader)
            reader, writer = await _connect(live)
            held.append((reader, writer))
            writer.write(_get("/healthz", live))
            assert (await _answer(reader))[0] == 200
        finally:
            for _, writer in held:
                writer.close()


# ---- clients that stop reading -----------------------------------------------------------------------------

STALLED_BOUND = 128 * 1024
"""What a feed client that stops reading may cost the server at most (the contract in rxagent.serve)."""


@asynccontextmanager
async def _stalled_clients(live: Live, count: int) -> AsyncIterator[list[socket.socket]]:
    """``count`` clients that ask for the session ``s``'s feed and never read a byte of it (raw sockets,
    so nothing of the answer is read into this process either), closed after."""
    loop = asyncio.get_running_loop()
    clients: list[socket.socket] = []
    try:
        for _ in range(count):
            client = socket.socket()
            clients.append(client)
            client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            client.setblocking(False)
            await loop.sock_connect(client, _address(live))
            await loop.sock_sendall(client, _get("/api/sessions/s/feed", live))
        yield clients
    finally:
        for client in clients:
            client.close()


async def test_200_stalled_feed_clients_stay_within_the_bound_and_give_the_memory_back() -> None:
    clock = VirtualClock()  # no timer moves unless told: only the clients' stalling is at work
    model = ScriptedModel([ScriptedResponse(text="z" * 3_000, chunk_size=1)])
    agent = ReActAgent(model, store=MemoryStore(), clock=clock)  # no threads: "idle" means stalled
    # A small send buffer for each connection: what the system would hold is reached with a short log.
    async with serving(agent, send_buffer=8192, send_timeout=3600) as live:
        _, answer = await live.post("/api/sessions/s/runs", {"input": "a long answer"})
        await clock.run(live.server.hub.handle("s").wait())
        log_bytes = sum(len(f.payload) for f in await agent.sessions.facts(live.server.hub.handle("s").ctx))
        assert log_bytes > 400 * 1024  # far more than a client may cost
        hub = live.server.hub
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            async with _stalled_clients(live, 200):
                await clock.advance(0)  # until nothing moves: every stream waits on its client
                streams = list(hub.streams)
                assert len(streams) == 200
                assert all(stream.waiting for stream in streams)
                closed = [stream.closed for stream in streams]
                del streams
                gc.collect()
                during = tracemalloc.get_traced_memory()[0]
            await asyncio.wait_for(asyncio.gather(*(c.wait() for c in closed)), WAIT)  # they went away
            await clock.advance(0)
            assert not hub.streams
            gc.collect()
            after = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert (during - before) / 200 <= STALLED_BOUND, (during - before) / 200
        assert after - before <= 1 << 20, after - before  # given back: nothing per client is left
        # And the run, and the log, are whole.
        _, run = await live.get(f"/api/sessions/s/runs/{answer['run_id']}")
        assert run["result"]["message"]["content"][0]["text"] == "z" * 3_000


# ---- behind a proxy ----------------------------------------------------------------------------------------

FORWARDED = {
    "X-Forwarded-Proto": "https",
    "X-Forwarded-Host": "agents.example",
    "X-Forwarded-For": "203.0.113.7",
    "Origin": "https://agents.example",  # the page as the browser has it: behind the proxy's TLS
}


async def _post_as(live: Live, headers: dict[str, str], local: str | None = None) -> int:
    connector = aiohttp.TCPConnector(local_addr=(local, 0)) if local else None
    async with (
        aiohttp.ClientSession(base_url=live.url, connector=connector) as http,
        http.post("/api/sessions/s/runs", json={"input": "hi"}, headers={**AUTH, **headers}) as response,
    ):
        return response.status


async def test_behind_a_tls_proxy_dashboard_actions_work_only_from_a_listed_proxy(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="rxagent.serve.access")
    agent = ReActAgent(ScriptedModel(["ok"] * 10))
    async with serving(agent, token=TOKEN, trusted_proxies=("127.0.0.1",)) as live:
        # From the listed proxy: the page's origin is the one the proxy forwards.
        assert await _post_as(live, FORWARDED) == 202
        assert await _post_as(live, {**FORWARDED, "X-Forwarded-Proto": "http, https"}) == 202  # the last
        assert await _post_as(live, {**FORWARDED, "Origin": "http://agents.example"}) == 403
        assert await _post_as(live, {**FORWARDED, "X-Forwarded-Host": "a b/c"}) == 403  # not a host
        assert any(r.getMessage().startswith("203.0.113.7 POST") for r in caplog.records)  # its client
        # From another address the same headers prove nothing: the connection's own origin counts.
        assert await _post_as(live, FORWARDED, local="127.0.0.2") == 403
        assert await _post_as(live, {"Origin": live.url}, local="127.0.0.2") == 202
        # The proxy's https makes the token's cookie Secure.
        async with live.http.get(
            f"/?token={TOKEN}", headers={"X-Forwarded-Proto": "https"}, allow_redirects=False
        ) as response:
            assert response.status == 303
            assert "Secure" in response.headers["Set-Cookie"]
    async with serving(ReActAgent(ScriptedModel(["ok"])), token=TOKEN) as live:  # no proxy listed
        assert await _post_as(live, FORWARDED) == 403
        assert await _post_as(live, {"Origin": live.url}) == 202


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"trusted_proxies": ("127.0.0.1",)}, "trusting proxies needs a token"),
        (
            {"trusted_proxies": ("proxy.example",), "token": TOKEN},
            "a trusted proxy is an address or a network",
        ),
        ({"trusted_proxies": "127.0.0.1", "token": TOKEN}, "a tuple of addresses, not a string"),
        ({"header_timeout": 0}, "must be positive"),
        ({"body_timeout": -1}, "must be positive"),
        ({"session_ttl": 0}, "must be positive"),
        ({"max_connections": 0}, "max_connections must be at least 1"),
        ({"send_buffer": 100}, "send_buffer must be at least 4096 bytes"),
    ],
)
def test_settings_out_of_range_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServeSettings(**settings)


def test_proxies_may_be_networks_and_ipv6() -> None:
    settings = ServeSettings(token=TOKEN, trusted_proxies=("10.0.0.0/8", "::1", "[fd00::1]"))
    assert settings.trusted_proxies == ("10.0.0.0/8", "::1", "[fd00::1]")


# ---- the token out of `ps` ---------------------------------------------------------------------------------


async def test_the_command_reads_its_token_from_a_file_and_trusts_the_proxies_it_is_given(
    server: OpenAIServer, tmp_path: Path
) -> None:
    server.script(text_reply("Hello."))
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    process = await start(
        "serve", "--port", "0", "--db", str(tmp_path / "s.db"), "--base-url", server.base_url,
        "--model", "test-model", "--tools", "none", "--token-file", str(token_file),
        "--trusted-proxy", "10.9.9.9", "--forwarded-allow-ips", "192.0.2.1,127.0.0.1",
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode().split()[-1]
        shown = await asyncio.to_thread(Path(f"/proc/{process.pid}/cmdline").read_bytes)  # what `ps` shows
        assert TOKEN not in shown.decode()
        async with aiohttp.ClientSession(url) as http:
            async with http.get("/api/sessions") as response:
                assert response.status == 401
            async with http.get("/healthz") as response:  # a load balancer's check needs no token
                assert (response.status, await response.json()) == (200, {"status": "ok"})
            async with http.post(
                "/api/sessions/s/runs", json={"input": "hi"}, headers={**AUTH, **FORWARDED}
            ) as response:
                assert response.status == 202, await response.text()
    finally:
        process.terminate()
        done = await finish(process)
    assert done.code == 0, done.stderr
    assert TOKEN not in done.stdout + done.stderr
    assert "--token shows in `ps`" not in done.stderr


async def test_token_on_the_command_line_still_works_with_a_warning(
    server: OpenAIServer, tmp_path: Path
) -> None:
    process = await start(
        "serve", "--port", "0", "--db", str(tmp_path / "s.db"), "--base-url", server.base_url,
        "--model", "test-model", "--tools", "none", "--token", TOKEN,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode().split()[-1]
        async with aiohttp.ClientSession(url, headers=AUTH) as http, http.get("/api/sessions") as response:
            assert response.status == 200
    finally:
        process.terminate()
        done = await finish(process)
    assert "--token shows in `ps` to every user of this machine" in done.stderr
    assert TOKEN not in done.stdout + done.stderr


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (None, [], "cannot read it (FileNotFoundError"),
        ("\n", [], "its first line is empty"),
        (f"{TOKEN}\n", ["--token", TOKEN], "give the token once"),
        (None, ["--trusted-proxy", "proxy.example", "--token", TOKEN], "a trusted proxy is an address"),
    ],
)
async def test_bad_token_files_and_proxies_stop_the_command(
    tmp_path: Path, make: str | None, extra: list[str], message: str
) -> None:
    token_file = tmp_path / "token"
    if make is not None:
        token_file.write_text(make)
    args = ["--token-file", str(token_file)] if "--token" not in extra or make is not None else []
    done = await finish(
        await start("serve", "--port", "0", "--tools", "none", *args, *extra, env=command_env())
    )
    assert done.code == 2, done.stderr
    assert message in done.stderr
    assert done.stdout == ""
    assert TOKEN not in done.stderr
