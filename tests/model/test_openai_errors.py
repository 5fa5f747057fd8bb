"""Error mapping, retries, budgets and timeouts of OpenAIChatModel against a real loopback server.

The waiting is on a :class:`~rxagent.clock.VirtualClock` shared by the client and the server: the I/O is
real, the seconds are not, so every wait and timeout is asserted exactly and none is slept through.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from rxagent.clock import VirtualClock
from rxagent.model import ModelConnectionError, ModelHTTPError, ModelStreamInterrupted, ModelTimeoutError
from rxagent.model.openai import Timeouts, parse_retry_after
from rxagent.operators import fold_message, to_async_iterator
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
SECONDS = RetryPolicy(max_attempts=3, base_delay=1, multiplier=2, jitter=0)
"""Waits of 1 s then 2 s: long enough to be unmistakable, free on a virtual clock."""


@pytest.fixture
def timed(server: OpenAIServer, clock: VirtualClock) -> OpenAIServer:
    """The loopback server, pausing on the test's virtual clock."""
    server.clock = clock
    return server


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


async def test_429_with_retry_after_waits_then_succeeds(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.error(429, "slow down", {"Retry-After": "10"}), OK)
    async with make_model(timed, clock=clock) as model:
        seen = expect(model.stream(ask()).pipe(fold_message()))
        await clock.advance(9.5)
        assert len(timed.requests) == 1  # still waiting out the server's 10 s
        await clock.advance(0.5)
        message = (await clock.run(seen)).items[0]
    assert message.text == "ok"
    assert [r.received_at for r in timed.requests] == [0.0, 10.0]


async def test_retry_after_ms_is_preferred(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.error(429, "slow down", {"retry-after-ms": "1500", "Retry-After": "30"}), OK)
    heard: list[RetryAttempt] = []
    budget = RetryBudget()
    budget.add_listener(heard.append)
    async with make_model(timed, clock=clock) as model:
        await clock.run(model.stream(ask(retry_budget=budget)).pipe(fold_message()))
    assert heard[0].delay == pytest.approx(1.5)
    assert [r.received_at for r in timed.requests] == [0.0, 1.5]


async def test_500_twice_then_success_within_the_budget(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.error(500, "oops"), Reply.error(502, "bad gateway"), OK)
    budget = RetryBudget(max_retries=3)
    heard: list[RetryAttempt] = []
    budget.add_listener(heard.append)
    async with make_model(timed, retry=SECONDS, clock=clock) as model:
        message = await clock.run(model.stream(ask(retry_budget=budget)).pipe(fold_message()))
    assert message.text == "ok"
    assert [r.received_at for r in timed.requests] == [0.0, 1.0, 3.0]  # waits of 1 s and 2 s
    assert budget.used == 2
    statuses = [a.error.status for a in heard if isinstance(a.error, ModelHTTPError)]
    assert statuses == [500, 502]


async def test_the_jitter_comes_from_the_policys_random_source(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.error(503, "busy"), Reply.error(503, "busy"), OK)
    draws = iter([0.0, 1.0])
    policy = RetryPolicy(max_attempts=3, base_delay=4, multiplier=1, jitter=0.5, rng=lambda: next(draws))
    async with make_model(timed, retry=policy, clock=clock) as model:
        await clock.run(model.stream(ask()).pipe(fold_message()))
    assert [r.received_at for r in timed.requests] == [0.0, 2.0, 8.0]  # 4 s scaled by 0.5, then by 1.5


async def test_budget_exhausted_says_so(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.error(503, "busy"), Reply.error(503, "busy"), OK)
    async with make_model(timed, retry=RetryPolicy(max_attempts=5, base_delay=1), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask(retry_budget=RetryBudget(max_retries=1)))))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "budget"
    assert "the run's retry budget is exhausted (after 2 attempts of this call)" in str(seen.error)
    assert isinstance(seen.error.__cause__, ModelHTTPError)
    assert len(timed.requests) == 2


