"""What every HTTP client here shares: URL, API key, headers, timeouts, one session.

:class:`OpenAIChatModel`, :class:`~rxagent.model.anthropic.AnthropicModel` and
:class:`~rxagent.model.embedders.OpenAIEmbedder` all build on :class:`HttpEndpoint`, so the key handling
(held as a :class:`pydantic.SecretStr`, sent only in its header — ``Authorization: Bearer …``, or the
header a subclass names, such as Anthropic's ``x-api-key`` —, masked in reprs and in server text quoted
by errors), the session lifecycle and the timeouts exist once.

Credentials in the base URL (``http://user:password@host/v1``, for an authenticating proxy in front of the
server) are taken out of the URL and sent as HTTP Basic credentials by
:func:`rxagent.redaction.split_credentials`: in ``Authorization``, or in ``Proxy-Authorization`` when the
API key's ``Bearer`` (or an ``Authorization`` in ``headers``) already fills ``Authorization``.

The URL's credentials and query secrets (Azure's ``?api-key=``) are masked wherever the URL is shown, by
:func:`rxagent.redaction.mask_url`; the objects here hold the URL to send and the credentials as
:class:`pydantic.Secret` values, so not even ``vars()`` of a client shows them.

Every timeout runs on the endpoint's :class:`~rxagent.clock.Clock`, none inside aiohttp, so that a test
on a :class:`~rxagent.clock.VirtualClock` controls all of them. Per request, one :class:`Deadline` moves
through the phases: only the total while the request waits for a free pooled connection, ``connect``
while a new connection is made (the endpoint's connector says when), ``idle_read`` from then on while the
client waits for the server (the response head, then each read of the body; pushing it per read costs an
assignment), and off while the caller handles what was read, so a slow consumer is never mistaken for a
silent server. The call's ``total`` caps every phase (a client that retries passes the same due time to
all its attempts) and is checked on every read, so it also ends a call whose consumer held it too long.
"""

from __future__ import annotations

import asyncio
import functools
import math
import os
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Literal, Self

from pydantic import Secret, SecretStr
from yarl import URL

from rxagent.clock import SYSTEM_CLOCK, Clock, Deadline
from rxagent.model._body import read_available
from rxagent.model.errors import ModelConnectionError, ModelError, ModelHTTPError, ModelTimeoutError
from rxagent.redaction import MASK, mask_url, redact, split_credentials, url_secrets

if TYPE_CHECKING:
    import aiohttp
    from aiohttp.client_proto import ResponseHandler
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

__all__ = ["ERROR_BODY_LIMIT", "HttpEndpoint", "RequestTimer", "Timeouts"]

