"""A client for OpenAI's Responses API (``POST {base_url}/responses``), the API of OpenAI's own agent SDK.

:class:`OpenAIResponsesModel` implements :class:`~rxagent.model.types.ChatModel` with the Responses wire
format (:mod:`rxagent.model._responses_wire`) over the same transport as
:class:`~rxagent.model.openai.OpenAIChatModel` (:class:`~rxagent.model._chat_endpoint.ChatEndpoint`): the
same timeouts, retries (before the first chunk only, honouring ``Retry-After``, on the run's budget) and
error classes, the same handling of the API key and of secrets in ``base_url``.

What it adds to chat completions is reasoning carried from one turn to the next without state on the
server: requests say ``store: false`` and ask for ``reasoning.encrypted_content``; each reasoning item
comes back encrypted, is kept as the :attr:`~rxagent.messages.ThinkingBlock.signature` of the thinking block
that holds its summary (so it is saved with the session like any message), and is sent back unmodified on
the next request. Reasoning summaries stream as thinking deltas when ``reasoning_summary`` asks for them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import JsonValue, SecretStr

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.model._chat_endpoint import ChatEndpoint
from rxagent.model._endpoint import Timeouts
from rxagent.model._openai_wire import EncodedTools, MessageWireCache, WireDict, join_body
from rxagent.model._responses_wire import (
    ResponsesParser,
    chunks_from_response,
    encode_options,
    instructions_of,
    message_to_items,
    tool_to_item,
)
from rxagent.model.types import ChatChunk, ChatRequest, ModelCapabilities
from rxagent.retry import RetryPolicy

__all__ = ["OpenAIResponsesModel", "ReasoningEffort", "ReasoningSummary"]


ReasoningEffort = Literal["minimal", "low", "medium", "high"]
"""How much a reasoning model reasons (``reasoning.effort``)."""

ReasoningSummary = Literal["auto", "concise", "detailed"]
"""What summary of its reasoning a reasoning model streams (``reasoning.summary``)."""


class OpenAIResponsesModel(ChatEndpoint):
    """A chat model served over OpenAI's Responses API (OpenAI, Azure OpenAI, vLLM, other servers of it).

    One ``aiohttp.ClientSession`` per model, created on first use on the running loop (the model is bound
    to that loop from then on) and closed by :meth:`aclose` or by leaving ``async with``.

    What a request sends: the leading system messages as ``instructions``; the rest of the conversation as
    input items (text messages, a user message's images and documents as ``input_image`` and
    ``input_file`` parts, ``function_call`` and ``function_call_output`` items, and the reasoning items of
    earlier answers, see the module); tools as ``function`` tools (``strict`` as each tool says);
    ``tool_choice``; ``max_tokens`` as ``max_output_tokens``; a response format as ``text.format``;
    ``stream``; ``store: false`` and ``include: ["reasoning.encrypted_content"]``; the request's ``extra``
    last (it may override any of these). The API has no stop sequences and no seed: a request that sets
    them fails with :class:`ValueError` before anything is sent.

    What streams back: text, reasoning summaries as thinking, function calls (the id is the call's
    ``call_id``) with their argument fragments, the finish reason (``stop``, ``tool_calls``, or ``length``
    / ``content_filter`` for an incomplete response), then usage with cached input tokens and reasoning
    tokens. ``response.failed`` and ``error`` events are :class:`~rxagent.model.errors.ModelError`
    (retryable when their code is ``rate_limit_exceeded`` or ``server_error`` and nothing has streamed).

    Args:
        model: the model name the server knows.
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``; requests go to
            ``{base_url}/responses``, with its query kept. Credentials and query secrets in it are sent,
            never shown (see :class:`~rxagent.model.openai.OpenAIChatModel`).
        api_key: the key sent as ``Authorization: Bearer …``; ``None`` reads ``api_key_env``.
        api_key_env: environment variable to read the key from when ``api_key`` is ``None``
            (``None``: don't). A missing key sends no ``Authorization`` header (local servers).
        timeouts: connect, idle-read and total timeouts.
        retry: how one call retries (a run's shared budget comes with each request).
        capabilities: what the model accepts (default: tools, forced tool choice, JSON schema output,
            thinking, images and documents).
        headers: extra HTTP headers sent with every request.
        connection_limit: most simultaneous connections to the server.
        reasoning_effort: ``reasoning.effort`` for reasoning models (``None``: the server's default, and
            nothing sent, as a model that does not reason requires).
        reasoning_summary: ``reasoning.summary``: ask a reasoning model to stream a summary of its
            reasoning, which becomes thinking (``None``: none asked for).
        clock: where the retry waits and the timeouts run: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Example:
        >>> model = OpenAIResponsesModel("o4-mini", base_url="http://127.0.0.1:8000/v1", api_key="sk-secret")
        >>> model
        OpenAIResponsesModel(model='o4-mini', base_url='http://127.0.0.1:8000/v1', api_key='**********')

    Raises:
        ValueError: a bad ``base_url`` (see :class:`~rxagent.model._endpoint.HttpEndpoint`).
    """

    provider_name = "openai"
    """Who serves the model, as OpenTelemetry's ``gen_ai.provider.name`` names it."""

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
        reasoning_effort: ReasoningEffort | None = None,
        reasoning_summary: ReasoningSummary | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        super().__init__(
            model,
            base_url=base_url,
            path="responses",
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            retry=retry,
            capabilities=capabilities or ModelCapabilities(json_schema_output=True, thinking=True),
            headers=headers,
            connection_limit=connection_limit,
            clock=clock,
        )
        reasoning: dict[str, JsonValue] = {}
        if reasoning_effort is not None:
            reasoning["effort"] = reasoning_effort
        if reasoning_summary is not None:
            reasoning["summary"] = reasoning_summary
        self._reasoning: WireDict | None = reasoning or None
        self._wire = MessageWireCache(to_wire=message_to_items)
        self._tools = EncodedTools(tool_to_item)

    def encode_request(self, request: ChatRequest) -> bytes:
        """The JSON body this model sends for ``request`` (for inspection and tests; ``stream`` uses it).

        Each message's input items are encoded once for as long as the message object lives, so a
        conversation that grows by one message per turn costs one message's encoding per request.

        Raises:
            ValueError: the request sets stop sequences or a seed, which the API does not take.
        """
        options = encode_options(request, self._reasoning)
        instructions, leading = instructions_of(request.messages)
        head: WireDict = {"model": self._model}
        if instructions is not None:
            head["instructions"] = instructions
        items = self._wire.encoded_messages(request.messages[leading:])
        return join_body(head, "input", items, self._tools.encoded(request.tools), options)

    def _new_parser(self) -> ResponsesParser:
        return ResponsesParser(self._redact)

    def _response_chunks(self, decoded: Any) -> list[ChatChunk]:
        """The chunks of a whole (not streamed) response, decoded from its JSON body."""
        return chunks_from_response(decoded, self._redact)
