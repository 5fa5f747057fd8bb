"""The API key never shows: not in reprs, error messages, exception chains, tracebacks or logs."""

from __future__ import annotations

import json
import logging
import socket
import traceback
from collections.abc import Iterator

import aiohttp
import pytest
from pydantic import SecretStr

from rxagent.clock import VirtualClock
from rxagent.model.openai import OpenAIChatModel, Timeouts
from rxagent.retry import RetryPolicy
from tests.model.openai_server import (
    API_KEY,
    Cut,
    OpenAIServer,
    Pause,
    Reply,
    Stall,
    ask,
    event,
    make_model,
    raw_http_server,
    text_chunk,
)
from tests.streams import expect


def exception_chain(error: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    stack = [error]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(e for e in (current.__cause__, current.__context__) if e is not None)


def assert_key_hidden(error: BaseException) -> None:
    assert API_KEY not in "".join(traceback.format_exception(error))
    for link in exception_chain(error):
        assert API_KEY not in str(link)
        assert API_KEY not in repr(link)
        assert API_KEY not in repr(vars(link))
        # aiohttp's ClientResponseError carries request_info, whose headers hold the key.
        assert not isinstance(link, aiohttp.ClientResponseError)
        assert not any(isinstance(value, aiohttp.RequestInfo) for value in vars(link).values())


def test_repr_and_str_of_the_model_mask_the_key() -> None:
    for key in (API_KEY, SecretStr(API_KEY)):
        model = OpenAIChatModel("m", base_url="http://127.0.0.1:1/v1", api_key=key)
        for text in (repr(model), str(model), f"{model!r}", repr(vars(model))):
            assert API_KEY not in text
        assert "api_key='**********'" in repr(model)


ECHOES = {
    "401_body_quoting_the_key": Reply.json(
        {"error": {"message": f"Incorrect API key provided: {API_KEY}"}}, 401
    ),
    "500_bodies_quoting_the_key": Reply.error(500, f"upstream rejected {API_KEY}"),
    "malformed_data_quoting_the_key": Reply.sse(f"data: {{bad {API_KEY}\n\n".encode()),
    "error_object_quoting_the_key": Reply.sse(
        event(json.dumps({"error": {"message": f"key {API_KEY} revoked"}}))
    ),
    "error_event_quoting_the_key": Reply.sse(f"event: error\ndata: key {API_KEY} revoked\n\n".encode()),
    "cut_mid_json_quoting_the_key": Reply.sse(text_chunk("a"), f'data: {{"x": "{API_KEY}'.encode()),
    "connection_cut": Reply.sse(text_chunk("a"), Pause(), Cut()),
    "idle_timeout": Reply.sse(Stall()),
    "non_json_body_quoting_the_key": Reply(
        [f"<html>{API_KEY}</html>".encode()], content_type="application/json"
    ),
}


@pytest.mark.parametrize("reply", ECHOES.values(), ids=ECHOES.keys())
async def test_errors_never_show_the_key(
    server: OpenAIServer, clock: VirtualClock, reply: Reply, caplog: pytest.LogCaptureFixture
) -> None:
    server.clock = clock  # the pauses, retry waits and idle timeout pass on virtual time
    server.script(reply, reply, reply)
    caplog.set_level(logging.DEBUG)
    stream = reply.content_type != "application/json" or reply.status != 200
    async with make_model(server, timeouts=Timeouts(idle_read=30), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask(stream=stream))))
    assert seen.error is not None
    assert_key_hidden(seen.error)
    assert API_KEY not in caplog.text
    assert server.requests[0].headers["Authorization"] == f"Bearer {API_KEY}"  # it was sent, though


async def test_connection_failures_never_show_the_key(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused_port = probe.getsockname()[1]

    async with raw_http_server(b"NOT HTTP AT ALL\r\n\r\n") as garbage_url:
        for base_url in (f"http://127.0.0.1:{refused_port}/v1", garbage_url):
            model = make_model(base_url, retry=RetryPolicy(max_attempts=2, base_delay=1), clock=clock)
            async with model:
                seen = await clock.run(expect(model.stream(ask())))
            assert seen.error is not None
            assert_key_hidden(seen.error)
    assert API_KEY not in caplog.text
