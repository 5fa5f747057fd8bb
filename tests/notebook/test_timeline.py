"""Pictures of a run: spans from events, lanes for overlapping calls, retries, the SVG's structure."""

from __future__ import annotations

import asyncio
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from IPython.core.interactiveshell import InteractiveShell

from rxagent import Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall, TextBlock
from rxagent.agent import ReActAgent
from rxagent.chunks import Usage
from rxagent.events import (
    AgentEvent,
    ModelCallFinished,
    ModelCallStarted,
    RetryScheduled,
    RunStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolResult,
    event_from_json,
    event_to_json,
)
from rxagent.messages import ToolResultBlock, ToolUseBlock
from rxagent.notebook import Timeline, UsageChart, timeline, usage_chart
from rxagent.operators import to_list
from rxagent.retry import RetryPolicy
from rxagent.tools import Permissions, Toolkit, tool
from tests.model.openai_server import OpenAIServer, Reply, finish_chunk, make_model, text_chunk, usage_chunk

from .html_check import HOSTILE

SVG = "{http://www.w3.org/2000/svg}"


def bars(svg: str, kind: str | None = None) -> list[ET.Element]:
    root = ET.fromstring(svg)  # a strict XML parser: the SVG must be well-formed
    found = [e for e in root.iter(f"{SVG}rect") if e.get("class") == "rxa-bar"]
    return [e for e in found if kind is None or e.get("data-kind") == kind]


def parallel_agent(count: int) -> tuple[ReActAgent, ScriptedModel]:
    """Tools that each wait until all ``count`` have started: they overlap however the machine runs them."""
    started = 0
    everyone = asyncio.Event()

    @tool(concurrency_safe=True)
    async def fetch(page: int) -> str:
        """Fetch a page."""
        nonlocal started
        started += 1
        if started == count:
            everyone.set()
        await asyncio.wait_for(everyone.wait(), 5)
        return f"page {page}"

    calls = [ScriptedToolCall("fetch", {"page": i}, id=f"p{i}") for i in range(count)]
    model = ScriptedModel([ScriptedResponse(tool_calls=calls), "All pages fetched."])
    return ReActAgent(model, Toolkit([fetch])), model


async def test_parallel_tool_calls_are_side_by_side_on_separate_lanes() -> None:
    agent, _ = parallel_agent(3)
    events = await to_list(agent.stream_events("fetch three pages"))
    picture = timeline(events)

    assert [s.label for s in picture.model_calls] == ["scripted", "scripted"]
    assert sorted(s.call_id or "" for s in picture.tool_calls) == ["p0", "p1", "p2"]
    assert sorted(s.lane for s in picture.tool_calls) == [0, 1, 2]
    assert picture.lanes("tool") == 3
    assert picture.lanes("model") == 1
    assert all(s.status == "ok" and s.duration > 0 for s in picture.tool_calls)
    first, second = picture.model_calls
    assert first.end <= min(s.start for s in picture.tool_calls)
    assert second.start >= max(s.end for s in picture.tool_calls) - 1e-3
    svg = picture.svg()
    assert len(bars(svg, "model")) == 2
    assert len(bars(svg, "tool")) == 3
    tool_rows = {bar.get("y") for bar in bars(svg, "tool")}
    assert len(tool_rows) == 3  # drawn on three rows
    assert {bar.get("data-call-id") for bar in bars(svg, "tool")} == {"p0", "p1", "p2"}


async def test_sequential_tool_calls_share_one_lane() -> None:
    @tool
    def step(n: int) -> str:
        """One step."""
        return str(n)

    calls = [ScriptedToolCall("step", {"n": i}) for i in range(3)]
    agent = ReActAgent(ScriptedModel([ScriptedResponse(tool_calls=calls), "done"]), Toolkit([step]))
    picture = timeline(await to_list(agent.stream_events("go")))
    assert [s.lane for s in picture.tool_calls] == [0, 0, 0]
    assert len(bars(picture.svg(), "tool")) == 3


