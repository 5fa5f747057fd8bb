"""A session's shared state (``rxagent.agent.shared_state``) and a caller's own tools
(``ToolScope.caller_tools``), through the agent's public API on a real SQLite session store.

Bad inputs tried: a shared state that is not an object, one holding a value JSON has no form for (a set,
NaN), a lone surrogate, two states in one input, a state with an input the session refuses (it is not
applied), JSON Patches that do not apply (a ``test`` that fails, a path that names nothing, a malformed
operation, a string instead of a list, a result that is not an object), the state read outside a run and
from extras written by hand; a caller tool named as one of the agent's tools, two caller tools of one
name, a caller tool's call with arguments its schema refuses.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ExternalResult, InvalidInputError, PendingToolCallsError, ReActAgent
from rxagent.agent.inputs import SharedState
from rxagent.agent.shared_state import SHARED_STATE_KEY, SharedStateError, patch_shared_state, shared_state
from rxagent.context import RuntimeContext, ToolScope
from rxagent.requests import ToolSchema
from rxagent.state import AgentState
from rxagent.tools import ToolContext, Toolkit, tool

seen: list[dict[str, Any]] = []


@tool
def add_item(item: str, context: ToolContext[object]) -> str:
    """Add an item to the user's list (kept in the shared state)."""
    state = shared_state(context)
    seen.append(json.loads(json.dumps(state)))  # as it was when the tool began
    state.setdefault("items", []).append(item)
    return f"{state.get('owner')} has {len(state['items'])} item(s)"


@tool
def apply_patch(patch: list[dict[str, Any]], context: ToolContext[object]) -> str:
    """Change the shared state with a JSON Patch."""
    return str(patch_shared_state(context, patch))


ASK = ToolSchema(
    "ask_user",
    "Ask the person at the front end.",
    {"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
)


@pytest.fixture(autouse=True)
def nothing_seen() -> None:
    seen.clear()


def agent_on(tmp_path: Path, *steps: Any, tools: Toolkit | None = None) -> ReActAgent:
    return ReActAgent(
        ScriptedModel(list(steps)), tools or Toolkit([add_item, apply_patch]), store=str(tmp_path / "s.db")
    )


CTX = RuntimeContext(session_id="s")


async def test_the_run_starts_from_the_callers_state_tools_change_it_and_the_log_keeps_it(
    tmp_path: Path,
) -> None:
    call = ScriptedResponse(tool_calls=[ScriptedToolCall("add_item", {"item": "milk"}, id="c1")])
    agent = agent_on(tmp_path, call, "Added.")
    result = await agent.call([SharedState({"owner": "Ada", "items": ["eggs"]}), "Add milk."], CTX)
    assert result.text == "Added."
    assert seen == [{"owner": "Ada", "items": ["eggs"]}]  # the tool read the caller's state
    await agent.aclose()

    again = agent_on(tmp_path, "Still here.")  # a new agent over the same store: the log replays it
    state = await again.sessions.state(CTX)
    assert state.extras[SHARED_STATE_KEY] == {"owner": "Ada", "items": ["eggs", "milk"]}
    await again.call("Anything else?", CTX)  # no state given: the session's stays
    assert (await again.sessions.state(CTX)).extras[SHARED_STATE_KEY]["items"] == ["eggs", "milk"]
    kinds = [f.kind for f in await again.sessions.facts(CTX)]
    assert kinds.count("extras") == 2  # the caller's state, then the tool's change
    await again.aclose()


async def test_a_patch_applies_whole_and_one_that_does_not_apply_changes_nothing(tmp_path: Path) -> None:
    good = [{"op": "test", "path": "/n", "value": 1}, {"op": "replace", "path": "/n", "value": 2}]
    bad = [{"op": "add", "path": "/m", "value": 9}, {"op": "test", "path": "/n", "value": 1}]  # n is 2 now
    agent = agent_on(
        tmp_path,
        ScriptedResponse(tool_calls=[ScriptedToolCall("apply_patch", {"patch": good}, id="p1")]),
        ScriptedResponse(tool_calls=[ScriptedToolCall("apply_patch", {"patch": bad}, id="p2")]),
        "Done.",
    )
    await agent.call([SharedState({"n": 1}), "Patch it."], CTX)
    state = await agent.sessions.state(CTX)
    assert state.extras[SHARED_STATE_KEY] == {"n": 2}  # the second patch's add was not kept
    results = [r for m in state.messages for r in m.tool_results]
    assert [r.status for r in results] == ["ok", "error"]
    assert "does not apply" in results[1].text
    assert "not equal" in results[1].text
    await agent.aclose()


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ([{"op": "remove", "path": "/missing"}], "does not apply"),
        ([{"op": "add", "path": "no-slash", "value": 1}], "does not apply"),
        ([{"path": "/n"}], "does not apply"),
        ([{"op": "bogus", "path": "/n"}], "does not apply"),
        ([7], "does not apply"),
        ("not a list", "list of operations"),
        ([{"op": "replace", "path": "", "value": [1]}], "would make the shared state a list"),
    ],
)
def test_bad_patches_are_refused_whole(patch: Any, problem: str) -> None:
    state = AgentState(extras={SHARED_STATE_KEY: {"n": 1}})
    with pytest.raises(SharedStateError, match=problem):
        patch_shared_state(state, patch)
    assert state.extras[SHARED_STATE_KEY] == {"n": 1}


