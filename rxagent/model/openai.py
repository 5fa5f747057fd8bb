"""A client for OpenAI-compatible chat-completions servers (OpenAI, vLLM, llama.cpp, Ollama, …) on aiohttp.

:class:`OpenAIChatModel` implements :class:`~rxagent.model.types.ChatModel`. Each subscription to
``stream(request)`` is one call: ``from_async_batches`` over one async generator that makes the
attempts (POST, SSE bytes → events → chunks, yielded a network read's worth at a time), waits between them
by the rules of :func:`rxagent.retry.plan_retry` (the same rules as the ``retry_backoff`` operator: retry
before the first chunk only, honour ``Retry-After``, draw on the run's budget), all under
``timeouts.total``. The waits and every timeout run on the model's ``clock`` (see :mod:`rxagent.clock`),
so tests can run them on virtual time against a real loopback server.

One attempt is an async generator that holds the response in ``async with``: disposing the subscription
cancels its task, which closes the response and returns the connection to the pool. Errors are mapped to
:mod:`rxagent.model.errors`: an error status to :class:`ModelHTTPError` (with ``Retry-After``), a failed
connection to :class:`ModelConnectionError`, the connect and idle-read timeouts to
:class:`ModelTimeoutError`, and any transport failure after the first chunk to
:class:`ModelStreamInterrupted` (never retried: a retry would repeat deltas already emitted). A stream that
ends with neither ``[DONE]`` nor a finish reason is an error, never a silently short answer.

The API key is held as a :class:`pydantic.SecretStr`; it is put into the ``Authorization`` header of each
request and nowhere else. No error raised here holds request headers: aiohttp's ``ClientResponseError``
(which does, through ``request_info``) is never chained, and server text quoted in errors has the key
masked. Credentials and query secrets in ``base_url`` are handled as :mod:`rxagent.model._endpoint`
describes: sent, never shown (errors, reprs and logs show the URL through
:func:`rxagent.redaction.mask_url`).
"""

from __future__ import annotations

import json
import math
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import cast

import aiohttp
from pydantic import SecretStr
from reactivex import Observable

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.model._endpoint import ERROR_BODY_LIMIT, HttpEndpoint, RequestTimer, Timeouts
from rxagent.model._openai_wire import (
    MessageWireCache,
    StreamParser,
    chunks_from_completion,
    dumps,
    encode_body,
    tool_to_wire,
)
from rxagent.model.errors import (
    MalformedStreamError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamInterrupted,
    ModelTimeoutError,
)
from rxagent.model.sse import SSEDecoder, SSEEvent
from rxagent.model.types import ChatChunk, ChatRequest, ModelCapabilities, ToolSchema, check_content
from rxagent.operators import from_async_batches
from rxagent.retry import RetryBudget, RetryExhausted, RetryPolicy, is_retryable, plan_retry

__all__ = ["OpenAIChatModel", "Timeouts", "list_models", "parse_retry_after"]

