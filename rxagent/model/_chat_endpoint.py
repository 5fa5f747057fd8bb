"""What every streaming chat client over HTTP shares: the call, its attempts, and how they fail.

:class:`ChatEndpoint` is the base of :class:`~rxagent.model.openai.OpenAIChatModel` and
:class:`~rxagent.model.anthropic.AnthropicModel`. A client adds only its wire format: how a request is
encoded (:meth:`ChatEndpoint.encode_request`), how a streamed response's events become chunks (a
:class:`ChunkParser` per attempt) and how a whole response does (:meth:`ChatEndpoint._response_chunks`).
Everything else exists once, here:

* **The call** (:meth:`ChatEndpoint.stream`): a cold observable, ``from_async_batches`` over one async
  generator that makes the attempts (POST, SSE bytes → events → chunks, yielded a few dozen at a
  time) and waits between them by the rules of :func:`rxagent.retry.plan_retry` (the same rules as the
  ``retry_backoff`` operator: retry before the first chunk only, honour ``Retry-After``, draw on the run's
  budget), all under ``timeouts.total``. Waits and timeouts run on the client's ``clock``.
* **The errors**: an error status is a :class:`~rxagent.model.errors.ModelHTTPError` carrying the wait the
  server asked for (``retry-after-ms``, else ``Retry-After``); a failed connection is a
  :class:`~rxagent.model.errors.ModelConnectionError`; the connect and idle-read timeouts are
  :class:`~rxagent.model.errors.ModelTimeoutError`; any transport failure after the first chunk is a
  :class:`~rxagent.model.errors.ModelStreamInterrupted` (never retried: a retry would repeat deltas already
  emitted). A stream that ends before its end marker is an error, never a silently short answer.
* **The secrets**: no error raised here holds request headers (aiohttp's ``ClientResponseError``, which
  does, is never chained) and server text quoted in errors has the key masked (see
  :mod:`rxagent.model._endpoint`).

One attempt is an async generator that holds the response in ``async with``: disposing the subscription
cancels its task, which closes the response and returns the connection to the pool.
"""

from __future__ import annotations

import json
import math
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Iterable, Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Protocol

import aiohttp
from pydantic import SecretStr
from reactivex import Observable

from rxagent.clock import Clock
from rxagent.model._endpoint import ERROR_BODY_LIMIT, HttpEndpoint, RequestTimer, Timeouts
from rxagent.model.errors import (
    MalformedStreamError,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelStreamInterrupted,
    ModelTimeoutError,
)
from rxagent.model.sse import SSEDecoder, SSEEvent
from rxagent.model.types import ChatChunk, ChatRequest, ModelCapabilities, check_content
from rxagent.operators import from_async_batches
from rxagent.retry import RetryBudget, RetryExhausted, RetryPolicy, is_retryable, plan_retry

__all__ = ["BATCH_EVENTS", "ChatEndpoint", "ChunkParser", "parse_retry_after"]

_NOT_JSON = object()

BATCH_EVENTS = 32
"""Most events of one network read decoded into one batch of chunks. Chunks are objects the garbage
collector tracks: a batch of a whole read (a fast server's read can carry a thousand events) would keep
them all alive at once, enough to set off collections that then find them alive and promote them to the
older generations, whose collections cost far more (measured: a sixth of a streamed delta's CPU). Batches
this small are consumed before the collector notices them, and still resume the generators only once
per 32 tokens."""


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


class ChunkParser(Protocol):
    """Turns one streamed response's SSE events into chunks; a client makes one per attempt.

    Attributes:
        done: the stream's end marker arrived (``[DONE]``, ``message_stop``): whatever follows is not
            part of the answer.
        finished: the answer is complete although the end marker has not come (a finish reason, for
            servers that never send the marker); ``False`` where the marker is always sent.
        ending: what a stream must end with, as an error message names it (``"[DONE] or a finish
            reason"``).
    """

    done: bool
    finished: bool

    @property
    def ending(self) -> str:
        """What a stream must end with, for the error of one that does not."""
        ...

    def feed_all(self, events: Iterable[SSEEvent], into: list[ChatChunk]) -> ModelError | None:
        """Append the chunks of ``events`` to ``into``, stopping at the end marker.

        Returns:
            The error that stopped it at a bad event (``into`` holds the chunks before it), else ``None``.
        """
        ...

    def feed_tail(self, tail: SSEEvent) -> ChatChunk | None:
        """The chunk of the event the body ended in without its closing blank line.

        Raises:
            MalformedStreamError: the event is incomplete (the body was cut off inside it).
            ModelError: the event is an error the server reported.
        """
        ...

    def usage_chunk(self) -> ChatChunk | None:
        """The call's usage as a chunk of its own, emitted once at the end, if the server sent any."""
        ...


