"""Approvals in a notebook: the buttons' logic (clicked without a browser) and the printed fallback."""

from __future__ import annotations

import ast
import asyncio
import sys
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.notebook import ApprovalPanel, approvals
from rxagent.tools import Permissions, Toolkit, tool

from .html_check import HIDDEN, HOSTILE, assert_safe

CTX = RuntimeContext(user_id="ada", session_id="refunds")


def refund_agent(*responses: ScriptedResponse | str) -> tuple[ReActAgent, list[str]]:
    ran: list[str] = []

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        ran.append(order)
        return f"refunded {order}"

    @tool(external=True)
    def sign(document: str) -> str:
        """The user signs a document in their app."""
        raise AssertionError("external tools never run here")

    agent = ReActAgent(
        ScriptedModel(list(responses)),
        Toolkit([refund, sign]),
        permissions=Permissions().ask("refund", reason="refunds need a human"),
    )
    return agent, ran


def calls(*orders: str) -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[ScriptedToolCall("refund", {"order": order}, id=f"r-{order}") for order in orders]
    )


def buttons(box: Any) -> dict[str, Any]:
    """Every button under a widget, by its tooltip ("approve r-A1", "deny r-A1")."""
    found: dict[str, Any] = {}
    for child in getattr(box, "children", ()):
        if type(child).__name__ == "Button":
            found[child.tooltip] = child
        found.update(buttons(child))
    return found


async def test_approving_in_the_panel_runs_the_same_call_and_resumes_the_run() -> None:
    agent, ran = refund_agent(calls("A1"), "Refunded A1.")
    first = await agent.call("refund A1", CTX)
    assert first.reason == "PERMISSION_ASKING"
    panel = await approvals(agent, CTX)
    box = panel.widget()
    assert "refunds need a human" in assert_safe(box.children[1].children[0].value).text

    buttons(box)["approve r-A1"].click()

    result = await asyncio.wait_for(panel.result, 5)
    assert (result.reason, result.text) == ("MODEL_STOP", "Refunded A1.")
    assert ran == ["A1"]
    assert all(button.disabled for button in buttons(box).values())
    assert panel.frame is not None
    assert panel.frame.text.startswith("✓ finished · MODEL_STOP")
    assert "Refunded A1." in panel.frame.html
    assert box.children[-1].value == panel.frame.html  # the resumed run was drawn in the panel
    assert panel.next is None


async def test_the_decisions_go_together_once_every_call_has_one_with_the_reason_given() -> None:
    agent, ran = refund_agent(calls("A1", "B2"), "Refunded A1 only.")
    await agent.call("refund both", CTX)
    panel = await approvals(agent, CTX)
    box = panel.widget()
    found = buttons(box)
    found["approve r-A1"].click()
    await asyncio.sleep(0)  # let anything scheduled by the click run: nothing may be sent yet
    assert not panel.sent
    assert not panel.result.done()
    row = box.children[2]
    reason = row.children[1].children[2]
    reason.value = "over the limit"
    found["deny r-B2"].click()

    result = await asyncio.wait_for(panel.result, 5)
    assert result.text == "Refunded A1 only."
    assert ran == ["A1"]
    state = await agent.sessions.state(CTX)
    [tool_message] = [m for m in state.messages if m.role == "tool"]
    assert [(r.tool_use_id, r.status) for r in tool_message.tool_results] == [
        ("r-A1", "ok"),
        ("r-B2", "denied"),
    ]
    assert "over the limit" in tool_message.tool_results[1].text


async def test_a_run_that_asks_again_gets_a_new_panel_below_the_first() -> None:
    agent, ran = refund_agent(calls("A1"), calls("B2"), "Both refunded.")
    await agent.call("refund A1 then B2", CTX)
    panel = await approvals(agent, CTX)
    box = panel.widget()
    panel.decide("r-A1", allow=True)
    asked_again = await asyncio.wait_for(panel.result, 5)
    assert asked_again.reason == "PERMISSION_ASKING"
    assert panel.next is not None
    assert [p.call.id for p in panel.next.calls] == ["r-B2"]
    assert box.children[-1] is panel.next.widget()
    buttons(panel.next.widget())["approve r-B2"].click()
    done = await asyncio.wait_for(panel.next.result, 5)
    assert done.text == "Both refunded."
    assert ran == ["A1", "B2"]


async def test_a_failing_resumed_run_is_shown_in_the_panel_and_raised_to_whoever_awaits() -> None:
    agent, _ = refund_agent(calls("A1"))  # nothing scripted after the call: the resumed run fails
    await agent.call("refund A1", CTX)
    panel = await approvals(agent, CTX)
    panel.widget()
    panel.decide("r-A1", allow=True)
    with pytest.raises(AssertionError, match="no response left"):
        await asyncio.wait_for(panel.result, 5)
    assert panel.frame is not None
    assert panel.frame.text.startswith("✗ failed")


