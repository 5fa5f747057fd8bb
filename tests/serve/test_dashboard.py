"""The dashboard at ``/``, driven in a real browser: headless Chromium (Debian's, installed by the test
set-up) under Playwright, against a real server on 127.0.0.1 and scripted models the test paces.

One browser serves the whole run (a new context, so new cookies, per test: see ``tests/serve/browser.py``).
Every wait has a timeout (``WAIT``); nothing sleeps. Every test also checks that the page raised no error
and that its Content Security Policy blocked nothing (a blocked script or style would mean the page built
markup from text).

Bad inputs tried: edited arguments that are not JSON, JSON that is not an object, arguments the tool's
schema refuses (the server's 409 is shown, nothing runs), a double click on approve (one answer is sent,
the call runs once), an unknown session in the address, the page without the token, with a wrong token;
and untrusted text (``<script>``, ``<img onerror>``) in the model's answer, its thinking, a tool's name,
arguments, progress and result, and the user's input.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.chunks import ChatChunk
from rxagent.model.types import ChatRequest, ModelCapabilities
from rxagent.serve.dashboard import page as dashboard_page
from rxagent.tools import Permissions, ToolContext, Toolkit, tool
from tests.model.openai_server import (
    DONE,
    Frame,
    Hold,
    OpenAIServer,
    Reply,
    finish_chunk,
    make_model,
    text_chunk,
    usage_chunk,
)
from tests.serve.browser import MS, ROOT, Dashboard, dashboard
from tests.serve.conftest import WAIT, Live, ValveModel, fact_events, is_result_of, serving

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "tok-5e1d-DASHBOARD-NEVER-SHOWN"
PAYLOAD = '<img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>'
__all__ = ["PAYLOAD", "Dashboard", "dashboard"]


# ---- agents and tools --------------------------------------------------------------------------------------

refunds: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    refunds.append(order)
    return f"refunded {order}"


@tool
async def lookup(city: str, ctx: ToolContext) -> str:
    """The temperature in a city."""
    ctx.progress("station 1/2", fraction=0.5)
    ctx.progress("station 2/2", fraction=1.0)
    return f"12 °C in {city}"


@tool
def convert(celsius: float) -> str:
    """Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32:.1f} °F"


@tool
def echo(text: str, ctx: ToolContext) -> str:
    """Say it back."""
    ctx.progress(text)
    return "echo: " + text


@pytest.fixture(autouse=True)
def no_refunds() -> Iterator[None]:
    refunds.clear()
    yield
    refunds.clear()


def refund_agent(*script: Any) -> ReActAgent:
    return ReActAgent(ScriptedModel(list(script)), Toolkit([refund]), permissions=Permissions().ask("refund"))


def asks_refund(order: str = "A-1") -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": order}, id="r1")])


class WithoutUsage:
    """A scripted model whose ``calls``-th model calls (0-based) report no usage, as some servers do."""

    def __init__(self, inner: ScriptedModel, calls: set[int]) -> None:
        self.inner = inner
        self.calls = calls
        self.made = 0

    @property
    def model_name(self) -> str:
        return self.inner.model_name

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.inner.capabilities

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        call, self.made = self.made, self.made + 1
        if call not in self.calls:
            return self.inner.stream(request)
        return self.inner.stream(request).pipe(ops.filter(lambda chunk: chunk.usage is None))


def weather_agent() -> ReActAgent:
    """Three model calls (the second reports no usage) around two tool calls, one with progress."""
    script = ScriptedModel(
        [
            ScriptedResponse(
                text="Looking.", tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"}, id="l1")]
            ),
            ScriptedResponse(tool_calls=[ScriptedToolCall("convert", {"celsius": 12}, id="c1")]),
            ScriptedResponse(text="It is 53.6 °F in Oslo."),
        ]
    )
    return ReActAgent(WithoutUsage(script, {1}), Toolkit([lookup, convert]))


async def run_to_end(
    live: Live, session: str, body: dict[str, Any], path: str = "runs"
) -> list[dict[str, Any]]:
    """Submit (``runs`` or ``respond``) and read the feed up to that run's result; the facts' data."""
    status, answer = await live.post(f"/api/sessions/{session}/{path}", body)
    assert status == 202, answer
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        return fact_events(await feed.until(is_result_of(answer["run_id"])))


async def head(live: Live, session: str) -> int:
    status, answer = await live.get(f"/api/sessions/{session}")
    assert status == 200, answer
    return int(answer["head"])


def session_feeds(live: Live) -> list[Any]:
    """The sessions' feeds the server streams now (not the sessions list's)."""
    return [s for s in live.server.hub.streams if s.request.path.startswith("/api/sessions/")]


