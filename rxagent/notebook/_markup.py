"""Escaping and the few markup pieces every notebook display shares.

Everything a model, a tool or a user wrote passes through :func:`visible` (for text) or :func:`esc` (for
HTML and SVG, text and attribute values alike) before it is shown. ``visible`` makes invisible and
layout-changing characters visible as ``\\uXXXX``: terminal escape sequences, bidirectional overrides that
reorder what a reader sees (the "Trojan Source" trick), zero-width and tag characters that smuggle text
past a reader, and lone surrogates, which cannot be encoded as UTF-8 and would fail the kernel's reply.
``esc`` then escapes ``& < > " '`` so that nothing can open a tag or leave an attribute; the result is
also valid XML, so an SVG holding it still parses.

Displays never turn model text into links or markup: text is shown as text (``white-space: pre-wrap``),
so a ``javascript:`` URL in a model's answer stays a string.
"""

from __future__ import annotations

import html
import re

__all__ = ["CLIP", "clip", "esc", "visible"]

# C0 controls except tab and newline (a lone CR could overwrite a terminal line), DEL and C1 controls,
# zero-width space, bidi embeddings/overrides/isolates, invisible operators, BOM, lone surrogates, and the
# Unicode tag block (invisible copies of ASCII, used to hide instructions in text).
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\ud800-\udfff\U000e0000-\U000e007f]"
)

CLIP = 20_000
"""Characters of one text shown before the rest is left out (a tool may return megabytes)."""


def visible(text: str) -> str:
    """``text`` with hidden and layout-changing characters written as ``\\uXXXX`` (CR LF becomes LF)."""
    return _HIDDEN.sub(_code, text.replace("\r\n", "\n"))


def _code(match: re.Match[str]) -> str:
    point = ord(match.group())
    return f"\\u{point:04x}" if point <= 0xFFFF else f"\\U{point:08x}"


def esc(text: object) -> str:
    """``str(text)`` made visible and escaped for HTML and XML text and attribute values."""
    return html.escape(visible(str(text)), quote=True)


def clip(text: str, limit: int = CLIP) -> tuple[str, int]:
    """The first ``limit`` characters of ``text`` and how many were left out."""
    if len(text) <= limit:
        return text, 0
    return text[:limit], len(text) - limit
