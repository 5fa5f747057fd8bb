"""FallbackModel against a real loopback server: which failures move a call to the next model, which do
not, what the answer says about who gave it, and that a cancel frees what the model being asked holds.

Two OpenAI-compatible models (``primary``, ``secondary``) talk to the same scripted server; each request's
body names the model it was for. Bad inputs tried: a 503 (and a 503, 503, 429 run through the primary's
own retries first), a stream cut after its first delta, a 400 and a malformed stream (moving on only when
``fallback_on`` names them), a closed model whose ``stream`` raises, a model that fails inside
``subscribe``, a refused connection, every model failing, an empty model list, and a cancel while the
secondary's request is in flight and while the primary waits to retry.
"""

from __future__ import annotations

import asyncio
import doctest
import logging
import re
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from reactivex import Observable, abc

import rxagent.model.fallback
from rxagent import Agent, ScriptedModel
from rxagent.clock import VirtualClock
from rxagent.model import (
    AllModelsFailed,
    ChatChunk,
    ChatModel,
    ChatRequest,
    FallbackModel,
    MalformedStreamError,
    ModelCapabilities,
    ModelConnectionError,
    ModelHTTPError,
    ModelStreamInterrupted,
)
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import Slot, Source, fold_message, last_value
from rxagent.retry import RetryExhausted, RetryPolicy
from rxagent.telemetry import Telemetry
from tests.model.openai_server import (
    API_KEY,
    DONE,
    Cut,
    OpenAIServer,
    Reply,
    ask,
    event,
    finish_chunk,
    make_model,
    text_chunk,
    usage_chunk,
)
from tests.streams import expect

ONE_ATTEMPT = RetryPolicy(max_attempts=1)
SECONDS = RetryPolicy(max_attempts=3, base_delay=1, multiplier=2, jitter=0)
"""Waits of 1 s then 2 s, on the test's virtual clock."""
STREAM_TASK = "rxagent.from_async_iterable"


def answer(text: str) -> Reply:
    return Reply.sse(text_chunk(text), finish_chunk(), usage_chunk(), DONE)


def models_asked(server: OpenAIServer) -> list[str]:
    return [request.body["model"] for request in server.requests]


def named(name: str, server: OpenAIServer | str, **options: Any) -> OpenAIChatModel:
    """A model called ``name`` (the name the server sees in each body), without retries unless given."""
    base_url = server if isinstance(server, str) else server.base_url
    settings: dict[str, Any] = {"base_url": base_url, "api_key": API_KEY, "retry": ONE_ATTEMPT, **options}
    return OpenAIChatModel(name, **settings)


@pytest.fixture
async def pair(server: OpenAIServer) -> AsyncIterator[tuple[OpenAIChatModel, OpenAIChatModel]]:
    """``primary`` and ``secondary`` (no retries), both on the loopback server."""
    async with named("primary", server) as primary, named("secondary", server) as secondary:
        yield primary, secondary


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A loopback port with nothing listening on it."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        yield probe.getsockname()[1]


# ---- moving on, and not --------------------------------------------------------------------------------


async def test_the_primary_gives_503_then_the_secondary_answers(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel], caplog: pytest.LogCaptureFixture
) -> None:
    server.script(Reply.error(503, "overloaded"), answer("From the secondary."))
    model = FallbackModel(pair)
    with caplog.at_level(logging.WARNING, "rxagent"):
        seen = await expect(model.stream(ask()))
    assert seen.completed
    assert [c.model for c in seen.items] == ["secondary", None, None]  # named on the first chunk only
    assert "".join(c.text for c in seen.items) == "From the secondary."
    assert models_asked(server) == ["primary", "secondary"]
    assert "model 'primary' failed before answering (RetryExhausted: gave up after 1 attempts: HTTP 503" in (
        caplog.text
    )
    assert "asking 'secondary'" in caplog.text