async def streams_closed(live: Live) -> None:
    """Wait until every session feed the server streams now has ended."""
    await asyncio.wait_for(asyncio.gather(*(s.closed.wait() for s in session_feeds(live))), WAIT)


# ---- streaming ---------------------------------------------------------------------------------------------


async def test_tokens_appear_on_the_page_as_the_model_streams_them(browser: Browser) -> None:
    text = "Streaming, one piece at a time."
    model = ValveModel(ScriptedResponse(text=text, chunk_size=6))
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await dash.open()
        await dash.page.fill("#new-sid", "s1")
        await dash.page.fill("#new-input", "stream please")
        await dash.page.click("#new-send")
        await dash.until("() => location.hash === '#/s/s1'")
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        shown = ""
        for sent, start in enumerate(range(0, len(text), 6), start=1):
            model.release(1)  # one more chunk leaves the model; the next stays until the page showed this one
            await model.until_sent(sent)
            shown += text[start : start + 6]
            await dash.answer_is(shown)
            assert model.chunks_sent == sent
        assert shown == text
        model.open()
        await dash.state_is("idle")
        assert await dash.answer() == text
        (bubble,) = await dash.page.locator(".bubble.user").all_text_contents()
        assert "stream please" in bubble
        await dash.until("() => document.querySelector('#sessions li[data-session=\"s1\"]') !== null")


async def test_deltas_from_a_model_server_on_loopback_reach_the_page_before_the_run_ends(
    browser: Browser,
) -> None:
    """The whole path: an OpenAI-compatible server on 127.0.0.1 (holding each delta until the test lets it
    go), the model client, the agent, the session feed, the browser."""
    pieces = ["The answer ", "arrives ", "in pieces, ", "as the ", "server sends them."]
    gates = [asyncio.Event() for _ in pieces]
    frames: list[Frame] = []
    for gate, piece in zip(gates, pieces, strict=True):
        frames += [Hold(gate), text_chunk(piece)]
    async with OpenAIServer() as server, make_model(server) as model:
        server.script(Reply.sse(*frames, finish_chunk(), usage_chunk(11, 5), DONE))
        async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
            await live.post("/api/sessions/s/runs", {"input": "go"})
            await dash.open("s")
            await dash.state_is("running")
            for shown, gate in enumerate(gates[:-1], start=1):
                gate.set()
                await dash.answer_is("".join(pieces[:shown]))  # a partial answer, on the page
                assert (await live.get("/api/sessions/s"))[1]["status"]["state"] == "running"
            gates[-1].set()
            await dash.state_is("idle")
            assert await dash.answer() == "".join(pieces)
            await dash.until("() => document.querySelectorAll('#tokens g.bar').length === 1")
            assert len(server.requests) == 1


async def test_a_reload_mid_run_shows_every_fact_once_and_the_exact_answer(browser: Browser) -> None:
    letters = "abcdefghijklmnopqrstuvwxyz" * 2
    model = ValveModel(ScriptedResponse(text=letters, chunk_size=1))
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/s/runs", {"input": "letters"})
        await dash.open("s")
        model.release(10)
        await model.until_sent(10)
        await dash.answer_is(letters[:10])
        await dash.page.reload()  # mid-run: the page is rebuilt from the log, then follows live
        await dash.answer_is(letters[:10])
        assert await dash.seqs() == list(range(1, await head(live, "s") + 1))
        model.release(7)
        await model.until_sent(17)
        await dash.answer_is(letters[:17])
        model.open()
        await dash.state_is("idle")
        await dash.until(
            "(n) => document.getElementById('fact-count').textContent === String(n)", await head(live, "s")
        )
        seqs = await dash.seqs()
        assert seqs == list(range(1, await head(live, "s") + 1))  # contiguous: no gap, no duplicate
        assert await dash.answer() == letters
        # One text node took the deltas: no element per piece.
        assert await dash.page.locator(".bubble.assistant .text span").count() == 0


async def test_a_dropped_stream_resumes_after_the_last_event_with_no_gap(browser: Browser) -> None:
    letters = "abcdefghijklmnopqrstuvwxyz"
    model = ValveModel(ScriptedResponse(text=letters, chunk_size=1))
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/s/runs", {"input": "letters"})
        await dash.open("s")
        model.release(5)
        await model.until_sent(5)
        await dash.answer_is(letters[:5])
        rendered = (await dash.seqs())[-1]
        (stream,) = session_feeds(live)
        stream.end()  # the server ends the stream (a proxy's timeout, a restart): the browser reconnects
        await dash.until("() => document.getElementById('conn').dataset.conn !== 'live'")
        await dash.until("() => document.getElementById('conn').dataset.conn === 'live'")
        model.open()
        await dash.state_is("idle")
        assert await dash.answer() == letters
        assert await dash.seqs() == list(range(1, await head(live, "s") + 1))
        feeds = [r for r in dash.requests if "/api/sessions/s/feed" in r.url]
        assert len(feeds) == 2
        assert (await feeds[1].all_headers()).get("last-event-id") == str(rendered)


