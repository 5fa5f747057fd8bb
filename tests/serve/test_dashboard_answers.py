"""The dashboard's answers in a real browser: a long answer stays fast, Markdown renders, and what is not
Markdown's stays text.

The bounds asserted are the issue's, measured in the browser: a 10 000-delta answer is on the page within
2 s of the run's end with no task over 200 ms (the Long Tasks API), and a reload of that session renders
within 2 s. ``bench/dashboard.py`` measures the figures (and the page before this one).

Bad inputs tried: ``<script>`` and ``<img onerror>`` in an answer, in a heading, in a list and in code; a
``javascript:`` link, a ``data:`` link and a link with no scheme; terminal escapes (colours, an OSC title,
one split across two deltas) and right-to-left overrides; emphasis markers that open nothing.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from playwright.async_api import Browser

from rxagent import ScriptedModel, ScriptedResponse
from rxagent.agent import ReActAgent
from tests.serve.browser import ROOT, dashboard
from tests.serve.conftest import WAIT, serving

pytestmark = pytest.mark.asyncio(loop_scope="session")

DELTAS = 10_000


def long_answer(deltas: int, size: int = 4) -> str:
    """An answer of ``deltas`` pieces of ``size`` characters, as Markdown: paragraphs, lists with code and
    links, code blocks (holding tags)."""
    parts: list[str] = []
    length = 0
    block = 0
    while True:
        block += 1
        if block % 7 == 0:
            part = "```python\n" + "\n".join(f"print({i})  # <b>{i}</b>" for i in range(8)) + "\n```\n\n"
        elif block % 5 == 0:
            part = "".join(
                f"- item **{i}** with `code` and [a link](https://example.org/{i})\n" for i in range(6)
            )
            part += "\n"
        else:
            part = " ".join(f"word{block}_{i}" for i in range(60)) + "\n\n"
        if length + len(part) > deltas * size:
            break
        parts.append(part)
        length += len(part)
    parts.append("x" * (deltas * size - length))  # a last paragraph, to the exact length
    return "".join(parts)


DONE = """(want) => {
    const b = [...document.querySelectorAll('.bubble.assistant')].pop();
    return b !== undefined && b.dataset.done === 'yes'
        && b.querySelector('.text').textContent.replace(/\\s+/g, '') === want;
}"""
"""Whether the last answer is complete on the page: its message came, and its text (without white space,
which Markdown does not keep) is the one wanted."""


async def test_a_10000_delta_answer_is_on_the_page_within_2_s_of_the_run_s_end_and_a_reload_too(
    browser: Browser,
) -> None:
    text = long_answer(DELTAS)
    assert len(text) == DELTAS * 4
    model = ScriptedModel([ScriptedResponse(text=text, chunk_size=4)])
    async with serving(ReActAgent(model)) as live, dashboard(browser, live, long_tasks=True) as dash:
        await dash.open("long")  # a page open on the session before it exists: it shows the run started
        await dash.state_is("absent")
        status, answer = await live.post("/api/sessions/long/runs", {"input": "a long answer, please"})
        assert status == 202, answer
        await asyncio.wait_for(live.server.hub.handle("long").wait(), WAIT * 6)  # the run's end
        # Timed here: a clock read in the page would wait for its busy main thread, and hide the wait.
        ended = time.monotonic()
        await dash.page.wait_for_function(DONE, arg=_without_marks(text), timeout=WAIT * 1000)
        on_page = (time.monotonic() - ended) * 1000
        long_tasks: list[float] = await dash.page.evaluate("window.__longTasks")
        blocks = await dash.page.evaluate(
            "() => document.querySelectorAll('.bubble.assistant .md p, .bubble.assistant .md li').length"
        )
        assert on_page < 2000, f"the answer was complete on the page {on_page:.0f} ms after the run's end"
        frames = await dash.page.evaluate("window.__longFrames")
        assert max(long_tasks, default=0) < 200, f"long tasks (ms): {long_tasks}; long frames: {frames}"
        assert blocks > 100  # the Markdown was rendered (paragraphs and list items), not left as text
        facts = int(await dash.page.text_content("#fact-count") or 0)
        assert facts > DELTAS

        started = time.monotonic()
        await dash.page.reload()
        await dash.page.wait_for_function(DONE, arg=_without_marks(text), timeout=WAIT * 1000)
        reloaded = time.monotonic() - started
        assert reloaded < 2.0, f"a reload rendered the session in {reloaded:.2f} s"


def _without_marks(text: str) -> str:
    """``text`` as the page's text content has it once rendered (no white space): without the Markdown
    marks the long answer uses."""
    out: list[str] = []
    for line in text.split("\n"):
        if line.startswith("```"):
            continue
        if line.startswith("- "):
            line = line[2:]
        line = line.replace("**", "").replace("`", "")
        while "[a link](" in line:
            start = line.index("[a link](")
            end = line.index(")", start)
            line = line[:start] + "a link" + line[end + 1 :]
        out.append(line)
    return "".join("".join(out).split())


MARKDOWN = """# A heading with <script>window.__pwned=1</script>

Some **bold**, *italic*, ~~struck~~ and `inline <b>code</b>` text; 2 * 3 * 4 stays, snake_case_name too.

## Lists

