"""Error mapping, retries, budgets and timeouts of OpenAIChatModel against a real loopback server."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from rxagent.model import ModelConnectionError, ModelHTTPError, ModelStreamInterrupted, ModelTimeoutError
from rxagent.model.openai import Timeouts, parse_retry_after
from rxagent.operators import fold_message
from rxagent.retry import RetryAttempt, RetryBudget, RetryExhausted, RetryPolicy
from tests.model.openai_server import (
    DONE,
    Cut,
    OpenAIServer,
    Pause,
    Reply,
    Stall,
    ask,
    finish_chunk,
    make_model,
    raw_http_server,
    text_chunk,
)
from tests.streams import expect

OK = Reply.sse(text_chunk("ok"), finish_chunk(), DONE)
ONE_ATTEMPT = RetryPolicy(max_attempts=1)


@pytest.fixture
def refused_port() -> int:
    """A loopback port with nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def unaccepting_port() -> Iterator[int]:
    """A loopback port whose listener never accepts and whose backlog is full: connecting hangs."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers: list[socket.socket] = []
    for _ in range(3):  # fill the accept queue; the kernel then drops further SYNs
        filler = socket.socket()
        filler.setblocking(False)
        filler.connect_ex(("127.0.0.1", port))
        fillers.append(filler)
    yield port
    for filler in fillers:
        filler.close()
    listener.close()


# ---- HTTP statuses and retries ----------------------------------------------------------------------


async def test_429_with_retry_after_waits_then_succeeds(server: OpenAIServer) -> None:
    server.script(Reply.error(429, "slow down", {"Retry-After": "1"}), OK)
    async with make_model(server) as model:
        message = await model.stream(ask()).pipe(fold_message())
    assert message.text == "ok"
    first, second = server.requests
    assert second.received_at - first.received_at >= 1.0


async def test_retry_after_ms_is_preferred(server: OpenAIServer) -> None:
    server.script(Reply.error(429, "slow down", {"retry-after-ms": "150", "Retry-After": "30"}), OK)
    heard: list[RetryAttempt] = []
    budget = RetryBudget()
    budget.add_listener(heard.append)
    async with make_model(server) as model:
        await model.stream(ask(retry_budget=budget)).pipe(fold_message())
    assert heard[0].delay == pytest.approx(0.15)
    assert server.requests[1].received_at - server.requests[0].received_at >= 0.15


async def test_500_twice_then_success_within_the_budget(server: OpenAIServer) -> None:
    server.script(Reply.error(500, "oops"), Reply.error(502, "bad gateway"), OK)
    budget = RetryBudget(max_retries=3)
    heard: list[RetryAttempt] = []
    budget.add_listener(heard.append)
    async with make_model(server) as model:
        message = await model.stream(ask(retry_budget=budget)).pipe(fold_message())
    assert message.text == "ok"
    assert len(server.requests) == 3
    assert budget.used == 2
    statuses = [a.error.status for a in heard if isinstance(a.error, ModelHTTPError)]
    assert statuses == [500, 502]


async def test_budget_exhausted_says_so(server: OpenAIServer) -> None:
    server.script(Reply.error(503, "busy"), Reply.error(503, "busy"), OK)
    async with make_model(server, retry=RetryPolicy(max_attempts=5, base_delay=0.01)) as model:
        seen = await expect(model.stream(ask(retry_budget=RetryBudget(max_retries=1))))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "budget"
    assert "the run's retry budget is exhausted (after 2 attempts of this call)" in str(seen.error)
    assert isinstance(seen.error.__cause__, ModelHTTPError)
    assert len(server.requests) == 2


async def test_one_budget_is_shared_by_two_calls_of_a_run(server: OpenAIServer) -> None:
    run_budget = RetryBudget(max_retries=2)
    server.script(Reply.error(500, "a"), Reply.error(500, "b"), OK, Reply.error(500, "c"), OK)
    async with make_model(server) as model:
        first = await model.stream(ask("one", retry_budget=run_budget)).pipe(fold_message())
        second = await expect(model.stream(ask("two", retry_budget=run_budget)))
    assert first.text == "ok"
    assert isinstance(second.error, RetryExhausted)
    assert second.error.why == "budget"
    assert [r.body["messages"][0]["content"] for r in server.requests] == ["one", "one", "one", "two"]


async def test_400_is_not_retried(server: OpenAIServer) -> None:
    server.script(Reply.json({"error": {"message": "bad tool schema"}}, 400), OK)
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert seen.error.status == 400
    assert "bad tool schema" in str(seen.error)
    assert seen.error.retryable is False
    assert len(server.requests) == 1


async def test_a_redirect_is_an_error_not_followed(server: OpenAIServer) -> None:
    server.script(Reply.error(307, "", {"Location": "/v1/elsewhere"}))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert seen.error.status == 307
    assert len(server.requests) == 1


async def test_retry_after_beyond_the_policy_cap_fails_at_once(server: OpenAIServer) -> None:
    server.script(Reply.error(503, "maintenance", {"Retry-After": "3600"}), OK)
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "retry_after"
    assert len(server.requests) == 1


def test_retry_after_parses_seconds_and_http_dates() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after(" 1.5 ") == 1.5
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:07 GMT", now=now) == 7.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now=now) == 0.0
    for bad in (None, "", "soon", "inf", "nan", "Thu, 99 Foo"):
        assert parse_retry_after(bad) is None


# ---- transport failures ----------------------------------------------------------------------------


async def test_an_error_after_the_first_chunk_is_an_interruption_without_duplicates(
    server: OpenAIServer,
) -> None:
    server.script(Reply.sse(text_chunk("Hel"), text_chunk("lo"), Pause(), Cut()), OK)
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["Hel", "lo"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert seen.error.chunks_emitted == 2
    assert seen.error.retryable is False
    assert len(server.requests) == 1


async def test_connection_refused_is_a_connection_error_retried(refused_port: int) -> None:
    async with make_model(f"http://127.0.0.1:{refused_port}/v1") as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "attempts"
    assert seen.error.attempts == 3
    assert isinstance(seen.error.last_error, ModelConnectionError)
    assert "Cannot connect" in str(seen.error.last_error)


async def test_connect_timeout(unaccepting_port: int) -> None:
    timeouts = Timeouts(connect=0.2)
    async with make_model(
        f"http://127.0.0.1:{unaccepting_port}/v1", timeouts=timeouts, retry=ONE_ATTEMPT
    ) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "connect"
    assert error.retryable
    assert str(error) == "timed out after 0.2 s connecting to the model server"


async def test_idle_timeout_before_the_first_chunk_is_retried(server: OpenAIServer) -> None:
    server.script(Reply.sse(Stall()), Reply.sse(Stall()))
    async with make_model(
        server, timeouts=Timeouts(idle_read=0.2), retry=RetryPolicy(2, base_delay=0.01)
    ) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "idle"
    assert "waiting for the model server to send more" in str(error)
    assert len(server.requests) == 2


async def test_idle_timeout_while_waiting_for_the_response_headers(server: OpenAIServer) -> None:
    server.script(Reply(hold_headers=True))
    async with make_model(server, timeouts=Timeouts(idle_read=0.2), retry=ONE_ATTEMPT) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "idle"
    await server.disconnected.wait()


async def test_idle_timeout_after_a_chunk_interrupts_the_stream(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("partial"), Stall()))
    async with make_model(server, timeouts=Timeouts(idle_read=0.2)) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["partial"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    cause = seen.error.__cause__
    assert isinstance(cause, ModelTimeoutError)
    assert cause.kind == "idle"
    await server.disconnected.wait()


async def test_keep_alive_comments_hold_off_the_idle_timeout(server: OpenAIServer) -> None:
    pings = [frame for _ in range(4) for frame in (Pause(0.1), b": keep-alive\n\n")]
    server.script(Reply.sse(text_chunk("slow"), *pings, finish_chunk(), DONE))
    async with make_model(server, timeouts=Timeouts(idle_read=0.25)) as model:
        message = await model.stream(ask()).pipe(fold_message())
    assert message.text == "slow"  # 0.4 s in all, never 0.25 s of silence


async def test_total_timeout_bounds_the_whole_call(server: OpenAIServer) -> None:
    pings = [frame for _ in range(100) for frame in (Pause(0.05), b": keep-alive\n\n")]
    server.script(Reply.sse(text_chunk("never ends"), *pings))
    loop = asyncio.get_running_loop()
    start = loop.time()
    async with make_model(server, timeouts=Timeouts(idle_read=1, total=0.3)) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelTimeoutError)
    assert seen.error.kind == "total"
    assert str(seen.error) == "timed out after 0.3 s the whole model call"
    assert 0.3 <= loop.time() - start < 5
    await server.disconnected.wait()  # the response was closed, not left streaming


async def test_total_timeout_includes_retry_waits(server: OpenAIServer) -> None:
    server.script(Reply.error(503, "busy", {"Retry-After": "30"}), OK)
    async with make_model(server, timeouts=Timeouts(total=0.3)) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelTimeoutError)
    assert seen.error.kind == "total"
    assert len(server.requests) == 1


async def test_an_invalid_http_response_is_a_connection_error() -> None:
    async with (
        raw_http_server(b"HTTP/1.1 2x0 WHAT\r\nContent-Length: 0\r\n\r\n") as base_url,
        make_model(base_url, retry=ONE_ATTEMPT) as model,
    ):
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelConnectionError)
    assert "invalid HTTP response" in str(error)
    assert error.__cause__ is None  # aiohttp's ClientResponseError holds the request headers
    assert error.__context__ is None