async def test_a_retried_model_call_is_one_bar_with_the_retry_marked(server: OpenAIServer) -> None:
    server.script(
        Reply.error(503, "overloaded"),
        Reply.sse(text_chunk("Fine."), finish_chunk(), usage_chunk(prompt=11, completion=3)),
    )
    async with make_model(server, retry=RetryPolicy(max_attempts=3, base_delay=0.01, jitter=0.0)) as model:
        events = await to_list(ReActAgent(model).stream_events("Hello?"))
    picture = timeline(events)
    [call] = picture.model_calls
    [retry] = call.retries
    assert (retry.number, retry.delay_s) == (1, pytest.approx(0.01))
    assert "503" in retry.error
    assert call.start <= retry.at <= call.end
    assert call.usage == Usage(input_tokens=11, output_tokens=3)
    root = ET.fromstring(picture.svg())
    marks = [g for g in root.iter(f"{SVG}g") if g.get("class") == "rxa-retry"]
    assert len(marks) == 1
    tip = marks[0].find(f"{SVG}title")
    assert tip is not None
    assert "retry 1" in (tip.text or "")
    assert "503" in (tip.text or "")
    assert len(bars(picture.svg(), "model")) == 1


def head(run: str, seq: int, at: float) -> dict[str, Any]:
    return {"run_id": run, "session_id": "s", "trace_id": "t", "seq": seq, "time": at}


def handmade() -> list[AgentEvent]:
    """A run at known times: a model call with a retry, then two overlapping calls, one denied call."""
    a = ToolUseBlock(id="a", name="search", input={})
    b = ToolUseBlock(id="b", name="search", input={})
    return [
        RunStarted(**head("r", 0, 100.0), agent="x", input=[Msg.user("q")]),
        ModelCallStarted(**head("r", 1, 100.0), iteration=1, model="m", messages=1, tools=["search"]),
        RetryScheduled(**head("r", 2, 100.5), retry_number=1, delay_s=0.5, error="503", budget_remaining=7),
        ModelCallFinished(
            **head("r", 3, 102.0), iteration=1, usage=Usage(40, 10), latency_s=2.0, finish_reason="tool_calls"
        ),
        ToolExecutionStarted(**head("r", 4, 102.0), call=a),
        ToolExecutionStarted(**head("r", 5, 102.5), call=b),
        ToolResult(**head("r", 6, 104.0), result=result_of("a", "search", "ok"), duration_s=1.0),
        ToolResult(**head("r", 7, 104.0), result=result_of("b", "search", "error"), duration_s=1.5),
        ToolResult(**head("r", 8, 104.0), result=result_of("c", "wipe", "denied"), duration_s=0.0),
    ]


def result_of(call_id: str, name: str, status: Any) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, name=name, output=(TextBlock(text="x"),), status=status)


def test_spans_take_their_times_from_the_events() -> None:
    picture = Timeline.from_events(handmade())
    [model] = picture.model_calls
    assert (model.start, model.end, model.status, model.iteration) == (100.0, 102.0, "tool_calls", 1)
    spans = {s.call_id: s for s in picture.tool_calls}
    assert (spans["a"].start, spans["a"].end, spans["a"].lane, spans["a"].status) == (102.0, 103.0, 0, "ok")
    assert (spans["b"].start, spans["b"].end, spans["b"].lane, spans["b"].status) == (
        102.5,
        104.0,
        1,
        "error",
    )
    # refused before it ran: a span of no length where its result came, on a lane of its own at that moment
    assert (spans["c"].start, spans["c"].end, spans["c"].status) == (104.0, 104.0, "denied")
    assert (picture.origin, picture.end) == (100.0, 104.0)
    svg = picture.svg(width=500)
    assert len(bars(svg, "tool")) == 3
    assert len(bars(svg, "model")) == 1
    model_bar = bars(svg, "model")[0]
    # 500 px wide, 96 px of labels on the left, 16 on the right: 388 px for 4 s
    assert float(model_bar.get("x") or 0) == pytest.approx(96.0)
    assert float(model_bar.get("width") or 0) == pytest.approx(2.0 / 4.0 * 388, abs=0.1)


def test_events_read_back_from_json_give_the_same_picture() -> None:
    events = handmade()
    again = [event_from_json(event_to_json(e)) for e in events]
    assert Timeline.from_events(again) == Timeline.from_events(events)


async def test_calls_that_wait_or_never_finish_are_shown_as_such() -> None:
    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    calls = [ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]
    agent = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=calls)]),
        Toolkit([refund]),
        permissions=Permissions().ask("refund"),
    )
    events = await to_list(agent.stream_events("refund it"))
    assert any(isinstance(e, ToolPermissionAsked) for e in events)
    [waiting] = timeline(events).tool_calls
    assert (waiting.call_id, waiting.status, waiting.duration) == ("r1", "waiting", 0.0)
    # a run whose events stop mid-call (cancelled): the call lasts until the last event
    cut = handmade()[:6]
    unfinished = {s.call_id: s.status for s in timeline(cut).tool_calls}
    assert unfinished == {"a": "unfinished", "b": "unfinished"}


