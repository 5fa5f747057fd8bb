"""The todo list: kept in the session (a new agent over the same SQLite file finds it), shown as events, and
recalled to the model in each request without ever being stored.

Bad inputs tried: an unknown status, more than ``MAX_TODOS`` items, an item of blank text, a call outside
an agent's run, and a stored list that is not a todo list (written by hand into the session's extras).
"""

from __future__ import annotations

import json
from pathlib import Path

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult, TodoItem, TodosUpdated, ToolResult
from rxagent.harness import todos_part
from rxagent.harness.todos import MAX_TODOS, TODOS_KEY, read_todos, todo_reminder, write_todos
from rxagent.messages import ToolUseBlock
from rxagent.operators import to_list
from rxagent.session import SQLiteStore, seed_session
from rxagent.state import AgentState
from rxagent.tools import ToolBatchFinished, ToolExecutor, Toolkit

from ..agent.helpers import check_invariants
from .agents import agent_of

PLAN = [
    {"content": "Read the report", "status": "in_progress"},
    {"content": "Write the summary", "status": "pending"},
]


def write(todos: object, call_id: str = "w1") -> ScriptedResponse:
    return ScriptedResponse(tool_calls=[ScriptedToolCall("write_todos", {"todos": todos}, id=call_id)])  # type: ignore[arg-type]


def results_of(events: list[object]) -> list[ToolResult]:
    return [e for e in events if isinstance(e, ToolResult)]


async def test_the_list_survives_a_restart_and_each_change_is_an_event(tmp_path: Path) -> None:
    db = str(tmp_path / "sessions.db")
    first = agent_of(ScriptedModel([write(PLAN), "Planned."]), [todos_part()], store=db)
    events = await to_list(first.stream_events("Summarise the report."))
    result = check_invariants(events)
    assert result.reason == "MODEL_STOP"
    [written] = results_of(events)
    [updated] = [e for e in events if isinstance(e, TodosUpdated)]
    assert events.index(updated) == events.index(written) + 1  # told right after the call that changed it
    assert updated.todos == [
        TodoItem(content="Read the report", status="in_progress"),
        TodoItem(content="Write the summary"),
    ]
    assert "1 in progress, 1 pending" in written.result.text
    facts = await first.sessions.facts()
    assert any(f.kind == "extras" and json.loads(f.payload)["extras"][TODOS_KEY] == PLAN for f in facts)
    await first.aclose()

    # Another process: a new agent over the same file reads the list back.
    read = ScriptedResponse(tool_calls=[ScriptedToolCall("read_todos", {}, id="r1")])
    second = agent_of(ScriptedModel([read, "Still two to do."]), [todos_part()], store=db)
    events = await to_list(second.stream_events("Where are we?"))
    [answer] = results_of(events)
    assert answer.result.text == "1. [>] Read the report\n2. [ ] Write the summary"
    assert not [e for e in events if isinstance(e, TodosUpdated)]  # reading changes nothing
    assert (await second.sessions.state()).extras[TODOS_KEY] == PLAN
    await second.aclose()


async def test_the_reminder_is_in_the_request_the_model_receives_and_never_stored(tmp_path: Path) -> None:
    done = [
        {"content": "Read the report", "status": "completed"},
        {"content": "Write the summary", "status": "completed"},
    ]
    model = ScriptedModel([write(PLAN), "Working.", write(done, "w2"), "All done."])
    agent = agent_of(model, [todos_part()], store=str(tmp_path / "sessions.db"))
    await agent.call("Summarise the report.")
    first, second = model.requests[0], model.requests[1]
    assert first.messages[-1].role == "user"  # no list yet: no reminder
    reminder = second.messages[-1]
    assert reminder.role == "system"
    assert reminder.metadata == {"rxagent": "todo_reminder"}
    assert reminder.text.splitlines()[:3] == [
        "Reminder: 2 item(s) of your todo list are still open:",
        "- [>] Read the report",
        "- [ ] Write the summary",
    ]
    await agent.call("Finish it.")
    assert model.requests[2].messages[-1].metadata == {"rxagent": "todo_reminder"}  # still open at turn 2
    assert model.requests[3].messages[-1].role == "tool"  # every item completed: no reminder

    state = await agent.sessions.state()
    assert not any(m.metadata.get("rxagent") == "todo_reminder" for m in state.messages)
    assert all("Reminder:" not in f.payload for f in await agent.sessions.facts())  # nor anywhere in the log
    await agent.aclose()


