"""Cold streams, cancellation that frees the connection, and the model's own lifecycle (aclose)."""

from __future__ import annotations

import asyncio
import doctest

import pytest
from reactivex import operators as ops

import rxagent.model.openai
from rxagent.clock import VirtualClock
from rxagent.messages import Msg
from rxagent.model import ChatModel
from rxagent.model.openai import OpenAIChatModel, Timeouts
from rxagent.operators import fold_message
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    Stall,
    ask,
    finish_chunk,
    make_model,
    text_chunk,
)
from tests.streams import expect

OK = Reply.sse(text_chunk("ok"), finish_chunk(), DONE)
STREAM_TASK = "rxagent.from_async_iterable"


def stream_tasks() -> set[asyncio.Task[object]]:
    return {task for task in asyncio.all_tasks() if task.get_name() == STREAM_TASK and not task.done()}


async def assert_released(
    model: OpenAIChatModel, server: OpenAIServer, tasks: set[asyncio.Task[object]]
) -> None:
    """The stream's task ended, the server saw the client leave, and the pool holds no connection."""
    assert tasks
    _, pending = await asyncio.wait(tasks, timeout=5)
    assert not pending
    await asyncio.wait_for(server.disconnected.wait(), 5)
    session = model._session
    assert session is not None
    connector = session.connector
    assert connector is not None
    assert not connector._acquired
    assert not stream_tasks()


async def test_the_model_is_a_chat_model(server: OpenAIServer) -> None:
    async with make_model(server) as model:
        assert isinstance(model, ChatModel)
        assert model.model_name == "test-model"
        assert model.capabilities.tools


async def test_stream_is_cold_and_each_subscription_is_one_call(server: OpenAIServer) -> None:
    server.script(OK, OK)
    async with make_model(server) as model:
        answer = model.stream(ask()).pipe(fold_message())
        await asyncio.sleep(0)
        assert server.requests == []
        first: Msg = await answer
        second: Msg = await answer
    assert first.text == second.text == "ok"
    assert len(server.requests) == 2


async def test_dispose_mid_stream_closes_the_response_and_frees_the_connection(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("a"), Stall()))
    async with make_model(server) as model:
        seen = expect(model.stream(ask()))
        await server.stalled.wait()
        tasks = stream_tasks()
        seen.dispose()
        await assert_released(model, server, tasks)
        assert all(task.cancelled() for task in tasks)
    assert seen.outcome is None


async def test_dispose_leaves_no_timer_on_the_models_clock(server: OpenAIServer, clock: VirtualClock) -> None:
    server.script(Reply.sse(text_chunk("a"), Stall()))
    async with make_model(server, timeouts=Timeouts(idle_read=30), clock=clock) as model:
        seen = expect(model.stream(ask()))
        await asyncio.wait_for(server.stalled.wait(), 5)
        await clock.advance(0)
        assert len(clock.pending()) == 1  # the request's deadline (idle now), waiting for the server
        tasks = stream_tasks()
        seen.dispose()
        await assert_released(model, server, tasks)
        assert clock.pending() == ()


async def test_dispose_during_a_retry_wait_cancels_it(server: OpenAIServer, clock: VirtualClock) -> None:
    server.script(Reply.error(503, "busy", {"Retry-After": "30"}), OK)
    async with make_model(server, clock=clock) as model:
        seen = expect(model.stream(ask()))
        await clock.advance(0)  # the loop runs until idle: the request made, the 503 read, the wait set
        assert clock.pending() == (30.0,)
        seen.dispose()
        await clock.advance(0)
        assert clock.pending() == ()
        await clock.advance(60)
    assert len(server.requests) == 1  # no attempt after the cancelled wait
    assert seen.outcome is None


async def test_cancelling_the_awaiting_task_frees_the_connection(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("a"), Stall()))
    async with make_model(server) as model:

        async def consume() -> Msg:
            return await model.stream(ask()).pipe(fold_message())

        consumer = asyncio.create_task(consume())
        await server.stalled.wait()
        tasks = stream_tasks()
        consumer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await consumer
        await assert_released(model, server, tasks)


