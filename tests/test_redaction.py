"""``mask_url``, ``url_secrets``, ``redact``, ``split_credentials``, ``header_secrets`` and
``RedactingFilter``: what a URL shows, which of its parts are secrets, where its credentials travel, and
how log records lose the secrets.

Bad inputs tried: text that is no URL (a bad port, a broken IPv6 address, an empty string), a user name
without a password, an empty password, percent-encoded credentials and query values, a fragment; a user
name holding ``:``, credentials bound for ``Proxy-Authorization`` when that header is taken too; a log
record whose format does not match its arguments, one whose exception quotes a secret.
"""

from __future__ import annotations

import base64
import logging

import pytest
from yarl import URL

import rxagent.redaction
from rxagent.model.errors import ModelHTTPError
from rxagent.model.openai import OpenAIChatModel
from rxagent.redaction import (
    MASK,
    RedactingFilter,
    header_secrets,
    mask_url,
    redact,
    split_credentials,
    url_secrets,
)
from tests.examples import run_examples

M = MASK


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
        ("http://user:pw@host/v1", f"http://user:{M}@host/v1"),
        ("https://sk-token@host/v1", f"https://{M}@host/v1"),  # a lone user name is the secret
        ("https://sk-token:@host/v1", f"https://{M}@host/v1"),  # so is one with an empty password
        ("http://:pw@host/v1", f"http://:{M}@host/v1"),
        ("http://ana%40x.org:p%3Aw@host/v1", f"http://ana%40x.org:{M}@host/v1"),
        (
            "https://x.openai.azure.com/openai?api-version=2024-06-01&api-key=abc",
            f"https://x.openai.azure.com/openai?api-version=2024-06-01&api-key={M}",
        ),
        (
            "http://h/v1?access_token=a&Signature=b&sig=c&code=d&X-Amz-Credential=e&model=gpt",
            f"http://h/v1?access_token={M}&Signature={M}&sig={M}&code={M}&X-Amz-Credential={M}&model=gpt",
        ),
        ("http://h/v1#access_token=abc", f"http://h/v1#{M}"),
        ("http://h:99999/v1", "(a URL that cannot be parsed)"),
        ("http://user:pw@[::1/v1", "(a URL that cannot be parsed)"),
        ("", ""),
    ],
)
def test_mask_url_shows_everything_but_the_secrets(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert (
        mask_url(shown) == shown or shown == "(a URL that cannot be parsed)"
    )  # masking twice changes nothing


def test_url_secrets_lists_each_secret_decoded_and_as_written() -> None:
    url = "http://ana:p%3Aw@h/v1?api-version=1&api-key=a%2Bb&other=x"
    assert url_secrets(url) == ("p:w", "p%3Aw", "a+b", "a%2Bb")
    assert url_secrets("https://tok@h/") == ("tok",)
    assert url_secrets("http://h/v1?api-version=1") == ()
    with pytest.raises(ValueError, match="Port out of range"):
        url_secrets("http://h:99999/")


def test_redact_masks_every_secret_longest_first() -> None:
    assert redact("key abc and abcdef", ["abc", "abcdef"]) == f"key {M} and {M}"
    assert redact("nothing here", ["", "zz"]) == "nothing here"


def test_a_model_http_error_shows_the_url_it_is_given_masked() -> None:
    error = ModelHTTPError(401, "denied", url="http://u:hunter2@h/v1/chat/completions?api-key=zz")
    assert str(error) == f"HTTP 401 from http://u:{M}@h/v1/chat/completions?api-key={M}: denied"


def basic(credentials: str) -> str:
    return f"Basic {base64.b64encode(credentials.encode()).decode()}"


def test_split_credentials_moves_them_to_authorization_unless_it_is_taken() -> None:
    url = URL("http://ana%40x.org:p%3Aw@h:8/mcp?api-version=1&token=t#frag")

    bare, header = split_credentials(url)
    assert str(bare) == "http://h:8/mcp?api-version=1&token=t#frag"  # only the userinfo goes
    assert header is not None
    assert (header.name, header.value.get_secret_value()) == ("Authorization", basic("ana@x.org:p:w"))
    assert header.token == header.value.get_secret_value().removeprefix("Basic ")
    assert "p:w" not in repr(header)

    _, beside = split_credentials(url, taken=["X-Tenant", "authorization"])
    assert beside is not None
    assert beside.name == "Proxy-Authorization"  # the server's credentials keep Authorization

    _, lone = split_credentials(URL("https://sk-token@h/"))
    assert lone is not None
    assert lone.value.get_secret_value() == basic("sk-token:")

    plain = URL("http://h/mcp")
    assert split_credentials(plain, taken=["Authorization"]) == (plain, None)


@pytest.mark.parametrize(
    ("url", "taken", "message"),
    [
        ("http://a%3Ab:pw-LEAK@h/v1", (), "the user name in my url .* holds a ':'"),
        (
            "http://a:pw-LEAK@h/v1",
            ("authorization", "PROXY-AUTHORIZATION"),
            "headers set Proxy-Authorization too",
        ),
    ],
    ids=["colon_in_user", "proxy_header_taken"],
)
def test_split_credentials_refuses_what_basic_cannot_carry(
    url: str, taken: tuple[str, ...], message: str
) -> None:
    with pytest.raises(ValueError, match=message) as caught:
        split_credentials(URL(url), taken=taken, what="my url")
    assert "pw-LEAK" not in str(caught.value)
    assert MASK in str(caught.value)


def test_header_secrets_are_the_values_of_credential_headers_and_their_credentials() -> None:
    headers = {"Authorization": "Bearer t0k", "X-Api-Key": "k3y", "X-Tenant": "acme", "Accept": "a b"}
    assert header_secrets(headers) == ("Bearer t0k", "t0k", "k3y")
    assert header_secrets({}) == ()


def record(message: str, *args: object, error: BaseException | None = None) -> logging.LogRecord:
    exc_info = (type(error), error, error.__traceback__) if error is not None else None
    return logging.LogRecord("lib", logging.DEBUG, "lib.py", 1, message, args, exc_info)


def formatted(log: logging.LogRecord) -> str:
    return logging.Formatter("%(name)s %(message)s").format(log)


def test_redacting_filter_masks_messages_exceptions_and_stacks() -> None:
    mask = RedactingFilter()
    mask.hold(["s3cret", ""])
    try:
        raise RuntimeError("refused s3cret")
    except RuntimeError as error:
        failed = record("POST %s", "http://h/mcp?token=s3cret", error=error)

    assert mask.filter(failed) is True  # masked, never dropped
    assert failed.getMessage() == f"POST http://h/mcp?token={MASK}"
    assert failed.exc_info is None  # no handler can format the original
    assert failed.exc_text is not None
    assert failed.exc_text.endswith(f"RuntimeError: refused {MASK}")
    assert "s3cret" not in formatted(failed)

    try:
        raise RuntimeError("nothing to hide")
    except RuntimeError as error:
        clean = record("plain %d", 1, error=error)
    mask.filter(clean)
    assert (clean.getMessage(), clean.exc_info is not None) == ("plain 1", True)  # left as it was

    stacked = record("here")
    stacked.stack_info = 'File "s3cret.py", line 1'
    mask.filter(stacked)
    assert stacked.stack_info == f'File "{MASK}.py", line 1'

    mismatched = record("%s and %s", "s3cret")  # one argument short: logging would print both raw
    mask.filter(mismatched)
    assert "s3cret" not in mismatched.getMessage()


def test_redacting_filter_counts_holds_and_releases() -> None:
    mask = RedactingFilter()
    mask.hold(["a-secret", "b-secret"])
    mask.hold(["a-secret"])  # a second owner of the same secret
    mask.release(["a-secret", "b-secret"])
    assert mask.held == ("a-secret",)
    shown = record("a-secret b-secret")
    mask.filter(shown)
    assert shown.getMessage() == f"{MASK} b-secret"
    mask.release(["a-secret"])
    assert mask.held == ()
    untouched = record("a-secret")
    mask.filter(untouched)
    assert untouched.getMessage() == "a-secret"


def test_a_redacting_filter_on_a_logger_masks_before_every_handler(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("tests.redaction.library")
    mask = RedactingFilter()
    mask.hold(["hunter2"])
    logger.addFilter(mask)
    caplog.set_level(logging.DEBUG)
    try:
        logger.info("connecting to %s", "http://h/?key=hunter2")
        try:
            raise ValueError("hunter2")
        except ValueError:
            logger.debug("failed", exc_info=True)
    finally:
        logger.removeFilter(mask)
    assert "hunter2" not in caplog.text
    assert [r.getMessage() for r in caplog.records] == [f"connecting to http://h/?key={MASK}", "failed"]
    assert f"ValueError: {MASK}" in caplog.text
    assert not any(r.exc_info for r in caplog.records)


def test_the_examples_run() -> None:
    for documented in (rxagent.redaction, split_credentials, RedactingFilter, OpenAIChatModel):
        results = run_examples(documented)
        assert results.attempted > 0
        assert results.failed == 0
