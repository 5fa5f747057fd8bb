"""The context budget: large results evicted to files and read back, an overflow compressed and retried
once (by the budget's own count, and when the loopback OpenAI server refuses with HTTP 400
``context_length_exceeded``), and an impossible budget failing with ``ContextBudgetExceeded`` while the real
SQLite log keeps the conversation as it was.

Bad inputs tried: budget settings out of range, an evicted-results folder outside the workspace (by
name, and through a symlink), a request whose fixed part alone is over the budget, a server that refuses
twice.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.events import (
    ContextCompressed,
    ContextOverflowRetry,
    ModelCallFinished,
    ModelCallStarted,
    TodoItem,
)
from rxagent.harness import ContextBudget, ContextBudgetExceeded, budget_part, todos_part
from rxagent.harness.budget import EVICTED_DIR, WorkspaceFolder
from rxagent.harness.todos import TODOS_KEY, todo_reminder
from rxagent.memory import TiktokenCounter
from rxagent.memory.window import SUMMARY_HEADER
from rxagent.messages import Msg
from rxagent.model.scripted import FunctionModel, ScriptStep
from rxagent.operators import to_list
from rxagent.requests import ChatRequest
from rxagent.session import SQLiteStore, seed_session
from rxagent.state import AgentState
from rxagent.tools import Tool, tool
from rxagent.tools.permissions import canonical_path

from ..agent.helpers import check_invariants
from ..memory.conversations import filler, turn
from ..model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    usage_chunk,
)
from .agents import agent_of, fact_rows

COUNTER = TiktokenCounter()
BIG = "\n".join(
    f"line {i:05d}: " + "the quick brown fox jumps over the lazy dog " * 4 for i in range(1, 1_200)
)
OVERFLOW = {
    "error": {
        "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in "
        "5210 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
BOOKKEEPING = {"turn_started", "turn_finished", "run_started", "run_failed"}


@tool(read_only=True)
def dump() -> str:
    """Dump the whole report."""
    return BIG


def line_reader(root: Path) -> Tool:
    """A tiny read tool confined to ``root``: lines ``offset`` to ``offset + limit`` of a file."""
    real = Path(canonical_path(".", root))

    @tool(read_only=True)
    def read_lines(path: str, offset: int, limit: int) -> str:
        """Read some lines of a file of the workspace."""
        target = Path(canonical_path(path, real))
        if not target.is_relative_to(real):
            raise PermissionError(f"{path!r} is outside the workspace")
        return "\n".join(target.read_text().splitlines()[offset : offset + limit])

    return read_lines


def answer(text: str) -> Reply:
    return Reply.sse(
        chunk({"role": "assistant", "content": ""}),
        text_chunk(text),
        finish_chunk("stop"),
        usage_chunk(),
        DONE,
    )


def workspace_of(root: Path) -> WorkspaceFolder:
    def folder(ctx: RuntimeContext) -> Path:
        return root / (ctx.session_id or "default")

    return folder


async def test_a_200_kb_result_is_evicted_to_a_file_and_read_back_through_its_pointer(tmp_path: Path) -> None:
    assert len(BIG.encode()) > 200_000
    session_folder = tmp_path / "work" / "default"
    session_folder.mkdir(parents=True)
    read: list[str] = []

    def respond(request: ChatRequest) -> ScriptStep:
        last = request.messages[-1]
        if last.role == "user":
            return ScriptedResponse(tool_calls=[ScriptedToolCall("dump", {}, id="d1")])
        result = last.tool_results[0]
        if result.name == "dump":
            path = re.search(r"saved to the file `([^`]+)`", result.text)
            assert path is not None, result.text
            return ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("read_lines", {"path": path[1], "offset": 1000, "limit": 3}, id="r1")
                ]
            )
        read.append(result.text)
        return "Line 1001 is about a fox."

    model = FunctionModel(respond)
    budget = ContextBudget(max_tokens=8_000, reply_reserve=1_000, evict_over_tokens=2_000)
    agent = agent_of(
        model,
        [budget_part(budget, folder=workspace_of(tmp_path / "work"))],
        tools=[dump, line_reader(session_folder)],
        store=str(tmp_path / "sessions.db"),
    )
    events = await to_list(agent.stream_events("What does line 1001 say?"))
    assert check_invariants(events).text == "Line 1001 is about a fox."

    assert read == ["\n".join(BIG.splitlines()[1000:1003])]  # read back through the pointer, a part at a time
    pointer = model.requests[1].messages[-1].tool_results[0].text
    [saved] = (session_folder / EVICTED_DIR).iterdir()
    assert f"`{EVICTED_DIR}/{saved.name}`" in pointer
    assert saved.read_text() == BIG
    assert "1,199 lines" in pointer
    assert BIG.splitlines()[0] in pointer
    for request in model.requests:
        assert BIG not in "".join(m.text for m in request.messages)
        assert COUNTER.count_request(request) <= 7_000  # the whole request, tool schemas included
    # The request changed, not the history: the session keeps the result whole.
    state = await agent.sessions.state()
    [kept] = [m for m in state.messages if m.role == "tool" and m.tool_results[0].name == "dump"]
    assert kept.tool_results[0].text == BIG
    await agent.aclose()


async def test_an_evicted_file_that_went_missing_is_written_again(tmp_path: Path) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("dump", {}, id="d1")]), "Dumped.", "Again."]
    )
    agent = agent_of(
        model,
        [budget_part(ContextBudget(max_tokens=8_000), folder=workspace_of(tmp_path))],
        tools=[dump],
    )
    await agent.call("Dump it.")
    [saved] = (tmp_path / "default" / EVICTED_DIR).iterdir()
    saved.unlink()
    await agent.call("And now?")
    assert saved.read_text() == BIG  # the pointer in the request never dangles
    assert (
        model.requests[-1].messages[-3].tool_results[0].text
        == model.requests[1].messages[-1].tool_results[0].text
    )


async def test_an_overflow_by_the_budgets_own_count_compresses_and_retries_once(tmp_path: Path) -> None:
    history = [m for i in range(10) for m in turn(i, size=400, user_words=50)]
    store = SQLiteStore(tmp_path / "sessions.db")
    await seed_session(store, (None, "default"), AgentState(messages=history))
    model = ScriptedModel(["Summed up.", "Still fine."])
    budget = ContextBudget(max_tokens=3_000, reply_reserve=300, recent_turns=2, evict_over_tokens=2_000)
    agent = agent_of(model, [budget_part(budget, folder=workspace_of(tmp_path))], store=store)

    events = await to_list(agent.stream_events("Sum it up.", record=True))
    assert check_invariants(events).text == "Summed up."
    [retry] = [e for e in events if isinstance(e, ContextOverflowRetry)]
    assert retry.cause == "budget"
    assert retry.tokens > retry.allowed == 2_700
    [compressed] = [e for e in events if isinstance(e, ContextCompressed)]
    started = next(e for e in events if isinstance(e, ModelCallStarted))
    assert events.index(retry) < events.index(compressed) < events.index(started)  # before the request
    [request] = model.requests
    assert request.messages[1].text.startswith(SUMMARY_HEADER)
    assert COUNTER.count_request(request) <= 2_700
    recorded = [json.loads(f.payload) for f in await agent.sessions.facts() if f.kind == "event"]
    assert [e["cause"] for e in recorded if e["type"] == "context_overflow_retry"] == ["budget"]  # one retry

    # Compression went below the budget: the next request fits without another retry.
    events = await to_list(agent.stream_events("And?"))
    assert not [e for e in events if isinstance(e, ContextOverflowRetry | ContextCompressed)]
    await agent.aclose()


async def test_a_server_refusing_the_request_as_too_long_gets_it_compressed_once(
    server: OpenAIServer, tmp_path: Path, clock: VirtualClock
) -> None:
    history = [m for i in range(8) for m in turn(i, size=300, user_words=40)]
    store = SQLiteStore(tmp_path / "sessions.db")
    await seed_session(store, (None, "default"), AgentState(messages=history))
    server.script(Reply.json(OVERFLOW, status=400), answer("Done."))
    budget = ContextBudget(max_tokens=16_000, reply_reserve=500, recent_turns=1)
    agent = agent_of(
        make_model(server), [budget_part(budget, folder=workspace_of(tmp_path))], store=store, clock=clock
    )

    events = await to_list(agent.stream_events("Go on.", record=True))
    assert check_invariants(events).text == "Done."
    assert len(server.requests) == 2  # the refused request and its one retry
    [retry] = [e for e in events if isinstance(e, ContextOverflowRetry)]
    assert retry.cause == "provider"
    assert "context_length_exceeded" in retry.detail
    assert retry.allowed == int(retry.tokens * budget.overflow_shrink)
    [compressed] = [e for e in events if isinstance(e, ContextCompressed)]
    finished = next(e for e in events if isinstance(e, ModelCallFinished))
    assert events.index(retry) < events.index(compressed) < events.index(finished)  # told in order
    refused, retried = (r.body["messages"] for r in server.requests)
    assert len(retried) < len(refused)
    assert retried[1]["content"].startswith(SUMMARY_HEADER)
    assert refused[-1] == retried[-1] == {"role": "user", "content": "Go on."}
    recorded = [json.loads(f.payload) for f in await agent.sessions.facts() if f.kind == "event"]
    assert [e["cause"] for e in recorded if e["type"] == "context_overflow_retry"] == ["provider"]
    await agent.aclose()


async def test_a_server_refusing_twice_fails_the_run_and_the_log_keeps_the_conversation(
    server: OpenAIServer, tmp_path: Path, clock: VirtualClock
) -> None:
    history = [m for i in range(8) for m in turn(i, size=300, user_words=40)]
    store = SQLiteStore(tmp_path / "sessions.db")
    await seed_session(store, (None, "default"), AgentState(messages=history))
    server.script(Reply.json(OVERFLOW, status=400), Reply.json(OVERFLOW, status=400))
    budget = ContextBudget(max_tokens=16_000, reply_reserve=500, recent_turns=1)
    # The agent's clock is virtual: no background flush runs, so what the log has is what the run recorded.
    agent = agent_of(
        make_model(server), [budget_part(budget, folder=workspace_of(tmp_path))], store=store, clock=clock
    )
    before = await agent.sessions.facts()

    with pytest.raises(
        ContextBudgetExceeded, match="refused the request as too long after the one"
    ) as caught:
        await agent.call("Go on.")
    assert "context_length_exceeded" in str(caught.value.__cause__)
    assert len(server.requests) == 2
    after = await agent.sessions.facts()
    assert fact_rows(after[: len(before)]) == fact_rows(before)
    assert {f.kind for f in after[len(before) :]} <= BOOKKEEPING  # the run's start and failure, nothing else
    assert "ContextBudgetExceeded" in after[-2].payload or "ContextBudgetExceeded" in after[-1].payload
    state = await agent.sessions.state()
    assert state.messages == history
    assert state.extras == {}
    await agent.aclose()


async def test_an_impossible_budget_fails_and_the_sqlite_log_is_unchanged(
    tmp_path: Path, clock: VirtualClock
) -> None:
    db = tmp_path / "sessions.db"
    folder = workspace_of(tmp_path / "work")
    roomy = agent_of(
        ScriptedModel(["Hello, Ada."]),
        [todos_part(), budget_part(ContextBudget(max_tokens=8_000), folder=folder)],
        store=str(db),
    )
    await roomy.call("My name is Ada.")
    before_state = await roomy.sessions.state()
    await roomy.aclose()

    model = ScriptedModel(["never sent"])
    tight = ContextBudget(max_tokens=400, reply_reserve=100)
    prompt = "Follow the house rules. " + filler(400, "rule")
    agent = agent_of(
        model,
        [todos_part(), budget_part(tight, folder=folder)],
        system_prompt=prompt,
        store=str(db),
        clock=clock,
    )
    before = await agent.sessions.facts()
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.call("Tell me a long story.")
    assert model.requests == []
    error = caught.value
    assert error.rolls_back
    assert error.needed > error.allowed == 300
    assert error.breakdown["system"] > 400
    assert error.breakdown["tools"] > 0
    after = await agent.sessions.facts()
    assert fact_rows(after[: len(before)]) == fact_rows(before)
    new = after[len(before) :]
    assert [f.kind for f in new] == ["turn_started", "run_started", "run_failed", "turn_finished"]
    assert "ContextBudgetExceeded" in new[2].payload
    await agent.aclose()

    # Read again from the file by a new agent: the conversation is as it was.
    reopened = agent_of(ScriptedModel([]), [], store=str(db))
    assert await reopened.sessions.state() == before_state
    assert [m.text for m in before_state.messages] == ["My name is Ada.", "Hello, Ada."]
    assert not (tmp_path / "work" / "default" / EVICTED_DIR).exists()
    await reopened.aclose()


async def test_dynamic_sources_count_the_todo_reminder_with_the_system_part(tmp_path: Path) -> None:
    open_items = [TodoItem(content="Read the report", status="in_progress"), TodoItem(content="Write it up")]
    model = ScriptedModel(["never sent"])
    prompt = "You are careful. " + filler(300, "rule")
    parts = [
        todos_part(),
        budget_part(ContextBudget(max_tokens=300, reply_reserve=50), folder=workspace_of(tmp_path)),
    ]
    agent = agent_of(model, parts, system_prompt=prompt)
    await seed_session(
        agent.store, (None, "default"), AgentState(extras={TODOS_KEY: [i.model_dump() for i in open_items]})
    )
    with pytest.raises(ContextBudgetExceeded) as caught:
        await agent.call("Go on.")
    reminder = todo_reminder(open_items)
    assert reminder is not None
    system = Msg.system(agent.system_prompt or "")
    assert caught.value.breakdown["system"] == COUNTER.count_message(system) + COUNTER.count_message(reminder)
    schemas = agent.toolkit.view().schemas()
    assert caught.value.breakdown["tools"] == COUNTER.count_tools(schemas)


async def test_a_failed_request_removes_the_files_it_evicted_and_keeps_the_recorded_call(
    tmp_path: Path, clock: VirtualClock
) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("dump", {}, id="d1")]), "never sent"]
    )
    budget = ContextBudget(max_tokens=1_000, reply_reserve=100, evict_over_tokens=300, preview_lines=10)
    prompt = "You are careful. " + filler(650, "rule")
    agent = agent_of(
        model,
        [budget_part(budget, folder=workspace_of(tmp_path))],
        tools=[dump],
        system_prompt=prompt,
        store=str(tmp_path / "sessions.db"),
        clock=clock,
    )
    with pytest.raises(ContextBudgetExceeded):
        await agent.call("Dump it.")
    assert len(model.requests) == 1
    assert list((tmp_path / "default" / EVICTED_DIR).iterdir()) == []  # nothing half-done
    # The tool ran: its call and result were recorded as it ran, and stay; the summary the failed
    # compression wrote does not.
    state = await agent.sessions.state()
    assert [m.role for m in state.messages] == ["user", "assistant", "tool"]
    assert state.messages[-1].tool_results[0].text == BIG
    assert state.extras == {}
    await agent.aclose()


def test_settings_out_of_range_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="reply_reserve < max_tokens"):
        ContextBudget(max_tokens=500, reply_reserve=500)
    with pytest.raises(ValueError, match="reply_reserve < max_tokens"):
        ContextBudget(max_tokens=0)
    with pytest.raises(ValueError, match="evict_over_tokens"):
        ContextBudget(max_tokens=500, reply_reserve=10, evict_over_tokens=0)
    with pytest.raises(ValueError, match=r"overflow_shrink must be in \(0, 1\]"):
        ContextBudget(max_tokens=500, reply_reserve=10, overflow_shrink=1.5)
    with pytest.raises(ValueError, match="inside the workspace"):
        budget_part(ContextBudget(max_tokens=8_000), folder=workspace_of(tmp_path), evicted_dir="../out")


async def test_an_evicted_results_folder_that_links_out_of_the_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "work" / "default").mkdir(parents=True)
    (tmp_path / "work" / "default" / EVICTED_DIR).symlink_to(outside)
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("dump", {}, id="d1")]), "never sent"]
    )
    agent = agent_of(
        model,
        [budget_part(ContextBudget(max_tokens=8_000), folder=workspace_of(tmp_path / "work"))],
        tools=[dump],
    )
    with pytest.raises(PermissionError, match="leads outside the workspace"):
        await agent.call("Dump it.")
    assert list(outside.iterdir()) == []