class ChatEndpoint(HttpEndpoint, ABC):
    """A chat model served over HTTP with SSE streaming; subclasses add a wire format (see the module).

    Args:
        model: the model name the server knows.
        path: the endpoint under ``base_url`` (``"chat/completions"``, ``"messages"``).
        retry: how one call retries (a run's shared budget comes with each request).
        capabilities: what the model accepts.
        Others: as :class:`~rxagent.model._endpoint.HttpEndpoint` takes them.
    """

    _kind = "model"

    def __init__(
        self,
        model: str,
        *,
        base_url: str,
        path: str,
        api_key: str | SecretStr | None,
        api_key_env: str | None,
        timeouts: Timeouts | None,
        retry: RetryPolicy | None,
        capabilities: ModelCapabilities,
        headers: Mapping[str, str] | None,
        connection_limit: int,
        clock: Clock,
    ) -> None:
        super().__init__(
            base_url=base_url,
            path=path,
            api_key=api_key,
            api_key_env=api_key_env,
            timeouts=timeouts,
            headers=headers,
            connection_limit=connection_limit,
            clock=clock,
        )
        self._model = model
        self._retry = retry or RetryPolicy()
        self._capabilities = capabilities

    def __repr__(self) -> str:
        key = self._masked_key()
        shown = self._shown_base_url
        return f"{type(self).__name__}(model={self._model!r}, base_url={shown!r}, api_key={key})"

    # ---- what a wire format adds ----------------------------------------------------------------------

    @abstractmethod
    def encode_request(self, request: ChatRequest) -> bytes:
        """The JSON body this model sends for ``request`` (for inspection and tests; ``stream`` uses it)."""

    @abstractmethod
    def _new_parser(self) -> ChunkParser:
        """The parser of one streamed attempt."""

    @abstractmethod
    def _response_chunks(self, decoded: Any) -> list[ChatChunk]:
        """The chunks of a whole (not streamed) response, decoded from its JSON body.

        Raises:
            MalformedStreamError: the body is not a response of the wire format.
            ModelError: the body is an error the server reported.
        """

    def _completion_chunks(self, payload: bytes) -> list[ChatChunk]:
        try:
            decoded = json.loads(payload)
        except ValueError:
            decoded = _NOT_JSON  # raised below: the decode error holds the body, which may quote the key
        if decoded is _NOT_JSON:
            text = self._redact(payload[:200].decode("utf-8", "replace"))
            raise MalformedStreamError("the response body is not JSON", data=text)
        return self._response_chunks(decoded)

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
            reason, then one with the usage; it errors with a :class:`ModelError`, with
            :class:`~rxagent.retry.RetryExhausted` when a retryable error could not be retried, or with
            ``ValueError``, before anything is sent, when the request asks for something the wire format
            cannot say (the message says what): images and documents the model's capabilities refuse, or
            the wire format cannot carry, fail it with
            :class:`~rxagent.model.errors.UnsupportedContentError`.

        Raises:
            RuntimeError: the model was closed.

        Lifecycle:
            complete: after the stream's end marker (or the end of a body that carried a finish reason,
            where the wire format allows that).
            error: mapped as described in :mod:`rxagent.model._chat_endpoint`; retried before the first
            chunk only.
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

        Yields the chunks in batches of a few dozen at most (see :meth:`_attempt`).

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

    async def _attempt(
        self, body: bytes, streaming: bool, total_due: float | None
    ) -> AsyncIterator[list[ChatChunk]]:
        """One POST: yields the chunks of one response, raising only :class:`ModelError` (or cancelled).

        The chunks come in batches (never empty), those of at most :data:`BATCH_EVENTS` events of one
        network read each: the generators are resumed once per batch rather than once per token, and a
        read that carries hundreds of events (a server streaming faster than it is read) never holds
        hundreds of chunks at once. A chunk decoded before a bad event of the same batch is still yielded
        before the error, as it would be one chunk at a time.
        """
        session = self._session_on_running_loop()
        timer = self._request_timer(total_due)
        emitted = 0
        failure: ModelError | None = None
        cause: BaseException | None = None
        try:
            timer.watch()
            async with (
                timer.deadline,
                session.post(
                    self._url.get_secret_value(),
                    data=body,
                    headers=self._request_headers("text/event-stream" if streaming else "application/json"),
                    allow_redirects=False,
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
                parser = self._new_parser()
                decoder = SSEDecoder()
                content = response.content
                while data := await timer.read(content):
                    events = decoder.feed(data)
                    for start in range(0, len(events), BATCH_EVENTS):
                        chunks: list[ChatChunk] = []
                        problem = parser.feed_all(events[start : start + BATCH_EVENTS], chunks)
                        if chunks:
                            emitted += len(chunks)
                            yield chunks
                        if problem is not None:
                            raise problem
                        if parser.done:
                            break
                    if parser.done:
                        break  # whatever follows the end marker is not part of the answer
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
                        raise self._cut_short(parser, emitted, decoder.line, "")
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
        finally:
            # The request failed before its response, in this task (`pause` ended the watch otherwise,
            # before the first yield: a generator closed later may run this in another context).
            timer.unwatch()
        if failure is not None:
            # Raised outside the `except` blocks so that no aiohttp exception rides along as __context__.
            if emitted and not (isinstance(failure, ModelTimeoutError) and failure.kind == "total"):
                interrupted = ModelStreamInterrupted(emitted, str(failure))
                failure.__cause__ = cause
                raise interrupted from failure
            raise failure from cause

    def _tail_chunk(self, parser: ChunkParser, tail: SSEEvent, emitted: int) -> ChatChunk | None:
        try:
            return parser.feed_tail(tail)
        except MalformedStreamError:
            pass  # the last line was cut off; raised below, without the parse error as its context
        raise self._cut_short(parser, emitted, tail.line, tail.data)

    def _cut_short(self, parser: ChunkParser, emitted: int, line: int, data: str) -> ModelError:
        where = (
            f" in the middle of line {line}: {self._redact(data)[:200]!r}" if data else f" after line {line}"
        )
        reason = f"the server ended the stream without {parser.ending}{where}"
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
