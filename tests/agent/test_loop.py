"""The ReAct loop with the scripted model: every end reason, re-prompts, limits, guards and repairs."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from reactivex import operators as ops

from rxagent import Msg, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent, RunControl
from rxagent.events import (
    AgentEvent,
    ErrorEvent,
    MessageCompleted,
    PhaseChanged,
    RepeatGuardTriggered,
    TextDelta,
    ToolProgress,
    ToolResult,
    event_from_json,
    event_to_json,
)
from rxagent.messages import TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.operators import to_list
from rxagent.session import MemoryStore, seed_session
from rxagent.state import AgentState
from rxagent.tools import ToolContext, Toolkit, ToolSystemError, tool

from .helpers import check_invariants, of_type, run


@tool(concurrency_safe=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool(return_direct=True)
def final_answer(text: str) -> str:
    """Give the answer directly to the user."""
    return text


@tool
async def report(ctx: ToolContext) -> str:
    """Report progress while working."""
    ctx.progress("halfway", fraction=0.5)
    return "reported"


def calls(*pairs: tuple[str, dict[str, Any]]) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall(name, args) for name, args in pairs])


def agent_with(script: list[Any], **options: Any) -> tuple[ReActAgent, ScriptedModel]:
    model = ScriptedModel(script)
    toolkit = Toolkit([add, final_answer, report])
    return ReActAgent(model, toolkit, system_prompt="You are exact.", options=AgentOptions(**options)), model


async def test_model_stop_after_a_tool_round() -> None:
    agent, model = agent_with(
        [ScriptedResponse(text="Adding.", tool_calls=[ScriptedToolCall("add", {"a": 2, "b": 3})]), "5"]
    )
    result, events = await run(agent, "2+3?")
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "5", 2)
    assert result.usage.model_calls == 2
    assert [e.result.text for e in of_type(events, ToolResult)] == ["5"]  # type: ignore[attr-defined]
    phases = [e.phase for e in of_type(events, PhaseChanged)]  # type: ignore[attr-defined]
    assert phases == ["THINKING", "TOOL_PENDING", "TOOL_EXECUTING", "OBSERVING", "THINKING", "FINISHED"]
    second = model.requests[1]
    assert [m.role for m in second.messages] == ["system", "user", "assistant", "tool"]
    assert second.messages[0].text == "You are exact."
    assert [t.name for t in second.tools] == ["add", "final_answer", "report"]
    model.assert_complete()


async def test_every_event_of_a_run_round_trips_through_json() -> None:
    agent, _ = agent_with([calls(("report", {})), "done"])
    _, events = await run(agent, "go")
    assert of_type(events, ToolProgress)
    for event in events:
        assert event_from_json(event_to_json(event)) == event


async def test_history_persists_across_runs_of_a_session() -> None:
    agent, model = agent_with(["Hi Ada.", "You are Ada."])
    await run(agent, "I am Ada.")
    result, _ = await run(agent, "Who am I?")
    assert result.text == "You are Ada."
    assert [m.text for m in model.requests[1].messages] == [
        "You are exact.",
        "I am Ada.",
        "Hi Ada.",
        "Who am I?",
    ]
    state = await agent.sessions.state()
    assert len(state.messages) == 4


async def test_thinking_only_output_is_re_prompted_once() -> None:
    agent, model = agent_with([ScriptedResponse(thinking="hmm"), "42"])
    result, _ = await run(agent, "answer?")
    assert (result.reason, result.text) == ("MODEL_STOP", "42")
    assert "no answer text" in model.requests[1].messages[-1].text


async def test_no_answer_twice_ends_with_a_clear_reason() -> None:
    agent, _ = agent_with([ScriptedResponse(thinking="hmm"), ScriptedResponse(text="   ")])
    result, _ = await run(agent, "answer?")
    assert result.reason == "NO_ANSWER"
    assert result.detail == "the model gave no answer text twice"


async def test_max_iterations_ends_with_a_summarising_turn_without_tools() -> None:
    agent, model = agent_with(
        [calls(("add", {"a": i, "b": 1})) for i in range(3)] + ["Summary: counted to 3."], max_iters=3
    )
    result, _ = await run(agent, "count")
    assert (result.reason, result.text, result.iterations) == ("MAX_ITERATIONS", "Summary: counted to 3.", 4)
    summarising = model.requests[-1]
    assert summarising.tools == ()
    assert "Do not call any tool" in summarising.messages[-1].text
    assert all(r.tools for r in model.requests[:-1])


async def test_return_direct_ends_the_run_when_every_call_is_return_direct() -> None:
    agent, model = agent_with([calls(("final_answer", {"text": "It is 5."}))])
    result, _ = await run(agent, "2+3?")
    assert (result.reason, result.text) == ("TOOL_RETURN_DIRECT", "It is 5.")
    assert len(model.requests) == 1


async def test_return_direct_mixed_with_a_normal_tool_goes_back_to_the_model() -> None:
    agent, model = agent_with(
        [calls(("final_answer", {"text": "x"}), ("add", {"a": 1, "b": 1})), "model decides"]
    )
    result, _ = await run(agent, "go")
    assert (result.reason, result.text) == ("MODEL_STOP", "model decides")
    assert len(model.requests) == 2


async def test_return_direct_that_failed_goes_back_to_the_model() -> None:
    agent, _ = agent_with([calls(("final_answer", {})), "fixed"])
    result, _ = await run(agent, "go")
    assert result.reason == "MODEL_STOP"


async def test_repeat_guard_injects_a_hint_and_emits_an_event() -> None:
    same = calls(("add", {"a": 1, "b": 1}))
    agent, model = agent_with([same, same, same, "ok, 2"], repeat_guard=3)
    result, events = await run(agent, "1+1?")
    assert result.text == "ok, 2"
    (guard,) = of_type(events, RepeatGuardTriggered)
    assert (guard.tool, guard.count, guard.arguments) == ("add", 3, {"a": 1, "b": 1})  # type: ignore[attr-defined]
    hint = model.requests[3].messages[-1]
    assert hint.role == "system"
    assert "same arguments 3 times" in hint.text
    assert all("same arguments" not in m.text for m in model.requests[2].messages)


async def test_repeat_guard_counts_only_calls_whose_results_are_the_same_too() -> None:
    readings = iter(["20.1", "20.4", "20.4", "20.4", "20.4"])

    @tool
    def thermometer(room: str) -> str:
        """Reads the temperature of a room.

        Args:
            room: which room.
        """
        return next(readings)

    lab = calls(("thermometer", {"room": "lab"}))
    hall = calls(("thermometer", {"room": "hall"}))
    # lab 20.1; lab 20.4 (another result); hall 20.4 (other arguments, the same text); lab 20.4 (other
    # arguments again); lab 20.4: the first two alike in a row.
    model = ScriptedModel([lab, lab, hall, lab, lab, "steady"])
    agent = ReActAgent(model, Toolkit([thermometer]), options=AgentOptions(repeat_guard=2))
    result, events = await run(agent, "is it steady?")
    assert result.text == "steady"
    (guard,) = of_type(events, RepeatGuardTriggered)
    assert (guard.tool, guard.count, guard.arguments) == ("thermometer", 2, {"room": "lab"})  # type: ignore[attr-defined]
    hinted = [i for i, r in enumerate(model.requests) if any("same arguments" in m.text for m in r.messages)]
    assert hinted == [5]


async def test_tool_system_error_ends_in_the_error_phase_without_looping() -> None:
    @tool
    def ledger() -> str:
        """Reads the ledger."""
        raise ToolSystemError("ledger database unreachable")

    model = ScriptedModel([calls(("ledger", {})), "never used"])
    agent = ReActAgent(model, Toolkit([ledger]))
    result, events = await run(agent, "balance?")
    assert result.reason == "ERROR"
    assert "ledger database unreachable" in (result.detail or "")
    assert [e.phase for e in of_type(events, PhaseChanged)][-1] == "ERROR"  # type: ignore[attr-defined]
    assert of_type(events, ErrorEvent)
    assert len(model.requests) == 1


async def test_broken_arguments_get_error_results_and_the_model_corrects_itself() -> None:
    script = [
        ScriptedResponse(tool_calls=[ScriptedToolCall("add", '{"a": 1, "b"')]),
        calls(("add", {"a": 1, "b": "2"})),
        "3",
    ]
    agent, _ = agent_with(script)
    result, events = await run(agent, "1+2")
    assert result.text == "3"
    first, second = [e.result for e in of_type(events, ToolResult)]  # type: ignore[attr-defined]
    assert first.status == "error"
    assert "not valid JSON" in first.text
    assert (second.status, second.text) == ("ok", "3")


async def test_a_damaged_history_is_repaired_before_the_request() -> None:
    store = MemoryStore()
    orphan_call = ToolUseBlock(id="lost", name="add", input={"a": 1, "b": 1})
    damaged = AgentState(
        messages=[
            Msg.user("earlier"),
            Msg(role="assistant", content=(orphan_call,)),
            Msg.user("and then?"),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id="ghost", name="add", output=(TextBlock(text="?"),))
            ),
        ]
    )
    await seed_session(store, (None, "default"), damaged)
    model = ScriptedModel(["fine"])
    agent = ReActAgent(model, Toolkit([add]), store=store)
    result, _ = await run(agent, "now")
    assert result.reason == "MODEL_STOP"
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "assistant", "tool", "user", "user"]
    assert sent[2].tool_results[0].tool_use_id == "lost"
    assert sent[2].tool_results[0].status == "error"


async def test_interrupt_during_the_model_stream_ends_with_interrupted() -> None:
    agent, _ = agent_with([ScriptedResponse(text="a long answer " * 20, chunk_size=2, delay=0.002)])
    control = RunControl()
    deltas = 0

    def interrupt_after_five(event: AgentEvent) -> None:
        nonlocal deltas
        if isinstance(event, TextDelta):
            deltas += 1
            if deltas == 5:
                control.interrupt()

    events = await to_list(
        agent.stream_events("talk", control=control).pipe(ops.do_action(interrupt_after_five))
    )
    result = check_invariants(events)
    assert result.reason == "INTERRUPTED"
    assert result.text == "a long ans"
    assert (await agent.sessions.state()).messages[-1].text == "a long ans"


async def test_interrupt_during_tools_gives_dangling_calls_interrupted_results() -> None:
    started = asyncio.Event()

    @tool
    async def slow() -> str:
        """Takes forever."""
        started.set()
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel([calls(("slow", {}))])
    agent = ReActAgent(model, Toolkit([slow]))
    control = RunControl()

    async def interrupt_when_started() -> None:
        await started.wait()
        control.interrupt()

    helper = asyncio.ensure_future(interrupt_when_started())
    result, events = await run(agent, "go", control=control)
    await helper
    assert result.reason == "INTERRUPTED"
    tool_message = [e.message for e in of_type(events, MessageCompleted) if e.message.role == "tool"]  # type: ignore[attr-defined]
    assert tool_message[0].tool_results[0].status == "interrupted"
    state = await agent.sessions.state()
    assert state.messages[-1].tool_results[0].status == "interrupted"


@pytest.mark.parametrize("bad", [42, [Msg.user("ok"), 3]])
async def test_bad_input_types_are_refused_clearly(bad: Any) -> None:
    agent, _ = agent_with([])
    with pytest.raises(TypeError, match="agent input must be"):
        await agent.call(bad)


async def test_first_tool_choice_applies_to_the_first_step_only() -> None:
    agent, model = agent_with([calls(("add", {"a": 1, "b": 2})), "3"], first_tool_choice="required")
    await run(agent, "1+2")
    assert [r.tool_choice for r in model.requests] == ["required", None]


async def test_incremental_repair_sends_what_a_full_repair_would_at_every_step() -> None:
    from rxagent.agent.transcript import repair_transcript

    store = MemoryStore()
    damaged = AgentState(
        messages=[
            Msg.user("earlier"),
            Msg(role="assistant", content=(ToolUseBlock(id="lost", name="add", input={"a": 1, "b": 1}),)),
            Msg.user("and then?"),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id="ghost", name="add", output=(TextBlock(text="?"),))
            ),
        ]
    )
    await seed_session(store, (None, "default"), damaged)
    script = [calls(("add", {"a": i, "b": 1})) for i in range(5)] + ["done"]
    model = ScriptedModel(script)
    agent = ReActAgent(model, Toolkit([add]), system_prompt="You are exact.", store=store)
    await run(agent, "count")
    final = [(m.role, m.content) for m in repair_transcript((await agent.sessions.state()).messages)]
    assert len(model.requests) == 6
    for request in model.requests:
        sent = [(m.role, m.content) for m in request.messages[1:]]  # after the system prompt
        assert sent == final[: len(sent)]
    assert model.requests[0].messages[3].tool_results[0].tool_use_id == "lost"
