"""Typed dependencies reach tools and steps: ``Agent[Db, None](..., deps_type=Db)``, then
``agent.call(..., deps=db)`` gives the same ``db`` to a tool's ``ToolContext[Db].deps`` and to a step's
``run.deps_of(Db)``, with no globals and nothing in ``RuntimeContext.attributes``.

Bad inputs tried: a step asking for deps of another type, and a run given no deps (both fail the run with
a ``TypeError`` naming the types, the run's result says ``ERROR``); a tool run outside an agent (its deps
are ``None``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from reactivex import Observable
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import Agent
from rxagent.agent.loop import ReActNode, Reason, RunState, StepOutput, react_steps, reason_step
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, ErrorEvent
from rxagent.messages import Msg
from rxagent.operators import to_list
from rxagent.tools import ToolContext, Toolkit, tool


@dataclass
class Db:
    """What the caller hands each run: the tools' database (a dict here)."""

    balances: dict[str, int]
    reads: list[str] = field(default_factory=lambda: [])


@dataclass
class Other:
    """Dependencies of another type."""


@tool
def balance(account: str, context: ToolContext[Db]) -> str:
    """The balance of an account.

    Args:
        account: the account's name.
    """
    db = context.deps
    db.reads.append(account)
    return f"{account}: {db.balances[account]}"


def balance_script() -> list[ScriptedResponse | str]:
    return [
        ScriptedResponse(tool_calls=[ScriptedToolCall("balance", {"account": "alice"}, id="b1")]),
        "Alice has 42.",
    ]


async def test_a_tool_reads_the_runs_deps_through_a_typed_tool_context() -> None:
    agent = Agent[Db, None](ScriptedModel(balance_script()), Toolkit([balance]), deps_type=Db)
    db = Db({"alice": 42})
    result = await agent.call("What does Alice have?", deps=db)
    assert result.text == "Alice has 42."
    assert db.reads == ["alice"]  # the very object the caller passed
    tool_message = (await agent.sessions.state()).messages[2]
    assert [r.text for r in tool_message.tool_results] == ["alice: 42"]


async def test_each_run_gets_its_own_deps() -> None:
    agent = Agent[Db, None](ScriptedModel([*balance_script(), *balance_script()]), Toolkit([balance]))
    first, second = Db({"alice": 1}), Db({"alice": 2})
    await agent.call("Alice?", RuntimeContext(session_id="one"), deps=first)
    await agent.call("Alice?", RuntimeContext(session_id="two"), deps=second)
    assert (first.reads, second.reads) == (["alice"], ["alice"])
    two = await agent.sessions.state(RuntimeContext(session_id="two"))
    assert [r.text for r in two.messages[2].tool_results] == ["alice: 2"]


def test_a_tool_context_parameter_typed_with_deps_is_not_in_the_schema() -> None:
    properties = balance.schema().parameters["properties"]
    assert isinstance(properties, dict)
    assert set(properties) == {"account"}
    assert balance.parameter_names == frozenset({"account"})


def test_a_tool_run_outside_an_agent_has_no_deps() -> None:
    context: ToolContext[Db] = ToolContext("c1", "balance", RuntimeContext(session_id="s"))
    assert context.deps is None


def greeting_agent(model: ScriptedModel, kind: type[object]) -> Agent[Db, None]:
    """An agent whose reasoning step first reads the run's deps as a ``kind`` and tells the model the
    accounts it holds."""
    reason = reason_step()

    def greet(node: Reason, run: RunState) -> Observable[StepOutput[ReActNode]]:
        deps = run.deps_of(kind)
        accounts = sorted(deps.balances) if isinstance(deps, Db) else []
        run.add_messages([Msg.system(f"The bank holds {accounts}.")])
        return reason(node, run)

    return Agent[Db, None](model, steps=react_steps().on(Reason, greet), deps_type=Db)


async def test_a_step_reads_the_runs_deps_by_type() -> None:
    model = ScriptedModel(["Hello."])
    result = await greeting_agent(model, Db).call("Hi", deps=Db({"alice": 1, "bob": 2}))
    assert result.text == "Hello."
    told = model.requests[0].messages[-1]
    assert (told.role, told.text) == ("system", "The bank holds ['alice', 'bob'].")


@pytest.mark.parametrize(
    ("kind", "deps", "message"),
    [
        (Other, Db({}), "this run's deps are Db, not Other"),
        (Db, None, "this run's deps are NoneType, not Db"),
    ],
)
async def test_a_step_asking_for_deps_of_another_type_fails_the_run_saying_so(
    kind: type[object], deps: Db | None, message: str
) -> None:
    model = ScriptedModel(["never asked"])
    agent = greeting_agent(model, kind)
    seen: list[AgentEvent] = []
    with pytest.raises(TypeError, match=message):
        await to_list(agent.stream_events("Hi", deps=deps).pipe(ops.do_action(seen.append)))
    result = seen[-1]
    assert isinstance(result, AgentResult)
    assert (result.reason, result.detail) == ("ERROR", f"TypeError: {message}")
    assert any(isinstance(e, ErrorEvent) and e.error_type == "TypeError" for e in seen)
    assert model.requests == []  # the step failed before its model call
    assert [m.text for m in (await agent.sessions.state()).messages] == ["Hi"]  # the run was saved
    with pytest.raises(TypeError, match=message):
        await agent.call("Hi again", deps=deps)
