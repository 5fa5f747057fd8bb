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

Example:
    >>> mask_url("http://proxy-user:hunter2@127.0.0.1:8000/v1?api-version=1&api-key=abc")
    'http://proxy-user:**********@127.0.0.1:8000/v1?api-version=1&api-key=**********'
    >>> mask_url("https://sk-abc@gateway.example/v1")
    'https://**********@gateway.example/v1'
    >>> redact("invalid key abc", ["abc"])
    'invalid key **********'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from yarl import URL

__all__ = ["MASK", "mask_url", "redact", "url_secrets"]

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


def redact(text: str, secrets: Iterable[str]) -> str:
    """``text`` with every occurrence of each (non-empty) secret replaced by :data:`MASK`.

    Longer secrets go first, so that a secret that contains a shorter one is masked whole.
    """
    for secret in sorted(secrets, key=len, reverse=True):
        if secret and secret in text:
            text = text.replace(secret, MASK)
    return text