async def test_closing_the_page_releases_its_stream_and_the_run_goes_on(browser: Browser) -> None:
    model = ValveModel(ScriptedResponse(text="still going", chunk_size=1))
    async with serving(ReActAgent(model)) as live:
        await live.post("/api/sessions/s/runs", {"input": "go"})
        async with dashboard(browser, live) as dash:
            await dash.open("s")
            model.release(3)
            await dash.answer_is("sti")
            assert len(session_feeds(live)) == 1
        await streams_closed(live)  # the context closed with the page: its EventSource went away
        assert not session_feeds(live)
        assert (await live.server.hub.handle("s").open_feed()).watchers == 0
        model.open()
        await asyncio.wait_for(live.server.hub.handle("s").wait(), WAIT)
        state = await live.agent.sessions.state(live.server.hub.handle("s").ctx)
        assert state.messages[-1].text == "still going"


# ---- approvals ---------------------------------------------------------------------------------------------


async def test_approve_runs_the_call_once_and_the_page_shows_its_result(browser: Browser) -> None:
    async with serving(refund_agent(asks_refund(), "Refunded.")) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s", {"input": "refund A-1"})
        await dash.open("s")
        await dash.state_is("waiting_for_approval")
        approve = dash.page.locator('.approval[data-call="r1"] button.approve')
        await approve.dblclick(timeout=MS)  # the second click meets a disabled button
        await dash.state_is("idle")
        await dash.answer_is("Refunded.")
        await dash.until("() => document.querySelectorAll('.approval').length === 0")
        await dash.call_result_is("refund", "refunded A-1")
        detail = await dash.call_detail("refund")
        assert detail["result"] == "refunded A-1"
        assert "approved" in detail["summary"]
        assert json.loads(detail["args"]) == {"order": "A-1"}
        assert refunds == ["A-1"]
        assert len(dash.posts("/respond")) == 1


async def test_deny_never_runs_the_call(browser: Browser) -> None:
    async with (
        serving(refund_agent(asks_refund(), "Not refunded.")) as live,
        dashboard(browser, live) as dash,
    ):
        await run_to_end(live, "s", {"input": "refund A-1"})
        await dash.open("s")
        await dash.page.locator('.approval[data-call="r1"] button.deny').click(timeout=MS)
        await dash.answer_is("Not refunded.")
        await dash.state_is("idle")
        await dash.until(
            "() => [...document.querySelectorAll('#trace .row[data-name=\"refund\"]')]"
            ".some((r) => r.textContent.includes('denied') && r.dataset.status === 'denied')"
        )
        detail = await dash.call_detail("refund")
        assert "The user denied this call" in detail["result"]
        assert "denied" in detail["summary"]
        # The denial is told by its tool_result event (of the answer's run) and by the tool message: the
        # call is shown once, where it was asked.
        assert await dash.page.locator('#trace .row[data-name="refund"]').count() == 1
        assert refunds == []


