"""What every OpenAI-compatible HTTP client here shares: URL, API key, headers, timeouts, one session.

:class:`OpenAIChatModel` and :class:`~rxagent.memory.OpenAIEmbedder` both build on :class:`HttpEndpoint`,
so the key handling (held as a :class:`pydantic.SecretStr`, sent only in the ``Authorization`` header,
masked in reprs and in server text quoted by errors) and the session lifecycle exist once.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Self
from urllib.parse import urlsplit

from pydantic import SecretStr

if TYPE_CHECKING:
    import aiohttp

__all__ = ["HttpEndpoint", "Timeouts"]

_MASK = "**********"


@dataclass(frozen=True, slots=True)
class Timeouts:
    """How long a model call may take, in seconds.

    Attributes:
        connect: establishing the TCP (and TLS) connection. Short: a server that cannot be reached
            should fail fast and be retried.
        idle_read: the longest silence on the socket, per read: before the response starts and between
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


class HttpEndpoint:
    """One OpenAI-compatible endpoint: ``{base_url}/{path}``, its key and headers, and one aiohttp session.

    The session is created on first use on the running loop, which the endpoint is bound to from then
    on, and closed by :meth:`aclose` or by leaving ``async with``.

    Args:
        base_url: the API root, e.g. ``"http://127.0.0.1:8000/v1"``.
        path: the endpoint under it (``"chat/completions"``, ``"embeddings"``).
        api_key: sent as ``Authorization: Bearer …``; ``None`` reads ``api_key_env`` (no key: no header).
        api_key_env: environment variable holding the key (``None``: don't read one).
        timeouts: connect, idle-read and total timeouts.
        headers: extra HTTP headers sent with every request.
        connection_limit: most simultaneous connections to the server.
        request_total: apply ``timeouts.total`` to each HTTP request (a client that retries bounds the
            whole call itself instead).
    """

    _kind = "client"
    """What the subclass is called in error messages ("model", "embedder")."""

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
        request_total: bool = False,
    ) -> None:
        if connection_limit < 1:
            raise ValueError("connection_limit must be at least 1")
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"base_url must be an absolute http(s) URL, got {base_url!r}")
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env) or None
        self._base_url = base_url.rstrip("/")
        self._url = f"{self._base_url}/{path}"
        self._api_key: SecretStr | None = SecretStr(api_key) if isinstance(api_key, str) else api_key
        self._timeouts = timeouts or Timeouts()
        self._headers = dict(headers or {})
        self._connection_limit = connection_limit
        self._request_total = request_total
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @property
    def timeouts(self) -> Timeouts:
        """The connect, idle-read and total timeouts."""
        return self._timeouts

    def _masked_key(self) -> str:
        """The key as a repr shows it."""
        return f"'{_MASK}'" if self._api_key is not None else "None"

    def _redact(self, text: str) -> str:
        """``text`` with the API key masked (servers sometimes quote the key in an error)."""
        if self._api_key is not None:
            secret = self._api_key.get_secret_value()
            if secret and secret in text:
                return text.replace(secret, _MASK)
        return text

    def _request_headers(self, accept: str) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": accept, **self._headers}
        if self._api_key is not None:
            headers["Authorization"] = f"Bearer {self._api_key.get_secret_value()}"
        return headers

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
            timeouts = self._timeouts
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._connection_limit),
                # No `connect` here: waiting for a free pooled connection is not a connect timeout.
                timeout=aiohttp.ClientTimeout(
                    total=timeouts.total if self._request_total else None,
                    connect=None,
                    sock_connect=timeouts.connect,
                    sock_read=timeouts.idle_read,
                ),
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
