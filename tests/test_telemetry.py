"""OpenTelemetry spans of agent runs, read back from the SDK's in-memory exporter: names, parents, attributes,
trace ids, contents only when asked for, and every span ended however the run ends.

Bad inputs tried: a tool that raises, a model call that fails, a custom (non-W3C) trace id, a context
whose parent span id is not a span id, an unsampled ``traceparent``, a run cancelled in a tool and one
cancelled mid-stream, no tracer provider at all, the package without OpenTelemetry installed, an image
URL carrying a signature (masked in the recorded contents).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import rxagent.telemetry
from rxagent import DocumentBlock, ImageBlock, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.agent.middleware import watches_events
from rxagent.context import RuntimeContext
from rxagent.logs import json_log_handler
from rxagent.model import ChatRequest, ModelHTTPError, Usage
from rxagent.model.scripted import FunctionModel
from rxagent.telemetry import Telemetry, traceparent
from rxagent.tools import Toolkit, tool

from .agent.helpers import run
from .test_media import pdf, png

WAIT = 10.0
HEADER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
CONTENT_KEYS = {
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
}


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


def spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    """Finished spans in the order they started."""
    return sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)


def hex_id(value: int, digits: int = 32) -> str:
    return f"{value:0{digits}x}"


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


@tool
def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


@tool
async def refund(order: str) -> str:
    """Refund an order."""
    raise ValueError(f"card declined for order {order}")


def calculator(telemetry: Telemetry, *extra: ScriptedResponse | str | Exception) -> ReActAgent:
    model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3}, id="call_add")],
                usage=Usage(input_tokens=30, output_tokens=7),
            ),
            ScriptedResponse(
                text="2 + 3 = 5", usage=Usage(input_tokens=45, output_tokens=9, cache_read_tokens=20)
            ),
            *extra,
        ],
        model_name="tiny-model",
    )
    return ReActAgent(model, Toolkit([add, refund]), name="calc", middleware=[telemetry])


async def test_a_run_is_one_invoke_agent_span_with_its_chat_and_tool_spans_in_order(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider))
    ctx = RuntimeContext(session_id="alice")
    result = await agent.call("What is 2 + 3?", ctx)
    assert result.text == "2 + 3 = 5"
    finished = spans(exporter)
    assert [s.name for s in finished] == [
        "invoke_agent calc",
        "chat tiny-model",
        "execute_tool add",
        "chat tiny-model",
    ]
    root, first_chat, tool_span, second_chat = finished
    assert root.parent is None
    for child in (first_chat, tool_span, second_chat):
        assert child.parent is not None
        assert child.parent.span_id == root.context.span_id
        assert root.start_time <= child.start_time  # type: ignore[operator]
        assert child.end_time <= root.end_time
    assert first_chat.end_time <= tool_span.start_time  # type: ignore[operator]
    assert tool_span.end_time <= second_chat.start_time  # type: ignore[operator]
    # the run's trace id is the trace id of every span
    assert {hex_id(s.context.trace_id) for s in finished} == {ctx.trace_id} == {result.trace_id}
    assert [s.kind for s in finished] == [
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
        SpanKind.INTERNAL,
        SpanKind.CLIENT,
    ]
    assert all(s.status.status_code == StatusCode.UNSET for s in finished)


async def test_spans_carry_the_conventions_attributes_and_the_usage(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider))
    result = await agent.call("What is 2 + 3?", RuntimeContext(session_id="alice"))
    root, first_chat, tool_span, second_chat = spans(exporter)
    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": "calc",
        "gen_ai.provider.name": "rxagent.scripted",
        "gen_ai.request.model": "tiny-model",
        "gen_ai.conversation.id": "alice",
        "gen_ai.usage.input_tokens": 75,
        "gen_ai.usage.output_tokens": 16,
        "gen_ai.usage.cache_read.input_tokens": 20,
        "rxagent.run.id": result.run_id,
        "rxagent.run.reason": "MODEL_STOP",
        "rxagent.run.iterations": 2,
    }
    assert (result.usage.input_tokens, result.usage.output_tokens) == (75, 16)
    assert attrs(first_chat) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "rxagent.scripted",
        "gen_ai.request.model": "tiny-model",
        "gen_ai.conversation.id": "alice",
        "gen_ai.usage.input_tokens": 30,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.response.finish_reasons": ("tool_calls",),
    }
    assert attrs(second_chat)["gen_ai.response.finish_reasons"] == ("stop",)
    assert attrs(second_chat)["gen_ai.usage.cache_read.input_tokens"] == 20
    assert attrs(tool_span) == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "add",
        "gen_ai.tool.call.id": "call_add",
        "gen_ai.tool.type": "function",
        "gen_ai.tool.description": "Add two numbers.",
    }


async def test_request_options_and_a_provider_name_given_to_telemetry(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from rxagent.agent import AgentOptions

    agent = ReActAgent(
        ScriptedModel(["hi"]),
        options=AgentOptions(temperature=0.2, max_tokens=64),
        middleware=[Telemetry(provider, provider_name="openai")],
    )
    await agent.call("hello")
    root, chat = spans(exporter)
    assert attrs(root)["gen_ai.provider.name"] == "openai"
    assert attrs(chat)["gen_ai.provider.name"] == "openai"
    assert (attrs(chat)["gen_ai.request.temperature"], attrs(chat)["gen_ai.request.max_tokens"]) == (0.2, 64)
    assert attrs(root)["gen_ai.conversation.id"] == "default"


async def test_a_failing_tool_gives_its_span_an_error_type_and_no_content(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "42"}, id="call_r")]), "Sorry."]
    )
    agent = ReActAgent(model, Toolkit([refund]), middleware=[Telemetry(provider)])
    result = await agent.call("Refund order 42.")
    assert result.text == "Sorry."  # the model read the error and answered
    root, _, tool_span, _ = spans(exporter)
    assert attrs(tool_span)["error.type"] == "ValueError"
    assert tool_span.status.status_code == StatusCode.ERROR
    assert tool_span.status.description is None  # the result's text is content: not without opt-in
    assert root.status.status_code == StatusCode.UNSET  # the run itself went fine
    assert "error.type" not in attrs(root)


async def test_a_failing_model_call_fails_its_chat_span_and_the_run_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    failure = ModelHTTPError(400, "unknown parameter", url="http://model")
    agent = ReActAgent(ScriptedModel([failure]), middleware=[Telemetry(provider)])
    with pytest.raises(ModelHTTPError):
        await agent.call("hello")
    root, chat = spans(exporter)
    for span in (root, chat):
        assert attrs(span)["error.type"] == "ModelHTTPError"
        assert span.status.status_code == StatusCode.ERROR
        assert span.status.description == "ModelHTTPError: HTTP 400 from http://model: unknown parameter"
    assert chat.parent is not None
    assert chat.parent.span_id == root.context.span_id
    assert attrs(root)["rxagent.run.reason"] == "ERROR"


async def test_contents_are_absent_by_default(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider))
    await agent.call("What is 2 + 3? secret-prompt")
    for span in spans(exporter):
        assert not CONTENT_KEYS & attrs(span).keys(), span.name
        for value in attrs(span).values():
            assert "secret-prompt" not in str(value)
            assert "2 + 3 = 5" not in str(value)


async def test_contents_are_recorded_in_the_conventions_shape_when_asked_for(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider, capture_content=True))
    await agent.call("What is 2 + 3?")
    root, first_chat, tool_span, second_chat = spans(exporter)
    question = [{"role": "user", "parts": [{"type": "text", "content": "What is 2 + 3?"}]}]
    answer = [
        {"role": "assistant", "parts": [{"type": "text", "content": "2 + 3 = 5"}], "finish_reason": "stop"}
    ]
    assert json.loads(attrs(root)["gen_ai.input.messages"]) == question
    assert json.loads(attrs(root)["gen_ai.output.messages"]) == answer
    assert json.loads(attrs(first_chat)["gen_ai.input.messages"]) == question
    call = {"type": "tool_call", "id": "call_add", "name": "add", "arguments": {"a": 2, "b": 3}}
    assert json.loads(attrs(first_chat)["gen_ai.output.messages"]) == [
        {"role": "assistant", "parts": [call], "finish_reason": "tool_calls"}
    ]
    assert json.loads(attrs(second_chat)["gen_ai.input.messages"]) == [
        *question,
        {"role": "assistant", "parts": [call]},
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_add", "response": "5"}]},
    ]
    assert json.loads(attrs(second_chat)["gen_ai.output.messages"]) == answer
    assert json.loads(attrs(tool_span)["gen_ai.tool.call.arguments"]) == {"a": 2, "b": 3}
    assert attrs(tool_span)["gen_ai.tool.call.result"] == "5"


async def test_media_is_recorded_by_reference_or_by_size_never_by_its_bytes(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ReActAgent(ScriptedModel(["Two."]), middleware=[Telemetry(provider, capture_content=True)])
    picture = ImageBlock.from_bytes(png(2, 2))
    signed = "https://example.com/cat.png?X-Amz-Signature=s3cr3t"
    await agent.call(["How many?", picture, ImageBlock.from_url(signed), DocumentBlock.from_bytes(pdf(1))])
    root, chat = spans(exporter)
    recorded = attrs(chat)["gen_ai.input.messages"]
    assert json.loads(recorded) == [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "How many?"},
                {"type": "image", "mime_type": "image/png", "size": picture.size},
                {
                    "type": "uri",
                    "modality": "image",
                    "mime_type": "image/png",
                    "uri": "https://example.com/cat.png?X-Amz-Signature=**********",
                },
                {"type": "document", "mime_type": "application/pdf", "size": len(pdf(1))},
            ],
        }
    ]
    assert "s3cr3t" not in recorded
    assert attrs(root)["gen_ai.input.messages"] == recorded


async def test_a_failing_tools_result_is_its_status_message_when_contents_are_recorded(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "42"})]), "Sorry."]
    )
    agent = ReActAgent(model, Toolkit([refund]), middleware=[Telemetry(provider, capture_content=True)])
    await agent.call("Refund order 42.")
    tool_span = spans(exporter)[2]
    assert tool_span.status.description == "Error: ValueError: card declined for order 42"


async def test_a_traceparent_makes_the_run_join_the_callers_trace(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider))
    ctx = RuntimeContext(session_id="s").with_traceparent(HEADER)
    result = await agent.call("What is 2 + 3?", ctx)
    finished = spans(exporter)
    root = finished[0]
    assert root.parent is not None
    assert (hex_id(root.parent.span_id, 16), root.parent.is_remote) == ("00f067aa0ba902b7", True)
    assert {hex_id(s.context.trace_id) for s in finished} == {"4bf92f3577b34da6a3ce929d0e0e4736"}
    assert result.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in finished[1:])


async def test_an_unsampled_traceparent_records_nothing(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = calculator(Telemetry(provider))
    ctx = RuntimeContext(session_id="s").with_traceparent(HEADER[:-2] + "00")
    result = await agent.call("What is 2 + 3?", ctx)
    assert result.text == "2 + 3 = 5"
    assert exporter.get_finished_spans() == ()  # the SDK's default sampler follows the caller's decision


async def test_a_custom_trace_id_or_a_bad_parent_span_id_leaves_the_run_a_root(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ReActAgent(ScriptedModel(["one", "two"]), middleware=[Telemetry(provider)])
    await agent.call("a", RuntimeContext(trace_id="request-17"))
    await agent.call("b", RuntimeContext(parent_span_id="not-a-span-id"))
    custom, _, bad_parent, _ = spans(exporter)
    assert custom.parent is None
    assert attrs(custom)["rxagent.trace_id"] == "request-17"  # the tracer chose the span's trace id
    assert bad_parent.parent is None


async def test_traceparent_runs_an_agent_under_a_span_of_ones_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ReActAgent(ScriptedModel(["hi"]), middleware=[Telemetry(provider)])
    with provider.get_tracer("app").start_as_current_span("handle request") as outer:
        header = traceparent()
        assert header is not None
        await agent.call("hello", RuntimeContext().with_traceparent(header))
    assert traceparent() is None  # no span is current here
    request, root, _ = spans(exporter)
    assert request.name == "handle request"
    assert root.parent is not None
    assert root.parent.span_id == outer.get_span_context().span_id
    assert root.context.trace_id == request.context.trace_id


async def test_a_nested_run_hangs_under_the_tool_call_that_runs_it(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    clerk = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 1})]), "2"]),
        Toolkit([add]),
        name="clerk",
        middleware=[Telemetry(provider)],  # an instance of its own: spans still find their parents
    )
    lead = ReActAgent(
        ScriptedModel(
            [
                ScriptedResponse(
                    tool_calls=[
                        ScriptedToolCall("clerk", {"task": "1 + 1"}, id="call_clerk"),
                        ScriptedToolCall("add", {"a": 5, "b": 5}, id="call_add"),
                    ]
                ),
                "2 and 10",
            ]
        ),
        Toolkit([clerk.as_tool(), add]),
        name="lead",
        middleware=[Telemetry(provider)],
    )
    result, events = await run(lead, "Add things.")
    by_id = {s.context.span_id: s for s in exporter.get_finished_spans()}

    def parent_name(span: ReadableSpan) -> str | None:
        return by_id[span.parent.span_id].name if span.parent is not None else None

    tree = sorted((s.name, parent_name(s)) for s in by_id.values())
    assert tree == sorted(
        [
            ("invoke_agent lead", None),
            ("chat scripted", "invoke_agent lead"),
            ("execute_tool clerk", "invoke_agent lead"),
            ("execute_tool add", "invoke_agent lead"),
            ("invoke_agent clerk", "execute_tool clerk"),
            ("chat scripted", "invoke_agent clerk"),
            ("execute_tool add", "invoke_agent clerk"),
            ("chat scripted", "invoke_agent clerk"),
            ("chat scripted", "invoke_agent lead"),
        ]
    )
    assert {hex_id(s.context.trace_id) for s in by_id.values()} == {result.trace_id}
    child = next(s for s in by_id.values() if s.name == "invoke_agent clerk")
    nested_run = next(e.run_id for e in events if e.parent_run_id == result.run_id)
    assert (attrs(child)["rxagent.run.id"], attrs(child)["rxagent.parent_run.id"]) == (
        nested_run,
        result.run_id,
    )


async def test_a_run_cancelled_in_a_tool_ends_its_open_spans(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    started = asyncio.Event()

    @tool
    async def wait_forever() -> str:
        """Waits until cancelled."""
        started.set()
        await asyncio.Event().wait()
        return "unreachable"

    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("wait_forever")])])
    agent = ReActAgent(model, Toolkit([wait_forever]), middleware=[Telemetry(provider)])
    running = asyncio.ensure_future(agent.call("go"))
    await asyncio.wait_for(started.wait(), WAIT)
    assert [s.name for s in spans(exporter)] == ["chat scripted"]  # the others are still open
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    root, chat, tool_span = spans(exporter)
    assert (root.name, tool_span.name) == ("invoke_agent agent", "execute_tool wait_forever")
    for span in (root, tool_span):
        assert attrs(span)["error.type"] == "cancelled"
        assert span.status.status_code == StatusCode.ERROR
    assert chat.status.status_code == StatusCode.UNSET
    assert tool_span.end_time <= root.end_time  # type: ignore[operator]
    assert not rxagent.telemetry._run_spans  # what the spans held is released
    assert not rxagent.telemetry._tool_spans


async def test_a_run_cancelled_mid_stream_ends_its_chat_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    streaming = asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        streaming.set()
        await asyncio.Event().wait()
        return "unreachable"

    agent = ReActAgent(FunctionModel(respond), middleware=[Telemetry(provider)])
    running = asyncio.ensure_future(agent.call("go"))
    await asyncio.wait_for(streaming.wait(), WAIT)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    root, chat = spans(exporter)
    assert attrs(chat)["error.type"] == attrs(root)["error.type"] == "cancelled"
    assert chat.end_time <= root.end_time  # type: ignore[operator]
    assert not rxagent.telemetry._run_spans


async def test_parallel_tool_calls_are_siblings(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    calls = [ScriptedToolCall("add", {"a": i, "b": i}, id=f"call_{i}") for i in range(3)]
    agent = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=calls), "done"]),
        Toolkit([add]),
        middleware=[Telemetry(provider)],
    )
    await agent.call("go")
    finished = spans(exporter)
    root = finished[0]
    tools = [s for s in finished if s.name == "execute_tool add"]
    assert sorted(attrs(s)["gen_ai.tool.call.id"] for s in tools) == ["call_0", "call_1", "call_2"]
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in tools)


async def test_log_lines_in_a_tool_carry_its_span(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    log = logging.getLogger("tests.telemetry")

    @tool
    def audited(order: str) -> str:
        """Logs, in a worker thread."""
        log.warning("refunding %s", order)
        return "ok"

    stream = io.StringIO()
    handler = json_log_handler(stream)
    log.addHandler(handler)
    try:
        agent = ReActAgent(
            ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("audited", {"order": "9"})]), "ok"]),
            Toolkit([audited]),
            middleware=[Telemetry(provider)],
        )
        result = await agent.call("go")
    finally:
        log.removeHandler(handler)
    (line,) = [json.loads(text) for text in stream.getvalue().splitlines()]
    tool_span = next(s for s in spans(exporter) if s.name == "execute_tool audited")
    assert (line["trace_id"], line["span_id"]) == (result.trace_id, hex_id(tool_span.context.span_id, 16))
    assert line["run_id"] == result.run_id


async def test_telemetry_keeps_call_quiet_and_works_for_stream_events(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    telemetry = Telemetry(provider)
    assert not watches_events([telemetry])
    agent = calculator(
        telemetry, ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 1, "b": 2})]), "3"
    )
    quiet = await agent.call("What is 2 + 3?")
    assert quiet.seq < 5  # call built no per-step events for the spans' sake
    result, _ = await run(agent, "And 1 + 2?")
    assert result.text == "3"
    names = [s.name for s in spans(exporter)]
    assert names.count("invoke_agent calc") == 2
    assert names.count("execute_tool add") == 2


async def test_without_a_tracer_provider_runs_work_and_record_nothing(exporter: InMemorySpanExporter) -> None:
    agent = calculator(Telemetry())  # the global provider, which no test sets
    result = await agent.call("What is 2 + 3?")
    assert result.text == "2 + 3 = 5"
    assert exporter.get_finished_spans() == ()


def script(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_rxagent_imports_and_runs_without_opentelemetry() -> None:
    code = """
import asyncio, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
import rxagent
from rxagent import ReActAgent, ScriptedModel
print(asyncio.run(ReActAgent(ScriptedModel(["fine"])).call("hi")).text)
try:
    import rxagent.telemetry
except ModuleNotFoundError as error:
    print(error)
"""
    done = script(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "fine",
        "rxagent.telemetry needs OpenTelemetry's API and SDK: pip install 'rxagent[otel]'",
    ]


def test_importing_rxagent_does_not_import_opentelemetry() -> None:
    done = script("import sys, rxagent, rxagent.agent, rxagent.logs; print('opentelemetry' in sys.modules)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