def test_the_state_is_read_only_inside_a_run_and_only_as_an_object() -> None:
    with pytest.raises(RuntimeError, match="only inside an agent's run"):
        shared_state(RuntimeContext(session_id="s"))
    with pytest.raises(SharedStateError, match="is a list, not a JSON object"):
        shared_state(AgentState(extras={SHARED_STATE_KEY: [1, 2]}))
    fresh = AgentState()
    shared_state(fresh)["k"] = "v"  # the live object: changed in place
    assert fresh.extras[SHARED_STATE_KEY] == {"k": "v"}


@pytest.mark.parametrize(
    ("value", "error", "problem"),
    [
        ([1, 2], TypeError, "holds a JSON object, not list"),
        ({"tags": {1, 2}}, TypeError, "JSON values only"),
        ({"x": math.nan}, TypeError, "JSON values only"),
        ({"name": "\udc80"}, InvalidInputError, "lone surrogate"),
    ],
)
async def test_bad_states_are_refused_before_anything_runs(
    tmp_path: Path, value: Any, error: type[Exception], problem: str
) -> None:
    agent = agent_on(tmp_path, "never")
    with pytest.raises(error, match=problem):
        await agent.call([SharedState(value), "hi"], CTX)
    with pytest.raises(InvalidInputError, match="a second SharedState"):
        await agent.call([SharedState({"a": 1}), SharedState({"b": 2}), "hi"], CTX)
    assert (await agent.sessions.state(CTX)).messages == []
    await agent.aclose()


async def test_a_state_given_with_input_the_session_refuses_is_not_applied(tmp_path: Path) -> None:
    agent = agent_on(tmp_path, "never")
    with pytest.raises(PendingToolCallsError):
        await agent.call([SharedState({"owner": "Eve"}), ExternalResult("ghost", "x")], CTX)
    assert SHARED_STATE_KEY not in (await agent.sessions.state(CTX)).extras
    await agent.aclose()


# ---- caller tools ------------------------------------------------------------------------------------------


async def test_a_caller_tool_is_seen_by_the_model_and_its_call_waits_for_the_callers_result(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("ask_user", {"question": "Ship it?"}, id="q1")]),
            "Shipping.",
        ]
    )
    agent = ReActAgent(model, Toolkit([add_item]), store=str(tmp_path / "s.db"))
    ctx = RuntimeContext(session_id="s", tools=ToolScope(allow=["add_item"], caller_tools=(ASK,)))
    first = await agent.call("Ship the order.", ctx)
    assert first.reason == "TOOL_SUSPENDED"
    assert [c.id for c in first.pending] == ["q1"]
    assert [t.name for t in model.requests[0].tools] == ["add_item", "ask_user"]  # beside the allowed ones
    second = await agent.call(ExternalResult("q1", "yes"), ctx)
    assert second.text == "Shipping."
    assert model.requests[1].messages[-1].tool_results[0].text == "yes"
    await agent.aclose()


async def test_a_caller_tools_call_with_arguments_its_schema_refuses_gets_an_error_result(
    tmp_path: Path,
) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("ask_user", {"question": 5}, id="q1")]), "Sorry."]
    )
    agent = ReActAgent(model, store=str(tmp_path / "s.db"))
    result = await agent.call("Ask.", RuntimeContext(session_id="s", tools=ToolScope(caller_tools=(ASK,))))
    assert result.text == "Sorry."
    assert not result.pending  # refused here: it never reached the caller
    (refused,) = model.requests[1].messages[-1].tool_results
    assert refused.status == "error"
    assert "question" in refused.text
    await agent.aclose()


def test_caller_tools_may_not_take_a_name_in_use() -> None:
    kit = Toolkit([add_item])
    with pytest.raises(ValueError, match="as one of the agent's own tools is"):
        kit.view(caller_tools=[ToolSchema("add_item", "mine")])
    with pytest.raises(ValueError, match="two caller tools are named 'ask_user'"):
        kit.view(caller_tools=[ASK, ASK])
    view = kit.view(caller_tools=[ASK])
    assert [s.name for s in view.schemas()] == ["add_item", "ask_user"]
    assert [s.name for s in kit.view().schemas()] == ["add_item"]  # the toolkit's other views unchanged