async def test_approve_with_edited_arguments_runs_the_call_with_them(browser: Browser) -> None:
    async with (
        serving(refund_agent(asks_refund(), "Refunded B-7.")) as live,
        dashboard(browser, live) as dash,
    ):
        await run_to_end(live, "s", {"input": "refund A-1"})
        await dash.open("s")
        card = dash.page.locator('.approval[data-call="r1"]')
        edit = card.locator("textarea.edit")
        await dash.state_is("waiting_for_approval")
        assert json.loads(await edit.input_value()) == {"order": "A-1"}  # prefilled with the call's arguments
        for bad, said in (("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")):
            await edit.fill(bad)
            await card.locator("button.approve-edited").click()
            await dash.until(
                "(said) => document.querySelector('.approval .error').textContent.includes(said)", said
            )
        assert dash.posts("/respond") == []  # refused in the page: nothing was sent
        await edit.fill('{"order": 5}')
        await card.locator("button.approve-edited").click()
        await dash.until(
            "() => { const said = document.querySelector('.approval .error').textContent;"
            " return said.startsWith('409: ') && said.includes('the edited arguments were refused'); }"
        )
        assert refunds == []
        assert (await live.get("/api/sessions/s"))[1]["status"]["state"] == "waiting_for_approval"
        await edit.fill('{"order": "B-7"}')
        await card.locator("button.approve-edited").click()
        await dash.answer_is("Refunded B-7.")
        # one read in the page: the card may go away between a count and a read of its text
        shown = await dash.page.evaluate(
            """() => document.querySelector('.approval[data-call="r1"] .error')?.textContent ?? ''"""
        )
        assert shown == ""
        assert refunds == ["B-7"]
        await dash.call_result_is("refund", "refunded B-7")
        detail = await dash.call_detail("refund")
        assert detail["result"] == "refunded B-7"
        assert "approved with edited arguments" in detail["summary"]
        assert json.loads(detail["args"]) == {"order": "B-7"}
        # The conversation shows the arguments the call ran with, not the model's.
        await dash.until(
            "() => { const c = document.querySelector('.chip[data-call=\"r1\"]');"
            " return c && c.dataset.edited === 'yes' && c.textContent.includes('B-7'); }"
        )
        await dash.select("tool", "refund", 0)  # the call where it was asked: its arguments too
        asked = await dash.page.locator("#detail pre.args").text_content()
        assert json.loads(asked or "") == {"order": "B-7"}


# ---- timeline and chart ------------------------------------------------------------------------------------


async def test_the_timeline_and_the_token_chart_show_every_call(browser: Browser) -> None:
    async with serving(weather_agent()) as live, dashboard(browser, live) as dash:
        facts = await run_to_end(live, "w", {"input": "weather in Oslo, in Fahrenheit"})
        finished = [
            f["data"] for f in facts if f["kind"] == "event" and f["data"]["type"] == "model_call_finished"
        ]
        # the agent writes zeros for a call whose model reported no usage: no bar for it
        with_usage = [u for f in finished if (u := f["usage"])["input_tokens"] + u["output_tokens"] > 0]
        assert (len(finished), len(with_usage)) == (3, 2)
        await dash.open("w")
        await dash.answer_is("It is 53.6 °F in Oslo.")
        await dash.until("() => document.querySelectorAll('#tokens g.bar').length === 2")
        bars = await dash.page.evaluate(
            "() => [...document.querySelectorAll('#tokens g.bar')]"
            ".map((g) => [Number(g.dataset.input), Number(g.dataset.output)])"
        )
        assert bars == [[u["input_tokens"], u["output_tokens"]] for u in with_usage]
        assert await dash.page.locator("#tokens g.bar rect").count() == 4  # input and output of each
        await dash.until(
            "() => document.querySelectorAll('#trace .row[data-kind=model], #trace .row[data-kind=tool]')"
            ".length === 5"
        )
        assert await dash.timeline() == [
            ("model", "scripted"),
            ("tool", "lookup"),
            ("model", "scripted"),
            ("tool", "convert"),
            ("model", "scripted"),
        ]
        await dash.until(
            "() => document.querySelectorAll('#trace .row[data-name=\"lookup\"] .tick').length === 2"
        )
        lookup_call = await dash.call_detail("lookup")
        assert json.loads(lookup_call["args"]) == {"city": "Oslo"}
        assert lookup_call["progress"] == ["station 1/2 (50 %)", "station 2/2 (100 %)"]
        assert lookup_call["result"] == "12 °C in Oslo"
        assert (await dash.call_detail("convert"))["result"] == "53.6 °F"
        await dash.page.locator('#trace .row[data-name="convert"]').click()
        await dash.until("() => document.querySelector('#detail h4.summary').textContent === 'tool convert'")
        # Each model call is in the step that made it, and the run's three steps of reasoning are there.
        steps = [r["label"] for r in await dash.rows("step")]
        assert steps == [
            *("Start", "Reason", "Act: lookup", "Reason", "Act: convert", "Reason", "Finish: MODEL_STOP")
        ]
        models = await dash.rows("model")
        assert [m["depth"] for m in models] == [2, 2, 2]  # run > step > model call
        assert all(m["status"] == "ok" for m in models)


# ---- interrupt, steer, new messages ------------------------------------------------------------------------


async def test_the_interrupt_button_ends_the_running_run(browser: Browser) -> None:
    model = ValveModel(ScriptedResponse(text="a slow answer", chunk_size=1))
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/s/runs", {"input": "go"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        await dash.open("s")
        await dash.state_is("running")
        await dash.page.click("#interrupt", timeout=MS)
        await dash.until("() => document.getElementById('action-note').textContent === 'interrupted'")
        await dash.state_is("idle")
        await dash.until(
            "() => document.querySelector('#trace .row[data-kind=run]').dataset.status === 'interrupted'"
        )
        # The model call the interrupt cut short is not left running.
        await dash.until(
            "() => document.querySelector('#trace .row[data-kind=model]').dataset.status === 'interrupted'"
        )
        turns = (await live.get("/api/sessions/s/turns"))[1]["turns"]
        assert turns[-1]["runs"][-1]["reason"] == "INTERRUPTED"