async def test_decisions_are_checked_before_anything_is_sent() -> None:
    agent, ran = refund_agent(calls("A1"), "done")
    await agent.call("refund A1", CTX)
    panel = await approvals(agent, CTX)
    with pytest.raises(
        ValueError, match=r"no call with id 'nope' waits for a decision here \(waiting: r-A1\)"
    ):
        panel.decide("nope", allow=True)
    assert not panel.sent
    panel.decide("r-A1", allow=True)
    with pytest.raises(RuntimeError, match="sent already"):
        panel.decide("r-A1", allow=False)
    await asyncio.wait_for(panel.result, 5)
    assert ran == ["A1"]
    for name in ("agent", "ctx"):
        with pytest.raises(ValueError, match="not a Python identifier"):
            await approvals(agent, CTX, **{f"{name}_name": "my agent"})


async def test_a_call_decided_twice_is_refused() -> None:
    agent, _ = refund_agent(calls("A1", "B2"))
    await agent.call("refund both", CTX)
    panel = await approvals(agent, CTX)
    panel.decide("r-A1", allow=True)
    with pytest.raises(ValueError, match="decided already"):
        panel.decide("r-A1", allow=False)
    assert panel.decisions["r-A1"].allow


async def test_external_calls_are_left_out_and_cannot_be_put_in() -> None:
    agent, _ = refund_agent(
        ScriptedResponse(tool_calls=[ScriptedToolCall("sign", {"document": "D"}, id="s1")])
    )
    result = await agent.call("sign it", CTX)
    assert result.reason == "TOOL_SUSPENDED"
    panel = await approvals(agent, CTX)
    assert panel.calls == ()
    assert panel.snippet() == "# nothing waits for a decision in this session"
    state = await agent.sessions.state(CTX)
    with pytest.raises(ValueError, match="wait for an external result"):
        ApprovalPanel(agent, state.pending, CTX)


def run_snippet(snippet: str, namespace: dict[str, Any]) -> Any:
    code = compile(snippet, "<snippet>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    return eval(code, namespace)  # a coroutine: the snippet awaits


async def test_without_widgets_the_panel_prints_a_call_that_works(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    agent, ran = refund_agent(calls("A1", "B2"), "done")
    await agent.call("refund both", CTX)
    panel = await approvals(agent, CTX)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # as if the notebook extra were not installed
    panel._ipython_display_()
    printed = capsys.readouterr().out
    assert "ipywidgets is not installed" in printed
    snippet = panel.snippet()
    assert snippet in printed
    assert snippet.splitlines() == [
        "from rxagent.agent import ToolDecision",
        "",
        "result = await agent.call(",
        "    [",
        '        ToolDecision(\'r-A1\', allow=True),  # refund({"order": "A1"}) asks: refunds need a human',
        '        ToolDecision(\'r-B2\', allow=True),  # refund({"order": "B2"}) asks: refunds need a human',
        "    ],",
        "    ctx,",
        ")",
    ]
    await run_snippet(snippet, {"agent": agent, "ctx": CTX})
    assert ran == ["A1", "B2"]


# A lone surrogate cannot be stored in a session at all (its JSON cannot be encoded), so it never
# reaches a panel; every other hostile text can.
STORABLE = [(raw, shown) for raw, shown in HOSTILE if "\ud800" not in raw]


@pytest.mark.parametrize(("raw", "shown"), STORABLE)
async def test_the_snippet_stays_one_decision_per_call_whatever_the_model_wrote(raw: str, shown: str) -> None:
    hostile = raw + "\n__import__('os').system('echo pwned')  # \r\u2028"
    agent, ran = refund_agent(
        ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": hostile}, id=hostile)]), "done"
    )
    await agent.call("refund", CTX)
    panel = await approvals(agent, CTX, agent_name="bot", ctx_name="session")
    snippet = panel.snippet()
    assert len(snippet.splitlines()) == 8  # import, blank, call, list, one decision, list end, ctx, end
    assert not set(HIDDEN + "\u2028") & set(snippet)
    tree = ast.parse(snippet.replace("await ", ""))  # the same statements, outside an async function
    calls_made = [node for node in ast.walk(tree) if isinstance(node, ast.Call)]
    names = [ast.unparse(node.func) for node in calls_made]
    assert names == ["bot.call", "ToolDecision"]  # nothing else is called
    decision = calls_made[1]
    assert isinstance(decision.args[0], ast.Constant)
    assert decision.args[0].value == hostile  # the id survives exactly
    await run_snippet(snippet, {"bot": agent, "session": CTX})
    assert ran == [hostile]
    # and the widget shows the hostile call as text
    rows = panel.widget().children[1]
    assert shown in assert_safe(rows.children[0].value).text


def test_a_panel_is_made_inside_the_running_loop_it_resumes_runs_on() -> None:
    agent, _ = refund_agent()
    with pytest.raises(RuntimeError, match="no running event loop"):
        ApprovalPanel(agent, (), CTX)
