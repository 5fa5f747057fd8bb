"""The three recipes built from public parts: plan-then-execute, a reviewer before tools run, and
reflect-then-revise.

Each runs against the scripted model and through ``OpenAIChatModel`` on the loopback server. Bad inputs
tried: a plan with no numbered items, a reviewer answer that is not JSON, a reviewer that gives no
verdict for a call, a verdict that is not a JSON ``true``, a reviewer and a critic that never answer
(cancelled and interrupted while they wait), a critic that says nothing, a critic that never stops
objecting, a negative ``max_rounds``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, NoReturn

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import Agent, AgentOptions, RunControl
from rxagent.agent.loop import RunState
from rxagent.agent.recipes import (
    Review,
    Verdict,
    function_reviewer,
    model_reviewer,
    plan_and_execute,
    reflect_then_revise,
    reviewing,
)
from rxagent.agent.recipes.reflect import CRITIQUE, REVISE
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, ModelCallFinished, ModelCallStarted, StepNote, TextDelta
from rxagent.model import ChatRequest, FunctionModel, Usage
from rxagent.model.openai import OpenAIChatModel
from rxagent.model.scripted import ScriptStep
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


def text_reply(text: str, prompt: int = 5, completion: int = 7) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        text_chunk(text),
        finish_chunk(),
        usage_chunk(prompt, completion),
        DONE,
    )


def call_reply(name: str, arguments: str, id: str) -> Reply:
    return Reply.sse(tool_chunk(0, id, name, arguments), finish_chunk("tool_calls"), usage_chunk(), DONE)


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIChatModel]:
    async with make_model(server) as client:
        yield client


# ---- plan, then execute ----------------------------------------------------------------------------------


async def check_plan_run(agent: Agent) -> list[AgentEvent]:
    SHOUTED.clear()
    result, events = await run(agent, "Add 2 and 3, then shout it.", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "2 + 3 = 5, and I shouted FIVE!")
    assert SHOUTED == ["five"]
    notes = of_type(events, StepNote)
    assert [n.text for n in notes] == ["Step 1 of 2: Add 2 and 3", "Step 2 of 2: Shout the sum"]  # type: ignore[attr-defined]
    assert notes[-1].data == {"items": ["Add 2 and 3", "Shout the sum"], "started": 2}  # type: ignore[attr-defined]
    assert "plan" not in (await agent.sessions.state(CTX)).extras  # the finished plan is cleared
    return events


async def test_plan_then_execute_with_the_scripted_model() -> None:
    model = ScriptedModel(PLAN_SCRIPT)
    agent = Agent(model, Toolkit([add, shout]), steps=plan_and_execute(), system_prompt="Be exact.")
    await check_plan_run(agent)
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
    await check_plan_run(Agent(model, Toolkit([add, shout]), steps=plan_and_execute()))
    bodies = [r.body for r in server.requests]
    assert "tools" not in bodies[0]
    assert bodies[2]["messages"][-1] == {"role": "tool", "tool_call_id": "c1", "content": "5"}


async def test_a_reply_without_a_numbered_plan_works_on_the_request_directly() -> None:
    model = ScriptedModel(["I will just do it.", call("add", {"a": 1, "b": 1}, "c1"), "2"])
    agent = Agent(model, Toolkit([add]), steps=plan_and_execute())
    result, events = await run(agent, "1+1", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "2")
    assert of_type(events, StepNote) == []
    assert (await agent.sessions.state(CTX)).extras["plan"] is None  # no plan to follow


async def test_a_plan_waits_for_an_approval_and_carries_on_after_it() -> None:
    from rxagent.agent import ToolDecision
    from rxagent.tools import Permissions

    SHOUTED.clear()
    model = ScriptedModel(PLAN_SCRIPT)
    agent = Agent(
        model, Toolkit([add, shout]), steps=plan_and_execute(), permissions=Permissions().ask("shout")
    )
    first, _ = await run(agent, "Add 2 and 3, then shout it.", CTX)
    assert first.reason == "PERMISSION_ASKING"
    assert (await agent.sessions.state(CTX)).extras["plan"] == {
        "items": ["Add 2 and 3", "Shout the sum"],
        "started": 2,
    }
    result, events = await run(agent, [ToolDecision("c2", True)], CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", "2 + 3 = 5, and I shouted FIVE!")
    assert SHOUTED == ["five"]
    assert of_type(events, StepNote) == []  # no item handed out again: the plan went on to its close
    assert "plan" not in (await agent.sessions.state(CTX)).extras


# ---- a reviewer before tools run ---------------------------------------------------------------------------


def two_shouts() -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("shout", {"text": "hello"}, id="s1"),
            ScriptedToolCall("shout", {"text": "delete everything"}, id="s2"),
        ]
    )


async def careful(review: Review, run: RunState) -> dict[str, Verdict]:
    return {
        c.id: Verdict(
            approve="delete" not in c.raw_arguments,
            reason="destructive" if "delete" in c.raw_arguments else "",
        )
        for c in review.calls
    }


async def test_a_reviewer_function_rejects_one_call_of_a_batch() -> None:
    SHOUTED.clear()
    model = ScriptedModel([two_shouts(), "Shouted hello only."])
    agent = Agent(model, Toolkit([shout]), steps=reviewing(function_reviewer(careful)))
    result, events = await run(agent, "shout", CTX)
    assert result.text == "Shouted hello only."
    assert SHOUTED == ["hello"]
    sent = model.requests[1].messages[-1].tool_results
    assert [(r.tool_use_id, r.status, r.text) for r in sent] == [
        ("s1", "ok", "HELLO!"),
        ("s2", "denied", "Rejected by the reviewer: destructive"),
    ]
    notes = of_type(events, StepNote)
    assert [n.text for n in notes] == ["approved shout", "rejected shout"]  # type: ignore[attr-defined]
    assert [n.data for n in notes] == [  # type: ignore[attr-defined]
        {"call_id": "s1", "tool": "shout", "approve": True, "reason": "no reason given"},
        {"call_id": "s2", "tool": "shout", "approve": False, "reason": "destructive"},
    ]


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
    agent = Agent(model, Toolkit([shout]), steps=reviewing(model_reviewer(model)))
    result, events = await run(agent, "shout", CTX)
    assert result.text == "Done."
    assert SHOUTED == ["hello"]
    review_request = server.requests[1].body
    assert "tools" not in review_request
    assert "s2: shout" in review_request["messages"][-1]["content"]
    assert server.requests[2].body["messages"][-1]["content"] == "Rejected by the reviewer: unsafe"
    assert result.usage.model_calls == 3  # the review's model call counts
    assert result.iterations == 2  # and is not an iteration
    assert len(of_type(events, ModelCallStarted)) == 3  # it is traced
    history = (await agent.sessions.state(CTX)).messages
    assert [m.role for m in history] == [
        "user",
        "assistant",
        "tool",
        "assistant",
    ]


@pytest.mark.parametrize(
    "answer",
    [
        "I approve both!",
        '{"s1": {"approve": true}}',
        '{"s1": {"approve": "yes"}, "s2": {"approve": true}}',
        '{"s1": {"approve": true}, "s2": "sure"}',
        "",
    ],
    ids=["not-json", "missing-verdict", "not-a-json-true", "not-a-verdict", "empty"],
)
async def test_what_the_reviewer_does_not_approve_does_not_run(answer: str) -> None:
    SHOUTED.clear()
    chat = ScriptedModel([two_shouts(), "ok"])
    reviewer_model = ScriptedModel([answer])
    agent = Agent(chat, Toolkit([shout]), steps=reviewing(model_reviewer(reviewer_model)))
    await run(agent, "shout", CTX)
    sent = {r.tool_use_id: (r.status, r.text) for r in chat.requests[1].messages[-1].tool_results}
    unheard = ("denied", "Rejected by the reviewer: the reviewer gave no verdict")
    assert sent["s2"] == unheard  # an answer that cannot be read gives no verdict at all
    if answer == '{"s1": {"approve": true}}':
        assert sent["s1"] == ("ok", "HELLO!")
        assert SHOUTED == ["hello"]
    else:
        assert sent["s1"] == unheard
        assert SHOUTED == []


async def test_everything_rejected_goes_back_to_the_model() -> None:
    async def no(review: Review, run: RunState) -> dict[str, Verdict]:
        return {c.id: Verdict(approve=False, reason="not today") for c in review.calls}

    SHOUTED.clear()
    model = ScriptedModel([two_shouts(), "Fine, I won't."])
    agent = Agent(model, Toolkit([shout]), steps=reviewing(function_reviewer(no)))
    result, _ = await run(agent, "shout", CTX)
    assert result.text == "Fine, I won't."
    assert SHOUTED == []
    assert [r.status for r in model.requests[1].messages[-1].tool_results] == ["denied", "denied"]


async def test_calls_a_human_approved_are_not_reviewed_again() -> None:
    from rxagent.agent import ToolDecision
    from rxagent.tools import Permissions

    reviewed: list[list[str]] = []

    async def approve_all(review: Review, run: RunState) -> dict[str, Verdict]:
        reviewed.append([c.id for c in review.calls])
        return {c.id: Verdict(approve=True) for c in review.calls}

    SHOUTED.clear()
    agent = Agent(
        ScriptedModel([two_shouts(), "Both shouted."]),
        Toolkit([shout]),
        steps=reviewing(function_reviewer(approve_all)),
        permissions=Permissions().ask("shout"),
    )
    first, _ = await run(agent, "shout", CTX)
    assert first.reason == "PERMISSION_ASKING"  # the reviewer's approval does not pass the permission gate
    assert reviewed == [["s1", "s2"]]
    result, _ = await run(agent, [ToolDecision("s1", True), ToolDecision("s2", True)], CTX)
    assert result.text == "Both shouted."
    assert SHOUTED == ["hello", "delete everything"]
    assert reviewed == [["s1", "s2"]]


class Stuck:
    """A reviewer (or, with ``answer``, a model's function) that never answers, recording that it was
    cancelled."""

    def __init__(self) -> None:
        self.waiting = asyncio.Event()
        self.cancelled = asyncio.Event()

    async def wait(self) -> NoReturn:
        self.waiting.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.set()
            raise
        raise AssertionError("unreachable")

    async def __call__(self, review: Review, run: RunState) -> dict[str, Verdict]:
        await self.wait()

    async def answer(self, request: ChatRequest) -> ScriptStep:
        await self.wait()


async def test_an_interrupt_while_the_reviewer_thinks_ends_the_run_interrupted() -> None:
    stuck = Stuck()
    agent = Agent(ScriptedModel([two_shouts()]), Toolkit([shout]), steps=reviewing(function_reviewer(stuck)))
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
    agent = Agent(
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
    agent = Agent(model, Toolkit([add, shout]), steps=plan_and_execute(), options=AgentOptions(max_iters=10))
    events = await to_list(agent.stream_events("Add 2 and 3, then shout it.", CTX))
    check_invariants(events)


# ---- reflect, then revise --------------------------------------------------------------------------------


def used(input_tokens: int, output_tokens: int, text: str) -> ScriptedResponse:
    return ScriptedResponse(text=text, usage=Usage(input_tokens, output_tokens))


async def test_an_answer_the_critic_accepts_finishes_the_run() -> None:
    model = ScriptedModel([used(10, 2, "Paris."), used(30, 1, "OK")])  # the critic is the agent's model
    agent = Agent(model, steps=reflect_then_revise(), system_prompt="Answer briefly.")
    result, events = await run(agent, "Capital of France?", CTX)
    assert (result.reason, result.text, result.detail) == ("MODEL_STOP", "Paris.", None)
    assert (result.iterations, result.usage.model_calls) == (1, 2)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (40, 3)
    critique = model.requests[1]
    assert [m.role for m in critique.messages] == ["system", "user", "assistant", "user"]
    assert critique.messages[-1].text == CRITIQUE
    assert critique.tools == ()
    assert "".join(e.text for e in of_type(events, TextDelta)) == "Paris."  # type: ignore[attr-defined]
    assert of_type(events, StepNote) == []
    assert [m.text for m in (await agent.sessions.state(CTX)).messages] == ["Capital of France?", "Paris."]


@pytest.mark.parametrize("verdict", ["OK", "ok.", "  Ok!\n"])
async def test_the_critic_says_ok_in_its_own_words(verdict: str) -> None:
    agent = Agent(ScriptedModel(["Paris.", verdict]), steps=reflect_then_revise())
    result = await agent.call("Capital of France?", CTX)
    assert (result.text, result.iterations, result.detail) == ("Paris.", 1, None)


async def test_one_revision_then_accepted_keeps_the_critique_out_of_the_history() -> None:
    model = ScriptedModel([used(10, 5, "2 + 2 = 5."), used(20, 5, "2 + 2 = 4.")])
    critic = ScriptedModel([used(100, 4, "The sum is wrong."), used(120, 1, "OK")])
    agent = Agent(model, steps=reflect_then_revise(critic=critic))
    result, events = await run(agent, "What is 2 + 2?", CTX)
    assert (result.reason, result.text, result.detail) == ("MODEL_STOP", "2 + 2 = 4.", None)
    assert result.iterations == 2  # the answering turns only
    assert (result.usage.model_calls, result.usage.input_tokens, result.usage.output_tokens) == (4, 250, 15)
    assert [e.text for e in of_type(events, StepNote)] == ["The sum is wrong."]  # type: ignore[attr-defined]
    assert [e.model for e in of_type(events, ModelCallStarted)] == ["scripted"] * 4  # type: ignore[attr-defined]
    assert len(of_type(events, ModelCallFinished)) == 4
    saved = (await agent.sessions.state(CTX)).messages
    assert [(m.role, m.text) for m in saved] == [
        ("user", "What is 2 + 2?"),
        ("assistant", "2 + 2 = 5."),
        ("user", "Revise your answer: The sum is wrong."),
        ("assistant", "2 + 2 = 4."),
    ]
    assert saved[2].metadata == {"rxagent": REVISE}
    # the model read the critique as the revision request; the critic saw the revised answer
    assert model.requests[1].messages[-1].text == "Revise your answer: The sum is wrong."
    assert critic.requests[1].messages[-2].text == "2 + 2 = 4."


@pytest.mark.parametrize("max_rounds", [0, 1, 2])
async def test_a_critic_that_never_stops_objecting_ends_after_max_rounds(max_rounds: int) -> None:
    answers = [f"draft {n}" for n in range(max_rounds + 1)]
    critic = ScriptedModel([f"objection {n}" for n in range(max_rounds + 1)])
    agent = Agent(ScriptedModel(answers), steps=reflect_then_revise(max_rounds, critic=critic))
    result, events = await run(agent, "Write a haiku.", CTX)
    assert (result.reason, result.text) == ("MODEL_STOP", answers[-1])  # the last answer stands
    assert result.detail == (
        f"revised {max_rounds} time(s), the most allowed; the critic still objects: objection {max_rounds}"
    )
    assert result.iterations == max_rounds + 1
    assert len(of_type(events, StepNote)) == max_rounds
    critic.assert_complete()


async def test_revisions_count_from_the_users_last_own_message() -> None:
    model = ScriptedModel(["draft 1", "draft 2", "draft 3", "draft 4"])
    critic = ScriptedModel(["too long", "still too long", "too long again", "OK"])
    agent = Agent(model, steps=reflect_then_revise(max_rounds=1, critic=critic))
    first = await agent.call("Write a haiku.", CTX)
    assert (first.text, first.iterations) == ("draft 2", 2)  # one revision, then the most allowed
    second = await agent.call("Shorter, please.", CTX)  # a new request: the count starts again
    assert (second.text, second.iterations, second.detail) == ("draft 4", 2, None)


async def test_a_critic_that_says_nothing_leaves_the_answer_standing() -> None:
    critic = ScriptedModel([ScriptedResponse(text="", thinking="hmm")])
    agent = Agent(ScriptedModel(["Paris."]), steps=reflect_then_revise(critic=critic))
    result = await agent.call("Capital of France?", CTX)
    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "Paris.", 1)
    assert result.detail == "the critic said nothing: the answer stands"


async def test_tool_calls_and_structured_answers_are_not_criticised() -> None:
    model = ScriptedModel([call("add", {"a": 1, "b": 2}, "c1"), "3", "OK"])
    agent = Agent(model, Toolkit([add]), steps=reflect_then_revise())
    result, _ = await run(agent, "1 + 2?", CTX)
    assert (result.text, result.iterations, result.usage.model_calls) == ("3", 2, 3)
    assert model.requests[2].messages[-1].text == CRITIQUE  # after the answer, not after the tool call


def test_a_negative_max_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match=r"max_rounds .* must be 0 or more, not -1"):
        reflect_then_revise(max_rounds=-1)


async def test_an_interrupt_during_the_critique_ends_the_run_with_the_answer() -> None:
    stuck = Stuck()
    agent = Agent(ScriptedModel(["Paris."]), steps=reflect_then_revise(critic=FunctionModel(stuck.answer)))
    control = RunControl()

    async def interrupt() -> None:
        await asyncio.wait_for(stuck.waiting.wait(), 5)
        control.interrupt()

    helper = asyncio.ensure_future(interrupt())
    result, events = await asyncio.wait_for(run(agent, "Capital of France?", CTX, control), 5)
    await helper
    assert (result.reason, result.text, result.iterations) == ("INTERRUPTED", "Paris.", 1)
    assert stuck.cancelled.is_set()  # the critic's call was cancelled
    assert [m.text for m in (await agent.sessions.state(CTX)).messages] == ["Capital of France?", "Paris."]
    check_invariants(events)


async def test_a_cancel_during_the_critique_saves_and_releases_the_session() -> None:
    stuck = Stuck()

    async def critic(request: ChatRequest) -> ScriptStep:
        if not stuck.waiting.is_set():  # the first critique never comes; the next ones accept
            await stuck.wait()
        return "OK"

    agent = Agent(ScriptedModel(["Paris.", "Rome."]), steps=reflect_then_revise(critic=FunctionModel(critic)))
    seen = expect(agent.stream_events("Capital of France?", CTX))
    await asyncio.wait_for(stuck.waiting.wait(), 5)
    seen.dispose()
    await asyncio.wait_for(stuck.cancelled.wait(), 5)
    assert seen.outcome is None  # cancelled: no result, no error
    result = await asyncio.wait_for(agent.call("And of Italy?", CTX), 5)  # the session was released
    assert (result.text, result.iterations) == ("Rome.", 1)
    saved = [m.text for m in (await agent.sessions.state(CTX)).messages]
    assert saved == ["Capital of France?", "Paris.", "And of Italy?", "Rome."]  # the answer kept, no critique


async def test_reflect_through_the_openai_client(server: OpenAIServer, model: OpenAIChatModel) -> None:
    server.script(
        text_reply("2 + 2 = 5.", 10, 5),
        text_reply("Wrong sum.", 30, 2),
        text_reply("2 + 2 = 4.", 40, 5),
        text_reply("OK", 60, 1),
    )
    agent = Agent(model, steps=reflect_then_revise())
    result, _ = await run(agent, "What is 2 + 2?", CTX)
    assert (result.text, result.iterations, result.usage.model_calls) == ("2 + 2 = 4.", 2, 4)
    assert (result.usage.input_tokens, result.usage.output_tokens) == (140, 13)
    bodies = [r.body for r in server.requests]
    assert bodies[1]["messages"][-1] == {"role": "user", "content": CRITIQUE}
    assert bodies[2]["messages"][-1] == {"role": "user", "content": "Revise your answer: Wrong sum."}
    assert all(m.get("content") != "Wrong sum." for m in bodies[2]["messages"])  # the critic's reply itself
