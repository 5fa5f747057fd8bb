"""No secret shows: not the API key, nor the credentials or query secrets of a base URL — not in reprs,
error messages, exception chains, tracebacks or logs. The URL's credentials are sent all the same.

Bad inputs tried: a user name holding ``:``, credentials bound for ``Proxy-Authorization`` with that
header also in ``headers``, base URLs that are not absolute http(s) URLs or cannot be parsed (each with a
password in it), server error bodies quoting the password, the query key and the Basic token.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import traceback
from collections.abc import Iterator

import aiohttp
import pytest
from pydantic import SecretStr
from yarl import URL

from rxagent.clock import VirtualClock
from rxagent.model.errors import ModelConnectionError, ModelHTTPError
from rxagent.model.openai import OpenAIChatModel, Timeouts
from rxagent.redaction import MASK
from rxagent.retry import RetryExhausted, RetryPolicy
from tests.model.openai_server import (
    API_KEY,
    BASIC,
    DONE,
    PASSWORD,
    PROXY_USER,
    QUERY_KEY,
    Cut,
    OpenAIServer,
    Pause,
    Reply,
    Stall,
    ask,
    assert_no_secret,
    client_log,
    event,
    finish_chunk,
    make_model,
    raw_http_server,
    text_chunk,
    with_credentials,
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
    """Neither the key nor any secret of a credentialed base URL shows anywhere in ``error``'s chain."""
    assert_no_secret("".join(traceback.format_exception(error)))
    for link in exception_chain(error):
        assert_no_secret(str(link))
        assert_no_secret(repr(link))
        assert_no_secret(repr(vars(link)))
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


# ---- credentials in the base URL -----------------------------------------------------------------------


async def test_url_credentials_go_to_proxy_authorization_beside_the_key(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("ok"), finish_chunk(), DONE))
    async with make_model(with_credentials(server.base_url)) as model:
        seen = await expect(model.stream(ask()))
    assert seen.error is None
    (sent,) = server.requests
    # One header cannot carry two credentials: the key keeps Authorization, the proxy's go beside it.
    assert sent.headers["Authorization"] == f"Bearer {API_KEY}"
    assert sent.headers["Proxy-Authorization"] == f"Basic {BASIC}"
    assert sent.path == "/v1/chat/completions"
    assert sent.query == f"api-version=2024-06-01&api-key={QUERY_KEY}"  # the query goes on every request


@pytest.mark.parametrize(
    "options",
    [{"api_key": None, "api_key_env": None}, {"api_key": "", "api_key_env": None}],
    ids=["no_key", "empty_key"],
)
async def test_url_credentials_alone_go_to_authorization(
    server: OpenAIServer, options: dict[str, object]
) -> None:
    server.script(Reply.sse(text_chunk("ok"), finish_chunk(), DONE))
    async with make_model(with_credentials(server.base_url), **options) as model:
        seen = await expect(model.stream(ask()))
    assert seen.error is None
    (sent,) = server.requests
    assert sent.headers["Authorization"] == f"Basic {BASIC}"  # as curl or a browser sends such a URL
    assert "Proxy-Authorization" not in sent.headers


async def test_url_credentials_go_beside_an_authorization_header_given_in_headers(
    server: OpenAIServer,
) -> None:
    server.script(Reply.sse(text_chunk("ok"), finish_chunk(), DONE))
    headers = {"authorization": "Token from-headers"}
    async with make_model(with_credentials(server.base_url), api_key=None, headers=headers) as model:
        seen = await expect(model.stream(ask()))
    assert seen.error is None
    (sent,) = server.requests
    assert sent.headers["Authorization"] == "Token from-headers"
    assert sent.headers["Proxy-Authorization"] == f"Basic {BASIC}"


async def test_percent_encoded_credentials_are_sent_decoded(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("ok"), finish_chunk(), DONE))
    base_url = str(URL(server.base_url).with_user("ana@example.org").with_password("p:ss/wörd"))
    assert "%40" in base_url  # the URL holds them encoded
    assert "%3A" in base_url
    async with make_model(base_url, api_key=None, api_key_env=None) as model:
        seen = await expect(model.stream(ask()))
    assert seen.error is None
    expected = base64.b64encode("ana@example.org:p:ss/wörd".encode()).decode()
    assert server.requests[0].headers["Authorization"] == f"Basic {expected}"


