"""The dashboard's trace view in a real browser: runs, steps, model and tool calls and a nested run as a
tree, each with its duration, tokens and status; a model call's request and a step's state on a click; a
failed model call marked failed and its error said once in the conversation, which shows the conversation
only.

Bad inputs tried: a model that fails mid-answer; a model call whose request the server did not keep (a
nested agent's: rebuilt from the log, and said so).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from playwright.async_api import Browser

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.session import MemoryStore
from rxagent.tools import Toolkit
from tests.serve.browser import ROOT, dashboard
from tests.serve.conftest import serving
from tests.serve.test_dashboard import convert, lookup, run_to_end

pytestmark = pytest.mark.asyncio(loop_scope="session")


def team() -> ReActAgent:
    """A lead that asks a researcher (an agent used as a tool) and looks the weather up in one batch,
    converts it, and answers."""
    store = MemoryStore()
    said = ScriptedModel(["Oslo is the capital of **Norway**."])
    researcher = ReActAgent(said, name="researcher", store=store)
    model = ScriptedModel(
        [
            ScriptedResponse(
                text="Asking and looking it up.",
                tool_calls=[
                    ScriptedToolCall("researcher", {"task": "Where is Oslo?"}, id="t1"),
                    ScriptedToolCall("lookup", {"city": "Oslo"}, id="l1"),
                ],
            ),
            ScriptedResponse(tool_calls=[ScriptedToolCall("convert", {"celsius": 12}, id="c1")]),
            ScriptedResponse(text="Oslo, in **Norway**, is at 53.6 °F."),
        ]
    )
    tools = Toolkit([researcher.as_tool(description="Finds facts."), lookup, convert])
    return ReActAgent(model, tools, system_prompt="Be precise.", store=store, name="lead")


async def test_a_run_with_a_nested_agent_and_two_tools_is_a_tree_and_a_model_call_shows_its_request(
    browser: Browser, tmp_path: Path
) -> None:
    wide = {"width": 1400, "height": 1100}
    async with serving(team()) as live, dashboard(browser, live, viewport=wide) as dash:
        await run_to_end(live, "trip", {"input": "Where is Oslo, and how warm is it in °F?"})
        await dash.open("trip")
        await dash.answer_is("Oslo, in Norway, is at 53.6 °F.")
        await dash.until("() => document.querySelectorAll('#trace .row[data-kind=model]').length === 4")
        tree = [(r["depth"], r["kind"], r["label"]) for r in await dash.rows()]
        assert tree == [
            (0, "run", "lead · “Where is Oslo, and how warm is it in °F?”"),
            (1, "step", "Start"),
            (1, "step", "Reason"),
            (2, "model", "scripted"),
            (1, "step", "Act: researcher, lookup"),
            (2, "tool", "researcher"),
            (3, "run", tree[6][2]),  # the researcher's run, nested in the call that started it
            (4, "step", "Start"),
            (4, "step", "Reason"),
            (5, "model", "scripted"),
            (4, "step", "Finish: MODEL_STOP"),
            (2, "tool", "lookup"),
            (1, "step", "Reason"),
            (2, "model", "scripted"),
            (1, "step", "Act: convert"),
            (2, "tool", "convert"),
            (1, "step", "Reason"),
            (2, "model", "scripted"),
            (1, "step", "Finish: MODEL_STOP"),
        ]
        assert tree[6][2].startswith("researcher (nested run …")
        rows = await dash.rows()
        assert {r["status"] for r in rows} == {"ok"}
        durations = await dash.page.locator("#trace .row .dur").all_text_contents()
        assert all(d.endswith(" ms") or d.endswith(" s") for d in durations)
        tokens = await dash.page.locator('#trace .row[data-kind="model"] .tok').all_text_contents()
        assert all("→" in t for t in tokens)  # input→output tokens of each model call

        # The chat shows the conversation: no run plumbing, no nested agent's words.
        chat = await dash.page.locator("#conversation").text_content() or ""
        assert "run_started" not in chat
        assert "MODEL_STOP" not in chat
        assert "capital" not in chat
        assert await dash.page.locator("#conversation .note").count() == 0

        # A model call: the request it sent, as this server sent it.
        await dash.select("model", "scripted", 0)
        await dash.until("() => document.querySelector('#detail .source') !== null")
        assert await dash.page.locator("#detail .source").get_attribute("data-source") == "sent"
        roles = await dash.page.locator("#detail .msg .role").all_text_contents()
        assert roles == ["system", "user"]
        texts = await dash.page.locator("#detail .msg pre").all_text_contents()
        assert texts == ["Be precise.", "Where is Oslo, and how warm is it in °F?"]
        tools = await dash.page.locator("#detail details.tool").evaluate_all(
            "(all) => all.map((d) => d.dataset.name)"
        )
        assert tools == ["researcher", "lookup", "convert"]
        lookup_tool = dash.page.locator('#detail details.tool[data-name="lookup"]')
        await lookup_tool.locator("summary").click()
        schema = json.loads(await lookup_tool.locator("pre").text_content() or "")
        assert schema["properties"]["city"]["type"] == "string"
        shots = os.environ.get("RXAGENT_SCREENSHOT") == "1"
        target = ROOT / "docs" / "dashboard-trace.png" if shots else tmp_path / "trace.png"
        await dash.page.screenshot(path=str(target), full_page=True)

        # The third call's request holds the results of the first two batches.
        await dash.select("model", "scripted", 3)
        await dash.until("() => document.querySelectorAll('#detail .msg').length === 6")
        roles = await dash.page.locator("#detail .msg .role").all_text_contents()
        assert roles == ["system", "user", "assistant", "tool", "assistant", "tool"]

        # The nested agent's call: not kept by the server (another agent's), so it is rebuilt from the log.
        await dash.select("model", "scripted", 1)
        await dash.until("() => document.querySelector('#detail .source') !== null")
        assert await dash.page.locator("#detail .source").get_attribute("data-source") == "log"
        assert await dash.page.locator("#detail .msg pre").all_text_contents() == ["Where is Oslo?"]

        # A step: its node, and the session's state there.
        key = await dash.select("step", "Act", 0)
        await dash.until("() => document.querySelector('#detail .asked .label') !== null")
        step = json.loads(await dash.page.locator("#detail pre.step").text_content() or "")
        assert (step["node"], [c["name"] for c in step["calls"]]) == ("Act", ["researcher", "lookup"])
        said = await dash.page.locator("#detail .asked").text_content() or ""
        assert "messages (" in said
        assert key.startswith("step:")
        # A tool call: its arguments and result; the nested run shows its answer.
        convert_call = await dash.call_detail("convert")
        assert (json.loads(convert_call["args"]), convert_call["result"]) == ({"celsius": 12}, "53.6 °F")
        await dash.page.locator('#trace .row[data-kind="run"]').nth(1).click()
        await dash.until("() => document.querySelector('#detail pre.answer') !== null")
        answer = await dash.page.locator("#detail pre.answer").text_content()
        assert answer == "Oslo is the capital of **Norway**."
    assert target.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


async def test_a_model_call_that_fails_is_marked_failed_and_its_error_shown_once(browser: Browser) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                text="Half an ans", error=RuntimeError("the model server fell over"), error_after=2
            )
        ]
    )
    async with serving(ReActAgent(model)) as live, dashboard(browser, live) as dash:
        await dash.open("bad")
        await dash.state_is("absent")
        await live.post("/api/sessions/bad/runs", {"input": "answer"})
        await dash.until(
            "() => document.querySelector('#trace .row[data-kind=run]')?.dataset.status === 'failed'"
        )
        await dash.until("() => document.querySelectorAll('.bubble.error').length === 1")
        model_row = (await dash.rows("model"))[0]
        assert model_row["status"] == "error"
        errors = await dash.page.locator(".bubble.error").all_text_contents()
        assert errors == ["errorThe run failed: RuntimeError: the model server fell over"]
        chat = await dash.page.locator("#conversation").text_content() or ""
        assert chat.count("the model server fell over") == 1
        await dash.select("model", "scripted")
        said = await dash.page.locator("#detail pre.error-text").text_content()
        assert said == "RuntimeError: the model server fell over"
        await dash.state_is("idle")
