"""``mask_url``, ``url_secrets`` and ``redact``: what a URL shows, and which of its parts are secrets.

Bad inputs tried: text that is no URL (a bad port, a broken IPv6 address, an empty string), a user name
without a password, an empty password, percent-encoded credentials and query values, a fragment.
"""

from __future__ import annotations

import pytest

import rxagent.redaction
from rxagent.model.errors import ModelHTTPError
from rxagent.model.openai import OpenAIChatModel
from rxagent.redaction import MASK, mask_url, redact, url_secrets
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


def test_the_examples_run() -> None:
    for documented in (rxagent.redaction, OpenAIChatModel):
        results = run_examples(documented)
        assert results.attempted > 0
        assert results.failed == 0