- one
- two with [a safe link](https://example.org/page?x=1)
  - nested <img src=x onerror="window.__pwned=2">
1. first
2. second

> a quote

```html
<script>window.__pwned=3</script>
<img src=x onerror="window.__pwned=4">
```

| tool | result |
|------|-------:|
| lookup | 12 °C |

Links that are not links: [click](javascript:alert(document.cookie)),
[data](data:text/html,<script>x</script>), [relative](/api/sessions), <javascript:alert(1)>.

Escapes: \x1b[31mred\x1b[0m \x1b]0;title\x07done \u202eevil\u202c and a bare https://example.org/bare.
"""


async def test_markdown_renders_and_what_is_not_markdown_stays_text(browser: Browser, tmp_path: Path) -> None:
    # The escape that opens the colour comes in one delta and its end in the next.
    split = MARKDOWN.index("\x1b[31m") + 2
    pieces = [MARKDOWN[:split], MARKDOWN[split:]]
    model = ScriptedModel([ScriptedResponse(text="".join(pieces), chunk_size=split)])
    tall = {"width": 1200, "height": 1500}
    async with serving(ReActAgent(model)) as live, dashboard(browser, live, viewport=tall) as dash:
        await live.post("/api/sessions/md/runs", {"input": "show me Markdown"})
        await dash.open("md")
        await dash.until("() => document.querySelector('.bubble.assistant[data-done=\"yes\"]') !== null")
        md = dash.page.locator(".bubble.assistant .md")
        assert await md.locator("h1").text_content() == "A heading with <script>window.__pwned=1</script>"
        assert await md.locator("h2").text_content() == "Lists"
        assert await md.locator("strong").first.text_content() == "bold"
        assert await md.locator("em").first.text_content() == "italic"
        assert await md.locator("del").text_content() == "struck"
        assert "inline <b>code</b>" in await md.locator("p code").all_text_contents()
        paragraph = await md.locator("p").first.text_content() or ""
        assert "2 * 3 * 4 stays, snake_case_name too" in paragraph
        assert await md.locator(":scope > ul > li").count() == 2
        nested = await md.locator("ul ul > li").text_content()
        assert nested == 'nested <img src=x onerror="window.__pwned=2">'
        assert await md.locator(":scope > ol > li").all_text_contents() == ["first", "second"]
        assert await md.locator("blockquote").text_content() == "a quote"
        code = await md.locator('pre[data-lang="html"] code').text_content()
        assert code == '<script>window.__pwned=3</script>\n<img src=x onerror="window.__pwned=4">'
        assert await md.locator("table th").all_text_contents() == ["tool", "result"]
        assert await md.locator("table td").all_text_contents() == ["lookup", "12 °C"]
        links = await md.locator("a").evaluate_all(
            "(all) => all.map((a) => [a.getAttribute('href'), a.rel, a.target, a.textContent])"
        )
        assert links == [
            ["https://example.org/page?x=1", "noopener noreferrer", "_blank", "a safe link"],
            ["https://example.org/bare", "noopener noreferrer", "_blank", "https://example.org/bare"],
        ]
        text = await md.text_content() or ""
        for literal in (
            "[click](javascript:alert(document.cookie))",
            "[data](data:text/html,<script>x</script>)",
            "[relative](/api/sessions)",
            "<javascript:alert(1)>",
        ):
            assert literal in text, literal
        assert "Escapes: red title" not in text  # the OSC title is removed with its sequence
        assert "Escapes: red done \\u202eevil\\u202c and a bare" in text
        assert not any(c in text for c in "\x1b\x07\u202e\u202c")
        assert await dash.page.locator("img").count() == 0
        assert await dash.page.evaluate("() => window.__pwned") is None
        assert await dash.page.evaluate("() => document.scripts.length") == 1
        target = (
            ROOT / "docs" / "dashboard-markdown.png"
            if os.environ.get("RXAGENT_SCREENSHOT") == "1"
            else tmp_path / "markdown.png"
        )
        await dash.page.locator("#conversation").evaluate("(box) => { box.scrollTop = 0; }")
        await dash.page.locator("section.panel").first.screenshot(path=str(target))
        assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_a_long_conversation_folds_its_old_turns_away(browser: Browser) -> None:
    turns = 33
    model = ScriptedModel([f"Answer {n}." for n in range(turns)])
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        for n in range(turns):
            status, answer = await live.post("/api/sessions/chat/runs", {"input": f"Question {n}?"})
            assert status == 202, answer
        await asyncio.wait_for(live.server.hub.handle("chat").wait(), WAIT)
        await dash.open("chat")
        await dash.answer_is(f"Answer {turns - 1}.")
        assert await dash.page.text_content("#earlier") == "Show 3 earlier turns"
        folded = await dash.page.locator(".turn.collapsed").all_text_contents()
        assert [t.split("?")[0] for t in folded] == ["youQuestion 0", "youQuestion 1", "youQuestion 2"]
        assert await dash.page.locator(".turn:not(.collapsed)").count() == 30
        await dash.page.click("#earlier")
        assert await dash.page.locator(".turn.collapsed").count() == 0
        assert await dash.page.locator("#earlier").count() == 0
        assert await dash.page.locator(".turn").count() == turns
