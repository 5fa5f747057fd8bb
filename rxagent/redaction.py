"""What is never shown: secrets become :data:`MASK` wherever a URL or a server's text is shown.

A model endpoint travels with two kinds of secret: its API key (held as a :class:`pydantic.SecretStr`, sent
only in a header) and whatever credentials its URL carries. :func:`mask_url` is the one way a URL becomes
text for people — error messages, events, log lines, reprs, command-line output all go through it:

* **userinfo**: ``http://user:password@host/v1`` shows as ``http://user:**********@host/v1``. A user name
  without a password (``https://TOKEN@host/``, as some gateways take a token) is itself the secret and
  shows as ``https://**********@host/``.
* **query values named like credentials**: a parameter whose name contains, in any case, ``key``,
  ``token``, ``secret``, ``passw``, ``pwd``, ``sig``, ``auth``, ``credential``, ``code`` or ``session``
  (Azure's ``api-key``, a SAS ``sig``, Azure Functions' ``code``, ``access_token``, AWS's
  ``X-Amz-Credential``…) shows its name with a masked value; the others (``api-version=2024-06-01``) show
  as they are, since they say which endpoint was meant. Masking a harmless value by its name costs little;
  showing a secret one costs much, so the list errs on the side of masking.
* a **fragment** (never sent; OAuth puts tokens there) is masked whole.

:func:`url_secrets` gives the same secrets as the strings a server might quote back, so that
:func:`redact` can mask them in server text (an error body that repeats the request's query, say).

A URL's credentials are best not sent in the URL at all, since every library that logs or raises about a
request shows its URL: :func:`split_credentials` takes them out and gives the header that carries them
instead, as HTTP Basic credentials (RFC 7617; user name and password percent-decoded, as UTF-8):

* in ``Authorization`` when nothing else fills it — what curl, browsers, aiohttp and httpx do with such
  a URL;
* in ``Proxy-Authorization`` when ``Authorization`` already carries the server's own credentials (an API
  key's ``Bearer``, a header the user set): one header cannot carry two credentials, and
  ``Proxy-Authorization`` is where a gateway in front of an application reads its own (Google's IAP does
  this, so that ``Authorization`` reaches the application). A proxy that reads only ``Authorization``
  cannot be combined with a server that wants its own credentials there, by any client.

Query secrets cannot be moved: the server reads them from the URL. Where a library logs the URLs it
requests, :class:`RedactingFilter` masks them (and any other held secret) in the log records.

Example:
    >>> mask_url("http://proxy-user:hunter2@127.0.0.1:8000/v1?api-version=1&api-key=abc")
    'http://proxy-user:**********@127.0.0.1:8000/v1?api-version=1&api-key=**********'
    >>> mask_url("https://sk-abc@gateway.example/v1")
    'https://**********@gateway.example/v1'
    >>> redact("invalid key abc", ["abc"])
    'invalid key **********'
"""

from __future__ import annotations

import base64
import logging
import threading
import traceback
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

from pydantic import SecretStr

if TYPE_CHECKING:
    from yarl import URL

__all__ = [
    "MASK",
    "BasicAuthHeader",
    "RedactingFilter",
    "header_secrets",
    "mask_url",
    "redact",
    "split_credentials",
    "url_secrets",
]

MASK: Final = "**********"
"""What a secret is shown as."""

_SECRET_NAME_PARTS = (
    "key",
    "token",
    "secret",
    "passw",
    "pwd",
    "sig",
    "auth",
    "credential",
    "code",
    "session",
)
"""A query parameter whose lower-cased name contains one of these holds a secret (see the module)."""

_UNPARSABLE = "(a URL that cannot be parsed)"
"""What :func:`mask_url` shows for text that is no URL: it could hide credentials anywhere."""


def _is_secret_name(name: str) -> bool:
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_NAME_PARTS)


def _parse(url: str | URL) -> URL:
    from yarl import URL  # yarl comes with aiohttp; imported here so that `import rxagent` stays light

    return url if isinstance(url, URL) else URL(url)


def mask_url(url: str | URL) -> str:
    """``url`` as it may be shown: its password, secret query values and fragment masked (see the module).

    Never raises: text that cannot be parsed as a URL is shown as ``(a URL that cannot be parsed)``, since
    where its credentials are cannot be told.
    """
    try:
        parsed = _parse(url)
        if parsed.password:
            parsed = parsed.with_password(MASK)
        elif parsed.user:
            parsed = parsed.with_user(None).with_user(MASK)  # and no empty password after it
        if any(_is_secret_name(name) for name in parsed.query):
            parsed = parsed.with_query(
                [(name, MASK if _is_secret_name(name) else value) for name, value in parsed.query.items()]
            )
        if parsed.fragment:
            parsed = parsed.with_fragment(MASK)
        return str(parsed)
    except (ValueError, TypeError):
        return _UNPARSABLE


def url_secrets(url: str | URL) -> tuple[str, ...]:
    """The secrets ``url`` carries, each as decoded and as written in the URL (a server may quote either).

    The password (or a lone user name), and the values of query parameters named like credentials.

    Raises:
        ValueError: ``url`` cannot be parsed.
    """
    parsed = _parse(url)
    found: list[str | None] = []
    if parsed.password:
        found += [parsed.password, parsed.raw_password]
    elif parsed.user:
        found += [parsed.user, parsed.raw_user]
    found += [value for name, value in parsed.query.items() if _is_secret_name(name)]
    # The values as written (percent-encoded) are what went over the wire: a server echoing the request
    # line quotes those. yarl keeps the query as written in raw_query_string.
    for pair in parsed.raw_query_string.split("&"):
        name, _, value = pair.partition("=")
        if _is_secret_name(name):
            found.append(value)
    return tuple(dict.fromkeys(secret for secret in found if secret))


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The secrets among HTTP ``headers``: the values of those named like credentials (as query parameters
    are: ``Authorization``, ``X-Api-Key``…), and of a ``<scheme> <credentials>`` value the credentials
    alone too, as a server would quote them (``t0k3n`` of ``Bearer t0k3n``).
    """
    found: list[str] = []
    for name, value in headers.items():
        if _is_secret_name(name):
            found += [value, value.strip().partition(" ")[2].strip()]
    return tuple(dict.fromkeys(secret for secret in found if secret))


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each (non-empty) secret replaced by :data:`MASK`.

    Longer secrets go first, so that a secret that contains a shorter one is masked whole.
    """
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text