async def test_the_message_and_the_span_name_the_model_that_answered(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    server.script(Reply.error(502, "bad gateway"), answer("Paris."))
    agent = Agent(FallbackModel(pair), name="geo", middleware=[Telemetry(provider)])
    result = await agent.call("Capital of France?")
    provider.shutdown()
    assert result.text == "Paris."
    assert result.message is not None
    assert result.message.metadata["model"] == "secondary"
    state = await agent.sessions.state()
    assert state.messages[-1].metadata["model"] == "secondary"  # and so does the session's copy
    [chat] = [span for span in exporter.get_finished_spans() if span.name.startswith("chat")]
    attributes = dict(chat.attributes or {})
    assert chat.name == "chat fallback:primary,secondary"
    assert attributes["gen_ai.request.model"] == "fallback:primary,secondary"
    assert attributes["gen_ai.response.model"] == "secondary"
    assert attributes["gen_ai.provider.name"] == "rxagent.fallback"


async def test_the_primary_s_own_retries_come_first(server: OpenAIServer, clock: VirtualClock) -> None:
    server.clock = clock
    server.script(
        Reply.error(503, "busy"),
        Reply.error(503, "busy"),
        Reply.error(429, "slow down"),
        answer("ok"),
    )
    async with (
        named("primary", server, retry=SECONDS, clock=clock) as primary,
        named("secondary", server, clock=clock) as secondary,
    ):
        message = await clock.run(FallbackModel([primary, secondary]).stream(ask()).pipe(fold_message()))
    assert message.text == "ok"
    assert message.metadata["model"] == "secondary"
    assert models_asked(server) == ["primary", "primary", "primary", "secondary"]
    assert clock.now() == 3.0  # the primary waited 1 s and 2 s before it gave up


async def test_a_primary_that_fails_after_streaming_began_does_not_fall_back(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    server.script(Reply.sse(text_chunk("Hel"), Cut()), answer("never asked"))
    # Even an error the user names does not move a call whose answer has begun.
    seen = await expect(FallbackModel(pair, fallback_on=(ModelStreamInterrupted,)).stream(ask()))
    assert [(c.text, c.model) for c in seen.items] == [("Hel", "primary")]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert models_asked(server) == ["primary"]
    assert len(server.replies) == 1


async def test_an_error_that_is_not_a_way_out_surfaces_at_once(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    server.script(Reply.error(400, "bad request"), answer("never asked"))
    seen = await expect(FallbackModel(pair).stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert seen.error.status == 400
    assert models_asked(server) == ["primary"]


async def test_errors_the_user_names_move_the_call_on(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    def policy_refusal(error: BaseException) -> bool:
        return isinstance(error, ModelHTTPError) and "content_policy" in error.body

    server.script(Reply.error(400, '{"error": {"code": "content_policy"}}'), answer("A safe answer."))
    by_predicate = await FallbackModel(pair, fallback_on=policy_refusal).stream(ask()).pipe(fold_message())
    assert (by_predicate.text, by_predicate.metadata["model"]) == ("A safe answer.", "secondary")

    server.script(Reply.sse(event("{not json")), answer("Well formed."))
    by_type = (
        await FallbackModel(pair, fallback_on=(MalformedStreamError,)).stream(ask()).pipe(fold_message())
    )
    assert (by_type.text, by_type.metadata["model"]) == ("Well formed.", "secondary")

    server.script(Reply.sse(event("{not json")), answer("never asked"))
    seen = await expect(FallbackModel(pair, fallback_on=(ValueError,)).stream(ask()))
    assert isinstance(seen.error, MalformedStreamError)  # named errors only; this one was not
    assert models_asked(server) == ["primary", "secondary", "primary", "secondary", "primary"]


async def test_a_model_whose_stream_raises_is_a_failure_before_answering(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    primary, secondary = pair
    await primary.aclose()  # its stream() now raises RuntimeError at once
    server.script(answer("Still here."))
    message = await FallbackModel(pair, fallback_on=(RuntimeError,)).stream(ask()).pipe(fold_message())
    assert (message.text, message.metadata["model"]) == ("Still here.", "secondary")
    seen = await expect(FallbackModel(pair).stream(ask()))
    assert isinstance(seen.error, RuntimeError)
    assert "was closed by aclose()" in str(seen.error)
    assert models_asked(server) == ["secondary"]
    assert secondary.model_name == "secondary"


class Unreachable:
    """A model that fails inside ``subscribe`` itself (as the embedded model refuses a request), before
    ``subscribe`` returns: the call moves on from within it."""

    model_name = "unreachable"
    capabilities = ModelCapabilities()

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        def subscribe(
            observer: abc.ObserverBase[ChatChunk], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            observer.on_error(ModelConnectionError("no route to host"))
            return Slot()

        return Source(subscribe)


async def test_a_model_that_fails_inside_subscribe_hands_over_without_disposing_the_next(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    _, secondary = pair
    unreachable: ChatModel = Unreachable()
    server.script(answer("Answered."))
    answered = FallbackModel([unreachable, secondary]).stream(ask()).pipe(fold_message())
    message = await asyncio.wait_for(last_value(answered), 5)  # a disposed secondary would never answer
    assert (message.text, message.metadata["model"]) == ("Answered.", "secondary")


async def test_when_every_model_fails_the_error_names_each_failure(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel], refused_port: int
) -> None:
    primary, _ = pair
    server.script(Reply.error(503, "overloaded"))
    async with named("unplugged", f"http://127.0.0.1:{refused_port}/v1") as unplugged:
        seen = await expect(FallbackModel([primary, unplugged]).stream(ask()))
    error = seen.error
    assert isinstance(error, AllModelsFailed)
    assert [name for name, _ in error.failures] == ["primary", "unplugged"]
    assert isinstance(error.failures[0][1], RetryExhausted)
    assert isinstance(error.failures[1][1], RetryExhausted)
    assert isinstance(error.failures[1][1].last_error, ModelConnectionError)
    assert error.__cause__ is error.failures[1][1]
    assert re.match(
        r"all 2 models failed before answering: 'primary': RetryExhausted: gave up after 1 attempts: "
        r"HTTP 503 from .*: overloaded; 'unplugged': RetryExhausted: gave up after 1 attempts: "
        r"ClientConnectorError: .*",
        str(error),
    )
    assert not error.retryable


async def test_an_error_that_ends_the_call_after_a_fallback_says_which_models_failed_before(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    server.script(Reply.error(503, "overloaded"), Reply.error(401, "bad key"))
    seen = await expect(FallbackModel(pair).stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert seen.error.status == 401
    assert seen.error.__notes__ == ["after the fallback from 'primary' (RetryExhausted)"]


# ---- cancelling, resubscribing -------------------------------------------------------------------------


def stream_tasks() -> set[asyncio.Task[Any]]:
    return {task for task in asyncio.all_tasks() if task.get_name() == STREAM_TASK and not task.done()}


async def test_cancelling_mid_fallback_closes_the_secondary_s_connection(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    primary, secondary = pair
    server.script(Reply.error(503, "overloaded"), Reply(hold_headers=True))
    seen = expect(FallbackModel(pair).stream(ask()))
    await asyncio.wait_for(server.stalled.wait(), 5)  # the secondary's request is in flight
    tasks = stream_tasks()
    assert len(tasks) == 1
    seen.dispose()
    _, pending = await asyncio.wait(tasks, timeout=5)
    assert not pending
    await asyncio.wait_for(server.disconnected.wait(), 5)  # the server saw the client go
    for model in (primary, secondary):
        session = model._session
        assert session is not None
        assert session.connector is not None
        assert not session.connector._acquired  # no connection held by either model
    assert not stream_tasks()
    assert seen.outcome is None
    assert models_asked(server) == ["primary", "secondary"]


async def test_cancelling_while_the_primary_waits_to_retry_asks_no_one_else(
    server: OpenAIServer, clock: VirtualClock
) -> None:
    server.clock = clock
    server.script(Reply.error(503, "busy"), answer("never asked"))
    async with (
        named("primary", server, retry=SECONDS, clock=clock) as primary,
        named("secondary", server, clock=clock) as secondary,
    ):
        seen = expect(FallbackModel([primary, secondary]).stream(ask()))
        await clock.advance(0)
        assert clock.pending() == (1.0,)  # the primary's retry wait
        seen.dispose()
        await clock.advance(0)
        assert clock.pending() == ()
        await clock.advance(10)
    assert len(server.requests) == 1
    assert seen.outcome is None


async def test_each_subscription_is_a_new_call_from_the_first_model(
    server: OpenAIServer, pair: tuple[OpenAIChatModel, OpenAIChatModel]
) -> None:
    server.script(Reply.error(503, "busy"), answer("one"), answer("two"))
    call = FallbackModel(pair).stream(ask()).pipe(fold_message())
    await asyncio.sleep(0)
    assert server.requests == []  # cold
    first, second = await call, await call
    assert [(m.text, m.metadata["model"]) for m in (first, second)] == [
        ("one", "secondary"),
        ("two", "primary"),
    ]
    assert models_asked(server) == ["primary", "secondary", "primary"]


# ---- the model itself ----------------------------------------------------------------------------------


async def test_it_is_a_chat_model_whose_capabilities_every_model_shares() -> None:
    rich = ScriptedModel(["a"], capabilities=ModelCapabilities(json_schema_output=True, thinking=True))
    plain = ScriptedModel(["b"], model_name="plain", capabilities=ModelCapabilities(images=False))
    model = FallbackModel([rich, plain], name="both")
    assert isinstance(model, ChatModel)
    assert model.model_name == "both"
    assert model.capabilities == ModelCapabilities(
        tools=True,
        forced_tool_choice=True,
        json_schema_output=False,
        thinking=False,
        images=False,
        documents=True,
    )
    assert FallbackModel([rich]).capabilities == rich.capabilities
    with pytest.raises(ValueError, match="at least one model"):
        FallbackModel([])


async def test_async_with_closes_every_model(server: OpenAIServer) -> None:
    server.script(answer("hi"))
    async with make_model(server) as first, make_model(server) as second:
        async with FallbackModel([first, second, ScriptedModel(["unused"])]) as model:
            await model.stream(ask()).pipe(fold_message())
        for closed in (first, second):
            with pytest.raises(RuntimeError, match="was closed by aclose"):
                closed.stream(ask())


def test_module_examples() -> None:
    assert doctest.testmod(rxagent.model.fallback).failed == 0


def test_the_failure_list_names_each_model_and_its_error() -> None:
    error = AllModelsFailed([("a", ModelHTTPError(503, "x")), ("b", ModelConnectionError("refused"))])
    assert str(error) == (
        "all 2 models failed before answering: 'a': ModelHTTPError: HTTP 503 from the model server: x; "
        "'b': ModelConnectionError: refused"
    )
