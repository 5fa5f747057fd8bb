"""The dashboard for several operators, in a real browser: two tabs answering one call, a call answered
elsewhere, approve all, always allow; and the sessions list that stays current (live over SSE, titles,
badges, search, delete), queued runs, the narrow layout, Enter to send, signing in.

Bad inputs tried: two answers to one call at the same moment (one is taken, the other tab says so), a
click on delete that is not confirmed, deleting a session whose run is going (refused, said), Shift+Enter
(a new line, nothing sent), the page with no token, a wrong token, a cookie gone while the page is open.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

import pytest
from playwright.async_api import Browser

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.agent.grants import SESSION_RULES
from rxagent.context import RuntimeContext
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.browser import dashboard
from tests.serve.conftest import WAIT, ValveModel, serving
from tests.serve.test_dashboard import run_to_end

pytestmark = pytest.mark.asyncio(loop_scope="session")

TOKEN = "tok-OPERATORS-signs-in"

done: Counter[str] = Counter()


@tool
def refund(order: str) -> str:
    """Refund an order."""
    done[order] += 1
    return f"refunded {order}"


def asks(*orders: str) -> ScriptedResponse:
    calls = [ScriptedToolCall("refund", {"order": o}, id=f"r-{o}") for o in orders]
    return ScriptedResponse(tool_calls=calls)


def desk(*script: Any) -> ReActAgent:
    return ReActAgent(ScriptedModel(list(script)), Toolkit([refund]), permissions=Permissions().ask("refund"))


@pytest.fixture(autouse=True)
def clean() -> None:
    done.clear()


ANSWERED = (
    "(call) => document.querySelector(`.approval[data-call='${call}'][data-answered='yes'] .answered`)"
    "?.textContent"
)
"""The note of a call's card that says who answered it, once it says so."""


# ---- approvals ---------------------------------------------------------------------------------------------


CLICK = """(which) => {
    const button = document.querySelector(`.approval[data-call='r-A'] button.${which}`);
    const enabled = !button.disabled;
    button.click();
    return enabled;
}"""
"""Click a button of the call's card at once; whether it was enabled then."""

SETTLED = (
    "() => document.querySelector(\".approval[data-call='r-A'] .sent, .approval[data-call='r-A'] .answered\")"
    " !== null || document.querySelector(\".approval[data-call='r-A']\") === null"
)
"""Whether a tab's card for the call says how its answer went (or is gone: its answer was taken)."""


async def test_two_tabs_approve_and_deny_one_call_at_once_and_exactly_one_answer_is_taken(
    browser: Browser,
) -> None:
    async with serving(desk(asks("A"), "Done.", "Not done.")) as live:
        await run_to_end(live, "s", {"input": "refund A"})
        async with dashboard(browser, live) as one, dashboard(browser, live) as two:
            for tab in (one, two):
                await tab.open("s")
                await tab.state_is("waiting_for_approval")
            # Both clicks leave together (a click each, sent to both pages at once): neither tab has heard
            # of the other's answer when its own goes.
            clicks = (one.page.evaluate(CLICK, "approve"), two.page.evaluate(CLICK, "deny"))
            clicked = await asyncio.gather(*clicks)
            assert clicked == [True, True]
            for tab in (one, two):
                await tab.until(SETTLED)
                await tab.state_is("idle")
            first, second = ([r.status for r in t.responses if "/respond" in r.url] for t in [one, two])
            assert sorted(first + second) == [202, 409]
            winner, loser = (one, two) if first == [202] else (two, one)
            said = await loser.until(ANSWERED, "r-A")
            assert said.startswith("This call was answered already: ")
            taken = "approved" if winner is one else "denied"
            assert f": {taken} in run …" in said
            assert said.endswith("(another tab or client); your answer was not taken.")
            assert await loser.page.locator(".approval[data-call='r-A'] button").count() == 0
            assert done["A"] == (1 if winner is one else 0)
            facts = await live.agent.sessions.facts(RuntimeContext(session_id="s"))
            decisions = [json.loads(f.payload) for f in facts if f.kind == "decision"]
            assert [d["kind"] for d in decisions] == ["approval" if winner is one else "denial"]


async def test_a_call_answered_elsewhere_shows_who_answered_and_loses_its_buttons(browser: Browser) -> None:
    async with serving(desk(asks("A"), "Done.")) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s", {"input": "refund A"})
        await dash.open("s")
        await dash.state_is("waiting_for_approval")
        approval = {"decisions": [{"call_id": "r-A", "allow": True}]}
        status, answer = await live.post("/api/sessions/s/respond", approval)
        assert status == 202
        said = await dash.until(ANSWERED, "r-A")
        assert (
            said == f"Answered elsewhere: approved in run …{answer['run_id'][-6:]} (another tab or client)."
        )
        assert await dash.page.locator(".approval[data-call='r-A'] button").count() == 0
        await dash.answer_is("Done.")
        assert done["A"] == 1


