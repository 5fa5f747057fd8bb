"""``list_models``: the models an OpenAI-compatible server lists, asked as the model's calls are.

Against the loopback server (tests/model/openai_server.py). Bad inputs tried: an error status whose body
quotes the key, a 2xx answer that is not a model list (not JSON, no ``data``, an entry without an id), a
server that cannot be reached, a base URL that is not http(s), a base URL with credentials in it.
"""

from __future__ import annotations

import socket

import pytest

from rxagent.model import ModelConnectionError, ModelError, ModelHTTPError, list_models
from tests.model.openai_server import API_KEY, OpenAIServer, Reply


async def test_the_names_come_in_the_servers_order_asked_with_the_models_authorization(
    server: OpenAIServer,
) -> None:
    server.list_models("b-model", "a-model")

    names = await list_models(server.base_url, api_key=API_KEY, headers={"X-Team": "blue"})

    assert names == ["b-model", "a-model"]
    [request] = server.requests
    assert request.path == "/v1/models"
    assert request.headers["Authorization"] == f"Bearer {API_KEY}"
    assert request.headers["X-Team"] == "blue"


async def test_the_key_comes_from_the_environment_as_the_models_does(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.list_models()
    monkeypatch.setenv("MY_KEY", "sk-from-env")

    assert await list_models(server.base_url, api_key_env="MY_KEY") == []
    assert await list_models(server.base_url, api_key_env=None) == []

    assert server.requests[0].headers["Authorization"] == "Bearer sk-from-env"
    assert "Authorization" not in server.requests[1].headers


async def test_an_error_status_is_a_model_http_error_with_the_key_masked(server: OpenAIServer) -> None:
    server.model_list = Reply.error(401, f"bad key {API_KEY}")

    with pytest.raises(ModelHTTPError) as raised:
        await list_models(server.base_url, api_key=API_KEY)

    assert raised.value.status == 401
    assert f"{server.base_url}/models" in str(raised.value)
    assert API_KEY not in str(raised.value)


@pytest.mark.parametrize(
    "body",
    [
        b"<html>models</html>",
        b'{"object": "list"}',
        b'{"data": {"id": "m"}}',
        b'{"data": [{"id": "m"}, {"name": "no id"}]}',
        b'{"data": [{"id": 7}]}',
        b'["m"]',
    ],
)
async def test_an_answer_that_is_not_a_model_list_is_an_error(server: OpenAIServer, body: bytes) -> None:
    server.model_list = Reply([body], content_type="application/json")

    with pytest.raises(ModelError, match="is not a model list"):
        await list_models(server.base_url)


async def test_a_server_that_cannot_be_reached_is_a_connection_error() -> None:
    with socket.socket() as unused:  # bound, never listening: a connection to it is refused
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
        with pytest.raises(ModelConnectionError, match="Cannot connect"):
            await list_models(f"http://127.0.0.1:{port}/v1")


async def test_a_base_url_that_is_not_http_is_refused_before_any_request() -> None:
    with pytest.raises(ValueError, match="absolute http"):
        await list_models("127.0.0.1:8080/v1")


async def test_credentials_in_the_base_url_are_sent_and_never_shown(server: OpenAIServer) -> None:
    url = server.base_url.replace("http://", "http://me:hunter2@")
    server.model_list = Reply.error(403, "not you")

    with pytest.raises(ModelHTTPError) as raised:
        await list_models(url, api_key_env=None)

    assert server.requests[0].headers["Authorization"].startswith("Basic ")
    assert "hunter2" not in str(raised.value)
    assert "me:**********@" in str(raised.value)
