"""What the server adds for a harness's agent, on a real server on 127.0.0.1: a session's background tasks
(``GET /api/sessions/{sid}/tasks``), their own sessions served read-only, and the todo list in the feed.

The subagent's model waits for the test (:class:`Gate`), so "running" and "queued" are states the test
holds, not a race.

Bad inputs tried: an unknown session and an invalid session id on the tasks endpoint; an unknown task's
session; every endpoint that would drive a session (runs, steer, respond, reconcile, interrupt, AG-UI)
given a task's session, each answered 409 with nothing recorded.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.harness import Harness, HarnessAgent, Subagent
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from tests.serve.conftest import WAIT, Live, fact_events, is_result_of, serving

TALL = "How tall is the Eiffel tower?"
BUILT = "Who built the Eiffel tower?"


class Gate:
    """A subagent's model that answers each task once the test opens the gate; :attr:`entered` is set by
    the first call."""

    def __init__(self) -> None:
        self.open = asyncio.Event()
        self.entered = asyncio.Event()
        self.model = FunctionModel(self._respond)

    async def _respond(self, request: ChatRequest) -> str:
        self.entered.set()
        await self.open.wait()
        task = next(m.text for m in request.messages if m.role == "user")
        return f"Answer to: {task}"


def start(*instructions: str) -> ScriptedResponse:
    return ScriptedResponse(
        tool_calls=[
            ScriptedToolCall("start_task", {"agent": "researcher", "instructions": text}, id=f"t{n}")
            for n, text in enumerate(instructions, 1)
        ]
    )


def lead(tmp_path: Path, gate: Gate, *script: Any, max_tasks: int = 1) -> HarnessAgent:
    """A harness's agent whose model follows ``script``, with a ``researcher`` subagent on ``gate``."""
    harness = Harness(
        workspace=tmp_path / "work",
        subagents=[Subagent("researcher", "Finds facts.", model=gate.model)],
        max_tasks=max_tasks,
    )
    return harness.agent(ScriptedModel(list(script)), system_prompt="You lead a team.")


async def run_to_end(live: Live, session: str, text: str) -> list[dict[str, Any]]:
    status, answer = await live.post(f"/api/sessions/{session}/runs", {"input": text})
    assert status == 202, answer
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        return fact_events(await feed.until(is_result_of(answer["run_id"])))


async def tasks_of(live: Live, session: str) -> list[dict[str, Any]]:
    status, answer = await live.get(f"/api/sessions/{quoted(session)}/tasks")
    assert status == 200, answer
    assert answer["session_id"] == session
    return answer["tasks"]


def quoted(session_id: str) -> str:
    """A session id as a path segment (a task's holds ``/``)."""
    return session_id.replace("/", "%2F")