class BasicAuthHeader(NamedTuple):
    """The header that carries a URL's credentials as HTTP Basic credentials, and its value.

    Attributes:
        name: ``Authorization``, or ``Proxy-Authorization`` when ``Authorization`` holds other credentials.
        value: ``Basic <token>``, held as a :class:`pydantic.SecretStr` so that no repr shows it.
    """

    name: Literal["Authorization", "Proxy-Authorization"]
    value: SecretStr

    @property
    def token(self) -> str:
        """The base64 token alone: a secret too (it decodes to the password), to mask where it is quoted."""
        return self.value.get_secret_value().removeprefix("Basic ")


def split_credentials(
    url: URL, *, taken: Iterable[str] = (), what: str = "the URL"
) -> tuple[URL, BasicAuthHeader | None]:
    """``url`` without its user name and password, and the header that carries them (see the module).

    Args:
        url: the URL as given, maybe with ``user:password@`` (or a lone ``user@``, sent with an empty
            password).
        taken: the names (any case) of the headers the requests already carry. ``Authorization`` among
            them sends the credentials in ``Proxy-Authorization``.
        what: how error messages name the URL (``"base_url"``).

    Returns:
        The URL to send requests to (its query and fragment kept), and the header; ``None`` for a URL
        without credentials.

    Raises:
        ValueError: the user name holds a ``:`` (Basic credentials cannot carry one); the credentials
            belong in ``Proxy-Authorization`` and ``taken`` holds that header too. The message shows the
            URL masked.

    Example:
        >>> from yarl import URL
        >>> url, header = split_credentials(URL("http://ana:pw@host/mcp?x=1"), taken=["Authorization"])
        >>> str(url), header.name, header.value.get_secret_value()
        ('http://host/mcp?x=1', 'Proxy-Authorization', 'Basic YW5hOnB3')
    """
    if url.user is None and url.password is None:
        return url, None
    user, password = url.user or "", url.password or ""
    shown = mask_url(url)
    if ":" in user:
        raise ValueError(
            f"the user name in {what} {shown!r} holds a ':', which Basic credentials cannot carry"
        )
    taken_names = {name.lower() for name in taken}
    name: Literal["Authorization", "Proxy-Authorization"] = "Authorization"
    if "authorization" in taken_names:
        name = "Proxy-Authorization"
        if "proxy-authorization" in taken_names:
            raise ValueError(
                f"{what} {shown!r} carries credentials, which go in the Proxy-Authorization header "
                "(Authorization holds the server's), but headers set Proxy-Authorization too: "
                "give the proxy's credentials one way"
            )
    token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
    return url.with_user(None), BasicAuthHeader(name, SecretStr(f"Basic {token}"))


class RedactingFilter(logging.Filter):
    """A logging filter that masks the secrets it holds in each record: its message, exception and stack.

    Attach it to the loggers of a library that logs what it was given (the URLs it requests, say);
    a filter on a logger sees only the records logged to that very logger, not those its children pass
    up, so it goes on each of them. It never drops a record. The message becomes the formatted message,
    masked; an exception whose text holds a secret is replaced by its traceback text, masked (in
    ``exc_text``, which formatters print when there is no ``exc_info``), so that no handler can format
    the original.

    Secrets are counted: each :meth:`hold` is undone by one :meth:`release` of the same secrets, so two
    owners of one secret do not release it for each other. Safe to use from several threads.

    Example:
        >>> mask = RedactingFilter()
        >>> mask.hold(["s3cret"])
        >>> record = logging.LogRecord("x", logging.INFO, "f.py", 1, "GET /?token=%s", ("s3cret",), None)
        >>> mask.filter(record), record.getMessage()
        (True, 'GET /?token=**********')
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()
        self._secrets: tuple[str, ...] = ()
        """What :meth:`filter` masks; replaced whole on every change, so a reader needs no lock."""

    def hold(self, secrets: Iterable[str]) -> None:
        """Mask ``secrets`` (empty strings are ignored) until they are released."""
        with self._lock:
            self._counts.update(secret for secret in secrets if secret)
            self._secrets = tuple(self._counts)

    def release(self, secrets: Iterable[str]) -> None:
        """Undo one :meth:`hold` of ``secrets``; a secret no longer held is no longer masked."""
        with self._lock:
            self._counts.subtract(secret for secret in secrets if secret)
            self._counts = +self._counts  # drops the secrets whose count fell to zero
            self._secrets = tuple(self._counts)

    @property
    def held(self) -> tuple[str, ...]:
        """The secrets masked now."""
        return self._secrets

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask the held secrets in ``record`` (in place); always True: the record is kept."""
        secrets = self._secrets
        if not secrets:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a bad format: logging would later print msg and args as they are
            message = f"{record.msg!s} % {record.args!r}"
        masked = redact(message, secrets)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info is not None and record.exc_info[1] is not None:
            text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
            if redact(text, secrets) != text:
                record.exc_info, record.exc_text = None, redact(text, secrets)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, secrets)
        return True
