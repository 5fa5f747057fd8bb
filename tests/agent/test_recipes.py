"""The two recipes built from public parts: plan-then-execute and a reviewer before tools run.

Each runs against the scripted model and through ``OpenAIChatModel`` on the loopback server. Bad inputs
tried: a plan with no numbered items, a reviewer answer that is not JSON, a reviewer that gives no
verdict for a call, a reviewer that never answers (cancelled and interrupted while it waits).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent, RunControl
from rxagent.agent.loop import RunState
from rxagent.agent.recipes import Verdict, function_reviewer, model_reviewer, plan_and_execute, reviewing
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, StepNote
from rxagent.messages import ToolUseBlock
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)
from tests.streams import expect

from .helpers import check_invariants, of_type, run

CTX = RuntimeContext(user_id="u", session_id="recipes")
SHOUTED: list[str] = []


@tool(concurrency_safe=True)
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@tool
def shout(text: str) -> str:
    """Upper-case a text, loudly."""
    SHOUTED.append(text)
    return text.upper() + "!"


def call(name: str, arguments: dict[str, Any], id: str) -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall(name, arguments, id=id)])


PLAN_SCRIPT: list[Any] = [
    "Here is my plan:\n1. Add 2 and 3\n2. Shout the sum",
    call("add", {"a": 2, "b": 3}, "c1"),
    "The sum is 5.",
    call("shout", {"text": "five"}, "c2"),
    "Shouted.",
    "2 + 3 = 5, and I shouted FIVE!",
]


def text_reply(text: str) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}), text_chunk(text), finish_chunk(), usage_chunk(), DONE
    )


def call_reply(name: str, arguments: str, id: str) -> Reply:
    return Reply.sse(tool_chunk(0, id, name, arguments), finish_chunk("tool_calls"), usage_chunk(), DONE)


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIChatModel]:
    async with make_model(server) as client:
        yield client


# ---- plan, then execute ----------------------------------------------------------------------------------


async def check_plan_run(agent: ReActAgent, requests: Sequence[Any]) -> list[AgentEvent]:
    SHOUTED.clear()
    result, events = await run(agent, "Add 2 and 3, then shout it.", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "2 + 3 = 5, and I shouted FIVE!")
    assert SHOUTED == ["five"]
    notes = [e.text for e in of_type(events, StepNote)]
    assert notes == ["step 1: Add 2 and 3", "step 2: Shout the sum"]
    assert "plan" not in (await agent.sessions.state(CTX)).extras  # the finished plan is cleared
    return events


async def test_plan_then_execute_with_the_scripted_model() -> None:
    model = ScriptedModel(PLAN_SCRIPT)
    agent = ReActAgent(model, Toolkit([add, shout]), steps=plan_and_execute(), system_prompt="Be exact.")
    await check_plan_run(agent, model.requests)
    planning, first_item, *_, closing = model.requests
    assert planning.tools == ()  # the planning turn is text only
    assert "numbered plan" in planning.messages[-1].text
    assert [t.name for t in first_item.tools] == ["add", "shout"]
    assert first_item.messages[-1].text == "Step 1 of 2: Add 2 and 3\nDo this step now."
    assert closing.tools == ()
    assert "final answer" in closing.messages[-1].text
    assert len(model.requests) == 6


async def test_plan_then_execute_through_the_openai_client(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    server.script(
        text_reply("1. Add 2 and 3\n2. Shout the sum"),
        call_reply("add", '{"a": 2, "b": 3}', "c1"),
        text_reply("The sum is 5."),
        call_reply("shout", '{"text": "five"}', "c2"),
        text_reply("Shouted."),
        text_reply("2 + 3 = 5, and I shouted FIVE!"),
    )
    await check_plan_run(ReActAgent(model, Toolkit([add, shout]), steps=plan_and_execute()), [])
    bodies = [r.body for r in server.requests]
    assert "tools" not in bodies[0]
    assert bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "5"}


async def test_a_reply_without_a_numbered_plan_works_on_the_request_directly() -> None:
    model = ScriptedModel(["I will just do it.", call("add", {"a": 1, "b": 1}, "c1"), "2"])
    agent = ReActAgent(model, Toolkit([add]), steps=plan_and_execute())
    result, _ = await run(agent, "1+1", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "2")
    assert "plan" not in (await agent.sessions.state(CTX)).extras


# ---- a reviewer before tools run ---------------------------------------------------------------------------


def two_shouts() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("shout", {"text": "hello"}, id="s1"),
            ScriptedToolCall("shout", {"text": "delete everything"}, id="s2"),
        ]
    )


async def careful(calls: Sequence[ToolUseBlock], run: RunState) -> list[Verdict]:
    return [
        Verdict(c.id, "delete" not in c.raw_arguments, "destructive" if "delete" in c.raw_arguments else "")
        for c in calls
    ]


async def test_a_reviewer_function_rejects_one_call_of_a_batch() -> None:
    SHOUTED.clear()
    model = ScriptedModel([two_shouts(), "Shouted hello only."])
    agent = ReActAgent(model, Toolkit([shout]), steps=reviewing(function_reviewer(careful)))
    result, events = await run(agent, "shout", CTX)
    assert result.text == "Shouted hello only."
    assert SHOUTED == ["hello"]
    sent = model.requests[1].messages[-1].tool_results
    assert [(r.tool_use_id, r.status, r.text) for r in sent] == [
        ("s1", "ok", "HELLO!"),
        ("s2", "denied", "Rejected by the reviewer: destructive"),
    ]
    verdicts = [e.data for e in of_type(events, StepNote)]  # type: ignore[attr-defined]
    assert [(v["call_id"], v["approve"]) for v in verdicts] == [("s1", True), ("s2", False)]


async def test_a_model_reviewer_reads_json_verdicts_through_the_openai_client(
    server: OpenAIServer, model: OpenAIChatModel
) -> None:
    SHOUTED.clear()
    server.script(
        Reply.sse(
            tool_chunk(0, "s1", "shout", '{"text": "hello"}'),
            tool_chunk(1, "s2", "shout", '{"text": "delete everything"}'),
            finish_chunk("tool_calls"),
            DONE,
        ),
        text_reply('Verdicts: {"s1": {"approve": true}, "s2": {"approve": false, "reason": "unsafe"}}'),
        text_reply("Done."),
    )
    agent = ReActAgent(model, Toolkit([shout]), steps=reviewing(model_reviewer(model)))
    result, _ = await run(agent, "shout", CTX)
    assert result.text == "Done."
    assert SHOUTED == ["hello"]
    review_request = server.requests[1].body["messages"]
    assert "s2: shout" in review_request[-1]["content"]
    assert server.requests[2].body["messages"][-1]["content"] == "Rejected by the reviewer: unsafe"
    assert result.usage.model_calls == 3  # the review's model call counts


@pytest.mark.parametrize(
    "answer", ["I approve both!", '{"s1": {"approve": true}}'], ids=["not-json", "missing-verdict"]
)
async def test_what_the_reviewer_does_not_approve_does_not_run(answer: str) -> None:
    SHOUTED.clear()
    chat = ScriptedModel([two_shouts(), "ok"])
    reviewer_model = ScriptedModel([answer])
    agent = ReActAgent(chat, Toolkit([shout]), steps=reviewing(model_reviewer(reviewer_model)))
    await run(agent, "shout", CTX)
    sent = {r.tool_use_id: r.status for r in chat.requests[1].messages[-1].tool_results}
    assert sent["s2"] == "denied"
    assert sent["s1"] == ("denied" if answer.startswith("I") else "ok")
    assert ([] if answer.startswith("I") else ["hello"]) == SHOUTED


async def test_everything_rejected_goes_back_to_the_model() -> None:
    async def no(calls: Sequence[ToolUseBlock], run: RunState) -> list[Verdict]:
        return [Verdict(c.id, False, "not today") for c in calls]

    SHOUTED.clear()
    model = ScriptedModel([two_shouts(), "Fine, I won't."])
    agent = ReActAgent(model, Toolkit([shout]), steps=reviewing(function_reviewer(no)))
    result, _ = await run(agent, "shout", CTX)
    assert result.text == "Fine, I won't."
    assert SHOUTED == []
    assert [r.status for r in model.requests[1].messages[-1].tool_results] == ["denied", "denied"]


class Stuck:
    """A reviewer that never answers, recording that it was cancelled."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def __call__(self, calls: Sequence[ToolUseBlock], run: RunState) -> list[Verdict]:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")