async def test_a_run_waiting_for_another_servers_lease_says_so(browser: Browser) -> None:
    agent = ReActAgent(ScriptedModel([ScriptedResponse(text="Mine now.")]))
    # Another server (another keeper on the same store) runs the session: it holds the lease.
    elsewhere = await agent.store.acquire((None, "s"), "another-server", 60.0)
    assert elsewhere is not None
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/s/runs", {"input": "go"})
        await dash.open("s")
        await dash.state_is("queued")
        await dash.until(
            "(want) => document.getElementById('status').textContent.endsWith(want)",
            "waiting for another server's run to end",
        )
        await agent.store.release(elsewhere)
        await dash.answer_is("Mine now.")
        await dash.state_is("idle")
        assert "another server" not in await dash.page.text_content("#status", timeout=MS)


async def test_the_steer_box_reaches_the_next_model_request(browser: Browser) -> None:
    @tool
    def sign_off() -> str:
        """Sign off."""
        return "ok"

    model = ValveModel(
        ScriptedResponse(tool_calls=[ScriptedToolCall("sign_off", {})]), ScriptedResponse(text="Done.")
    )
    async with serving(ReActAgent(model, Toolkit([sign_off]))) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/s/runs", {"input": "go"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        await dash.open("s")
        await dash.state_is("running")
        await dash.page.fill("#steer-text", "Be brief.")
        await dash.page.click("#steer-send")
        await dash.until("() => document.getElementById('action-note').textContent.startsWith('steered')")
        model.open()
        await dash.answer_is("Done.")
        assert model.inner.requests[1].messages[-1].text == "Be brief."
        await dash.until(
            "() => [...document.querySelectorAll('.bubble.steer')]"
            ".some((b) => b.textContent.includes('Be brief.'))"
        )


async def test_the_composer_starts_a_run_and_shows_refusals(browser: Browser) -> None:
    async with serving(refund_agent("First.", asks_refund())) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s", {"input": "hello"})
        last = await head(live, "s")
        await dash.open("s")
        await dash.answer_is("First.")
        for box, button, error in (
            ("#steer-text", "#steer-send", "#steer-error"),
            ("#input-text", "#input-send", "#input-error"),
        ):
            await dash.page.fill(box, "   ")
            await dash.page.click(button)
            await dash.until(
                "(id) => /^400: '(message|input)' must not be empty$/"
                ".test(document.getElementById(id).textContent)",
                error[1:],
            )
        assert await head(live, "s") == last
        await dash.page.fill("#input-text", "refund it")
        await dash.page.click("#input-send")
        await dash.state_is("waiting_for_approval")
        assert await dash.page.locator("#input-send").is_disabled()  # new text waits for the answer
        assert await dash.page.locator("#steer-send").is_disabled()
        assert await dash.page.locator(".approval[data-call='r1'] button.approve").is_enabled()
        await dash.open("nobody")
        await dash.until(
            "() => document.getElementById('action-note').textContent.startsWith(\"No session 'nobody' yet\")"
        )
        await dash.state_is("absent")


# ---- replay ------------------------------------------------------------------------------------------------


async def test_replay_plays_the_log_back_and_runs_nothing(browser: Browser) -> None:
    async with serving(weather_agent()) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "w", {"input": "weather"})
        await dash.open("w")
        await dash.answer_is("It is 53.6 °F in Oslo.")
        await dash.state_is("idle")
        await dash.until("() => document.querySelectorAll('#trace .row[data-kind=model]').length === 3")
        before = (await dash.answer(), await dash.timeline(), await dash.seqs())
        last = await head(live, "w")
        turns = (await live.get("/api/sessions/w/turns"))[1]
        sent = len(dash.requests)
        await dash.page.select_option("#speed", "instant")
        await dash.page.click("#replay")
        await dash.until("() => document.getElementById('mode').dataset.replay === 'done'")
        assert await dash.page.locator("#drive").is_hidden()  # no driving while replaying
        assert (await dash.answer(), await dash.timeline(), await dash.seqs()) == before
        assert await dash.page.locator("#tokens g.bar").count() == 2
        assert await head(live, "w") == last  # nothing was appended: nothing ran
        assert (await live.get("/api/sessions/w/turns"))[1] == turns
        assert [r.method for r in dash.requests[sent:]] == ["GET"] * len(dash.requests[sent:])
        await streams_closed(live)  # the replay read the log and let go of the feed
        await dash.page.click("#live")
        await dash.until("() => document.getElementById('conn').dataset.conn === 'live'")
        await dash.answer_is("It is 53.6 °F in Oslo.")
        assert await dash.seqs() == before[2]


