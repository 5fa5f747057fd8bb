"""The dashboard on long answers, in headless Chromium: this page against the page issue 25 started from.

For each page and each answer length (``--deltas``, pieces of 4 characters of Markdown: paragraphs, lists,
code blocks, links; the answer ``tests/serve/test_dashboard_answers.py`` asserts on), a fresh server on
127.0.0.1 (in this process, a scripted model, the in-memory store); a first short run makes the session (the
page before could not follow a session that did not exist when it opened), a fresh browser page opens on
it, then the long run is submitted and, once it has ended on the server:

- ``after end``: how long after the run's end the whole answer was on the page (this process's clock: a
  clock read in the page would wait for the page's busy main thread, and hide the wait);
- ``long tasks``: the longest task of the page while it streamed, and how many took over 50 ms (the Long
  Tasks API);
- ``reload``: how long a reload of the finished session took to show the whole answer again (wall clock,
  from the reload to the answer complete).

The page before is ``rxagent/serve/dashboard.html`` at ``--before`` (default ``5d1ccc4``, the commit issue
25's work began from), read with git and served at ``/before`` beside this one, with its own
content-security policy. Its cost grows with the square of the answer's length (a layout per delta), so
it is measured up to ``--before-max`` deltas only. Runs alternate between the two pages, ``--repeats``
times; medians are printed.

Last line: ``dashboard_10k_after_end_ms: X`` (this page, 10 000 deltas; the issue's bound: 2000).

Run: ``.venv/bin/python bench/dashboard.py [--deltas 1000 3000 10000] [--repeats 3] [--before REV]
[--before-max 3000]``. Needs Chromium (``RXAGENT_CHROMIUM``, default ``/usr/bin/chromium``) and git.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the answer and the browser set-up the tests use

from aiohttp import web  # noqa: E402
from playwright.async_api import Browser, async_playwright  # noqa: E402

from rxagent import ScriptedModel, ScriptedResponse  # noqa: E402
from rxagent.agent import ReActAgent  # noqa: E402
from rxagent.serve import AgentServer, ServeSettings, create_app  # noqa: E402
from rxagent.serve.dashboard import content_policy  # noqa: E402
from tests.serve.browser import CHROMIUM, CHROMIUM_ARGS, LONG_TASKS  # noqa: E402
from tests.serve.test_dashboard_answers import long_answer  # noqa: E402

TIMEOUT_MS = 600_000

COMPLETE = {
    # This page: the answer's message came and its text (less white space) is whole.
    "now": """(length) => {
        const b = [...document.querySelectorAll('.bubble.assistant')].pop();
        return b !== undefined && b.dataset.done === 'yes' && b.querySelector('.text').textContent.length > 0;
    }""",
    # The page before: its answer bubble holds the whole text (one span per delta).
    "before": """(length) => {
        const b = [...document.querySelectorAll('.bubble.assistant .text')].pop();
        return b !== undefined && b.textContent.length >= length;
    }""",
}


@dataclass(frozen=True)
class Figures:
    """One measurement."""

    after_end_ms: float
    longest_task_ms: float
    long_tasks: int
    reload_s: float


def before_page(rev: str) -> str:
    """The dashboard page as it was at ``rev``."""
    return subprocess.run(
        ["git", "show", f"{rev}:rxagent/serve/dashboard.html"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout


async def measure(browser: Browser, page_name: str, before: str, deltas: int) -> Figures:
    text = long_answer(deltas)
    agent = ReActAgent(ScriptedModel(["Hello.", ScriptedResponse(text=text, chunk_size=4)]))
    app = create_app(agent, ServeSettings(port=0))
    body = before.encode()
    policy = content_policy(before)

    async def get_before(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/html", headers={"Content-Security-Policy": policy})

    app.router.add_get("/before", get_before)
    path = "/" if page_name == "now" else "/before"
    async with AgentServer(agent, ServeSettings(port=0), app=app) as server:
        context = await browser.new_context(viewport={"width": 1280, "height": 900})
        await context.add_init_script(LONG_TASKS)
        page = await context.new_page()
        try:
            session = server.hub.handle("long")
            await session.submit("hello")
            await page.goto(f"{server.url}{path}#/s/long")
            await page.wait_for_function(COMPLETE[page_name], arg=len("Hello."), timeout=TIMEOUT_MS)
            run = session.submit("a long answer, please")
            await run
            ended = time.monotonic()
            await page.wait_for_function(COMPLETE[page_name], arg=len(text), timeout=TIMEOUT_MS)
            after_end = (time.monotonic() - ended) * 1000
            tasks: list[float] = await page.evaluate("window.__longTasks")
            started = time.monotonic()
            await page.reload()
            await page.wait_for_function(COMPLETE[page_name], arg=len(text), timeout=TIMEOUT_MS)
            reload = time.monotonic() - started
        finally:
            await context.close()
    await agent.aclose()
    return Figures(after_end, max(tasks, default=0.0), len(tasks), reload)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--deltas", type=int, nargs="+", default=[1000, 3000, 10000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default="5d1ccc4", help="the git revision of the page before")
    parser.add_argument(
        "--before-max", type=int, default=3000, help="the longest answer the page before gets"
    )
    args = parser.parse_args()
    before = before_page(args.before)
    results: dict[tuple[str, int], list[Figures]] = {}
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            for deltas in args.deltas:
                pages = ["now", "before"] if deltas <= args.before_max else ["now"]
                for repeat in range(args.repeats):
                    for page_name in pages if repeat % 2 == 0 else reversed(pages):
                        figures = await measure(browser, page_name, before, deltas)
                        results.setdefault((page_name, deltas), []).append(figures)
                        print(f"  {page_name:6} {deltas:6} deltas: {figures}", flush=True)
        finally:
            await browser.close()
    heads = ("page", "deltas", "after end", "longest task", "long tasks", "reload")
    print("{:6} {:>6}  {:>10}  {:>12}  {:>10}  {:>8}".format(*heads))
    for (page_name, deltas), runs in results.items():
        after = statistics.median(f.after_end_ms for f in runs)
        longest = statistics.median(f.longest_task_ms for f in runs)
        count = statistics.median(f.long_tasks for f in runs)
        reload = statistics.median(f.reload_s for f in runs)
        print(f"{page_name:6} {deltas:6}  {after:8.0f}ms  {longest:10.0f}ms  {count:10.0f}  {reload:7.2f}s")
    if ("now", 10000) in results:
        after = statistics.median(f.after_end_ms for f in results[("now", 10000)])
        print(f"dashboard_10k_after_end_ms: {after:.0f}")


if __name__ == "__main__":
    asyncio.run(main())