async def test_one_budget_is_shared_by_two_calls_of_a_run(timed: OpenAIServer, clock: VirtualClock) -> None:
    run_budget = RetryBudget(max_retries=2)
    timed.script(Reply.error(500, "a"), Reply.error(500, "b"), OK, Reply.error(500, "c"), OK)
    async with make_model(timed, clock=clock) as model:
        first = await clock.run(model.stream(ask("one", retry_budget=run_budget)).pipe(fold_message()))
        second = await clock.run(expect(model.stream(ask("two", retry_budget=run_budget))))
    assert first.text == "ok"
    assert isinstance(second.error, RetryExhausted)
    assert second.error.why == "budget"
    assert [r.body["messages"][0]["content"] for r in timed.requests] == ["one", "one", "one", "two"]


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
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(text_chunk("Hel"), text_chunk("lo"), Pause(), Cut()), OK)
    async with make_model(timed, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["Hel", "lo"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert seen.error.chunks_emitted == 2
    assert seen.error.retryable is False
    assert len(timed.requests) == 1


async def test_connection_refused_is_a_connection_error_retried(
    refused_port: int, clock: VirtualClock
) -> None:
    async with make_model(f"http://127.0.0.1:{refused_port}/v1", retry=SECONDS, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "attempts"
    assert seen.error.attempts == 3
    assert isinstance(seen.error.last_error, ModelConnectionError)
    assert "Cannot connect" in str(seen.error.last_error)
    assert clock.now() == 3.0  # waits of 1 s and 2 s between the three attempts


async def test_connect_timeout(unaccepting_port: int, clock: VirtualClock) -> None:
    timeouts = Timeouts(connect=10)
    async with make_model(
        f"http://127.0.0.1:{unaccepting_port}/v1", timeouts=timeouts, retry=ONE_ATTEMPT, clock=clock
    ) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "connect"
    assert error.retryable
    assert str(error) == "timed out after 10 s connecting to the model server"
    assert clock.now() == 10.0


async def test_waiting_for_a_pooled_connection_is_not_a_connect_timeout(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(text_chunk("first"), Pause(60), finish_chunk(), DONE), OK)
    timeouts = Timeouts(connect=5, idle_read=90)
    async with make_model(timed, timeouts=timeouts, connection_limit=1, clock=clock) as model:
        first = expect(model.stream(ask("one")).pipe(fold_message()))
        second = expect(model.stream(ask("two")).pipe(fold_message()))  # queued behind the first for 60 s
        answers = await clock.run(asyncio.gather(first, second))
    assert [recording.items[0].text for recording in answers] == ["first", "ok"]
    assert [r.received_at for r in timed.requests] == [0.0, 60.0]


async def test_the_total_bounds_the_wait_for_a_pooled_connection(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(text_chunk("a"), text_chunk("b"), Pause(200), finish_chunk(), DONE))
    async with make_model(timed, timeouts=Timeouts(total=30), connection_limit=1, clock=clock) as model:

        async def hold_the_connection() -> None:
            # "a" read, "b" buffered: the stream is held (no deadline of its own runs) and keeps the only
            # connection, its response unfinished, while this reader dawdles.
            async for _ in to_async_iterator(model.stream(ask("one")), max_buffer=1):
                await clock.sleep(100)

        holder = asyncio.ensure_future(hold_the_connection())
        await clock.advance(0)
        queued = await clock.run(expect(model.stream(ask("two"))))
        assert not holder.done()
        holder.cancel()
    assert isinstance(queued.error, ModelTimeoutError)
    assert queued.error.kind == "total"
    assert clock.now() == 30.0  # it timed out waiting for the connection
    assert [r.body["messages"][0]["content"] for r in timed.requests] == ["one"]


async def test_idle_timeout_before_the_first_chunk_is_retried(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(Stall()), Reply.sse(Stall()))
    policy = RetryPolicy(2, base_delay=1, jitter=0)
    async with make_model(timed, timeouts=Timeouts(idle_read=30), retry=policy, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "idle"
    assert "waiting for the model server to send more" in str(error)
    assert [r.received_at for r in timed.requests] == [0.0, 31.0]  # 30 s of silence, a 1 s wait
    assert clock.now() == 61.0


async def test_idle_timeout_while_waiting_for_the_response_headers(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply(hold_headers=True))
    async with make_model(timed, timeouts=Timeouts(idle_read=30), retry=ONE_ATTEMPT, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    error = seen.error.last_error
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "idle"
    assert clock.now() == 30.0
    await clock.run(asyncio.wait_for(timed.disconnected.wait(), 5))


async def test_idle_timeout_after_a_chunk_interrupts_the_stream(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(text_chunk("partial"), Stall()))
    async with make_model(timed, timeouts=Timeouts(idle_read=30), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["partial"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    cause = seen.error.__cause__
    assert isinstance(cause, ModelTimeoutError)
    assert cause.kind == "idle"
    assert clock.now() == 30.0
    await clock.run(asyncio.wait_for(timed.disconnected.wait(), 5))


async def test_keep_alive_comments_hold_off_the_idle_timeout(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    pings = [frame for _ in range(4) for frame in (Pause(20), b": keep-alive\n\n")]
    timed.script(Reply.sse(text_chunk("slow"), *pings, finish_chunk(), DONE))
    async with make_model(timed, timeouts=Timeouts(idle_read=25), clock=clock) as model:
        message = await clock.run(model.stream(ask()).pipe(fold_message()))
    assert message.text == "slow"
    assert clock.now() == 80.0  # 80 s in all, never 25 s of silence


async def test_a_slow_consumer_is_not_a_silent_server(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.sse(text_chunk("a"), text_chunk("b"), Pause(1), text_chunk("c"), finish_chunk(), DONE))
    async with make_model(timed, timeouts=Timeouts(idle_read=5), clock=clock) as model:

        async def slow_reader() -> list[str]:
            texts: list[str] = []
            # A one-item buffer: while the reader dawdles, the stream is held, its request waiting.
            async for chunk in to_async_iterator(model.stream(ask()), max_buffer=1):
                texts.append(chunk.text)
                if len(texts) == 1:
                    await clock.sleep(60)  # far past idle_read, but the server was not silent
            return texts

        # Bounded: a deadline running while the stream is held would cancel it outside its iterator.
        texts = await asyncio.wait_for(clock.run(slow_reader()), 10)
    assert "".join(texts) == "abc"
    assert clock.now() == 60.0


async def test_a_total_deadline_passing_while_the_consumer_holds_the_stream_ends_it(
    timed: OpenAIServer, clock: VirtualClock
) -> None:
    timed.script(Reply.sse(text_chunk("a"), text_chunk("b"), Pause(1), text_chunk("c"), finish_chunk(), DONE))
    async with make_model(timed, timeouts=Timeouts(idle_read=5, total=30), clock=clock) as model:

        async def slow_reader() -> tuple[list[str], BaseException | None]:
            texts: list[str] = []
            try:
                async for chunk in to_async_iterator(model.stream(ask()), max_buffer=1):
                    texts.append(chunk.text)
                    if len(texts) == 1:
                        await clock.sleep(60)  # the stream is held past its 30 s
            except ModelTimeoutError as error:
                return texts, error
            return texts, None

        texts, error = await asyncio.wait_for(clock.run(slow_reader()), 10)
    assert isinstance(error, ModelTimeoutError)
    assert error.kind == "total"
    assert texts == ["a", "b"]  # the items buffered before the deadline still arrive, then the error
    assert clock.now() == 60.0


async def test_total_timeout_bounds_the_whole_call(timed: OpenAIServer, clock: VirtualClock) -> None:
    pings = [frame for _ in range(100) for frame in (Pause(5), b": keep-alive\n\n")]
    timed.script(Reply.sse(text_chunk("never ends"), *pings))
    async with make_model(timed, timeouts=Timeouts(idle_read=10, total=30), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, ModelTimeoutError)
    assert seen.error.kind == "total"
    assert str(seen.error) == "timed out after 30 s the whole model call"
    assert clock.now() == 30.0
    await clock.run(asyncio.wait_for(timed.disconnected.wait(), 5))  # closed, not left streaming


async def test_total_timeout_includes_retry_waits(timed: OpenAIServer, clock: VirtualClock) -> None:
    timed.script(Reply.error(503, "busy", {"Retry-After": "30"}), OK)
    async with make_model(timed, timeouts=Timeouts(total=20), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, ModelTimeoutError)
    assert seen.error.kind == "total"
    assert len(timed.requests) == 1
    assert clock.now() == 20.0  # in the middle of the 30 s wait


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


CONTEXT_OVERFLOWS = {
    "openai": '{"error": {"message": "This model\'s maximum context length is 8192 tokens.", '
    '"code": "context_length_exceeded"}}',
    "llama.cpp": '{"error": {"code": 400, "message": "the request exceeds the available context size"}}',
    "anthropic": '{"type": "error", "error": {"type": "invalid_request_error", '
    '"message": "prompt is too long"}}',
}


@pytest.mark.parametrize("server_name", sorted(CONTEXT_OVERFLOWS))
async def test_a_request_too_long_for_the_model_is_told_apart(server: OpenAIServer, server_name: str) -> None:
    server.script(Reply.error(400, CONTEXT_OVERFLOWS[server_name]))
    async with make_model(server) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert seen.error.context_overflow
    assert not seen.error.retryable  # the same request fails the same way: sending less is the cure
    assert len(server.requests) == 1


def test_other_refusals_are_not_context_overflows() -> None:
    assert not ModelHTTPError(400, '{"error": {"message": "bad tool schema"}}').context_overflow
    assert not ModelHTTPError(500, "maximum context length is 8192 tokens").context_overflow  # a server fault
    assert ModelHTTPError(413, "input is too long for this model").context_overflow
