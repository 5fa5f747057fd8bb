"""Rich displays: each object's HTML and text, escaping of hostile text, and the IPython hooks."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell
from pydantic import BaseModel

from rxagent import (
    DocumentBlock,
    ImageBlock,
    Msg,
    ScriptedModel,
    ScriptedResponse,
    ScriptedToolCall,
    TextBlock,
    ThinkingBlock,
)
from rxagent.agent import ReActAgent
from rxagent.chunks import Usage
from rxagent.events import (
    AgentResult,
    ContextCompressed,
    ErrorEvent,
    MemoriesRecalled,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    RepeatGuardTriggered,
    RetryScheduled,
    RunStarted,
    StepNote,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolProgress,
    ToolResult,
    ToolResultsEvicted,
    ToolSuspended,
    UsageTotals,
)
from rxagent.messages import ToolResultBlock, ToolUseBlock
from rxagent.notebook import html_of, text_of
from rxagent.operators import to_list
from rxagent.state import AgentState, PendingCall
from rxagent.tools import Toolkit, tool

from ..test_media import pdf, png
from .html_check import HIDDEN, HOSTILE, assert_safe, parse

HEAD: dict[str, Any] = {"run_id": "run_1", "session_id": "s", "trace_id": "t", "seq": 3}


def hostile_message(text: str) -> Msg:
    """An assistant message with the hostile text in every field a model controls."""
    return Msg(
        role="assistant",
        name=text,
        content=(
            ThinkingBlock(thinking=text),
            TextBlock(text=text),
            ToolUseBlock(id=text, name=text, input={text: text}, raw_arguments="{}"),
            ToolUseBlock(id="c2", name="f", input=None, raw_arguments=text, state="invalid", error=text),
        ),
    )


def hostile_events(text: str) -> list[Any]:
    call = ToolUseBlock(id=text, name=text, input={"q": text})
    result = ToolResultBlock(tool_use_id=text, name=text, output=(TextBlock(text=text),), status="error")
    message = hostile_message(text)
    usage = UsageTotals(input_tokens=10, output_tokens=5, model_calls=1)
    return [
        RunStarted(**HEAD, agent=text, input=[Msg.user(text)]),
        ModelCallStarted(**HEAD, iteration=1, model=text, messages=2, tools=[text]),
        ModelCallFinished(**HEAD, iteration=1, usage=Usage(3, 4), latency_s=0.5, finish_reason=text),
        TextDelta(**HEAD, text=text),
        ThinkingDelta(**HEAD, text=text),
        ToolCallStarted(**HEAD, index=0, call_id=text, name=text),
        ToolCallArgumentsDelta(**HEAD, index=0, call_id=text, fragment=text),
        ToolCallCompleted(**HEAD, call=call),
        MessageCompleted(**HEAD, message=message),
        ToolExecutionStarted(**HEAD, call=call),
        ToolProgress(**HEAD, call_id=text, name=text, message=text, fraction=0.5, data={text: text}),
        ToolResult(**HEAD, result=result, duration_s=0.25),
        ToolPermissionAsked(**HEAD, call=call, reason=text),
        ToolSuspended(**HEAD, call=call),
        RetryScheduled(**HEAD, retry_number=1, delay_s=0.5, error=text, budget_remaining=3),
        RepeatGuardTriggered(**HEAD, tool=text, arguments={text: text}, count=3),
        ErrorEvent(**HEAD, error_type=text, message=text),
        StepNote(**HEAD, source=text, text=text, data={text: text}),
        StepStarted(**HEAD, node=text, detail={text: [text]}, iteration=1),
        ToolResultsEvicted(
            **HEAD,
            message_ids=[text],
            call_ids=[text],
            tools=[text],
            tokens_removed=5,
            tokens_before=9,
            tokens_after=4,
        ),
        ContextCompressed(
            **HEAD,
            messages=2,
            first_message_id=text,
            last_message_id=text,
            compressed_total=2,
            summary_tokens=3,
            summariser=text,
            memories_indexed=0,
            tokens_before=9,
            tokens_after=4,
        ),
        MemoriesRecalled(**HEAD, query=text, memory_ids=[text], scores=[0.5], tokens=3),
        AgentResult(
            **HEAD,
            message=message,
            reason="PERMISSION_ASKING",
            structured={text: [text]},
            structured_error=text,
            usage=usage,
            iterations=1,
            pending=[call],
            detail=text,
        ),
    ]


def hostile_state(text: str) -> AgentState:
    call = ToolUseBlock(id=text, name=text, input={"q": text})
    return AgentState(
        messages=[
            Msg.user(text),
            hostile_message(text),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id=text, name=text, output=(TextBlock(text=text),))
            ),
        ],
        pending=[PendingCall(call=call, kind="ask", reason=text)],
        partial_results=[ToolResultBlock(tool_use_id=text, name=text, output=(TextBlock(text=text),))],
        active_groups=[text],
        extras={text: text},
    )


def hostile_toolkit(text: str) -> Toolkit:
    @tool(description=text)
    def lookup(query: str) -> str:
        return query

    kit = Toolkit([lookup])
    kit.create_group(text, text)
    return kit


@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_hostile_text_never_becomes_markup_and_is_shown_as_written(raw: str, shown: str) -> None:
    subjects: list[object] = [
        hostile_message(raw),
        *hostile_events(raw),
        hostile_state(raw),
        hostile_toolkit(raw),
    ]
    for subject in subjects:
        html = html_of(subject)
        parsed = assert_safe(html)
        assert shown in parsed.text, (type(subject).__name__, parsed.text[:400])
        assert not set(HIDDEN) & set(parsed.text), type(subject).__name__
        text = text_of(subject)
        text.encode("utf-8")
        assert not set(HIDDEN) & set(text), type(subject).__name__


def test_a_message_shows_role_text_folded_thinking_calls_and_results() -> None:
    message = Msg(
        role="assistant",
        content=(
            ThinkingBlock(thinking="Let me think about Oslo."),
            TextBlock(text="Checking the weather."),
            ToolUseBlock(id="call_1", name="weather", input={"city": "Oslo"}),
        ),
    )
    html = html_of(message)
    assert_safe(html)
    assert "<details" in html
    assert html.index("<details") < html.index("Let me think") < html.index("</details>")
    assert "open" not in html.split("<details", 1)[1].split(">", 1)[0]  # folded
    assert "Checking the weather." in parse(html).text
    assert '{"city": "Oslo"}' in parse(html).text
    results = Msg.from_tool_results(
        ToolResultBlock(tool_use_id="call_1", name="weather", output=(TextBlock(text="14 °C"),)),
        ToolResultBlock(tool_use_id="call_2", name="clock", output=(TextBlock(text="boom"),), status="error"),
    )
    shown = parse(html_of(results)).text
    assert "weather" in shown
    assert "ok" in shown
    assert "14 °C" in shown
    assert "error" in shown
    assert "boom" in shown
    assert text_of(message).splitlines() == [
        "assistant:",
        "  [thinking, 24 characters] Let me think about Oslo.…",
        "  Checking the weather.",
        '  ⚙ weather({"city": "Oslo"})',
    ]
    assert text_of(results).splitlines() == ["tool:", "  → weather [ok] 14 °C", "  → clock [error] boom"]


def test_images_and_documents_show_what_they_are_never_their_bytes() -> None:
    picture = png(64, 48)
    message = Msg.user(
        [
            "Compare these.",
            ImageBlock.from_bytes(picture),
            ImageBlock.from_url("https://me:hunter2@example.com/cat.png"),
            DocumentBlock.from_bytes(pdf(3), name="<b>brief</b>.pdf"),
            DocumentBlock.from_bytes(b"hello", "text/plain"),
        ]
    )
    assert text_of(message).splitlines() == [
        "user: Compare these.",
        f"  [image image/png 64×48 {len(picture):,} bytes]",
        "  [image image/png at https://me:**********@example.com/cat.png]",
        f"  [document application/pdf <b>brief</b>.pdf 3 pages {len(pdf(3)):,} bytes]",
        "  [document text/plain 5 bytes]",
    ]
    html = html_of(message)
    assert_safe(html)
    assert "hunter2" not in html
    assert "<img" not in html
    assert "base64" not in html
    assert "[document application/pdf <b>brief</b>.pdf 3 pages" in parse(html).text


def test_long_text_is_clipped_with_a_count_of_what_was_left_out() -> None:
    message = Msg.from_tool_results(
        ToolResultBlock(tool_use_id="c", name="dump", output=(TextBlock(text="x" * 50_000),))
    )
    shown = parse(html_of(message)).text
    assert shown.count("x") == 20_000
    assert "30,000 more characters" in shown


class Answer(BaseModel):
    city: str
    degrees: int


async def test_an_agent_result_shows_reason_usage_iterations_answer_and_structured_value() -> None:
    agent = ReActAgent(ScriptedModel(['{"city": "Oslo", "degrees": 14}']), output_type=Answer)
    result = await agent.call("Weather in Oslo?")
    assert result.reason == "STRUCTURED_OUTPUT"
    html = html_of(result)
    text = assert_safe(html).text
    assert "STRUCTURED_OUTPUT" in text
    assert "1 iteration(s)" in text
    assert "1 model call(s)" in text
    assert f"{result.usage.total_tokens:,} tokens" in text
    assert '"degrees": 14' in text
    plain = text_of(result)
    assert plain.startswith("AgentResult STRUCTURED_OUTPUT · 1 iteration(s) · 1 model call(s)")
    assert '"city": "Oslo"' in plain


async def test_a_result_waiting_for_approval_lists_the_calls_and_how_to_decide() -> None:
    from rxagent.tools import Permissions

    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "done"

    agent = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])]),
        Toolkit([refund]),
        permissions=Permissions().ask("refund", reason="refunds need a human"),
    )
    result = await agent.call("refund A-1")
    assert result.reason == "PERMISSION_ASKING"
    shown = parse(html_of(result)).text
    assert "refund" in shown
    assert "r1" in shown
    assert '{"order": "A-1"}' in shown
    assert "rxagent.notebook.approvals(agent, ctx)" in shown
    assert 'waiting: refund({"order": "A-1"}) [r1]' in text_of(result)


async def test_a_session_state_shows_as_a_transcript_in_order() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3})]), "5"])
    agent = ReActAgent(model, Toolkit([add]))
    await agent.call("2 + 3?")
    state = await agent.sessions.state()
    text = parse(html_of(state)).text
    positions = [text.index(piece) for piece in ("2 + 3?", '{"a": 2, "b": 3}', "→", "5")]
    assert positions == sorted(positions)
    assert text_of(state).splitlines() == [
        "AgentState: 4 message(s)",
        "user: 2 + 3?",
        "assistant:",
        '  ⚙ add({"a": 2, "b": 3})',
        "tool:",
        "  → add [ok] 5",
        "assistant: 5",
    ]


def test_a_toolkit_shows_its_tools_flags_and_parameters_without_preset_values() -> None:
    @tool(concurrency_safe=True)
    def search(query: str, limit: int = 5, api_key: str = "") -> str:
        """Search the web.

        Args:
            query: what to look for.
            limit: how many results.
        """
        return query

    @tool
    def wipe() -> str:
        """Delete everything."""
        return "gone"

    @tool(groups=["admin"], read_only=True)
    def audit(day: str) -> str:
        """Read the audit log."""
        return day

    kit = Toolkit()
    kit.register(search, preset={"api_key": "sk-secret-value"})
    kit.register(wipe)
    kit.register(audit)
    kit.create_group("admin")
    kit.disable("wipe")
    html = html_of(kit)
    assert_safe(html)
    shown = parse(html).text
    assert "sk-secret-value" not in html
    assert "sk-secret-value" not in text_of(kit)
    for piece in (
        "search",
        "Search the web.",
        "query",
        "what to look for.",
        "limit",
        "wipe",
        "audit",
        "admin",
    ):
        assert piece in shown, piece
    assert "disabled" in shown
    assert "group inactive" in shown
    assert "concurrency-safe" in shown
    assert "preset: api_key" in shown
    assert text_of(kit).splitlines() == [
        "Toolkit: 3 tool(s)",
        "  search(query: string, limit?: integer)  [preset: api_key, concurrency-safe] — Search the web.",
        "  wipe()  [disabled] — Delete everything.",
        "  audit(day: string)  [group inactive, groups: admin, read-only] — Read the audit log.",
    ]


async def test_every_event_of_a_run_displays_in_ipython_as_html_and_text() -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    model = ScriptedModel(
        [
            ScriptedResponse(
                thinking="hm", text="Adding.", tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 2})]
            ),
            "3",
        ]
    )
    agent = ReActAgent(model, Toolkit([add]))
    events = await to_list(agent.stream_events("1 + 2?"))
    formatter = InteractiveShell.instance().display_formatter
    state = await agent.sessions.state()
    for subject in [*events, state, agent.toolkit, state.messages[0]]:
        bundle, _ = formatter.format(subject)
        assert "text/html" in bundle, type(subject).__name__
        assert_safe(bundle["text/html"])
        assert bundle["text/plain"] == text_of(subject)
    assert text_of(events[0]) == '#0 run_started: agent started with "1 + 2?"'
    steps = [e for e in events if isinstance(e, StepStarted)]
    assert [text_of(e).split(": ", 1)[1].split(",")[0] for e in steps] == [
        "Start",
        "Reason",
        "Act",
        "Reason",
        "Finish",
    ]
    act = steps[2]
    assert text_of(act) == (
        f'#{act.seq} step_started: Act, iteration 1 {{"calls": [{{"id": "call_1", "name": "add"}}]}}'
    )


def test_objects_it_does_not_display_are_refused_clearly() -> None:
    for bad in (object(), "text", 3, [Msg.user("a list is not displayed")]):
        with pytest.raises(TypeError, match="no notebook display for"):
            html_of(bad)
        with pytest.raises(TypeError, match="no notebook display for"):
            text_of(bad)


def test_importing_rxagent_and_its_displayable_classes_does_not_load_the_notebook_package() -> None:
    code = (
        "import sys, rxagent, rxagent.messages, rxagent.events, rxagent.state, rxagent.tools;"
        "print(sorted(m for m in ('rxagent.notebook', 'IPython', 'ipywidgets') if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.strip() == "[]"


def test_in_a_fresh_kernel_a_message_renders_as_html_once_rxagent_is_imported() -> None:
    # The data never imports the notebook package: the registry imports it on the first display.
    code = (
        "import sys\n"
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "from rxagent import Msg\n"
        "before = 'rxagent.notebook' in sys.modules\n"
        "bundle, _ = InteractiveShell.instance().display_formatter.format(Msg.user('<b>hi</b>'))\n"
        "print(before, 'rxagent.notebook' in sys.modules, '&lt;b&gt;hi&lt;/b&gt;' in bundle['text/html'])\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert loaded.stdout.split() == ["False", "True", "True"]