ERROR_BODY_LIMIT = 64 * 1024
"""Bytes of an error response kept for the error message; a huge error page is not worth more."""


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a model call may take, in seconds (measured on the client's clock).

    Attributes:
        connect: establishing a new connection (name resolution, TCP and TLS); not the wait for a free
            pooled one. Short: a server that cannot be reached should fail fast and be retried.
        idle_read: the longest silence from the server, per read: before the response starts and between
            streamed bytes (SSE keep-alive comments count as activity). ``None``: no limit.
        total: the whole call, retries and their waits included. ``None``: no limit.
    """

    connect: float = 10.0
    idle_read: float | None = 60.0
    total: float | None = 600.0

    def __post_init__(self) -> None:
        for name in ("connect", "idle_read", "total"):
            value: float | None = getattr(self, name)
            if value is not None and not (value > 0 and math.isfinite(value)):
                raise ValueError(f"Timeouts.{name} must be a positive number of seconds, got {value!r}")


_CONNECTING: ContextVar[RequestTimer | None] = ContextVar("rxagent_connecting", default=None)
"""The timer of the request the current task is sending (see :meth:`RequestTimer.watch`)."""


class RequestTimer:
    """One request's deadline, moving through the phases described in the module docstring.

    Call :meth:`watch` and enter :attr:`deadline` just before the request, and :meth:`pause` first
    thing once it has a response (the endpoint's connector starts the connect and idle phases in
    between), read the body with :meth:`read`, and turn an expiry into its error with :meth:`error`. The
    call's total deadline (``total_due`` on the clock, shared by all attempts of a call) caps every phase,
    and is checked again on every read.
    """

    __slots__ = ("_clock", "_connect", "_idle", "_total", "_total_due", "_watching", "deadline", "phase")

    def __init__(self, clock: Clock, timeouts: Timeouts, total_due: float | None) -> None:
        self._clock = clock
        self._connect = timeouts.connect
        self._idle = timeouts.idle_read
        self._total = timeouts.total
        self._total_due = total_due
        self.deadline: Deadline = clock.timeout_at(total_due)
        """Only the total until the request has a connection; expiring cancels the request."""
        if self._idle is not None:  # the idle limit comes next: one timer for both, not two per request
            self.deadline.wake_by(clock.now() + self._idle)
        self.phase: Literal["connect", "idle", "total"] = "total"
        """Which limit the deadline stands for now."""
        self._watching: Token[RequestTimer | None] | None = None

    def watch(self) -> None:
        """Be the timer the endpoint's connector tells, in this task, when the request's connection is
        being made and when it is ready, until :meth:`pause` or :meth:`unwatch` (call both in this task:
        between the two, the request only connects and sends, it yields nothing)."""
        self._watching = _CONNECTING.set(self)

    def unwatch(self) -> None:
        """Stop being told about connections (nothing if :meth:`watch` was not called or ended already)."""
        watching, self._watching = self._watching, None
        if watching is not None:
            _CONNECTING.reset(watching)

    def connecting(self) -> None:
        """A new connection is being made: ``connect`` seconds from now."""
        self._limit("connect", self._connect)

    def waiting(self) -> None:
        """The client waits for the server: ``idle_read`` seconds from now (or no limit)."""
        self._limit("idle", self._idle)

    def pause(self) -> None:
        """The caller is busy with what arrived: the server is not being waited for.

        Nothing is armed while paused, because the caller may be an async generator suspended at a
        ``yield``: a deadline's cancel would then hit its task outside the generator, where nobody turns
        it into an error. The total is checked again at the next :meth:`read`. Ends :meth:`watch`.
        """
        self.unwatch()
        self.deadline.reschedule(None)

    async def read(self, content: aiohttp.StreamReader) -> bytes:
        """The next bytes of the body (``b""`` at its end), waited for at most ``idle_read`` seconds.

        Raises:
            ModelTimeoutError: the call's total deadline passed while the caller was busy.
        """
        if self._limit("idle", self._idle):
            raise self.total_error()
        data = await read_available(content)
        self.deadline.reschedule(None)
        return data

    async def read_body(self, content: aiohttp.StreamReader, limit: int | None = None) -> bytes:
        """The rest of the body (its first ``limit`` bytes or a little more), each read idle-bounded."""
        body = bytearray()
        while data := await self.read(content):
            body += data
            if limit is not None and len(body) >= limit:
                break
        return bytes(body)

    def error(self) -> ModelTimeoutError:
        """The error for this deadline's expiry: a ``connect``, ``idle`` or ``total`` timeout."""
        if self.phase == "connect":
            return ModelTimeoutError("connect", self._connect)
        if self.phase == "idle":
            return ModelTimeoutError("idle", self._idle or 0.0)
        return self.total_error()

    def total_error(self) -> ModelTimeoutError:
        """The error for the call's total deadline."""
        return ModelTimeoutError("total", self._total or 0.0)

    def _limit(self, phase: Literal["connect", "idle"], seconds: float | None) -> bool:
        """Arm the deadline ``seconds`` from now, or at the total if that comes first; True if it passed."""
        now = self._clock.now()
        when = None if seconds is None else now + seconds
        due = self._total_due
        if due is not None and (when is None or due <= when):
            self.phase = "total"
            self.deadline.reschedule(due)
            return due <= now
        self.phase = phase
        self.deadline.reschedule(when)
        return False


@functools.cache
def _timed_connector() -> type[aiohttp.TCPConnector]:
    """The connector class of the endpoints: aiohttp's, telling the watching :class:`RequestTimer` when a
    connection is being made and when the request has one.

    Made on first use, as aiohttp is imported then. aiohttp's trace hooks could tell the same, but a
    session with any hook awaits about ten signals per request (each with its parameters object), which
    cost more than the rest of sending it.
    """
    import aiohttp

    class TimedConnector(aiohttp.TCPConnector):
        async def connect(
            self,
            req: aiohttp.ClientRequest,
            traces: list[Trace],
            timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature: it passes them by name)
        ) -> Connection:
            connection = await super().connect(req, traces, timeout)
            timer = _CONNECTING.get()
            if timer is not None:  # a pooled connection or a new one: the server is waited for now
                timer.waiting()
            return connection

        async def _create_connection(
            self,
            req: aiohttp.ClientRequest,
            traces: list[Trace],
            timeout: aiohttp.ClientTimeout,  # noqa: ASYNC109 (aiohttp's signature: it passes them by name)
        ) -> ResponseHandler:
            timer = _CONNECTING.get()
            if timer is not None:
                timer.connecting()
            return await super()._create_connection(req, traces, timeout)

    return TimedConnector


