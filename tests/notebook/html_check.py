"""Read back the HTML a display produced, the way a browser's parser would, to check what it can do.

``parse(html)`` returns every tag and attribute the parser saw and the text as a reader sees it
(entities decoded). A display is safe when the tags and attributes are only the few it means to write:
then no input, however hostile, opened a tag, left an attribute or added a handler.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser

# What the displays write, and nothing else: no <script>, no <a>, no <img>, no <style>, no handlers.
SAFE_TAGS = {"div", "span", "b", "code", "details", "summary", "table", "tr", "th", "td"}
SAFE_ATTRIBUTES = {"style", "open"}

# Hostile texts a model (or a tool, or a user) could write, and what a reader must see instead: markup
# shows as the characters typed; hidden and reordering characters show as \\uXXXX escapes.
HOSTILE: list[tuple[str, str]] = [
    ("<script>alert('x')</script>", "<script>alert('x')</script>"),
    ('"><img src=x onerror=alert(1)>', '"><img src=x onerror=alert(1)>'),
    ("' onmouseover='alert(1)' x='", "' onmouseover='alert(1)' x='"),
    ("javascript:alert(document.cookie)", "javascript:alert(document.cookie)"),
    ('<a href="javascript:alert(1)">click me</a>', '<a href="javascript:alert(1)">click me</a>'),
    (
        "</div></details></table><script>alert(2)</script>",
        "</div></details></table><script>alert(2)</script>",
    ),
    ("&lt;script&gt; already escaped", "&lt;script&gt; already escaped"),
    ("<style>body{display:none}</style>", "<style>body{display:none}</style>"),
    ("fullwidth ＜script＞ is only text", "fullwidth ＜script＞ is only text"),
    ("\u202egnp.exe", "\\u202egnp.exe"),  # right-to-left override: would show as "exe.png"
    (
        "zero\u200bwidth, tag\U000e0041\U000e0042 smuggling",
        "zero\\u200bwidth, tag\\U000e0041\\U000e0042 smuggling",
    ),
    (
        "\x1b[31mred\x1b[0m, NUL \x00, CR\roverwrite",
        "\\u001b[31mred\\u001b[0m, NUL \\u0000, CR\\u000doverwrite",
    ),
    ("lone surrogate \ud800 here", "lone surrogate \\ud800 here"),
]
HIDDEN = "\u202e\u200b\U000e0041\x1b\x00\r\ud800"
"""Characters of HOSTILE that must never reach a reader as they are."""


@dataclass
class Parsed:
    tags: list[str] = field(default_factory=lambda: [])
    attributes: list[tuple[str, str]] = field(default_factory=lambda: [])
    text: str = ""


class _Reader(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parsed = Parsed()
        self._pieces: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.parsed.tags.append(tag)
        self.parsed.attributes.extend((name, value or "") for name, value in attrs)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)

    def handle_data(self, data: str) -> None:
        self._pieces.append(data)

    def close(self) -> None:
        super().close()
        self.parsed.text = "".join(self._pieces)


def parse(html: str) -> Parsed:
    reader = _Reader()
    reader.feed(html)
    reader.close()
    return reader.parsed


def assert_safe(html: str) -> Parsed:
    """Assert that ``html`` holds only the displays' own tags and attributes; return what was parsed."""
    html.encode("utf-8")  # a lone surrogate would fail here, and in the kernel's reply
    parsed = parse(html)
    assert set(parsed.tags) <= SAFE_TAGS, set(parsed.tags) - SAFE_TAGS
    names = {name for name, _ in parsed.attributes}
    assert names <= SAFE_ATTRIBUTES, names - SAFE_ATTRIBUTES
    for _, value in parsed.attributes:
        assert "javascript:" not in value.lower()
        assert "url(" not in value.lower()
    return parsed
