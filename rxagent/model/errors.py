"""Errors a model call can end with.

Every error says whether a new attempt may succeed (``retryable``) and, when the server said so, how long
to wait first (``retry_after``). None of them ever holds request headers, so an API key cannot leak
through an error message, a traceback or a repr; a URL in a message is shown through
:func:`~rxagent.redaction.mask_url`, so neither can the credentials or query secrets it carries.
"""

from __future__ import annotations

import re
from typing import Literal

from rxagent.redaction import mask_url

__all__ = [
    "MalformedStreamError",
    "ModelConnectionError",
    "ModelError",
    "ModelHTTPError",
    "ModelStreamError",
    "ModelStreamInterrupted",
    "ModelTimeoutError",
    "UnsupportedContentError",
]

RETRYABLE_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))

_CONTEXT_OVERFLOW = re.compile(
    r"context_length_exceeded|maximum context length|context window|context size|exceeds? the context"
    r"|prompt is too long|too many (input )?tokens|input is too long",
    re.IGNORECASE,
)
"""How servers word a request longer than the model's context: OpenAI's error code and message, vLLM's
and llama.cpp's (``exceeds the available context size``), Anthropic's ``prompt is too long``."""


class ModelError(Exception):
    """Base class of model-call errors."""

    retryable: bool = False
    retry_after: float | None = None


class ModelHTTPError(ModelError):
    """The server answered with an error status. 408, 409, 429 and 5xx are retryable; other 4xx are not.

    Args:
        status: the HTTP status.
        body: the start of the response body (the caller masks secrets the server quoted in it).
        retry_after: seconds the server asked to wait before a retry.
        url: the URL the request went to; the message shows it masked (its password and query secrets).
    """

    def __init__(self, status: int, body: str, *, retry_after: float | None = None, url: str = "") -> None:
        snippet = body if len(body) <= 500 else body[:500] + "…"
        super().__init__(f"HTTP {status} from {mask_url(url) if url else 'the model server'}: {snippet}")
        self.status = status
        self.body = snippet
        self.retry_after = retry_after
        self.retryable = status in RETRYABLE_STATUSES

    @property
    def context_overflow(self) -> bool:
        """The server refused the request as longer than the model's context (a 400 or 413 whose body says
        so, as OpenAI's ``context_length_exceeded`` does): sending less may succeed where a retry cannot."""
        return self.status in (400, 413) and _CONTEXT_OVERFLOW.search(self.body) is not None


class ModelStreamError(ModelHTTPError):
    """The server reported an error inside a stream it had begun with a success status (an SSE ``error``
    event, such as Anthropic's ``overloaded_error``).

    It is classified as the HTTP status its provider documents for the error's type (``overloaded_error``
    is 529, ``rate_limit_error`` 429, ``invalid_request_error`` 400, …): retryable when that status is,
    and, like every error, retried only before the first chunk was emitted.

    Args:
        kind: the provider's error type (``"overloaded_error"``).
        message: the provider's message (the caller masks secrets the server quoted in it).
        status: the HTTP status the provider documents for ``kind``.
    """

    def __init__(self, kind: str, message: str, status: int) -> None:
        ModelError.__init__(self, f"the model server reported {kind} in the stream: {message}")
        self.kind = kind
        self.status = status
        self.body = message if len(message) <= 500 else message[:500] + "…"
        self.retry_after = None
        self.retryable = status in RETRYABLE_STATUSES


class ModelConnectionError(ModelError):
    """The connection could not be made or broke before anything was streamed. Retryable."""

    retryable = True


class ModelTimeoutError(ModelError, TimeoutError):
    """A timeout: ``connect`` (retryable), ``idle`` read before the first chunk (retryable), or ``total``."""

    def __init__(self, kind: Literal["connect", "idle", "total"], seconds: float) -> None:
        what = {
            "connect": "connecting to the model server",
            "idle": "waiting for the model server to send more",
            "total": "the whole model call",
        }[kind]
        super().__init__(f"timed out after {seconds:g} s {what}")
        self.kind = kind
        self.seconds = seconds
        self.retryable = kind != "total"


class ModelStreamInterrupted(ModelError):
    """The stream broke after chunks were already emitted.

    Never retried: a retry would emit the answer's first deltas a second time. The partial answer is
    whatever the subscriber received; ``__cause__`` holds the underlying error.
    """

    def __init__(self, chunks_emitted: int, reason: str) -> None:
        super().__init__(
            f"model stream interrupted after {chunks_emitted} chunks ({reason}); "
            "not retried, since a retry would repeat deltas already emitted"
        )
        self.chunks_emitted = chunks_emitted


class MalformedStreamError(ModelError):
    """The server sent something that is not a valid chunk (bad JSON, wrong shape). Not retryable."""

    def __init__(self, message: str, *, line: int | None = None, data: str = "") -> None:
        where = f" at stream line {line}" if line is not None else ""
        snippet = data if len(data) <= 200 else data[:200] + "…"
        super().__init__(f"{message}{where}: {snippet!r}" if data else f"{message}{where}")
        self.line = line
        self.data = snippet


class UnsupportedContentError(ModelError):
    """The request holds content this model cannot take (an image or a document for a text-only model, a
    document by URL where the wire format takes only inline bytes). Raised before anything is sent; not
    retryable (the same request fails the same way)."""

    @classmethod
    def outside_user_message(cls, wire: str, role: str) -> UnsupportedContentError:
        """The error for an image or a document in a message whose role is not ``user``: every wire format
        rxagent speaks (``wire`` names it) carries them in user messages only.

        Example:
            >>> error = UnsupportedContentError.outside_user_message("Anthropic Messages", "assistant")
            >>> str(error).endswith("in user messages only, and this message's role is 'assistant'")
            True
        """
        return cls(
            f"the {wire} format carries images and documents in user messages only, and this message's "
            f"role is {role!r}"
        )