async def test_take_disposing_from_inside_on_next_frees_the_connection(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("a"), text_chunk("b"), Stall()))
    async with make_model(server) as model:
        seen = expect(model.stream(ask()).pipe(ops.take(1)))
        tasks = stream_tasks()  # subscribing started the attempt's task
        await seen
        assert [c.text for c in seen.items] == ["a"]
        assert seen.completed
        await assert_released(model, server, tasks)


async def test_a_complete_stream_leaves_no_task_and_no_acquired_connection(server: OpenAIServer) -> None:
    server.script(OK)
    async with make_model(server) as model:
        await model.stream(ask()).pipe(fold_message())
        session = model._session
        assert session is not None
        assert session.connector is not None
        assert not session.connector._acquired
        assert not stream_tasks()


async def test_the_connection_is_reused_by_the_next_call(server: OpenAIServer) -> None:
    server.script(OK, OK, OK)
    async with make_model(server) as model:
        for _ in range(3):
            await model.stream(ask()).pipe(fold_message())
    assert len({r.client_port for r in server.requests}) == 1


async def test_aclose_closes_the_session_and_later_use_is_a_clear_error(server: OpenAIServer) -> None:
    server.script(OK)
    model = make_model(server)
    prepared = model.stream(ask())  # assembled before aclose, subscribed after
    await model.stream(ask()).pipe(fold_message())
    session = model._session
    assert session is not None
    await model.aclose()
    assert session.closed
    await model.aclose()  # idempotent
    with pytest.raises(RuntimeError, match=r"was closed by aclose\(\); create a new model"):
        model.stream(ask())
    seen = await expect(prepared)
    assert isinstance(seen.error, RuntimeError)
    assert "was closed by aclose()" in str(seen.error)
    assert len(server.requests) == 1


async def test_async_with_closes_the_model(server: OpenAIServer) -> None:
    server.script(OK)
    async with make_model(server) as model:
        await model.stream(ask()).pipe(fold_message())
        session = model._session
    assert session is not None
    assert session.closed
    with pytest.raises(RuntimeError, match="closed"):
        async with model:
            pass


def test_the_model_is_bound_to_the_loop_it_first_ran_on() -> None:
    async def first_loop() -> OpenAIChatModel:
        async with OpenAIServer() as server:
            server.script(OK)
            model = make_model(server)
            await model.stream(ask()).pipe(fold_message())
            session = model._session
            assert session is not None
            await session.close()  # tidy up this loop's session but keep the model "open"
            return model

    model = asyncio.run(first_loop())

    async def second_loop() -> BaseException | None:
        seen = await expect(model.stream(ask()))
        return seen.error

    error = asyncio.run(second_loop())
    assert isinstance(error, RuntimeError)
    assert "bound to the event loop it was first used on" in str(error)


def test_subscribing_outside_a_running_loop_is_a_clear_error() -> None:
    model = OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", api_key="k")
    errors: list[Exception] = []
    model.stream(ask()).subscribe(on_error=errors.append)
    assert len(errors) == 1
    assert "loop-bound" in str(errors[0])


@pytest.mark.parametrize("base_url", ["127.0.0.1:8000/v1", "ftp://host/v1", "/v1", ""])
def test_a_bad_base_url_fails_at_construction(base_url: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        OpenAIChatModel("m", base_url=base_url)


@pytest.mark.parametrize(
    "settings", [{"connect": 0}, {"idle_read": -1}, {"total": float("inf")}, {"connect": float("nan")}]
)
def test_bad_timeouts_fail_at_construction(settings: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="positive number of seconds"):
        Timeouts(**settings)


async def test_no_idle_or_total_limit_is_allowed(server: OpenAIServer) -> None:
    server.script(OK)
    async with make_model(server, timeouts=Timeouts(idle_read=None, total=None)) as model:
        message = await model.stream(ask()).pipe(fold_message())
    assert message.text == "ok"


def test_connection_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="connection_limit"):
        OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", connection_limit=0)


def test_module_examples() -> None:
    results = doctest.testmod(rxagent.model.openai)
    assert results.attempted > 0
    assert results.failed == 0
