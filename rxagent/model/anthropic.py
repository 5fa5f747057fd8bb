"""A client for Anthropic's Messages API, spoken natively on aiohttp with rxagent's own SSE framing.

:class:`AnthropicModel` implements :class:`~rxagent.model.types.ChatModel`: the Messages wire format
(:mod:`rxagent.model._anthropic_wire`) on the call every HTTP chat client here shares
(:mod:`rxagent.model._chat_endpoint`), so it has the OpenAI client's timeouts, retries (``Retry-After``
honoured, before the first chunk only, on the run's budget) and error classes: 429 and 529
(``overloaded_error``) are retryable :class:`~rxagent.model.errors.ModelHTTPError`; an ``error`` event
inside the stream is a :class:`~rxagent.model.errors.ModelStreamError` classified the same way by its
type; a stream that ends before ``message_stop`` is an error, never a silently short answer.

What the OpenAI-compatible layer of Anthropic's API drops, this client keeps: thinking blocks with their
signatures (sent back unchanged on the next turn, as the API requires) and withheld (``redacted_thinking``)
ones, tool input streamed as JSON deltas, and cache usage (``Usage.cache_read_tokens`` and
``Usage.cache_write_tokens``). :class:`PromptCache` marks the request's cut points for the prompt cache.
Images and documents in user messages are sent as the API's ``image`` and ``document`` blocks, inline
(base64, or a text document's text) or by URL.

The API key travels in the ``x-api-key`` header and nowhere else; errors, reprs and logs never show it
(see :mod:`rxagent.model._endpoint`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import SecretStr

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.model._anthropic_wire import PromptCache, RequestEncoder, StreamParser, chunks_from_message
from rxagent.model._chat_endpoint import ChatEndpoint
from rxagent.model._endpoint import Timeouts
from rxagent.model.types import ChatChunk, ChatRequest, ModelCapabilities
from rxagent.retry import RetryPolicy

__all__ = ["ANTHROPIC_VERSION", "AnthropicModel", "PromptCache", "Timeouts"]

ANTHROPIC_VERSION = "2023-06-01"
"""The ``anthropic-version`` header sent by default: the API version whose format this client speaks."""


class AnthropicModel(ChatEndpoint):
    """A chat model served over Anthropic's Messages API (``POST {base_url}/messages``).

    One ``aiohttp.ClientSession`` per model, created on first use on the running loop (the model is
    bound to that loop from then on) and closed by :meth:`aclose` or by leaving ``async with``.

    Args:
        model: the model name, e.g. ``"claude-sonnet-4-5"``.
        base_url: the API root with its version, ``"https://api.anthropic.com/v1"`` (a proxy's works the
            same: credentials in it are sent as Basic credentials and never shown).
        api_key: sent as ``x-api-key``; ``None`` reads ``api_key_env``.
        api_key_env: environment variable to read the key from when ``api_key`` is ``None`` (``None``:
            don't). No key: no header (a proxy that adds it).
        max_tokens: the output limit of a request that sets none (the API requires one).
        thinking_budget: tokens of extended thinking per answer (at least 1 024, below ``max_tokens``);
            ``None``: no extended thinking.
        cache: where to mark the request for the prompt cache (``None``: no marks, as the API's own
            default). ``PromptCache()`` marks the system prompt, the tools and the last message.
        version: the ``anthropic-version`` header. Beta features go in ``headers``
            (``{"anthropic-beta": …}``) and their fields in ``ChatRequest.extra``.
        timeouts: connect, idle-read and total timeouts.
        retry: how one call retries (a run's shared budget comes with each request).
        capabilities: what the model accepts; by default tools, forced tool choice unless thinking is on
            (the API refuses both together), no JSON-schema output (an agent's ``output_type`` then
            answers through a tool), thinking when a budget is given, images and documents.
        headers: extra HTTP headers sent with every request.
        connection_limit: most simultaneous connections to the server.
        clock: where the retry waits and the timeouts run: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Example:
        >>> model = AnthropicModel("claude-opus-4-1", api_key="sk-ant-secret", cache=PromptCache())
        >>> model
        AnthropicModel(model='claude-opus-4-1', base_url='https://api.anthropic.com/v1', api_key='**********')
        >>> model.capabilities.thinking
        False

    Raises:
        ValueError: a bad ``base_url`` (see :class:`~rxagent.model._endpoint.HttpEndpoint`), ``max_tokens``
            below 1, or a thinking budget below 1 024 tokens or not below ``max_tokens``.
    """

    provider_name = "anthropic"
    """Who serves the model, as OpenTelemetry's ``gen_ai.provider.name`` names it."""
    _key_header = "x-api-key"
    _key_prefix = ""

    def __init__(
        self,
        model: str,
        *,
        base_url: str = "https://api.anthropic.com/v1",
        api_key: str | SecretStr | None = None,
        api_key_env: str | None = "ANTHROPIC_API_KEY",
        max_tokens: int = 4096,
        thinking_budget: int | None = None,
        cache: PromptCache | None = None,
        version: str = ANTHROPIC_VERSION,
        timeouts: Timeouts | None = None,
        retry: RetryPolicy | None = None,
        capabilities: ModelCapabilities | None = None,
        headers: Mapping[str, str] | None = None,
        connection_limit: int = 100,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if thinking_budget is not None and not 1024 <= thinking_budget < max_tokens:
            raise ValueError(
                f"thinking_budget must be at least 1024 tokens and below max_tokens ({max_tokens}), "
                f"got {thinking_budget}"
            )
        thinking = thinking_budget is not None
        accepts = ModelCapabilities(forced_tool_choice=not thinking, thinking=thinking)
        super().__init__(
            model,
            base_url=base_url,
            path="messages",
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            retry=retry,
            capabilities=capabilities or accepts,
            headers={"anthropic-version": version, **(headers or {})},
            connection_limit=connection_limit,
            clock=clock,
        )
        self._encoder = RequestEncoder(
            model, max_tokens=max_tokens, thinking_budget=thinking_budget, cache=cache
        )

    def encode_request(self, request: ChatRequest) -> bytes:
        """The JSON body this model sends for ``request`` (for inspection and tests; ``stream`` uses it).

        Each message's blocks are encoded once for as long as the message object lives, so a conversation
        that grows by one message per turn costs one message's encoding per request.

        Raises:
            ValueError: the request asks for a response format the API does not take (JSON mode, a JSON
                schema), or its ``max_tokens`` leaves no room for the thinking budget.
        """
        return self._encoder.encode(request)

    def _new_parser(self) -> StreamParser:
        return StreamParser(self._redact)

    def _response_chunks(self, decoded: Any) -> list[ChatChunk]:
        return chunks_from_message(decoded, self._redact)
