"""AnthropicModel's errors against a hostile loopback Messages server, classified as the OpenAI client's are.

429 and 529 (``overloaded_error``) are retried after the ``retry-after`` the server asked for; an ``error``
event before any content is retried like the status its type stands for, and after content it ends the
stream with what was already emitted; statuses and types that a retry cannot fix are not retried.

Bad inputs tried: malformed JSON in a ``data`` line, an event of the wrong shape (a number for a text, a
delta without its delta), a stream truncated without ``message_stop`` (with content, with nothing, after
its ``stop_reason``, and cut in the middle of its last line), a connection dropped mid-event, tool input
that is not valid JSON (and input cut off by the token limit), an error body quoting the API key, a
response format the API does not take, and bad constructor arguments.
"""

from __future__ import annotations

import pytest

from rxagent.clock import VirtualClock
from rxagent.messages import TextBlock
from rxagent.model import (
    JsonSchemaFormat,
    MalformedStreamError,
    ModelConnectionError,
    ModelHTTPError,
    ModelStreamError,
    ModelStreamInterrupted,
)
from rxagent.model.anthropic import AnthropicModel
from rxagent.operators import fold_message
from rxagent.retry import RetryAttempt, RetryBudget, RetryExhausted, RetryPolicy
from tests.model.anthropic_server import (
    API_KEY,
    AnthropicServer,
    ask,
    error_body,
    error_event,
    event,
    make_model,
    message_delta,
    message_start,
    ping,
    reply,
    text_block,
    tool_block,
)
from tests.model.openai_server import Cut, Pause, Reply, assert_no_secret
from tests.streams import expect

OK = reply(text_block(0, "ok"))
SECONDS = RetryPolicy(max_attempts=3, base_delay=1, multiplier=2, jitter=0)


@pytest.fixture
async def anthropic(clock: VirtualClock) -> AnthropicServer:
    """The loopback Messages server, pausing on the test's virtual clock."""
    async with AnthropicServer(clock) as running:
        yield running


# ---- statuses and retries --------------------------------------------------------------------------