async def test_an_interrupt_while_the_reviewer_thinks_ends_the_run_interrupted() -> None:
    stuck = Stuck()
    agent = ReActAgent(
        ScriptedModel([two_shouts()]), Toolkit([shout]), steps=reviewing(function_reviewer(stuck))
    )
    control = RunControl()

    async def interrupt() -> None:
        await asyncio.wait_for(stuck.waiting.wait(), 5)
        control.interrupt()

    helper = asyncio.ensure_future(interrupt())
    result, events = await asyncio.wait_for(run(agent, "shout", CTX, control), 5)
    await helper
    assert result.reason == "INTERRUPTED"
    assert stuck.cancelled.is_set()  # the custom step was cut, its work cancelled
    assert {r.tool_use_id: r.status for r in (await agent.sessions.state(CTX)).messages[-1].tool_results} == {
        "s1": "interrupted",
        "s2": "interrupted",
    }
    check_invariants(events)


async def test_a_cancel_while_the_reviewer_thinks_releases_it_and_saves() -> None:
    stuck = Stuck()
    agent = ReActAgent(
        ScriptedModel([two_shouts(), "next"]), Toolkit([shout]), steps=reviewing(function_reviewer(stuck))
    )
    seen = expect(agent.stream_events("shout", CTX))
    await asyncio.wait_for(stuck.waiting.wait(), 5)
    seen.dispose()
    await asyncio.wait_for(stuck.cancelled.wait(), 5)
    assert (await asyncio.wait_for(agent.call("again", CTX), 5)).text == "next"  # the session was released
    saved = (await agent.sessions.state(CTX)).messages
    assert [m.role for m in saved] == ["user", "assistant", "tool", "user", "assistant"]
    assert [r.status for r in saved[2].tool_results] == ["interrupted", "interrupted"]


async def test_recipes_keep_the_run_well_formed_under_stream_events() -> None:
    model = ScriptedModel(PLAN_SCRIPT)
    agent = ReActAgent(
        model, Toolkit([add, shout]), steps=plan_and_execute(), options=AgentOptions(max_iters=10)
    )
    events = await to_list(agent.stream_events("Add 2 and 3, then shout it.", CTX))
    check_invariants(events)
