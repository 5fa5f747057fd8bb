"""Side turns and agent-less runs: ``model_turn(run, request, record=False)`` inside a custom step, and
``run_loop`` on a ``new_run`` with no agent object at all.

A side turn (a critique of the answer, here) is not part of the conversation: the history and the
iteration count are as if it had not happened, while the run's usage counts its tokens and it is traced
(its ``ModelCallStarted``/``ModelCallFinished`` events, its ``chat`` span). ``record=True`` makes the same
turn an iteration saved in the history.

Bad input tried: a model that fails in an agent-less run (the save hook is told ``ERROR`` with the error,
the result comes after it, then the error).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import TypeVar

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import Agent
from rxagent.agent.loop import (
    Act,
    CheckOutput,
    Finish,
    Node,
    ReActNode,
    Reason,
    Reprompt,
    RunInput,
    RunState,
    Start,
    StepOutput,
    Steps,
    after_reasoning,
    model_turn,
    new_run,
    react_steps,
    reason_step,
    run_loop,
)
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    RunReason,
    RunStarted,
    TextDelta,
    ToolResult,
)
from rxagent.messages import Msg
from rxagent.model import ChatRequest, Usage
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import to_list
from rxagent.telemetry import Telemetry
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    usage_chunk,
)

E = TypeVar("E", bound=AgentEvent)

CRITIQUE = "Critique the answer above in one sentence."
CTX = RuntimeContext(session_id="critiqued")


# ---- an assembly with a side turn: the answer is critiqued, the critique is the result's detail ------------


@dataclass(frozen=True, slots=True)
class Critique(Node):
    """Ask the model for a critique of ``answer``, then finish with it."""

    answer: Msg


def critique_answers(
    node: Reason, message: Msg | None, run: RunState
) -> Critique | Finish | CheckOutput | Act | Reprompt:
    """As ``after_reasoning``, but a final answer goes to a critique first."""
    decided = after_reasoning(node, message, run)
    if isinstance(decided, Finish) and decided.reason == "MODEL_STOP" and message is not None:
        return Critique(message)
    return decided


def critiquing(*, record: bool) -> Steps[ReActNode | Critique]:
    """The ReAct assembly whose final answers are critiqued by a turn ``record``-ed or not."""

    def critique_step(node: Critique, run: RunState) -> Observable[StepOutput[Finish]]:
        request = ChatRequest((*run.deps.system, *run.history(), Msg.user(CRITIQUE)))
        return model_turn(
            run, request, record=record, then=lambda m: Finish("MODEL_STOP", node.answer, detail=m.text)
        )

    return react_steps().on(Critique, critique_step).on(Reason, reason_step(decide=critique_answers))


def scripted() -> ScriptedModel:
    return ScriptedModel(
        [
            ScriptedResponse(text="2 + 2 = 4.", usage=Usage(input_tokens=10, output_tokens=3)),
            ScriptedResponse(text="Correct and brief.", usage=Usage(input_tokens=20, output_tokens=5)),
        ]
    )


def of_kind(events: list[AgentEvent], kind: type[E]) -> list[E]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_side_turn_is_not_in_the_history_nor_an_iteration_but_its_usage_counts() -> None:
    model = scripted()
    agent = Agent(model, steps=critiquing(record=False))
    events = await to_list(agent.stream_events("What is 2 + 2?", CTX))
    result = events[-1]
    assert isinstance(result, AgentResult)
    assert (result.text, result.detail, result.reason) == ("2 + 2 = 4.", "Correct and brief.", "MODEL_STOP")
    assert result.iterations == 1
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30, 8)
    history = (await agent.sessions.state(CTX)).messages
    assert [(m.role, m.text) for m in history] == [("user", "What is 2 + 2?"), ("assistant", "2 + 2 = 4.")]
    # the side turn was asked: the conversation so far and the critique prompt
    critique_request = model.requests[1].messages
    assert [m.text for m in critique_request] == ["What is 2 + 2?", "2 + 2 = 4.", CRITIQUE]
    # still seen as a model call, at the iteration it came in; no deltas nor message of its own
    started = of_kind(events, ModelCallStarted)
    assert [e.iteration for e in started] == [1, 1]
    finished = of_kind(events, ModelCallFinished)
    assert [e.usage for e in finished] == [
        Usage(input_tokens=10, output_tokens=3),
        Usage(input_tokens=20, output_tokens=5),
    ]
    assert "".join(e.text for e in of_kind(events, TextDelta)) == "2 + 2 = 4."
    completed = [e.message.text for e in of_kind(events, MessageCompleted)]
    assert completed == ["2 + 2 = 4."]


async def test_a_recorded_turn_is_an_iteration_in_the_history() -> None:
    agent = Agent(scripted(), steps=critiquing(record=True))
    events = await to_list(agent.stream_events("What is 2 + 2?", CTX))
    result = events[-1]
    assert isinstance(result, AgentResult)
    assert (result.text, result.detail) == ("2 + 2 = 4.", "Correct and brief.")
    assert result.iterations == 2
    assert (result.usage.input_tokens, result.usage.output_tokens) == (30, 8)
    history = (await agent.sessions.state(CTX)).messages
    assert [(m.role, m.text) for m in history] == [
        ("user", "What is 2 + 2?"),
        ("assistant", "2 + 2 = 4."),
        ("assistant", "Correct and brief."),
    ]
    assert [e.iteration for e in of_kind(events, ModelCallStarted)] == [1, 2]
    assert "".join(e.text for e in of_kind(events, TextDelta)) == "2 + 2 = 4.Correct and brief."


async def test_a_quiet_call_counts_the_side_turn_too() -> None:
    result = await Agent(scripted(), steps=critiquing(record=False)).call("What is 2 + 2?", CTX)
    assert (result.iterations, result.usage.input_tokens, result.usage.output_tokens) == (1, 30, 8)


# ---- the side turn over HTTP, traced ----------------------------------------------------------------------


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIChatModel]:
    async with make_model(server) as client:
        yield client


def answer(text: str, prompt: int, completion: int) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        text_chunk(text),
        finish_chunk("stop"),
        usage_chunk(prompt, completion),
        DONE,
    )


def spans(exporter: InMemorySpanExporter) -> list[ReadableSpan]:
    return sorted(exporter.get_finished_spans(), key=lambda s: s.start_time or 0)


async def test_a_side_turn_over_http_has_its_chat_span_and_its_usage_in_the_runs(
    server: OpenAIServer, model: OpenAIChatModel, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    server.script(answer("Oslo.", 40, 2), answer("Accurate.", 55, 3))
    agent = Agent(model, steps=critiquing(record=False), name="critic", middleware=[Telemetry(provider)])
    result = await agent.call("Capital of Norway?", CTX)
    assert (result.text, result.detail, result.iterations) == ("Oslo.", "Accurate.", 1)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (95, 5)
    assert [(m.role, m.text) for m in (await agent.sessions.state(CTX)).messages] == [
        ("user", "Capital of Norway?"),
        ("assistant", "Oslo."),
    ]
    assert server.requests[1].body["messages"][-1] == {"role": "user", "content": CRITIQUE}
    root, answer_chat, critique_chat = spans(exporter)
    assert (root.name, answer_chat.name, critique_chat.name) == (
        "invoke_agent critic",
        "chat test-model",
        "chat test-model",
    )
    assert critique_chat.parent is not None
    assert root.context is not None
    assert critique_chat.parent.span_id == root.context.span_id
    usage = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")
    critique_attributes, root_attributes = dict(critique_chat.attributes or {}), dict(root.attributes or {})
    assert [critique_attributes[k] for k in usage] == [55, 3]
    assert [root_attributes[k] for k in usage] == [95, 5]
    assert root_attributes["rxagent.run.iterations"] == 1


# ---- a loop with no agent --------------------------------------------------------------------------------


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first.
        b: the second.
    """
    return a + b