async def test_replay_at_a_speed_shows_the_answer_grow(browser: Browser) -> None:
    async with serving(
        ReActAgent(ScriptedModel([ScriptedResponse(text="one two three", chunk_size=4)]))
    ) as live:
        await run_to_end(live, "s", {"input": "count"})
        async with dashboard(browser, live) as dash:
            await dash.open("s")
            await dash.answer_is("one two three")
            await dash.page.select_option("#speed", "16")
            await dash.page.click("#replay")
            await dash.until("() => document.getElementById('mode').dataset.replay === 'done'")
            assert await dash.answer() == "one two three"
            assert await dash.seqs() == list(range(1, await head(live, "s") + 1))


# ---- secrets and untrusted text ----------------------------------------------------------------------------


async def test_the_token_never_appears_in_the_page_or_any_response(
    browser: Browser, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="rxagent")
    agent = refund_agent(asks_refund(), "Refunded.")
    async with serving(agent, token=TOKEN) as live, dashboard(browser, live) as dash:
        # Without the token, or with a wrong one: refused, and no cookie.
        for path in ("/", "/?token=wrong"):
            response = await dash.page.goto(live.url + path)
            assert response is not None
            assert response.status == 401
            body = await response.text()
            assert "/?token=" in body
            assert TOKEN not in body
        assert await dash.page.context.cookies() == []
        # With it, once: a redirect to / that keeps it in an HttpOnly cookie.
        response = await dash.page.goto(live.url + "/?token=" + TOKEN)
        assert response is not None
        assert response.url == live.url + "/"
        assert response.request.redirected_from is not None
        (cookie,) = await dash.page.context.cookies()
        assert (cookie["name"], cookie["value"], cookie["httpOnly"], cookie["sameSite"]) == (
            "rxagent_token_" + live.url.rsplit(":", 1)[1],
            TOKEN,
            True,
            "Lax",
        )
        assert await dash.page.evaluate("() => document.cookie") == ""
        assert TOKEN not in await dash.page.evaluate("() => location.href")
        # The page works through the cookie: a session started, approved, answered.
        await dash.page.fill("#new-sid", "s")
        await dash.page.fill("#new-input", "refund A-1")
        await dash.page.click("#new-send")
        await dash.page.locator('.approval[data-call="r1"] button.approve').click(timeout=MS)
        await dash.answer_is("Refunded.")
        assert refunds == ["A-1"]
        assert TOKEN not in await dash.page.content()
        first = dash.requests[2]  # after the two refused loads
        assert TOKEN in first.url
        for request in dash.requests[3:]:
            assert TOKEN not in request.url
        for answer in dash.responses[2:]:  # the two refusals were read above, before the browser left them
            headers = await answer.all_headers()
            assert TOKEN not in json.dumps({k: v for k, v in headers.items() if k != "set-cookie"})
            if answer.status == 303 or headers.get("content-type", "").startswith("text/event-stream"):
                continue  # a redirect has no body; a feed is still open (read below with the API)
            assert TOKEN not in await answer.text()
        async with live.sse("/api/sessions/s/feed", headers={"Authorization": f"Bearer {TOKEN}"}) as feed:
            events = await feed.until(lambda e: e.event == "fact" and e.json()["seq"] == 1)
            assert all(TOKEN not in e.data for e in events)
        facts = await live.agent.sessions.facts(live.server.hub.handle("s").ctx)
        assert all(TOKEN not in f.payload for f in facts)
    assert TOKEN not in caplog.text
    assert "GET / 303" in caplog.text  # the redirect was logged, without its query string


