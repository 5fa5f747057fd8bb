"""A client for OpenAI-compatible chat-completions servers (OpenAI, vLLM, llama.cpp, Ollama, …) on aiohttp.

:class:`OpenAIChatModel` implements :class:`~rxagent.model.types.ChatModel`. It is the chat-completions
wire format (:mod:`rxagent.model._openai_wire`) on the call every HTTP chat client here shares
(:mod:`rxagent.model._chat_endpoint`): one cold observable per call, attempts retried before the first
chunk only, every wait and timeout on the model's ``clock``, errors mapped to :mod:`rxagent.model.errors`.
A stream that ends with neither ``[DONE]`` nor a finish reason is an error, never a silently short answer.

The API key is held as a :class:`pydantic.SecretStr`; it is put into the ``Authorization`` header of each
request and nowhere else. No error raised here holds request headers: aiohttp's ``ClientResponseError``
(which does, through ``request_info``) is never chained, and server text quoted in errors has the key
masked. Credentials and query secrets in ``base_url`` are handled as :mod:`rxagent.model._endpoint`
describes: sent, never shown (errors, reprs and logs show the URL through
:func:`rxagent.redaction.mask_url`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from pydantic import SecretStr

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.model._chat_endpoint import ChatEndpoint, parse_retry_after
from rxagent.model._endpoint import HttpEndpoint, Timeouts
from rxagent.model._openai_wire import (
    EncodedTools,
    MessageWireCache,
    StreamParser,
    chunks_from_completion,
    encode_body,
    tool_to_wire,
)
from rxagent.model.errors import ModelError
from rxagent.model.types import ChatChunk, ChatRequest, ModelCapabilities
from rxagent.retry import RetryPolicy

__all__ = ["OpenAIChatModel", "Timeouts", "list_models", "parse_retry_after"]


class OpenAIChatModel(ChatEndpoint):
    """A chat model served over the OpenAI chat-completions API.

    One ``aiohttp.ClientSession`` per model, created on first use on the running loop (the model is
    bound to that loop from then on) and closed by :meth:`aclose` or by leaving ``async with``.

    Args:
        model: the model name the server knows.
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``; requests go to
            ``{base_url}/chat/completions``, with its query (``?api-version=…``) kept. Credentials in it
            (``http://user:password@proxy/v1``, for an authenticating proxy) are sent as Basic
            credentials: in ``Authorization``, or in ``Proxy-Authorization`` when the API key fills
            ``Authorization`` (see :mod:`rxagent.model._endpoint`). Reprs, errors and logs show it masked
            (:func:`rxagent.redaction.mask_url`).
        api_key: the key sent as ``Authorization: Bearer …``; ``None`` reads ``api_key_env``.
        api_key_env: environment variable to read the key from when ``api_key`` is ``None``
            (``None``: don't). A missing key sends no ``Authorization`` header (local servers).
        timeouts: connect, idle-read and total timeouts.
        retry: how one call retries (a run's shared budget comes with each request).
        capabilities: what the model accepts (tools, forced tool choice, JSON schema output, thinking).
        headers: extra HTTP headers sent with every request.
        connection_limit: most simultaneous connections to the server.
        send_reasoning: send thinking blocks back as ``reasoning_content`` (only for providers that
            accept it).
        clock: where the retry waits and the timeouts run: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Example:
        >>> model = OpenAIChatModel("gpt-4o-mini", base_url="http://127.0.0.1:8000/v1", api_key="sk-secret")
        >>> model
        OpenAIChatModel(model='gpt-4o-mini', base_url='http://127.0.0.1:8000/v1', api_key='**********')
        >>> OpenAIChatModel("m", base_url="http://me:hunter2@127.0.0.1:8000/v1", api_key_env=None)
        OpenAIChatModel(model='m', base_url='http://me:**********@127.0.0.1:8000/v1', api_key=None)

    Raises:
        ValueError: a bad ``base_url`` (see :class:`~rxagent.model._endpoint.HttpEndpoint`).
    """

    provider_name = "openai"
    """Who serves the model, as OpenTelemetry's ``gen_ai.provider.name`` names it: the API spoken (a
    subclass for another OpenAI-compatible provider may say ``"groq"``, ``"deepseek"``, …)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.openai.com/v1",
        api_key: str | SecretStr | None = None,
        api_key_env: str | None = "OPENAI_API_KEY",
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        capabilities: ModelCapabilities | None = None,
        headers: Mapping[str, str] | None = None,
        connection_limit: int = 100,
        send_reasoning: bool = False,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            path="chat/completions",
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            retry=retry,
            capabilities=capabilities or ModelCapabilities(),
            headers=headers,
            connection_limit=connection_limit,
            clock=clock,
        )
        self._wire = MessageWireCache(send_reasoning=send_reasoning)
        self._tools = EncodedTools(tool_to_wire)

    def encode_request(self, request: ChatRequest) -> bytes:
        """The JSON body this model sends for ``request`` (for inspection and tests; ``stream`` uses it).

        Each message's encoding is cached for as long as the message object lives, so a conversation that
        grows by one message per turn costs one message's encoding per request, not the whole history's.

        Raises:
            UnsupportedContentError: an image or document the format cannot carry (see
                :func:`~rxagent.model._openai_wire.media_part`).
        """
        tools = self._tools.encoded(request.tools)
        return encode_body(self._model, request, self._wire.encoded_messages(request.messages), tools)

    def _new_parser(self) -> StreamParser:
        return StreamParser(self._redact)

    def _response_chunks(self, decoded: Any) -> list[ChatChunk]:
        return chunks_from_completion(decoded, self._redact)


class _ModelList(HttpEndpoint):
    """``GET {base_url}/models``: what :func:`list_models` asks."""

    _kind = "model list"

    async def names(self) -> list[str]:
        """The ids of the listed models (see :func:`list_models`)."""
        payload = await self._fetch("GET")
        try:
            listed: object = json.loads(payload)
        except ValueError:
            listed = None
        data = cast("dict[str, object]", listed).get("data") if isinstance(listed, dict) else None
        entries = cast("list[object]", data) if isinstance(data, list) else []
        names = [cast("dict[str, object]", entry).get("id") for entry in entries if isinstance(entry, dict)]
        if (
            not isinstance(data, list)
            or len(names) != len(entries)
            or not all(isinstance(n, str) for n in names)
        ):
            snippet = self._redact(payload[:200].decode("utf-8", "replace"))
            raise ModelError(f"the answer of {self._shown_url} is not a model list: {snippet!r}")
        return cast("list[str]", names)


async def list_models(
    base_url: str,
    *,
    api_key: str | SecretStr | None = None,
    api_key_env: str | None = "OPENAI_API_KEY",
    timeouts: Timeouts | None = None,
    headers: Mapping[str, str] | None = None,
) -> list[str]:
    """The names of the models an OpenAI-compatible server serves (``GET {base_url}/models``), in its order.

    The request carries the same ``Authorization`` (and extra headers) as :class:`OpenAIChatModel`'s calls
    with the same arguments; it is not retried.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        api_key: sent as ``Authorization: Bearer …``; ``None`` reads ``api_key_env`` (no key: no header).
        api_key_env: environment variable holding the key (``None``: don't read one).
        timeouts: connect, idle-read and total timeouts of the request.
        headers: extra HTTP headers.

    Raises:
        ValueError: ``base_url`` is not an absolute http(s) URL.
        ModelHTTPError: an error status (a server that lists no models may answer 404).
        ModelConnectionError: no connection, or a broken one.
        ModelTimeoutError: a timeout.
        ModelError: a 2xx answer that is not a model list (``{"data": [{"id": …}, …]}``).
    """
    async with _ModelList(
        base_url=base_url,
        path="models",
        api_key=api_key,
        api_key_env=api_key_env,
        timeouts=timeouts,
        headers=headers,
        connection_limit=1,
    ) as endpoint:
        return await endpoint.names()