class HttpEndpoint:
    """One HTTP endpoint: ``{base_url}/{path}``, its key and headers, and one aiohttp session.

    The session is created on first use on the running loop, which the endpoint is bound to from then
    on, and closed by :meth:`aclose` or by leaving ``async with``.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``. A query (``?api-version=…``) is kept
            on every request; credentials (``http://user:password@host/v1``) are sent as Basic credentials,
            as the module describes, and never shown.
        path: the endpoint under it (``"chat/completions"``, ``"embeddings"``).
        api_key: sent as ``Authorization: Bearer …`` (or in the subclass's ``_key_header``); ``None`` reads
            ``api_key_env`` (no key, or an empty one: no header).
        api_key_env: environment variable holding the key (``None``: don't read one).
        timeouts: connect, idle-read and total timeouts.
        headers: extra HTTP headers sent with every request.
        connection_limit: most simultaneous connections to the server.
        clock: where the timeouts (and a retrying client's waits) run: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests.

    Raises:
        ValueError: ``base_url`` is not an absolute http(s) URL; its user name holds a ``:`` (Basic
            credentials cannot carry one); its credentials belong in ``Proxy-Authorization`` and
            ``headers`` sets that header too. The message shows the URL masked.
    """

    _kind = "client"
    """What the subclass is called in error messages ("model", "embedder")."""
    _server = "the model server"
    """Who answers, in error messages."""
    _key_header = "Authorization"
    """The header the API key travels in."""
    _key_prefix = "Bearer "
    """What comes before the key in that header."""

    def __init__(
        self,
        *,
        base_url: str,
        path: str,
        api_key: str | SecretStr | None,
        api_key_env: str | None,
        timeouts: Timeouts | None,
        headers: Mapping[str, str] | None,
        connection_limit: int = 100,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if connection_limit < 1:
            raise ValueError("connection_limit must be at least 1")
        try:
            given = URL(base_url)
        except ValueError:
            given = None
        if given is None or given.scheme not in ("http", "https") or not given.host:
            raise ValueError(f"base_url must be an absolute http(s) URL, got {mask_url(base_url)!r}")
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env) or None
        if isinstance(api_key, str):
            api_key = SecretStr(api_key)
        # An empty key is no key, as an empty variable is: "Bearer " with nothing after it is no credential.
        self._api_key: SecretStr | None = api_key if api_key and api_key.get_secret_value() else None
        self._headers = dict(headers or {})
        taken = [*self._headers, *([self._key_header] if self._api_key is not None else [])]
        bare, self._url_auth = split_credentials(given, taken=taken, what="base_url")
        # `path` goes under the URL's path; its query stays on every request (Azure's api-version).
        under = f"{given.raw_path.rstrip('/')}/{path}"
        full = given.with_path(under, encoded=True, keep_query=True)
        self._url: Secret[URL] = Secret(bare.with_path(under, encoded=True, keep_query=True))
        """Where requests go: no credentials (they travel in a header), but maybe secrets in the query."""
        self._shown_url = mask_url(full)
        """The request URL as messages show it."""
        self._shown_base_url = mask_url(base_url.rstrip("/"))
        """``base_url`` as the repr shows it."""
        secrets = [*url_secrets(given)]
        if self._api_key is not None:
            secrets.append(self._api_key.get_secret_value())
        if self._url_auth is not None:
            secrets.append(self._url_auth.token)
        self._secrets: tuple[SecretStr, ...] = tuple(SecretStr(s) for s in secrets if s)
        """What :meth:`_redact` masks in server text: the key, the URL's secrets, the Basic token."""
        self._timeouts = timeouts or Timeouts()
        self._connection_limit = connection_limit
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def timeouts(self) -> Timeouts:
        """The connect, idle-read and total timeouts."""
        return self._timeouts

    @property
    def clock(self) -> Clock:
        """The clock the timeouts run on."""
        return self._clock

    def _total_due(self) -> float | None:
        """When a call starting now must end by, on the clock (``None``: no total limit)."""
        total = self._timeouts.total
        return None if total is None else self._clock.now() + total

    def _request_timer(self, total_due: float | None) -> RequestTimer:
        """A fresh deadline for one request of a call that must end by ``total_due``."""
        return RequestTimer(self._clock, self._timeouts, total_due)

    def _masked_key(self) -> str:
        """The key as a repr shows it."""
        return f"'{MASK}'" if self._api_key is not None else "None"

    def _redact(self, text: str) -> str:
        """``text`` with the key and the URL's secrets masked (servers sometimes quote them in an error)."""
        return redact(text, (secret.get_secret_value() for secret in self._secrets))

    def _request_headers(self, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept, **self._headers}
        if self._api_key is not None:
            headers[self._key_header] = f"{self._key_prefix}{self._api_key.get_secret_value()}"
        if self._url_auth is not None:
            name, value = self._url_auth
            headers[name] = value.get_secret_value()
        return headers

    async def _fetch(self, method: Literal["GET", "POST"], data: str | None = None) -> bytes:
        """One request whose whole answer is read, not retried (the total timeout bounds it): the body of a
        2xx answer.

        Raises:
            ModelHTTPError: an error status (the server's text quoted, the key masked).
            ModelConnectionError: no connection, a broken one, or an invalid HTTP answer.
            ModelTimeoutError: the connect, idle-read or total timeout.
        """
        import aiohttp

        session = self._session_on_running_loop()
        timer = self._request_timer(self._total_due())
        failure: ModelError | None = None
        try:
            timer.watch()
            async with (
                timer.deadline,
                session.request(
                    method,
                    self._url.get_secret_value(),
                    data=data,
                    headers=self._request_headers("application/json"),
                    allow_redirects=False,
                ) as response,
            ):
                timer.pause()
                if not 200 <= response.status < 300:
                    raw = await timer.read_body(response.content, ERROR_BODY_LIMIT)
                    text = self._redact(raw[:ERROR_BODY_LIMIT].decode("utf-8", "replace"))
                    raise ModelHTTPError(response.status, text, url=self._shown_url)
                return await timer.read_body(response.content)
        except ModelError:
            raise
        except aiohttp.ClientResponseError as error:
            # Holds request_info, headers included: keep only its message, never the object.
            failure = ModelConnectionError(f"invalid HTTP response from {self._server}: {error.message}")
        except (aiohttp.ClientError, OSError) as error:  # TimeoutError is an OSError
            if timer.deadline.expired():
                failure = timer.error()
            else:
                failure = ModelConnectionError(f"{type(error).__name__}: {self._redact(str(error))}")
        finally:
            timer.unwatch()  # when the request failed before its response (else `pause` ended it)
        # Raised outside the `except` blocks: no aiohttp exception (with headers) rides along.
        raise failure

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(
                f"{self!r} was closed by aclose(); create a new {self._kind} to make more calls"
            )

    def _session_on_running_loop(self) -> aiohttp.ClientSession:
        import aiohttp

        self._check_open()
        loop = asyncio.get_running_loop()
        if self._session is None:
            # The RequestTimer of each request learns from the connector when a connection is being made
            # and when it is ready; the timeouts themselves are all on the clock, none in aiohttp.
            self._session = aiohttp.ClientSession(
                connector=_timed_connector()(limit=self._connection_limit),
                timeout=aiohttp.ClientTimeout(total=None, connect=None, sock_connect=None, sock_read=None),
            )
            self._loop = loop
        elif self._loop is not loop:
            raise RuntimeError(
                f"{self!r} is bound to the event loop it was first used on; create one {self._kind} per loop"
            )
        return self._session

    async def aclose(self) -> None:
        """Close the HTTP session and its connections. It cannot be used afterwards. Idempotent."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __aenter__(self) -> Self:
        self._check_open()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