async def test_approve_all_answers_every_waiting_call_at_once(browser: Browser) -> None:
    async with serving(desk(asks("A", "B", "C"), "All three.")) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s", {"input": "refund three"})
        await dash.open("s")
        await dash.until("() => document.getElementById('approve-all')?.textContent === 'Approve all 3'")
        await dash.page.click("#approve-all")
        await dash.answer_is("All three.")
        assert done == {"A": 1, "B": 1, "C": 1}
        assert len(dash.posts("/respond")) == 1
        body = json.loads(dash.posts("/respond")[0].post_data or "")
        assert body == {"decisions": [{"call_id": f"r-{o}", "allow": True} for o in "ABC"]}


async def test_always_allow_lets_the_next_call_run_without_asking_and_the_rule_is_in_the_log(
    browser: Browser,
) -> None:
    agent = desk(asks("A"), "Refunded A.", asks("B"), "Refunded B.")
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await run_to_end(live, "s", {"input": "refund A"})
        await dash.open("s")
        await dash.page.locator(".approval[data-call='r-A'] button.always").click(timeout=WAIT * 1000)
        await dash.answer_is("Refunded A.")
        await dash.until(
            "() => document.getElementById('rules')?.textContent"
            " === 'Runs without asking in this session: refund'"
        )
        await dash.page.fill("#input-text", "refund B")
        await dash.page.press("#input-text", "Enter")
        await dash.answer_is("Refunded B.")
        assert done == {"A": 1, "B": 1}
        assert await dash.page.locator(".approval").count() == 0  # nobody was asked about B
        facts = await live.agent.sessions.facts(RuntimeContext(session_id="s"))
        decisions = [json.loads(f.payload) for f in facts if f.kind == "decision"]
        assert decisions == [
            {"call_id": "r-A", "kind": "approval", "reason": "", "arguments": None, "always": True}
        ]
        rules = [json.loads(f.payload)["extras"][SESSION_RULES] for f in facts if f.kind == "extras"]
        assert rules[-1] == [{"decision": "allow", "tool": "refund", "call_id": "r-A", "reason": ""}]
        await dash.select("tool", "refund", 0)
        assert "always allowed in this session" in (await dash.page.text_content("#detail h4.summary") or "")


# ---- the sessions list -------------------------------------------------------------------------------------

ITEMS = (
    "() => [...document.querySelectorAll('#sessions li')].filter((li) => !li.hidden)"
    ".map((li) => [li.dataset.session, li.dataset.state, li.querySelector('.title').textContent])"
)
"""The sessions the list shows: id, state and title of each."""


def state_of(session: str, state: str) -> str:
    """A page function: whether the list shows ``session`` in ``state``."""
    return (
        f"() => document.querySelector('#sessions li[data-session={session}]')?.dataset.state === '{state}'"
    )