def test_reprs_mask_the_url_credentials_and_query_secrets() -> None:
    base_url = with_credentials("http://127.0.0.1:1/v1")
    model = OpenAIChatModel("m", base_url=base_url, api_key=API_KEY)
    for text in (repr(model), str(model), repr(vars(model))):
        assert_no_secret(text)
    assert repr(model) == (
        f"OpenAIChatModel(model='m', base_url='http://{PROXY_USER}:{MASK}@127.0.0.1:1/v1"
        f"?api-version=2024-06-01&api-key={MASK}', api_key='{MASK}')"
    )


HTTP_ERRORS = {
    "401_quoting_the_password": Reply.json({"error": {"message": f"bad proxy password {PASSWORD}"}}, 401),
    "500_quoting_the_query_key": Reply.error(500, f"upstream refused api-key={QUERY_KEY}"),
    "407_quoting_the_basic_token": Reply.error(407, f"Proxy-Authorization: Basic {BASIC} rejected"),
}


@pytest.mark.parametrize("reply", HTTP_ERRORS.values(), ids=HTTP_ERRORS.keys())
async def test_http_errors_show_the_url_masked(
    server: OpenAIServer, clock: VirtualClock, reply: Reply, caplog: pytest.LogCaptureFixture
) -> None:
    server.clock = clock
    server.script(reply, reply, reply)
    caplog.set_level(logging.DEBUG)
    async with make_model(with_credentials(server.base_url), clock=clock) as model:
        seen = await clock.run(expect(model.stream(ask())))
    error = seen.error
    if isinstance(error, RetryExhausted):  # the 500s, retried until the policy gave up
        error = error.__cause__
    assert isinstance(error, ModelHTTPError)
    assert_key_hidden(error)
    assert_no_secret(client_log(caplog))
    shown = f"http://{PROXY_USER}:{MASK}@127.0.0.1:"  # which user, where: what the reader needs
    assert f"HTTP {reply.status} from {shown}" in str(error)
    assert f"/v1/chat/completions?api-version=2024-06-01&api-key={MASK}: " in str(error)
    assert MASK in error.body  # what the server quoted is masked, the rest of its text kept


async def test_connection_failures_show_the_url_masked(
    clock: VirtualClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        refused_port = probe.getsockname()[1]  # nothing listens there once the probe is closed

    async with raw_http_server(b"NOT HTTP AT ALL\r\n\r\n") as garbage_url:
        for base_url in (f"http://127.0.0.1:{refused_port}/v1", garbage_url):
            model = make_model(
                with_credentials(base_url), retry=RetryPolicy(max_attempts=2, base_delay=1), clock=clock
            )
            async with model:
                seen = await clock.run(expect(model.stream(ask())))
            # A connection error, retried until the policy gave up: the request was made.
            assert isinstance(seen.error, RetryExhausted)
            assert isinstance(seen.error.__cause__, ModelConnectionError)
            assert_key_hidden(seen.error)
    assert_no_secret(client_log(caplog))


@pytest.mark.parametrize(
    ("base_url", "message"),
    [
        (f"http://a%3Ab:{PASSWORD}@127.0.0.1:1/v1", "holds a ':', which Basic credentials cannot carry"),
        (f"ftp://{PROXY_USER}:{PASSWORD}@127.0.0.1/v1", "absolute http"),
        (f"http://{PROXY_USER}:{PASSWORD}@/v1", "absolute http"),
        (f"http://{PROXY_USER}:{PASSWORD}@127.0.0.1:99999/v1", "absolute http"),
        (f"http://{PROXY_USER}:{PASSWORD}@[::1/v1", "absolute http"),
    ],
    ids=["colon_in_user", "ftp", "no_host", "bad_port", "bad_ipv6"],
)
def test_a_bad_credentialed_base_url_is_refused_without_showing_the_password(
    base_url: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        OpenAIChatModel("m", base_url=base_url, api_key=API_KEY)
    assert_key_hidden(caught.value)


def test_proxy_credentials_given_two_ways_are_refused() -> None:
    with pytest.raises(ValueError, match="headers set Proxy-Authorization too") as caught:
        OpenAIChatModel(
            "m",
            base_url=with_credentials("http://127.0.0.1:1/v1"),
            api_key=API_KEY,
            headers={"proxy-authorization": "Basic other"},
        )
    assert_key_hidden(caught.value)
    # Without a key the URL's credentials take Authorization, and a Proxy-Authorization header is the user's.
    OpenAIChatModel(
        "m",
        base_url=with_credentials("http://127.0.0.1:1/v1"),
        api_key_env=None,
        headers={"Proxy-Authorization": "Basic other"},
    )