class Saves:
    """A save hook that notes each call, with whether the result was out already."""

    def __init__(self, seen: list[AgentEvent]) -> None:
        self.seen = seen
        self.calls: list[tuple[RunReason, Exception | None, bool]] = []

    async def __call__(self, reason: RunReason, failure: Exception | None) -> None:
        self.calls.append((reason, failure, any(isinstance(e, AgentResult) for e in self.seen)))


async def test_run_loop_runs_with_no_agent_object() -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3}, id="c1")]),
            "2 + 3 = 5.",
        ]
    )
    seen: list[AgentEvent] = []
    save = Saves(seen)
    run = new_run(model, Toolkit([add]), name="bare", save=save)
    first = Start(RunInput((Msg.user("What is 2 + 3?"),)))
    events = await to_list(run_loop(react_steps(), first, run).pipe(ops.do_action(seen.append)))
    started, result = events[0], events[-1]
    assert isinstance(started, RunStarted)
    assert started.agent == "bare"
    assert isinstance(result, AgentResult)
    assert (result.text, result.reason, result.iterations) == ("2 + 3 = 5.", "MODEL_STOP", 2)
    assert result.run_id == run.run_id
    assert [e.result.text for e in of_kind(events, ToolResult)] == ["5"]
    assert save.calls == [("MODEL_STOP", None, False)]  # saved once, before the result
    assert [(m.role, m.text or [r.text for r in m.tool_results]) for m in run.messages] == [
        ("user", "What is 2 + 3?"),
        ("assistant", []),
        ("tool", ["5"]),
        ("assistant", "2 + 3 = 5."),
    ]
    assert run.iteration == 2


async def test_an_agentless_run_that_fails_is_saved_with_the_error_before_its_result() -> None:
    seen: list[AgentEvent] = []
    save = Saves(seen)
    run = new_run(ScriptedModel([RuntimeError("model gone")]), save=save)
    first = Start(RunInput((Msg.user("hi"),)))
    with pytest.raises(RuntimeError, match="model gone"):
        await to_list(run_loop(react_steps(), first, run).pipe(ops.do_action(seen.append)))
    ((reason, failure, result_out),) = save.calls
    assert (reason, str(failure), result_out) == ("ERROR", "model gone", False)
    assert isinstance(seen[-1], AgentResult)
    assert seen[-1].reason == "ERROR"
    assert any(isinstance(e, ErrorEvent) and e.message == "model gone" for e in seen)