async def test_the_sessions_list_is_live_with_titles_badges_search_and_delete(browser: Browser) -> None:
    model = ValveModel(
        ScriptedResponse(text="First."), asks("B"), ScriptedResponse(error=RuntimeError("boom"))
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live, dashboard(browser, live) as dash:
        await dash.open()
        await dash.until("() => document.getElementById('sessions-empty').textContent === 'No session yet.'")
        await live.post("/api/sessions/alpha/runs", {"input": "Say something **first**"})
        await dash.until(state_of("alpha", "running"))
        assert await dash.page.evaluate(ITEMS) == [["alpha", "running", "Say something **first**"]]
        model.open()
        await dash.until(state_of("alpha", "idle"))
        await live.post("/api/sessions/beta/runs", {"input": "refund B"})
        await dash.until(state_of("beta", "waiting_for_approval"))
        await live.post("/api/sessions/gamma/runs", {"input": "this one fails"})
        await dash.until(state_of("gamma", "failed"))
        badges = await dash.page.locator("#sessions .badge").all_text_contents()
        assert badges == ["failed", "waiting for approval", "idle"]  # newest first
        assert (
            await dash.page.get_attribute("#sessions li[data-session=gamma] .badge", "title")
            == "RuntimeError: boom"
        )
        # No asking again and again: the list came on one stream.
        lists = [
            r.url for r in dash.requests if r.url.endswith("/api/sessions") or r.url.endswith("/api/feed")
        ]
        assert lists == [live.url + "/api/feed"]

        await dash.page.fill("#search", "REFUND")
        await dash.until(f"() => ({ITEMS})().length === 1")
        assert (await dash.page.evaluate(ITEMS))[0][0] == "beta"
        await dash.page.fill("#search", "nothing like it")
        await dash.until(
            "() => document.getElementById('sessions-empty').textContent === 'No session matches.'"
        )
        await dash.page.fill("#search", "")

        delete = dash.page.locator("#sessions li[data-session=alpha] button.delete")
        await delete.click()  # armed, not sent
        assert await delete.text_content() == "delete?"
        assert [r for r in dash.requests if r.method == "DELETE"] == []
        await delete.click()
        await dash.until("() => document.querySelector('#sessions li[data-session=alpha]') === null")
        assert (await live.get("/api/sessions/alpha"))[0] == 404


async def test_a_queued_run_shows_and_is_cancelled_and_a_running_session_is_not_deleted(
    browser: Browser,
) -> None:
    model = ValveModel(ScriptedResponse(text="The first."), ScriptedResponse(text="Never."))
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await live.post("/api/sessions/q/runs", {"input": "first"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        _, second = await live.post("/api/sessions/q/runs", {"input": "second, waiting its turn"})
        await dash.open("q")
        await dash.until("() => document.querySelector('#queue .queued') !== null")
        assert (
            await dash.page.text_content("#queue .queued span") == "queued (next): second, waiting its turn"
        )
        delete = dash.page.locator("#sessions li[data-session=q] button.delete")
        await delete.click()
        await delete.click()
        await dash.until(
            "() => document.querySelector('#sessions li[data-session=q] .meta')"
            ".textContent.startsWith('409: ')"
        )
        await dash.page.click("#queue button.cancel")
        await dash.until(
            "() => document.getElementById('action-note').textContent.endsWith('cancelled before it started')"
        )
        await dash.until("() => document.querySelector('#queue .queued') === null")
        model.open()
        await dash.answer_is("The first.")
        await dash.state_is("idle")
        state = await live.agent.sessions.state(RuntimeContext(session_id="q"))
        assert [m.text for m in state.messages] == ["first", "The first."]
        (cancel,) = [r for r in dash.requests if r.method == "DELETE" and "/runs/" in r.url]
        assert cancel.url == f"{live.url}/api/sessions/q/runs/{second['run_id']}"


async def test_a_narrow_screen_has_one_column_and_enter_sends_while_shift_enter_does_not(
    browser: Browser,
) -> None:
    agent = ReActAgent(ScriptedModel(["Hello.", "Two lines, read."]))
    phone = {"width": 390, "height": 844}
    async with serving(agent) as live, dashboard(browser, live, viewport=phone) as dash:
        await dash.open()
        assert await dash.page.locator("aside").is_hidden()
        await dash.page.click("#menu")
        assert await dash.page.locator("aside").is_visible()
        await dash.page.fill("#new-input", "hi")
        await dash.page.press("#new-input", "Enter")
        await dash.until("() => location.hash.startsWith('#/s/')")
        assert await dash.page.locator("aside").is_hidden()  # the session's view takes the screen
        await dash.answer_is("Hello.")
        widths = await dash.page.evaluate(
            "() => [...document.querySelectorAll('.cols > div')]"
            ".map((c) => Math.round(c.getBoundingClientRect().width))"
        )
        assert widths[0] == widths[1]  # one column: conversation above, trace below
        assert await dash.page.evaluate("() => document.documentElement.scrollWidth <= window.innerWidth")
        box = dash.page.locator("#input-text")
        await box.fill("two")
        await box.press("Shift+Enter")
        await box.type("lines")
        assert await box.input_value() == "two\nlines"
        assert len(dash.posts("/runs")) == 1  # Shift+Enter sent nothing
        await box.press("Enter")
        await dash.answer_is("Two lines, read.")
        assert [json.loads(r.post_data or "")["input"] for r in dash.posts("/runs")] == [
            "hi",
            "two\nlines",
        ]


async def test_without_the_token_a_sign_in_form_comes_and_signs_in(browser: Browser) -> None:
    agent = ReActAgent(ScriptedModel(["Signed in."]))
    async with serving(agent, token=TOKEN) as live, dashboard(browser, live) as dash:
        response = await dash.page.goto(live.url + "/#/s/x")
        assert response is not None
        assert response.status == 401
        await dash.page.fill("#token", "not it")
        await dash.page.press("#token", "Enter")
        await dash.page.wait_for_selector(".error", timeout=WAIT * 1000)
        assert await dash.page.text_content(".error") == "That is not this server's token."
        await dash.page.fill("#token", TOKEN)
        await dash.page.click("button[type=submit]")
        await dash.until("() => document.getElementById('conn') !== null")
        assert dash.page.url == live.url + "/"
        assert TOKEN not in await dash.page.content()
        await dash.page.fill("#new-sid", "x")
        await dash.page.fill("#new-input", "hello")
        await dash.page.click("#new-send")
        await dash.answer_is("Signed in.")
        # The cookie goes (cleared, or the server has a new token): the page asks for the token again.
        await dash.page.context.clear_cookies()
        # Its next request (a replay asked for here, or its own next look at the session) is refused.
        await dash.page.evaluate("() => document.getElementById('replay').click()")
        await dash.until("() => !document.getElementById('signin').hidden")
        await dash.page.fill("#signin-token", TOKEN)
        await dash.page.click("#signin-form button")
        await dash.until("() => location.hash === '#/s/x' && document.getElementById('signin').hidden")
        await dash.answer_is("Signed in.")
