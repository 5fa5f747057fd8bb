"""The Python of a Markdown page, run as notebook cells: what ``tests/test_readme.py`` does to the README
and ``tests/test_docs.py`` to the documentation site's pages.

A page's Python is notebook code (``await`` and ``async with`` at the top level). A block that talks to
a server (``http://127.0.0.1:8080/v1``) talks to the loopback OpenAI-compatible server instead, scripted
for that block (found by a phrase in it); it must close what it opens (no unclosed-session warning).
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import gc
import inspect
import io
import re
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.model.openai_server import OpenAIServer, Reply

SERVER_URL = "http://127.0.0.1:8080/v1"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```\n", re.DOTALL | re.MULTILINE)

__all__ = ["SERVER_URL", "Block", "blocks", "leaks_recorded", "run_cell"]


@dataclass(frozen=True)
class Block:
    """One fenced block of a Markdown page."""

    section: str
    language: str
    code: str
    start: int = 0
    """Where the block begins in the page's text (its opening fence)."""
    end: int = 0
    """Where it ends (after its closing fence)."""
    line: int = 1
    """The page's line number of the block's first line of code."""


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, with the ``## `` section it is in."""
    text = page.read_text(encoding="utf-8")
    found: list[Block] = []
    for match in _FENCE.finditer(text):
        headings = re.findall(r"^## .*$", text[: match.start()], re.MULTILINE)
        section = headings[-1] if headings else ""
        line = text.count("\n", 0, match.start()) + 2  # the line after the opening fence
        found.append(Block(section, match.group(1), match.group(2), match.start(), match.end(), line))
    return found


def script_for(code: str, scripts: Mapping[str, Sequence[Reply]]) -> Sequence[Reply]:
    phrases = [phrase for phrase in scripts if phrase in code]
    assert len(phrases) == 1, f"a block talks to {SERVER_URL} but has no script here:\n{code}"
    return scripts[phrases[0]]


@contextlib.contextmanager
def leaks_recorded() -> Iterator[list[str]]:
    """Records unclosed-resource warnings and loop errors (aiohttp reports an unclosed session both ways)
    until the block ends, and what a garbage collection then finds."""
    loop = asyncio.get_running_loop()
    found: list[str] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _, context: found.append(str(context.get("message"))))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield found
            gc.collect()
        finally:
            loop.set_exception_handler(previous)
    found.extend(str(w.message) for w in caught if issubclass(w.category, ResourceWarning))


async def run_cell(
    code: str,
    namespace: dict[str, Any],
    *,
    page: Path,
    server: OpenAIServer | None = None,
    scripts: Mapping[str, Sequence[Reply]] | None = None,
    line: int = 1,
) -> str:
    """Run ``code`` (a block of ``page`` starting at line ``line``) as a notebook cell (top-level
    ``await``) in ``namespace``; what it printed. A traceback names the page's own line numbers."""
    if SERVER_URL in code:
        assert server is not None, f"a block of {page} talks to a server, but none was given:\n{code}"
        assert scripts is not None, f"a block of {page} talks to a server, but no script was given:\n{code}"
        server.script(*script_for(code, scripts))
        code = code.replace(SERVER_URL, server.base_url)
    # dont_inherit: the block is compiled as a notebook compiles it, without this module's
    # `from __future__ import annotations` (a dataclass in a block must see real annotations).
    source = "\n" * (line - 1) + code
    compiled = compile(source, str(page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        outcome = eval(compiled, namespace)
        if inspect.iscoroutine(outcome):
            await outcome
    return printed.getvalue()