async def test_untrusted_text_is_shown_as_text_and_never_runs(browser: Browser) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                thinking="thinking " + PAYLOAD,
                text="Calling. ",
                tool_calls=[
                    ScriptedToolCall("echo", {"text": PAYLOAD}, id="e1"),
                    ScriptedToolCall(PAYLOAD, {"x": PAYLOAD}, id="e2"),  # a tool the model made up
                ],
            ),
            ScriptedResponse(text="Answer: " + PAYLOAD),
        ]
    )
    async with serving(ReActAgent(model, Toolkit([echo]))) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "x", {"input": "user says " + PAYLOAD})
        page_source = dashboard_page()[0].decode()
        for sink in (
            "innerHTML",
            "outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ):
            assert sink not in page_source, sink
        await dash.open("x")
        await dash.answer_is("Answer: " + PAYLOAD)
        await dash.until(
            "() => document.querySelectorAll('#trace .row[data-kind=model], #trace .row[data-kind=tool]')"
            ".length === 4"
        )
        assert await dash.page.evaluate("() => window.__pwned") is None
        assert await dash.page.locator("img").count() == 0
        assert await dash.page.evaluate("() => document.scripts.length") == 1
        assert PAYLOAD in (await dash.page.locator(".bubble.user").all_text_contents())[0]
        assert PAYLOAD in (await dash.page.locator(".bubble.assistant .thinking").first.text_content() or "")
        detail = await dash.call_detail("echo")
        assert json.loads(detail["args"]) == {"text": PAYLOAD}
        assert detail["progress"] == [PAYLOAD]
        assert detail["result"] == "echo: " + PAYLOAD
        assert (await dash.call_detail(PAYLOAD))["summary"].startswith("tool " + PAYLOAD)
        names = [name for _, name in await dash.timeline()]
        assert PAYLOAD in names
        await dash.page.click("#facts-box summary")
        await dash.until("() => document.querySelectorAll('#facts li').length > 0")
        rows = await dash.page.locator('#facts li[data-kind="event"]').all_text_contents()
        assert any(row.endswith("event step_started Act (iteration 1)") for row in rows), rows
        assert await dash.page.locator("img").count() == 0
        assert await dash.page.evaluate("() => window.__pwned") is None


# ---- the screenshot and the package ------------------------------------------------------------------------


async def test_a_screenshot_of_a_populated_dashboard(browser: Browser, tmp_path: Path) -> None:
    """With RXAGENT_SCREENSHOT=1 this writes docs/dashboard.png (the README's picture)."""
    model = ScriptedModel(
        [
            ScriptedResponse(
                text="Let me look up the weather first.",
                tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"}, id="l1")],
            ),
            ScriptedResponse(
                text="It is 12 °C in Oslo. Converting, then I will refund order A-1 as you asked.",
                tool_calls=[
                    ScriptedToolCall("convert", {"celsius": 12}, id="c1"),
                    ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
                ],
            ),
        ]
    )
    agent = ReActAgent(model, Toolkit([lookup, convert, refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await run_to_end(
            live, "weather-and-refund", {"input": "How warm is Oslo in °F? Then refund order A-1."}
        )
        await dash.open("weather-and-refund")
        await dash.state_is("waiting_for_approval")
        await dash.until("() => document.querySelectorAll('#tokens g.bar').length === 2")
        await dash.until("() => document.querySelector('#sessions li') !== null")
        await dash.select("tool", "lookup")
        target = (
            ROOT / "docs" / "dashboard.png"
            if os.environ.get("RXAGENT_SCREENSHOT") == "1"
            else tmp_path / "d.png"
        )
        target.parent.mkdir(parents=True, exist_ok=True)
        await dash.page.screenshot(path=str(target), full_page=True)
    data = target.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000


async def test_the_page_ships_in_the_wheel(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    shutil.copytree(ROOT / "rxagent", source / "rxagent", ignore=shutil.ignore_patterns("__pycache__"))
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"), str(source),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), 120)
    assert process.returncode == 0, (out + err).decode()[-3000:]
    (wheel,) = (tmp_path / "dist").glob("rxagent-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert (
            archive.read("rxagent/serve/dashboard.html")
            == (ROOT / "rxagent/serve/dashboard.html").read_bytes()
        )


# ---- uncertain calls ---------------------------------------------------------------------------------------


async def test_an_uncertain_call_gets_a_card_and_its_outcome_lets_the_session_carry_on(
    browser: Browser, tmp_path: Path
) -> None:
    from rxagent.session import SQLiteStore
    from tests.serve.test_reconcile import SESSION, killed_inside_the_refund
    from tests.serve.test_reconcile import refunds as refund_tools

    store = SQLiteStore(tmp_path / "sessions.db")
    await killed_inside_the_refund(store)  # a server died while the refund ran
    ran: list[str] = []
    agent = ReActAgent(ScriptedModel(["A-1 was refunded before."]), refund_tools(ran), store=store)
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await dash.open(SESSION)
        await dash.state_is("uncertain")
        card = dash.page.locator('.approval[data-call="r1"][data-kind="uncertain"]')
        assert await dash.page.locator(".approval").count() == 1  # the read-only call needs nobody
        assert await dash.page.locator("#input-send").is_disabled()
        await card.locator("textarea.result").fill("refunded A-1")
        await card.locator("button.reconcile-done").click(timeout=MS)
        await dash.answer_is("A-1 was refunded before.")
        await dash.state_is("idle")
        await dash.until("() => document.querySelectorAll('.approval').length === 0")
        assert len(dash.posts("/reconcile")) == 1
    assert ran == []  # never run twice
    await store.aclose()


# ---- the harness: the todo list and background tasks -------------------------------------------------------


TODOS_JS = (
    "() => [...document.querySelectorAll('#todos li')]"
    ".map((li) => [li.dataset.status, li.querySelector('.content').textContent])"
)
TASKS_JS = (
    "() => [...document.querySelectorAll('#tasks li')].map((li) => [li.dataset.status,"
    " li.querySelector('.state').textContent, li.querySelector('.what').textContent])"
)


async def test_the_todo_list_and_the_background_tasks_show_with_links_to_their_sessions(
    browser: Browser, tmp_path: Path
) -> None:
    from tests.serve.test_harness_api import TALL, Gate, lead, start

    todos = [
        {"content": "ask the researcher", "status": "completed"},
        {"content": "compare " + PAYLOAD, "status": "in_progress"},
        {"content": "write it up", "status": "pending"},
    ]
    first = start(TALL, PAYLOAD)
    plan = ScriptedResponse(
        tool_calls=[ScriptedToolCall("write_todos", {"todos": todos}, id="w1"), *first.tool_calls]
    )
    gate = Gate()
    agent = lead(tmp_path, gate, plan, "Two tasks are under way.")
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s1", {"input": "Research the Eiffel tower."})
        await dash.open("s1")
        await dash.answer_is("Two tasks are under way.")

        shown = [[t["status"], t["content"]] for t in todos]
        assert await dash.until(f"() => {{ const t = ({TODOS_JS})(); return t.length === 3 && t; }}") == shown
        assert await dash.page.locator("#todo-count").text_content() == "(1 of 3 done)"
        await asyncio.wait_for(gate.entered.wait(), WAIT)
        await dash.until(f"() => ({TASKS_JS})().map((t) => t[0]).join() === 'running,queued'")
        assert await dash.page.evaluate(TASKS_JS) == [
            ["running", "running", TALL],
            ["queued", "queued (1 in line)", PAYLOAD],
        ]

        gate.open.set()  # both answer; the page reads it on the feed's task_finished facts
        await dash.until(f"() => ({TASKS_JS})().map((t) => t[0]).join() === 'finished,finished'")
        answers = await dash.page.locator("#tasks .detail").all_text_contents()
        assert answers == [f"Answer to: {TALL}", f"Answer to: {PAYLOAD}"]
        tasks = (await live.get("/api/sessions/s1/tasks"))[1]["tasks"]
        links = await dash.page.locator("#tasks a.open").evaluate_all(
            "(a) => a.map((l) => l.getAttribute('href'))"
        )
        assert links == [f"#/s/{t['session_id'].replace('/', '%2F')}" for t in tasks]

        # Replayed from the log, the todo list comes back with the rest.
        await dash.page.select_option("#speed", "instant")
        await dash.page.click("#replay")
        await dash.until("() => document.getElementById('mode').dataset.replay === 'done'")
        assert await dash.page.evaluate(TODOS_JS) == shown
        await dash.page.click("#live")

        # A task's link opens its own session, read-only: its conversation, no way to drive it.
        posts = len(dash.posts(""))
        await dash.page.locator("#tasks a.open").first.click()
        await dash.until(
            "(sid) => document.getElementById('title').textContent === sid", tasks[0]["session_id"]
        )
        await dash.answer_is(f"Answer to: {TALL}")
        assert await dash.page.locator("#drive").is_hidden()
        assert await dash.page.locator("#interrupt").is_disabled()
        assert await dash.page.locator("#todos-box").is_hidden()
        assert await dash.page.locator("#tasks-box").is_hidden()
        note = dash.page.locator("#task-of")
        assert (
            await note.text_content()
            == "A background task of session s1: read only here, its task drives it."
        )
        assert len(dash.posts("")) == posts  # reading it sent nothing that drives it
        await note.locator("a").click()
        await dash.until("() => document.getElementById('title').textContent === 's1'")
        await dash.until(f"() => ({TASKS_JS})().length === 2")
        assert await dash.page.locator("#drive").is_visible()
        assert await dash.page.evaluate("() => window.__pwned") is None
        assert await dash.page.locator("img").count() == 0