async def test_429_waits_the_retry_after_then_succeeds(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(
        Reply.json(error_body("rate_limit_error", "Number of requests exceeded"), 429, {"retry-after": "10"}),
        OK,
    )
    heard: list[RetryAttempt] = []
    budget = RetryBudget()
    budget.add_listener(heard.append)
    async with make_model(anthropic, clock=clock) as model:
        seen = expect(model.stream(ask(retry_budget=budget)).pipe(fold_message()))
        await clock.advance(9.5)
        assert len(anthropic.requests) == 1  # still waiting out the server's 10 s
        await clock.advance(0.5)
        message = (await clock.run(seen)).items[0]
    assert message.text == "ok"
    assert [r.received_at for r in anthropic.requests] == [0.0, 10.0]
    [attempt] = heard
    assert isinstance(attempt.error, ModelHTTPError)
    assert (attempt.error.status, attempt.delay) == (429, 10.0)
    assert "rate_limit_error" in str(attempt.error)


async def test_529_overloaded_waits_the_retry_after_then_succeeds(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(
        Reply.json(error_body("overloaded_error", "Overloaded"), 529, {"retry-after": "3"}),
        Reply.json(error_body("overloaded_error", "Overloaded"), 529, {"retry-after": "5"}),
        OK,
    )
    async with make_model(anthropic, clock=clock) as model:
        message = await clock.run(model.stream(ask()).pipe(fold_message()))
    assert message.text == "ok"
    assert [r.received_at for r in anthropic.requests] == [0.0, 3.0, 8.0]


async def test_529_every_time_exhausts_the_attempts_and_says_overloaded(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(*[Reply.json(error_body("overloaded_error", "Overloaded"), 529) for _ in range(3)])
    async with make_model(anthropic, retry=SECONDS, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert isinstance(seen.error, RetryExhausted)
    assert seen.error.why == "attempts"
    last = seen.error.last_error
    assert isinstance(last, ModelHTTPError)
    assert last.status == 529
    assert "overloaded_error" in str(last)
    assert [r.received_at for r in anthropic.requests] == [0.0, 1.0, 3.0]


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request_error"),
        (401, "authentication_error"),
        (403, "permission_error"),
        (404, "not_found_error"),
    ],
)
async def test_a_status_a_retry_cannot_fix_is_not_retried(
    anthropic: AnthropicServer, status: int, kind: str
) -> None:
    anthropic.script(Reply.json(error_body(kind, "no"), status), OK)
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelHTTPError)
    assert (seen.error.status, seen.error.retryable) == (status, False)
    assert kind in str(seen.error)
    assert len(anthropic.requests) == 1


# ---- error events in the stream --------------------------------------------------------------------


async def test_an_overloaded_error_event_before_any_content_is_retried(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(Reply.sse(message_start(), ping(), error_event("overloaded_error", "Overloaded")), OK)
    heard: list[RetryAttempt] = []
    budget = RetryBudget()
    budget.add_listener(heard.append)
    async with make_model(anthropic, retry=SECONDS, clock=clock) as model:
        message = await clock.run(model.stream(ask(retry_budget=budget)).pipe(fold_message()))
    assert message.text == "ok"
    [attempt] = heard
    assert isinstance(attempt.error, ModelStreamError)
    assert (attempt.error.kind, attempt.error.status, attempt.error.retryable) == (
        "overloaded_error",
        529,
        True,
    )
    assert str(attempt.error) == "the model server reported overloaded_error in the stream: Overloaded"
    assert [r.received_at for r in anthropic.requests] == [0.0, 1.0]


async def test_an_error_event_mid_stream_ends_it_after_what_was_emitted(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(
        Reply.sse(
            message_start(),
            event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            Pause(),
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
            error_event("overloaded_error", "Overloaded"),
            event("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": "never"}}),
        ),
        OK,
    )
    async with make_model(anthropic, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["Hel", "lo"]  # nothing lost, nothing after the error
    assert isinstance(seen.error, ModelStreamError)
    assert seen.error.kind == "overloaded_error"
    assert len(anthropic.requests) == 1  # never retried once content went out: it would repeat it


async def test_an_error_event_a_retry_cannot_fix_is_not_retried(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.sse(message_start(), error_event("invalid_request_error", "prompt is too long")), OK
    )
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamError)
    assert isinstance(seen.error, ModelHTTPError)  # classified as its status: what fallbacks look at
    assert (seen.error.status, seen.error.retryable) == (400, False)
    assert "prompt is too long" in str(seen.error)
    assert len(anthropic.requests) == 1


async def test_an_error_event_of_an_unknown_type_counts_as_an_api_error(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.sse(message_start(), event("error", {"error": {"type": "brand_new_error", "message": "?"}})), OK
    )
    async with make_model(anthropic) as model:
        message = await model.stream(ask()).pipe(fold_message())
    assert message.text == "ok"
    assert len(anthropic.requests) == 2


# ---- malformed and truncated streams ---------------------------------------------------------------


async def test_malformed_json_in_a_data_line_is_an_error_naming_the_line(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.sse(
            message_start(),
            *text_block(0, "Hel"),
            b'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": \n\n',
        )
    )
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["Hel"]  # what came before the bad line is kept
    assert isinstance(seen.error, MalformedStreamError)
    assert "malformed JSON in the event stream" in str(seen.error)
    assert seen.error.line == 14  # the data line (3 lines per event: event, data, blank)
    assert seen.error.retryable is False
    assert len(anthropic.requests) == 1


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (
            '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 7}}',
            "$.delta.text",
        ),
        ('{"type": "content_block_delta", "index": 0}', "content_block_delta without its delta"),
        (
            '{"type": "content_block_start", "content_block": {"type": "text", "text": ""}}',
            "without its index",
        ),
        (
            '{"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta"}}',
            "text_delta without its text",
        ),
        ('["not", "an", "object"]', "not a JSON object"),
        ('{"index": 0, "delta": {"type": "text_delta", "text": "x"}}', "an event without its type"),
    ],
)
async def test_an_event_of_the_wrong_shape_is_malformed(
    anthropic: AnthropicServer, data: str, problem: str
) -> None:
    anthropic.script(Reply.sse(message_start(), f"event: whatever\ndata: {data}\n\n".encode()))
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, MalformedStreamError)
    assert problem in str(seen.error)


