"""The dashboard in a real browser, for the tests that drive it: Debian's Chromium under Playwright (the
``browser`` fixture is in ``tests/serve/conftest.py``: one browser for the whole run), a page on a server
(:func:`dashboard`, a fresh context so fresh cookies each time) and what the tests read off the page
(:class:`Dashboard`).

Every wait has a timeout (``WAIT``); nothing sleeps. Every page also checks, when it closes, that it raised
no error and that its Content Security Policy blocked nothing (a blocked script or style would mean the
page built markup from text).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, ConsoleMessage, Page, Request, Response

from tests.serve.conftest import WAIT, Live

CHROMIUM = Path(os.environ.get("RXAGENT_CHROMIUM", "/usr/bin/chromium"))
"""Debian's Chromium (scripts/_venv.sh installs it); Playwright's own browser download is never used."""
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
MS = WAIT * 1000
ROOT = Path(__file__).resolve().parents[2]

LONG_TASKS = """
window.__longTasks = [];
window.__longFrames = [];
new PerformanceObserver((list) => {
  for (const entry of list.getEntries()) window.__longTasks.push(Math.round(entry.duration));
}).observe({ type: "longtask", buffered: true });
new PerformanceObserver((list) => {
  for (const f of list.getEntries()) {
    window.__longFrames.push({ at: Math.round(f.startTime), duration: Math.round(f.duration),
      scripts: f.scripts.map((s) => `${s.invoker} @${s.sourceCharPosition}: ${Math.round(s.duration)} ms`) });
  }
}).observe({ type: "long-animation-frame", buffered: true });
"""
"""A page script (added before the page's own) that keeps the duration of every long task (the Long Tasks
API reports each task over 50 ms) and, to say what took the time, each long animation frame with the
scripts that ran in it."""


@dataclass
class Dashboard:
    """A browser page on the server's dashboard, with what it did: requests sent, responses, errors."""

    page: Page
    base: str
    errors: list[str] = field(default_factory=lambda: [])
    requests: list[Request] = field(default_factory=lambda: [])
    responses: list[Response] = field(default_factory=lambda: [])

    async def open(self, session: str | None = None) -> Response | None:
        return await self.page.goto(self.base + "/" + (f"#/s/{session}" if session else ""))

    async def until(self, function: str, arg: Any = None) -> Any:
        """Wait (at most ``WAIT``) until the JavaScript ``function`` returns a truthy value; that value."""
        handle = await self.page.wait_for_function(function, arg=arg, timeout=MS)
        return await handle.json_value()

    async def answer(self) -> str:
        """The text of the last answer bubble."""
        return await self.page.evaluate(
            "() => { const b = [...document.querySelectorAll('.bubble.assistant .text')];"
            " return b.length ? b[b.length - 1].textContent : null; }"
        )

    async def answer_is(self, text: str) -> None:
        await self.until(
            "(want) => { const b = [...document.querySelectorAll('.bubble.assistant .text')];"
            " return b.length > 0 && b[b.length - 1].textContent === want; }",
            text,
        )

    async def state_is(self, state: str) -> None:
        await self.until("(want) => document.getElementById('status').dataset.state === want", state)

    async def seqs(self) -> list[int]:
        """The sequence number of every fact the page rendered, from its list of the log's facts (opened
        here: it is drawn only while open), once it lists as many as it counts."""
        await self.page.evaluate("() => { document.getElementById('facts-box').open = true; }")
        await self.until(
            "() => document.querySelectorAll('#facts li[data-seq]').length"
            " === Number(document.getElementById('fact-count').textContent)"
        )
        found: list[int] = await self.page.evaluate(
            "() => [...document.querySelectorAll('#facts li[data-seq]')].map((n) => Number(n.dataset.seq))"
        )
        return found

    async def timeline(self) -> list[tuple[str, str]]:
        """``(kind, name)`` of every model and tool call in the trace, in the trace's order."""
        entries: list[list[str]] = await self.page.evaluate(
            "() => [...document.querySelectorAll('#trace .row')]"
            ".filter((r) => r.dataset.kind === 'model' || r.dataset.kind === 'tool')"
            ".map((r) => [r.dataset.kind, r.dataset.name])"
        )
        return [(kind, name) for kind, name in entries]

    async def rows(self, kind: str | None = None) -> list[dict[str, Any]]:
        """Every row of the trace (of ``kind``): its kind, name, status, label, and depth in the tree."""
        return await self.page.evaluate(
            """(kind) => [...document.querySelectorAll('#trace .row')]
                .filter((r) => kind === null || r.dataset.kind === kind)
                .map((r) => {
                    let depth = 0;
                    for (let n = r.parentElement; n && n.id !== 'trace'; n = n.parentElement)
                        if (n.classList.contains('span')) depth++;
                    return { kind: r.dataset.kind, name: r.dataset.name, status: r.dataset.status,
                             key: r.dataset.key, label: r.querySelector('.name').textContent,
                             depth: depth - 1 };
                })""",
            kind,
        )

    async def select(self, kind: str, name: str, index: int = -1) -> str:
        """Pick a row of the trace (the last of ``kind`` named ``name``, or the ``index``-th) as a click
        would; its key, once the detail below the trace shows it."""
        key: str = await self.page.evaluate(
            """([kind, name, index]) => {
                const all = [...document.querySelectorAll('#trace .row')]
                    .filter((r) => r.dataset.kind === kind && r.dataset.name === name);
                const row = all[index < 0 ? all.length + index : index];
                row.click();
                return row.dataset.key;
            }""",
            [kind, name, index],
        )
        await self.until("(key) => document.getElementById('detail').dataset.key === key", key)
        return key

    async def call_detail(self, name: str) -> dict[str, Any]:
        """The last tool call of the trace named ``name``: its summary, arguments, progress and result."""
        await self.select("tool", name)
        return await self.page.evaluate(
            """() => {
                const d = document.getElementById('detail');
                return { summary: d.querySelector('h4.summary').textContent,
                         args: d.querySelector('pre.args').textContent,
                         progress: [...d.querySelectorAll('ul.progress li')].map((li) => li.textContent),
                         result: d.querySelector('pre.result').textContent };
            }"""
        )

    async def call_result_is(self, name: str, result: str) -> None:
        """Wait until the last tool call named ``name`` shows ``result`` (picked again until it does)."""
        await self.until(
            """([name, want]) => {
                const all = [...document.querySelectorAll('#trace .row')]
                    .filter((r) => r.dataset.kind === 'tool' && r.dataset.name === name);
                if (!all.length) return false;
                all[all.length - 1].click();
                const pre = document.querySelector('#detail pre.result');
                return pre !== null && pre.textContent === want;
            }""",
            [name, result],
        )

    def posts(self, path_end: str) -> list[Request]:
        return [r for r in self.requests if r.method == "POST" and r.url.endswith(path_end)]


@asynccontextmanager
async def dashboard(
    browser: Browser, live: Live, *, viewport: dict[str, int] | None = None, long_tasks: bool = False
) -> AsyncIterator[Dashboard]:
    """A fresh browser context and page on ``live``'s server (``long_tasks``: keeping the page's long tasks
    in ``window.__longTasks``); closed after, checking the page raised no error and its Content Security
    Policy blocked nothing."""
    context = await browser.new_context(viewport=viewport or {"width": 1280, "height": 900})
    if long_tasks:
        await context.add_init_script(LONG_TASKS)
    page = await context.new_page()
    dash = Dashboard(page, live.url)

    def console(message: ConsoleMessage) -> None:
        if "Content Security Policy" in message.text or "Refused to" in message.text:
            dash.errors.append(message.text)

    page.on("pageerror", lambda error: dash.errors.append(str(error)))
    page.on("console", console)
    page.on("request", lambda request: dash.requests.append(request))
    page.on("response", lambda response: dash.responses.append(response))
    try:
        yield dash
        assert dash.errors == []
    finally:
        await context.close()