async def test_bad_lists_are_refused_with_a_plain_message_and_the_list_is_kept() -> None:
    unknown_status = [{"content": "Read", "status": "started"}]
    too_many = [{"content": f"step {i}"} for i in range(MAX_TODOS + 1)]
    blank = [{"content": "Read"}, {"content": "   "}]
    model = ScriptedModel(
        [write(PLAN), write(unknown_status, "w2"), write(too_many, "w3"), write(blank, "w4"), "Kept."]
    )
    agent = agent_of(model, [todos_part()])
    events = await to_list(agent.stream_events("Plan."))
    results = {r.result.tool_use_id: r.result for r in results_of(events)}
    assert results["w1"].status == "ok"
    for call_id in ("w2", "w3", "w4"):
        assert results[call_id].status == "error"
    assert "status" in results["w2"].text
    assert "started" in results["w2"].text
    assert str(MAX_TODOS) in results["w3"].text
    assert "[2] have no text" in results["w4"].text
    assert len([e for e in events if isinstance(e, TodosUpdated)]) == 1
    assert (await agent.sessions.state()).extras[TODOS_KEY] == PLAN


async def test_outside_a_run_the_tools_say_they_need_a_session() -> None:
    call = ToolUseBlock(id="r1", name="read_todos", input={})
    events = await to_list(
        ToolExecutor().execute([call], Toolkit([read_todos, write_todos]).view(), RuntimeContext())
    )
    [finished] = [e for e in events if isinstance(e, ToolBatchFinished)]
    assert finished.results[0].status == "error"
    assert "only inside an agent's run" in finished.results[0].text


async def test_a_stored_value_that_is_no_list_is_reported_and_the_run_goes_on() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("read_todos", {}, id="r1")]), "I see."]
    )
    agent = agent_of(model, [todos_part()])
    await seed_session(agent.store, (None, "default"), AgentState(extras={TODOS_KEY: "buy milk"}))
    events = await to_list(agent.stream_events("What is on the list?"))
    [answer] = results_of(events)
    assert answer.result.status == "error"
    assert "cannot be read" in answer.result.text
    assert isinstance(events[-1], AgentResult)
    assert events[-1].reason == "MODEL_STOP"
    assert all(m.metadata.get("rxagent") != "todo_reminder" for r in model.requests for m in r.messages)


def test_the_reminder_is_short() -> None:
    items = [TodoItem(content=f"step {i} " + "x" * 300) for i in range(25)] + [
        TodoItem(content="done", status="completed")
    ]
    reminder = todo_reminder(items)
    assert reminder is not None
    lines = reminder.text.splitlines()
    assert lines[0] == "Reminder: 25 item(s) of your todo list are still open:"
    assert len(lines) == 1 + 10 + 2  # ten items, "and 15 more", the closing line
    assert "15 more" in lines[-2]
    assert all(len(line) < 140 for line in lines)
    assert todo_reminder([TodoItem(content="done", status="completed")]) is None


async def test_a_sqlite_log_written_by_hand_is_read_the_same(tmp_path: Path) -> None:
    # The list is plain state: seeded into a real SQLite file, a new agent's reminder shows it.
    store = SQLiteStore(tmp_path / "sessions.db")
    await seed_session(store, (None, "default"), AgentState(extras={TODOS_KEY: PLAN}))
    model = ScriptedModel(["On it."])
    agent = agent_of(model, [todos_part()], store=store)
    await agent.call("Go on.")
    assert model.requests[0].messages[-1].metadata == {"rxagent": "todo_reminder"}
    await agent.aclose()