async def test_a_stream_ending_without_message_stop_after_content_is_an_interruption(
    anthropic: AnthropicServer,
) -> None:
    anthropic.script(Reply.sse(message_start(), *text_block(0, "The answer", " is")), OK)
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert [c.text for c in seen.items] == ["The answer", " is"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert seen.error.chunks_emitted == 2
    assert "the server ended the stream without message_stop after line" in str(seen.error)
    assert len(anthropic.requests) == 1


async def test_a_stream_ending_after_its_stop_reason_but_before_message_stop_is_still_cut_short(
    anthropic: AnthropicServer,
) -> None:
    anthropic.script(Reply.sse(message_start(), *text_block(0, "Done."), message_delta("end_turn", 3)))
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert [(c.text, c.finish_reason) for c in seen.items] == [("Done.", None), ("", "stop")]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert "without message_stop" in str(seen.error)


async def test_a_stream_cut_in_the_middle_of_its_last_line_says_where(anthropic: AnthropicServer) -> None:
    anthropic.script(
        Reply.sse(message_start(), *text_block(0, "Hi"), b'event: message_delta\ndata: {"type": "message_de')
    )
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert """without message_stop in the middle of line 14: '{"type": "message_de'""" in str(seen.error)


async def test_a_stream_with_nothing_but_its_start_is_a_retryable_connection_error(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(Reply.sse(message_start(), ping()), Reply.sse(), OK)
    heard: list[RetryAttempt] = []
    budget = RetryBudget()
    budget.add_listener(heard.append)
    async with make_model(anthropic, clock=clock) as model:
        message = await clock.run(model.stream(ask(retry_budget=budget)).pipe(fold_message()))
    assert message.content == (TextBlock(text="ok"),)
    assert [type(a.error) for a in heard] == [ModelConnectionError, ModelConnectionError]
    assert "without message_stop" in str(heard[0].error)


async def test_a_connection_dropped_mid_event_is_an_interruption(
    anthropic: AnthropicServer, clock: VirtualClock
) -> None:
    anthropic.script(
        Reply.sse(
            message_start(), *text_block(0, "Hel"), b"event: content_block_delta\ndata: {", Pause(), Cut()
        )
    )
    async with make_model(anthropic, clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    assert [c.text for c in seen.items] == ["Hel"]
    assert isinstance(seen.error, ModelStreamInterrupted)
    assert isinstance(seen.error.__cause__, ModelConnectionError)


# ---- tool input that is not JSON ---------------------------------------------------------------------


async def test_invalid_tool_json_is_an_invalid_call_with_its_text_kept(anthropic: AnthropicServer) -> None:
    anthropic.script(
        reply(
            tool_block(0, "toolu_bad", "add", '{"a": 2, ', '"b": }'),
            tool_block(1, "toolu_ok", "add", '{"a": 1, "b": 1}'),
            stop="tool_use",
        )
    )
    async with make_model(anthropic) as model:
        message = await model.stream(ask()).pipe(fold_message())
    bad, good = message.tool_calls
    assert (bad.state, bad.input, bad.raw_arguments) == ("invalid", None, '{"a": 2, "b": }')
    assert "not valid JSON" in (bad.error or "")
    assert (good.state, good.input) == ("complete", {"a": 1, "b": 1})


async def test_tool_input_cut_off_by_the_token_limit_says_so(anthropic: AnthropicServer) -> None:
    anthropic.script(reply(tool_block(0, "toolu_cut", "write", '{"text": "a long'), stop="max_tokens"))
    async with make_model(anthropic) as model:
        message = await model.stream(ask()).pipe(fold_message())
    [call] = message.tool_calls
    assert call.state == "invalid"
    assert "cut off by the output token limit" in (call.error or "")
    assert message.metadata["finish_reason"] == "length"


# ---- secrets and bad arguments ---------------------------------------------------------------------


async def test_an_error_quoting_the_key_shows_it_masked(anthropic: AnthropicServer) -> None:
    anthropic.script(Reply.json(error_body("authentication_error", f"invalid x-api-key: {API_KEY}"), 401))
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
        assert_no_secret(repr(model))
    assert isinstance(seen.error, ModelHTTPError)
    assert "invalid x-api-key: **********" in str(seen.error)
    assert_no_secret(str(seen.error))
    assert_no_secret(repr(seen.error.__dict__))


async def test_an_error_event_quoting_the_key_shows_it_masked(anthropic: AnthropicServer) -> None:
    anthropic.script(Reply.sse(message_start(), error_event("invalid_request_error", f"bad key {API_KEY}")))
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask()))
    assert isinstance(seen.error, ModelStreamError)
    assert_no_secret(str(seen.error))
    assert_no_secret(seen.error.body)


async def test_a_response_format_is_refused_before_anything_is_sent(anthropic: AnthropicServer) -> None:
    async with make_model(anthropic) as model:
        seen = await expect(model.stream(ask(response_format=JsonSchemaFormat("answer", {"type": "object"}))))
        plain = await expect(model.stream(ask(response_format="json_object")))
    assert isinstance(seen.error, ValueError)
    assert "takes no response format (a JSON schema was asked for)" in str(seen.error)
    assert isinstance(plain.error, ValueError)
    assert anthropic.requests == []


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"thinking_budget": 512}, "thinking_budget must be at least 1024"),
        ({"thinking_budget": 4096, "max_tokens": 4096}, "below max_tokens (4096)"),
        ({"base_url": "api.anthropic.com"}, "absolute http(s) URL"),
    ],
)
def test_bad_constructor_arguments_are_refused(options: dict[str, object], problem: str) -> None:
    with pytest.raises(ValueError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        AnthropicModel("claude-test", api_key_env=None, **options)  # type: ignore[arg-type]


async def test_a_thinking_budget_above_a_requests_max_tokens_is_refused(anthropic: AnthropicServer) -> None:
    async with make_model(anthropic, thinking_budget=2048) as model:
        seen = await expect(model.stream(ask(max_tokens=1000)))
    assert isinstance(seen.error, ValueError)
    assert "must be below max_tokens (1000)" in str(seen.error)
    assert anthropic.requests == []