_NOT_JSON = object()


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP-date; ``None`` if absent/bad.

    Example:
        >>> parse_retry_after("3")
        3.0
        >>> parse_retry_after("Wed, 21 Oct 2015 07:28:10 GMT", now=datetime(2015, 10, 21, 7, 28, tzinfo=UTC))
        10.0
        >>> parse_retry_after("soon") is None
        True
    """
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


class OpenAIChatModel(HttpEndpoint):
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

    _kind = "model"
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
            base_url=base_url,
            path="chat/completions",
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            headers=headers,
            connection_limit=connection_limit,
            clock=clock,
        )
        self._model = model
        self._retry = retry or RetryPolicy()
        self._capabilities = capabilities or ModelCapabilities()
        self._wire = MessageWireCache(send_reasoning=send_reasoning)
        self._tools_key: tuple[ToolSchema, ...] | None = None  # the tuple whose encoding is cached
        self._tools_wire: bytes = b""

    def __repr__(self) -> str:
        key = self._masked_key()
        shown = self._shown_base_url
        return f"{type(self).__name__}(model={self._model!r}, base_url={shown!r}, api_key={key})"

    # ---- the ChatModel protocol ---------------------------------------------------------------------

    @property
    def model_name(self) -> str:
        """The model name sent to the server."""
        return self._model

    @property
    def capabilities(self) -> ModelCapabilities:
        """What this model accepts."""
        return self._capabilities

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        """The answer to ``request`` as a cold stream of chunks (streamed over SSE, or fetched whole).

        Each subscription is one call, retried per the model's policy (drawing on
        ``request.retry_budget`` when given) and bounded by ``timeouts.total``.

        Returns:
            An observable of :class:`ChatChunk`: text/thinking/tool-call deltas, a chunk with the finish
            reason, then one with the usage; it errors with a :class:`ModelError`, or with
            :class:`~rxagent.retry.RetryExhausted` when a retryable error could not be retried. Images and
            documents the model's capabilities refuse, or the wire format cannot carry, fail it with
            :class:`~rxagent.model.errors.UnsupportedContentError` before anything is sent.

        Raises:
            RuntimeError: the model was closed.

        Lifecycle:
            complete: after ``[DONE]`` (or the end of a body that carried a finish reason).
            error: mapped as described in the module; retried before the first chunk only.
            cancel: the attempt's task is cancelled: the response is closed and its connection freed.
            re-subscribe: a new call (the request body is encoded once and reused).
        """
        self._check_open()
        body: bytes | None = None

        def call() -> AsyncIterator[list[ChatChunk]]:
            nonlocal body
            if body is None:
                check_content(request, self)
                body = self.encode_request(request)
            return self._call(body, request.stream, request.retry_budget)

        return from_async_batches(call)

    async def _call(
        self, body: bytes, streaming: bool, budget: RetryBudget | None
    ) -> AsyncIterator[list[ChatChunk]]:
        """The whole call: attempts, the waits between them, and the total deadline over all of it.

        Yields the chunks in batches, one per network read (see :meth:`_attempt`).

        One async generator rather than ``retry_backoff`` and ``timeout_total`` around the attempt: the
        same rules (:func:`~rxagent.retry.plan_retry`), without two more observers on every chunk and
        two more subscriptions on every request. The total is not a deadline around this generator (its
        cancel could hit the task while the consumer holds the stream at a ``yield``, outside it): each
        attempt's request timer is capped by it, and a retry wait that would outlast it is cut short.
        """
        total_due = self._total_due()
        attempts = 0
        while True:
            attempts += 1
            emitted = False
            try:
                async for batch in self._attempt(body, streaming, total_due):
                    emitted = True
                    yield batch
                return
            except ModelError as error:
                # Only before the first chunk: a retry would emit the answer's start twice.
                if emitted or not is_retryable(error):
                    raise
                plan = plan_retry(self._retry, attempts, error, budget)
                if isinstance(plan, RetryExhausted):
                    raise plan from error
            if total_due is not None and self._clock.now() + plan >= total_due:
                await self._clock.sleep(total_due - self._clock.now())
                raise ModelTimeoutError("total", self._timeouts.total or 0.0)
            await self._clock.sleep(plan)

    # ---- one call -------------------------------------------------------------------------------------

    def encode_request(self, request: ChatRequest) -> bytes:
        """The JSON body this model sends for ``request`` (for inspection and tests; ``stream`` uses it).

        Each message's encoding is cached for as long as the message object lives, so a conversation that
        grows by one message per turn costs one message's encoding per request, not the whole history's.

        Raises:
            UnsupportedContentError: an image or document the format cannot carry (see
                :func:`~rxagent.model._openai_wire.media_part`).
        """
        tools: bytes | None = None
        if request.tools:
            if request.tools is not self._tools_key:
                self._tools_wire = dumps([tool_to_wire(tool) for tool in request.tools])
                self._tools_key = request.tools
            tools = self._tools_wire
        return encode_body(self._model, request, self._wire.encoded_messages(request.messages), tools)

    async def _attempt(
        self, body: bytes, streaming: bool, total_due: float | None
    ) -> AsyncIterator[list[ChatChunk]]:
        """One POST: yields the chunks of one response, raising only :class:`ModelError` (or cancelled).

        The chunks come in batches, those of one network read each (never empty): the generators are
        resumed once per read rather than once per token. A chunk decoded before a bad event of the same
        read is still yielded before the error, as it would be one chunk at a time.
        """
        session = self._session_on_running_loop()
        timer = self._request_timer(total_due)
        emitted = 0
        failure: ModelError | None = None
        cause: BaseException | None = None
        try:
            async with (
                timer.deadline,
                session.post(
                    self._url.get_secret_value(),
                    data=body,
                    headers=self._request_headers("text/event-stream" if streaming else "application/json"),
                    allow_redirects=False,
                    trace_request_ctx=timer,
                ) as response,
            ):
                timer.pause()
                if not 200 <= response.status < 300:
                    raise await self._http_error(response, timer)
                if not streaming or response.content_type == "application/json":
                    # Asked for a stream, some servers still answer with a whole completion (or an error
                    # object) as plain JSON: read it as such rather than as an empty event stream.
                    chunks = self._completion_chunks(await timer.read_body(response.content))
                    emitted += len(chunks)
                    yield chunks
                    return
                parser = StreamParser(self._redact)
                decoder = SSEDecoder()
                content = response.content
                while data := await timer.read(content):
                    chunks: list[ChatChunk] = []
                    problem = parser.feed_all(decoder.feed(data), chunks)
                    if chunks:
                        emitted += len(chunks)
                        yield chunks
                    if problem is not None:
                        raise problem
                    if parser.done:
                        break  # whatever follows [DONE] is not part of the answer
                else:
                    # The body ended. An event without its closing blank line is only acceptable as a
                    # complete one (a server that closes right after `data: [DONE]\n`).
                    tail = decoder.end()
                    if tail is not None and not parser.done:
                        chunk = self._tail_chunk(parser, tail, emitted)
                        if chunk is not None:
                            emitted += 1
                            yield [chunk]
                    if not (parser.done or parser.finished):
                        raise self._cut_short(emitted, decoder.line, "")
                usage = parser.usage_chunk()
                if usage is not None:
                    emitted += 1
                    yield [usage]
        except ModelError:
            raise
        except aiohttp.ClientResponseError as error:
            # Holds request_info, headers included: keep only its status and message, never the object.
            failure = ModelConnectionError(f"invalid HTTP response from the model server: {error.message}")
        except (aiohttp.ClientError, OSError) as error:  # TimeoutError is an OSError
            if timer.deadline.expired():  # the request's deadline: connect, idle or the call's total
                failure, cause = timer.error(), error
            else:
                failure = ModelConnectionError(f"{type(error).__name__}: {self._redact(str(error))}")
                cause = error
        if failure is not None:
            # Raised outside the `except` blocks so that no aiohttp exception rides along as __context__.
            if emitted and not (isinstance(failure, ModelTimeoutError) and failure.kind == "total"):
                interrupted = ModelStreamInterrupted(emitted, str(failure))
                failure.__cause__ = cause
                raise interrupted from failure
            raise failure from cause

    def _tail_chunk(self, parser: StreamParser, tail: SSEEvent, emitted: int) -> ChatChunk | None:
        if tail.data == "[DONE]":
            parser.done = True
            return None
        try:
            return parser.feed(tail)
        except MalformedStreamError:
            pass  # the last line was cut off; raised below, without the parse error as its context
        raise self._cut_short(emitted, tail.line, tail.data)

    def _completion_chunks(self, payload: bytes) -> list[ChatChunk]:
        try:
            decoded = json.loads(payload)
        except ValueError:
            decoded = _NOT_JSON  # raised below: the decode error holds the body, which may quote the key
        if decoded is _NOT_JSON:
            text = self._redact(payload[:200].decode("utf-8", "replace"))
            raise MalformedStreamError("the response body is not JSON", data=text)
        return chunks_from_completion(decoded, self._redact)

    def _cut_short(self, emitted: int, line: int, data: str) -> ModelError:
        where = (
            f" in the middle of line {line}: {self._redact(data)[:200]!r}" if data else f" after line {line}"
        )
        reason = f"the server ended the stream without [DONE] or a finish reason{where}"
        if emitted:
            return ModelStreamInterrupted(emitted, reason)
        return ModelConnectionError(reason)

    async def _http_error(self, response: aiohttp.ClientResponse, timer: RequestTimer) -> ModelHTTPError:
        body = await timer.read_body(response.content, ERROR_BODY_LIMIT)
        headers = response.headers
        retry_after_ms = parse_retry_after(headers.get("retry-after-ms"))
        retry_after = retry_after_ms / 1000 if retry_after_ms is not None else None
        if retry_after is None:
            retry_after = parse_retry_after(headers.get("Retry-After"))
        text = self._redact(body.decode("utf-8", "replace"))
        return ModelHTTPError(response.status, text, retry_after=retry_after, url=self._shown_url)


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