@pytest.mark.parametrize(("raw", "shown"), HOSTILE)
def test_tool_and_model_names_are_escaped_and_the_svg_stays_well_formed(raw: str, shown: str) -> None:
    call = ToolUseBlock(id=raw, name=raw, input={})
    events: list[AgentEvent] = [
        ModelCallStarted(**head("r", 0, 1.0), iteration=1, model=raw, messages=1, tools=[raw]),
        RetryScheduled(**head("r", 1, 1.2), retry_number=1, delay_s=0.1, error=raw, budget_remaining=1),
        ModelCallFinished(**head("r", 2, 2.0), iteration=1, usage=None, latency_s=1.0, finish_reason=raw),
        ToolExecutionStarted(**head("r", 3, 2.0), call=call),
        ToolResult(**head("r", 4, 3.0), result=result_of(raw, raw, "ok"), duration_s=1.0),
    ]
    for svg in (timeline(events).svg(), usage_chart(events).svg()):
        root = ET.fromstring(svg)
        assert not [
            e for e in root.iter() if e.tag.replace(SVG, "") in {"script", "a", "foreignObject", "image"}
        ]
        for element in root.iter():
            assert not [name for name in element.attrib if name.lower().startswith("on")]
    picture = timeline(events).svg()
    titles = " ".join(t.text or "" for t in ET.fromstring(picture).iter(f"{SVG}title"))
    assert shown in titles
    [tool_bar] = bars(picture, "tool")
    assert tool_bar.get("data-call-id") == shown


def test_the_usage_chart_has_one_step_per_model_call_with_its_tokens() -> None:
    events = handmade()
    second = ModelCallFinished(
        **head("r", 9, 105.0), iteration=2, usage=Usage(80, 20), latency_s=1.0, finish_reason="stop"
    )
    chart = usage_chart([*events, second])
    assert [(s.step, s.iteration, s.usage.total_tokens) for s in chart.steps] == [(1, 1, 50), (2, 2, 100)]
    root = ET.fromstring(chart.svg())
    steps = [g for g in root.iter(f"{SVG}g") if g.get("class") == "rxa-step"]
    assert [g.get("data-step") for g in steps] == ["1", "2"]
    heights = [[float(r.get("height") or 0) for r in g.iter(f"{SVG}rect")] for g in steps]
    # stacked input and output bars in proportion to the tokens; the largest call fills the plot
    assert heights[1] == [pytest.approx(144.0), pytest.approx(36.0)]
    assert heights[0] == [pytest.approx(72.0), pytest.approx(18.0)]


def test_pictures_save_to_files_and_display_inline(tmp_path: Path) -> None:
    picture, chart = timeline(handmade()), usage_chart(handmade())
    saved = picture.save(tmp_path / "run.svg")
    assert saved.read_text(encoding="utf-8") == picture.svg()
    assert chart.save(tmp_path / "tokens.svg").read_text(encoding="utf-8") == chart.svg()
    formatter = InteractiveShell.instance().display_formatter
    texts: list[str] = []
    for subject in (picture, chart):
        bundle, _ = formatter.format(subject)
        assert bundle["image/svg+xml"] == subject.svg()
        texts.append(bundle["text/plain"])
    assert texts == [
        "Timeline: 1 model call(s), 3 tool call(s) over 4.000 s; lanes: model 1, tools 2",
        "UsageChart: 1 model call(s), 40 input / 10 output tokens",
    ]


def test_bad_input_is_refused_clearly() -> None:
    with pytest.raises(ValueError, match="no events"):
        timeline([])
    with pytest.raises(ValueError, match="no events"):
        usage_chart(iter([]))
    with pytest.raises(TypeError, match="item 1 is a dict"):
        timeline([handmade()[0], {"type": "run_started"}])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="width"):
        timeline(handmade()).svg(width=50)
    with pytest.raises(ValueError, match="width"):
        usage_chart(handmade()).svg(width=0)
    assert isinstance(UsageChart.from_events(handmade()), UsageChart)