async def test_tasks_are_listed_with_their_status_and_their_sessions_are_read_only(tmp_path: Path) -> None:
    gate = Gate()
    agent = lead(tmp_path, gate, start(TALL, BUILT), "Two tasks are under way.")
    async with serving(agent) as live:
        await run_to_end(live, "s1", "Find out about the Eiffel tower, in the background.")
        await asyncio.wait_for(gate.entered.wait(), WAIT)

        going = await tasks_of(live, "s1")

        assert [(t["agent"], t["instructions"], t["status"], t["position"]) for t in going] == [
            ("researcher", TALL, "running", None),
            ("researcher", BUILT, "queued", 1),  # max_tasks=1: it waits for the first
        ]
        for task in going:
            assert task["session_id"] == f"s1/tasks/{task['task_id']}"
            assert task["call_id"] in ("t1", "t2")
            assert (task["answer"], task["usage"]) == (None, None)

        gate.open.set()
        async with live.sse("/api/sessions/s1/feed") as feed:
            await feed.until(lambda e: e.event == "fact" and e.json()["kind"] == "task_finished")
            await feed.until(lambda e: e.event == "fact" and e.json()["kind"] == "task_finished")
        ended = await tasks_of(live, "s1")

        assert [(t["status"], t["answer"]) for t in ended] == [
            ("finished", f"Answer to: {TALL}"),
            ("finished", f"Answer to: {BUILT}"),
        ]
        assert all(t["usage"]["model_calls"] == 1 for t in ended)

        # A task's session is read as any other: its status, its turns, its feed.
        task_session = ended[0]["session_id"]
        path = f"/api/sessions/{quoted(task_session)}"
        status, read = await live.get(path)
        assert status == 200, read
        assert (read["session_id"], read["status"]["state"]) == (task_session, "idle")
        status, turns = await live.get(f"{path}/turns")
        assert status == 200, turns
        assert [t["input"] for t in turns["turns"]] == [[TALL]]
        async with live.sse(f"{path}/feed") as feed:
            facts = fact_events(
                await feed.until(lambda e: e.event == "fact" and e.json()["seq"] == read["head"])
            )
        answers = [f["data"]["message"] for f in facts if f["kind"] == "message"]
        assert answers[-1]["role"] == "assistant"
        assert answers[-1]["content"][0]["text"] == f"Answer to: {TALL}"
        assert await tasks_of(live, task_session) == []  # a task starts no tasks

        # ... and never driven from here: its task alone does that.
        head = read["head"]
        for route, body in [
            ("runs", {"input": "Something else."}),
            ("steer", {"message": "Something else."}),
            ("respond", {"decisions": [{"call_id": "c1", "allow": True}]}),
            ("reconcile", {"outcomes": [{"call_id": "c1", "outcome": "retry"}]}),
            ("interrupt", {}),
        ]:
            status, refused = await live.post(f"{path}/{route}", body)
            assert status == 409, (route, refused)
            assert refused["error"] == (
                f"session {task_session!r} is a background task's: read it here, and drive it through its "
                "task (resume_task, cancel_task)"
            )
        run_input = {
            "threadId": task_session,
            "runId": "r1",
            "messages": [{"id": "m1", "role": "user", "content": "Hi"}],
            **{"tools": [], "context": [], "state": {}, "forwardedProps": {}},
        }
        status, refused = await live.post("/ag-ui", run_input)
        assert status == 409, refused
        status, after = await live.get(path)
        assert after["head"] == head


async def test_the_todo_list_is_in_the_feed_whole_at_each_change(tmp_path: Path) -> None:
    first = [{"content": "draft", "status": "in_progress"}, {"content": "review", "status": "pending"}]
    second = [{"content": "draft", "status": "completed"}, {"content": "review", "status": "in_progress"}]
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("write_todos", {"todos": first})]),
            ScriptedResponse(tool_calls=[ScriptedToolCall("write_todos", {"todos": second})]),
            "Drafted.",
        ]
    )
    agent = Harness(workspace=tmp_path / "work").agent(model)
    async with serving(agent) as live:
        facts = await run_to_end(live, "s1", "Draft, then review.")

    lists = [f["data"]["extras"]["todos"] for f in facts if f["kind"] == "extras"]
    assert lists == [first, second]
    events = [
        f["data"]["todos"] for f in facts if f["kind"] == "event" and f["data"]["type"] == "todos_updated"
    ]
    assert events == [first, second]


async def test_an_agent_without_tasks_lists_none(tmp_path: Path) -> None:
    for agent in (
        ReActAgent(ScriptedModel(["Hi."])),
        Harness(workspace=tmp_path / "work").agent(ScriptedModel(["Hi."])),
    ):
        async with serving(agent) as live:
            await run_to_end(live, "s1", "Hello.")
            assert await tasks_of(live, "s1") == []


async def test_the_tasks_of_an_unknown_or_invalid_session_are_refused(tmp_path: Path) -> None:
    gate = Gate()
    async with serving(lead(tmp_path, gate, "Hi.")) as live:
        await run_to_end(live, "s1", "Hello.")
        for path, code, error in [
            ("/api/sessions/nobody/tasks", 404, "no session 'nobody'"),
            ("/api/sessions/s1%2Ftasks%2Ftask_0/tasks", 404, "no session 's1/tasks/task_0'"),
            ("/api/sessions/s1%2Ftasks%2Ftask_0", 404, "no session 's1/tasks/task_0'"),
            ("/api/sessions/-bad-/tasks", 400, "a session id is 1 to 128 letters"),
            ("/api/sessions/s1%2Fother%2Fx/tasks", 400, "a session id is 1 to 128 letters"),
        ]:
            status, answer = await live.get(path)
            assert (status, answer["error"][: len(error)]) == (code, error), path
