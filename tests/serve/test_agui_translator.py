"""The AG-UI translation on its own, for event sequences a scripted model does not produce: a tool call whose
id and name come late, a run cut off in the middle of everything, a turn asked twice, a run that never
started. Each translated stream must still pass AG-UI's ordering rules (``check_ordering``)."""

from __future__ import annotations

from typing import Any

from ag_ui.core import (
    BaseEvent,
    CustomEvent,
    EventType,
    RunErrorEvent,
    RunFinishedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    ToolCallArgsEvent,
)

from rxagent.chunks import Usage
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ContextOverflowRetry,
    ModelCallFinished,
    ModelCallStarted,
    RunStarted,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    TodoItem,
    TodosUpdated,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    UsageTotals,
)
from rxagent.messages import ToolUseBlock
from rxagent.serve.agui import AguiTranslator
from tests.serve.test_agui import check_ordering

HEAD: dict[str, Any] = {"run_id": "run_1", "session_id": "t", "trace_id": "trace_1", "seq": 0}


def translate(*events: AgentEvent) -> list[BaseEvent]:
    translator = AguiTranslator("t", "agui-run", "run_1", model="m")
    out = [e for event in events for e in translator.translate(event)]
    check_ordering(out)
    return out


def started() -> RunStarted:
    return RunStarted(**HEAD, agent="a", input=[])


def ended(reason: Any) -> AgentResult:
    return AgentResult(**HEAD, message=None, reason=reason)


def test_a_call_whose_id_and_name_come_late_is_told_whole_when_it_completes() -> None:
    call = ToolUseBlock(id="c9", name="lookup", input={"city": "Oslo"}, raw_arguments='{"city": "Oslo"}')
    out = translate(
        started(),
        ToolCallStarted(**HEAD, index=0, call_id=None, name=None),
        ToolCallArgumentsDelta(**HEAD, index=0, call_id=None, fragment='{"city": '),
        ToolCallArgumentsDelta(**HEAD, index=0, call_id=None, fragment='"Oslo"}'),
        ToolCallCompleted(**HEAD, call=call),
        ended("MODEL_STOP"),
    )
    types = [e.type for e in out]
    start = types.index(EventType.TOOL_CALL_START)
    assert types[start : start + 3] == [
        EventType.TOOL_CALL_START,
        EventType.TOOL_CALL_ARGS,
        EventType.TOOL_CALL_END,
    ]
    args = out[start + 1]
    assert isinstance(args, ToolCallArgsEvent)
    assert (args.tool_call_id, args.delta) == ("c9", '{"city": "Oslo"}')


def test_a_run_cut_off_mid_stream_closes_everything_before_it_finishes() -> None:
    out = translate(
        started(),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=[]),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=[]),  # the same turn, asked again
        ThinkingDelta(**HEAD, text="hmm"),
        TextDelta(**HEAD, text="Let me"),
        ToolCallStarted(**HEAD, index=0, call_id="c1", name="lookup"),
        ToolCallArgumentsDelta(**HEAD, index=0, call_id="c1", fragment='{"ci'),
        ended("INTERRUPTED"),  # no MessageCompleted: the run stopped mid-answer
    )
    assert [e.type for e in out].count(EventType.STEP_STARTED) == 1
    finished = out[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome is not None
    assert finished.outcome.type == "cancelled"
    assert finished.usage is None  # no model call finished: no usage to report, not zeros


def test_usage_counts_the_calls_that_finished() -> None:
    totals = UsageTotals()
    totals.add(Usage(input_tokens=10, output_tokens=4))
    out = translate(
        started(),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=[]),
        TextDelta(**HEAD, text="Hi."),
        ModelCallFinished(
            **HEAD,
            iteration=1,
            usage=Usage(input_tokens=10, output_tokens=4),
            latency_s=0.1,
            finish_reason="stop",
        ),
        AgentResult(**HEAD, message=None, reason="MODEL_STOP", usage=totals),
    )
    finished = out[-1]
    assert isinstance(finished, RunFinishedEvent)
    assert finished.usage is not None
    (usage,) = finished.usage
    assert (usage.model, usage.input_tokens, usage.output_tokens, usage.total_tokens) == ("m", 10, 4, 14)
    assert usage.reasoning_tokens is None  # not reported, so absent rather than zero


def test_a_run_that_never_started_is_one_run_error_and_then_nothing() -> None:
    translator = AguiTranslator("t", "agui-run", "run_1")
    (error,) = translator.fail("the session stayed busy", "SessionBusyError")
    assert isinstance(error, RunErrorEvent)
    check_ordering([error])
    assert translator.translate(started()) == []
    assert translator.fail("again") == []


def steps_of(out: list[BaseEvent]) -> list[tuple[str, str]]:
    return [
        ("start" if isinstance(e, StepStartedEvent) else "end", e.step_name)
        for e in out
        if isinstance(e, StepStartedEvent | StepFinishedEvent)
    ]


def test_each_node_is_a_step_finished_when_the_next_starts_with_model_calls_inside() -> None:
    def node(name: str) -> StepStarted:
        return StepStarted(**HEAD, node=name, detail={}, iteration=1)

    out = translate(
        started(),
        node("Start"),
        node("Reason"),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=[]),
        ModelCallFinished(**HEAD, iteration=1, usage=None, latency_s=0.1, finish_reason="stop"),
        node("Reason"),  # the same node type again: the one before was finished first
        ModelCallStarted(**HEAD, iteration=2, model="m", messages=1, tools=[]),  # cut off: never finished
        node("Finish"),
        ended("INTERRUPTED"),
    )
    assert steps_of(out) == [
        ("start", "Start"),
        ("end", "Start"),
        ("start", "Reason"),
        ("start", "model call 1"),
        ("end", "model call 1"),
        ("end", "Reason"),
        ("start", "Reason"),
        ("start", "model call 2"),
        ("end", "Reason"),
        ("start", "Finish"),
        ("end", "model call 2"),  # what the run left open is finished at its end, the node last
        ("end", "Finish"),
    ]
    assert isinstance(out[-1], RunFinishedEvent)


def test_a_node_named_like_an_open_step_is_not_told_rather_than_reopened() -> None:
    out = translate(
        started(),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=[]),
        StepStarted(**HEAD, node="model call 1", detail={}, iteration=1),
        ended("MODEL_STOP"),
    )
    assert steps_of(out) == [("start", "model call 1"), ("end", "model call 1")]


def test_the_harness_events_reach_ag_ui_as_custom_events() -> None:
    todos = TodosUpdated(**HEAD, todos=[TodoItem(content="Read", status="in_progress")])
    retry = ContextOverflowRetry(**HEAD, cause="provider", tokens=900, allowed=675, detail="HTTP 400")
    out = translate(started(), todos, retry, ended("MODEL_STOP"))
    custom = [e for e in out if isinstance(e, CustomEvent) and e.name != "rxagent.run_state"]
    assert [e.name for e in custom] == ["rxagent.todos_updated", "rxagent.context_overflow_retry"]
    assert custom[0].value["todos"] == [{"content": "Read", "status": "in_progress"}]
    assert custom[1].value["allowed"] == 675
