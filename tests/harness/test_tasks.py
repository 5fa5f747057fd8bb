"""Background subagent tasks (issue 24, item 5): ``BackgroundTasks`` and its five tools, through real runs.

What is shown, with the parent and its subagent on scripted models (a subagent's model holds each call
until the test answers it, so what runs when is the test's choice, never a matter of timing):

- two tasks under a limit of 1 run one at a time: the second waits in line (queued, first in line) and
  its model is called only once the first has ended; a task cancelled in line leaves it, one cancelled
  before its job began ends at once, and no slot is lost;
- ``task_result`` waits on the agent's clock (a virtual one: 30 s pass in no time) and then says the task
  still runs;
- cancelling the parent run cancels the tasks it started: the task's model call sees the cancellation,
  its session ends ``cancelled`` with its lease released, no asyncio task is left, and the parent's log
  records ``task_cancelled``; a task whose run ended normally keeps running, and closing the host
  cancels it;
- a task in flight when its process is SIGKILLed (a real SQLite file) is ``interrupted`` after restart,
  and a new process's run resumes it through ``resume_task``: its session goes on from what its log kept,
  and it finishes; a task that waited in line then is interrupted too, and once cancelled and resumed it
  starts from its instructions (its session kept nothing) and finishes;
- its usage appears in the result of the parent run that collects it, once, whether that run started it
  or a later one did after the task ended;
- its events carry the parent's trace id and the starting run as ``parent_run_id``; the parent's log
  records started and finished; the subagent gets only the tools it names (with the parent's presets,
  narrowed by the caller's scope), plus those granted.

Bad inputs tried: an unknown subagent name (by the model: the schema's enum; by the application), empty
instructions, an unknown task id, a task id of another session, ``wait`` negative, not a number, NaN and
over the limit, a subagent naming a tool its parent lacks or a task tool, a grant clashing with an
inherited tool, no subagent, two with one name, a bad name, an empty description, a limit below 1,
attaching twice, using the host before it is attached or after it closed, resuming a finished or running
task; nothing is started or recorded for any of them.
"""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, Usage
from rxagent.agent import Agent
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext, ToolScope
from rxagent.events import AgentEvent, AgentResult, ToolResult
from rxagent.harness import BackgroundTasks, Subagent, TaskError, compose_parts
from rxagent.harness.tasks import MAX_WAIT
from rxagent.model.types import ChatRequest
from rxagent.operators import to_list
from rxagent.session import turns_of
from rxagent.tools import Toolkit, tool
from tests.session.child_process import ChildProcess

from .task_agents import Gated, build, call, last_tool_text, lookup, steps, task_id_in

ADA = RuntimeContext(user_id="ada", session_id="trip")
WAIT = 10.0
"""Seconds any wait in these tests may take before it counts as a hang."""


def used(tokens: int) -> Usage:
    return Usage(input_tokens=tokens, output_tokens=1)


async def task_facts(agent: Agent, ctx: RuntimeContext = ADA) -> list[tuple[str, dict[str, Any]]]:
    """The task facts of the parent session's log: kind and payload."""
    return [
        (f.kind, json.loads(f.payload)) for f in await agent.sessions.facts(ctx) if f.kind.startswith("task_")
    ]


async def no_task_left(before: set[asyncio.Task[Any]]) -> None:
    """Every asyncio task started since ``before`` ends (nothing hangs on a cancelled task)."""
    leftover = asyncio.all_tasks() - before - {asyncio.current_task()}
    if leftover:
        _, pending = await asyncio.wait(leftover, timeout=WAIT)
        assert not pending, pending


# ---- the limit -------------------------------------------------------------------------------------------


async def test_two_tasks_under_a_limit_of_one_run_one_at_a_time() -> None:
    researcher = Gated()
    parent = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    *call("start_task", agent="researcher", instructions="Height?").tool_calls,
                    *call("start_task", agent="researcher", instructions="Builder?").tool_calls,
                ]
            ),
            "Both are on their way.",
        ]
    )
    agent, tasks = build(parent, researcher.model, max_tasks=1)
    result = await agent.call("Find the height and the builder of the Eiffel tower.", ADA)
    assert result.text == "Both are on their way."  # the run ended; its tasks go on

    first, second = await tasks.list(ADA)
    assert {first.instructions, second.instructions} == {"Height?", "Builder?"}
    await asyncio.wait_for(researcher.entered(first.instructions).wait(), WAIT)
    assert researcher.calls == [first.instructions]  # the other waits for the slot
    assert (await tasks.get(ADA, first.task_id)).status == "running"
    queued = await tasks.get(ADA, second.task_id)
    assert (queued.status, queued.position) == ("queued", 1)

    researcher.answer(first.instructions, "330 m.")
    assert (await tasks.result(ADA, first.task_id, wait=WAIT)).answer == "330 m."
    await asyncio.wait_for(researcher.entered(second.instructions).wait(), WAIT)
    assert researcher.calls == [first.instructions, second.instructions]
    assert (await tasks.get(ADA, second.task_id)).status == "running"
    researcher.answer(second.instructions, "Gustave Eiffel's company.")
    done = await tasks.result(ADA, second.task_id, wait=WAIT)
    assert (done.status, done.answer) == ("finished", "Gustave Eiffel's company.")

    await tasks.aclose()  # the ends are in the parent's log once it returns
    recorded = await task_facts(agent)
    assert [kind for kind, _ in recorded] == [
        "task_started",
        "task_started",
        "task_finished",
        "task_finished",
    ]
    assert [data["task_id"] for _, data in recorded] == [first.task_id, second.task_id] * 2
    assert {data["answer"] for kind, data in recorded if kind == "task_finished"} == {
        "330 m.",
        "Gustave Eiffel's company.",
    }
    await agent.aclose()


async def test_a_cancelled_queued_task_leaves_the_line_and_a_task_cancelled_at_once_ends() -> None:
    before = asyncio.all_tasks()
    researcher = Gated()
    agent, tasks = build(steps(), researcher.model, max_tasks=1)
    first = await tasks.start(ADA, "researcher", "First?")
    cancelled = await tasks.cancel(ADA, first.task_id)  # before its job even began
    assert (cancelled.status, cancelled.error) == ("cancelled", "cancelled on request")
    second = await tasks.start(ADA, "researcher", "Second?")
    third = await tasks.start(ADA, "researcher", "Third?")
    fourth = await tasks.start(ADA, "researcher", "Fourth?")
    assert [second.status, third.status, fourth.status] == ["running", "queued", "queued"]
    assert [third.position, fourth.position] == [1, 2]
    await asyncio.wait_for(researcher.entered("Second?").wait(), WAIT)
    assert (await tasks.cancel(ADA, third.task_id)).status == "cancelled"  # it leaves the line
    assert (await tasks.get(ADA, fourth.task_id)).position == 1
    researcher.answer("Second?", "Two.")
    assert (await tasks.result(ADA, second.task_id, wait=WAIT)).answer == "Two."
    researcher.answer("Fourth?", "Four.")
    assert (await tasks.result(ADA, fourth.task_id, wait=WAIT)).answer == "Four."
    assert researcher.calls == ["Second?", "Fourth?"]  # the cancelled ones never ran
    fifth = await tasks.start(ADA, "researcher", "Fifth?")
    assert fifth.status == "running"  # no slot was lost on the way
    await tasks.aclose()
    ends = [(kind, data["task_id"]) for kind, data in await task_facts(agent) if kind != "task_started"]
    assert sorted(ends) == sorted(
        [
            ("task_cancelled", first.task_id),
            ("task_cancelled", third.task_id),
            ("task_finished", second.task_id),
            ("task_finished", fourth.task_id),
            ("task_cancelled", fifth.task_id),
        ]
    )
    await agent.aclose()
    await no_task_left(before)


async def test_task_result_waits_on_the_agents_clock_then_says_the_task_still_runs(
    clock: VirtualClock,
) -> None:
    researcher = Gated()
    parent = steps(
        call("start_task", agent="researcher", instructions="Height?"),
        lambda request: call("task_result", task_id=task_id_in(request), wait=30),
        lambda request: ScriptedResponse(last_tool_text(request)),
    )
    agent, tasks = build(parent, researcher.model, clock=clock)
    result = await clock.run(agent.call("How tall is the Eiffel tower?", ADA))
    (info,) = await tasks.list(ADA)
    assert result.text == (
        f"Task {info.task_id} (researcher) is running. It has no answer yet: ask again later (with a wait, "
        "to wait for it)."
    )
    assert clock.now() == 30.0  # it waited the whole 30 s, on the virtual clock: no real time passed
    researcher.answer("Height?", "330 m.")
    assert (await tasks.result(ADA, info.task_id, wait=WAIT)).answer == "330 m."
    await tasks.aclose()
    await agent.aclose()


# ---- cancelling ------------------------------------------------------------------------------------------


async def test_cancelling_the_parent_run_cancels_its_tasks_and_releases_them() -> None:
    before = asyncio.all_tasks()
    researcher = Gated()
    parent = steps(
        call("start_task", agent="researcher", instructions="Height?"),
        lambda request: call("task_result", task_id=task_id_in(request), wait=600),
    )
    agent, tasks = build(parent, researcher.model)
    running = asyncio.create_task(agent.call("How tall is the Eiffel tower?", ADA))
    await asyncio.wait_for(researcher.entered("Height?").wait(), WAIT)
    (started,) = await tasks.list(ADA)
    assert started.status == "running"

    running.cancel()  # the parent's run, waiting in task_result
    with pytest.raises(asyncio.CancelledError):
        await running
    info = await tasks.result(ADA, started.task_id, wait=WAIT)
    assert (info.status, info.error) == ("cancelled", "its parent run was cancelled")
    assert researcher.cancelled == ["Height?"]  # its model call saw the cancellation
    assert await agent.store.lease((ADA.user_id, info.session_id)) is None  # its session was given back
    (turn,) = turns_of(await agent.store.read((ADA.user_id, info.session_id)))
    assert [run.outcome for run in turn.runs] == ["cancelled"]

    await tasks.aclose()
    assert [(kind, data.get("why")) for kind, data in await task_facts(agent)] == [
        ("task_started", None),
        ("task_cancelled", "its parent run was cancelled"),
    ]
    await agent.aclose()
    await no_task_left(before)


async def test_a_run_that_ends_leaves_its_tasks_running_and_closing_the_host_cancels_them() -> None:
    before = asyncio.all_tasks()
    researcher = Gated()
    parent = steps(call("start_task", agent="researcher", instructions="Height?"), "It runs.")
    agent, tasks = build(parent, researcher.model)
    assert (await agent.call("How tall is the Eiffel tower?", ADA)).text == "It runs."
    await asyncio.wait_for(researcher.entered("Height?").wait(), WAIT)
    (info,) = await tasks.list(ADA)
    assert info.status == "running"

    await tasks.aclose()
    assert researcher.cancelled == ["Height?"]
    assert await agent.store.lease((ADA.user_id, info.session_id)) is None
    assert [(kind, data.get("why")) for kind, data in await task_facts(agent)] == [
        ("task_started", None),
        ("task_cancelled", "its host closed"),
    ]
    with pytest.raises(TaskError, match="closed"):
        await tasks.start(ADA, "researcher", "Builder?")
    await agent.aclose()
    await no_task_left(before)


async def test_the_model_cancels_a_task_and_a_cancel_of_an_ended_one_changes_nothing() -> None:
    researcher = Gated()

    async def cancel_once_it_runs(request: ChatRequest) -> ScriptedResponse:
        await researcher.entered("Height?").wait()  # its model call holds: cancel it there
        return call("cancel_task", task_id=task_id_in(request))

    parent = steps(
        call("start_task", agent="researcher", instructions="Height?"),
        cancel_once_it_runs,
        lambda request: call("cancel_task", task_id=task_id_in(request)),
        "Stopped.",
    )
    agent, tasks = build(parent, researcher.model)
    events = await to_list(agent.stream_events("Start, then stop it.", ADA))
    told = [e.result.text for e in events if isinstance(e, ToolResult)]
    (info,) = await tasks.list(ADA)
    assert told[1] == (
        f"Task {info.task_id} (researcher) was cancelled (cancelled on request). "
        f"resume_task('{info.task_id}') continues it."
    )
    assert told[2] == f"Task {info.task_id} had ended already (cancelled): nothing was cancelled."
    assert info.status == "cancelled"
    assert researcher.cancelled == ["Height?"]
    await tasks.aclose()
    await agent.aclose()


# ---- usage -----------------------------------------------------------------------------------------------


async def test_a_tasks_usage_counts_once_in_the_run_that_collects_it() -> None:
    researcher = ScriptedModel(
        [call("lookup", name="Eiffel tower"), ScriptedResponse("330 m.", usage=used(100))]
    )
    parent = steps(
        ScriptedResponse(
            tool_calls=call("start_task", agent="researcher", instructions="Height?").tool_calls,
            usage=used(10),
        ),
        lambda request: ScriptedResponse(
            tool_calls=call("task_result", task_id=task_id_in(request), wait=WAIT).tool_calls, usage=used(10)
        ),
        lambda request: ScriptedResponse(f"It is {last_tool_text(request)}", usage=used(10)),
    )
    agent, tasks = build(parent, researcher)
    seen: list[AgentEvent] = []
    tasks.events.subscribe(seen.append)

    result = await agent.call("How tall is the Eiffel tower?", ADA)
    assert result.text == "It is 330 m."
    (info,) = await tasks.list(ADA)
    task_usage = info.usage
    assert task_usage is not None
    assert task_usage.model_calls == 2
    # the parent's three calls and the task's two, whose tokens the test's usage and the estimate give
    assert result.usage.model_calls == 5
    assert result.usage.input_tokens == 30 + task_usage.input_tokens
    assert task_usage.input_tokens >= 100
    assert info.collected

    # its events carry the parent's ids: the trace, the run that started it, its own session
    assert seen
    assert {(e.parent_run_id, e.trace_id, e.session_id) for e in seen} == {
        (result.run_id, result.trace_id, info.session_id)
    }
    assert info.session_id == f"trip/tasks/{info.task_id}"
    assert info.parent_run_id == result.run_id
    await tasks.aclose()
    kinds = [(kind, data["task_id"]) for kind, data in await task_facts(agent)]
    assert kinds == [
        ("task_started", info.task_id),
        ("task_collected", info.task_id),
        ("task_finished", info.task_id),
    ]
    await agent.aclose()


async def test_a_task_that_ends_after_its_run_counts_in_the_later_run_that_collects_it() -> None:
    researcher = Gated()
    parent = steps(
        ScriptedResponse(
            tool_calls=call("start_task", agent="researcher", instructions="Height?").tool_calls,
            usage=used(10),
        ),
        ScriptedResponse("Started.", usage=used(10)),
        ScriptedResponse(tool_calls=call("task_status", task_id="?").tool_calls, usage=used(10)),
    )
    agent, tasks = build(parent, researcher.model)
    first = await agent.call("Look the height up.", ADA)
    assert first.usage.model_calls == 2  # the task has not ended: nothing of it here
    (info,) = await tasks.list(ADA)
    researcher.answer("Height?", ScriptedResponse("330 m.", usage=used(100)))
    ended = await tasks.result(ADA, info.task_id, wait=WAIT)
    assert ended.status == "finished"
    assert ended.usage is not None
    assert not ended.collected

    def read(request: Any) -> ScriptedResponse:
        return ScriptedResponse(
            tool_calls=call("task_result", task_id=info.task_id).tool_calls, usage=used(10)
        )

    later = steps(read, ScriptedResponse("330 m.", usage=used(10)))
    again = steps(read, ScriptedResponse("Still 330 m.", usage=used(10)))
    agent.model = later
    second = await agent.call("What did it find?", ADA)
    assert (second.usage.model_calls, second.usage.input_tokens) == (2 + 1, 20 + ended.usage.input_tokens)
    agent.model = again
    third = await agent.call("Again?", ADA)
    assert (third.usage.model_calls, third.usage.input_tokens) == (2, 20)  # counted once only
    collected = [(kind, data) for kind, data in await task_facts(agent) if kind == "task_collected"]
    assert len(collected) == 1
    assert collected[0][1]["task_id"] == info.task_id
    await tasks.aclose()
    await agent.aclose()


# ---- a crash ---------------------------------------------------------------------------------------------


async def test_a_task_in_flight_when_its_process_is_killed_is_interrupted_and_finishes_when_resumed(
    tmp_path: Path,
) -> None:
    database = tmp_path / "sessions.db"
    child = await ChildProcess.start(Path(__file__).with_name("tasks_process.py"), str(database))
    try:
        said = await child.answer(within=60)
        assert said["answers"] == ["It runs in the background.", "That one waits its turn."]
        await child.kill()  # SIGKILL, while the first task's model call holds and the second waits
    finally:
        await child.close()
    task_id, queued_id = said["running"], said["queued"]

    # A new process, as it were: a new agent and host over the same file.
    researcher = Gated()
    question, second = "How tall is the Eiffel tower, and who built it?", "Who designed its lifts?"
    researcher.answer(question, ScriptedResponse("330 m, by Gustave Eiffel's company.", usage=used(100)))
    parent = steps(
        call("task_status", task_id=task_id),
        call("resume_task", task_id=task_id),
        call("task_result", task_id=task_id, wait=WAIT),
        lambda request: ScriptedResponse(f"Found: {last_tool_text(request)}"),
    )
    agent, tasks = build(parent, researcher.model, store=str(database), max_tasks=1)
    assert [(i.task_id, i.status) for i in await tasks.list(ADA)] == [
        (task_id, "interrupted"),
        (queued_id, "interrupted"),  # it waited in line: it stopped with its process too
    ]
    assert [kind for kind, _ in await task_facts(agent)] == ["task_started", "task_started"]  # and no end

    events = await to_list(agent.stream_events("What became of the task?", ADA))
    told = [e.result.text for e in events if isinstance(e, ToolResult)]
    assert "was interrupted: the process running it stopped before it finished." in told[0]
    assert told[1].startswith(f"Task {task_id} resumed (attempt 1)")
    assert told[2] == "330 m, by Gustave Eiffel's company."
    assert isinstance(events[-1], AgentResult)
    assert events[-1].text == "Found: 330 m, by Gustave Eiffel's company."
    # The resumed run went on from its log: the lookup's result was in its request, not run again.
    (request,) = researcher.requests
    assert [r.text for m in request.messages for r in m.tool_results] == [lookup("Eiffel tower")]
    (turn,) = turns_of(await agent.store.read(("ada", f"trip/tasks/{task_id}")))
    assert [(run.outcome, run.error) for run in turn.runs] == [
        ("failed", "the run ended with no record of how (its process stopped)"),
        ("finished", None),
    ]

    # The one that waited in line: cancelled by the application, then resumed from its instructions (its
    # session kept nothing), and it finishes too.
    cancelled = await tasks.cancel(ADA, queued_id)
    assert (cancelled.status, cancelled.error) == (
        "cancelled",
        "cancelled on request, after it was interrupted",
    )
    researcher.answer(second, "Otis.")
    await tasks.resume(ADA, queued_id)
    assert (await tasks.result(ADA, queued_id, wait=WAIT)).answer == "Otis."
    assert [m.text for m in researcher.requests[-1].messages if m.role == "user"] == [second]

    await tasks.aclose()
    assert [(kind, data["task_id"], data["attempt"]) for kind, data in await task_facts(agent)] == [
        ("task_started", task_id, 0),
        ("task_started", queued_id, 0),
        ("task_resumed", task_id, 1),
        ("task_collected", task_id, 1),
        ("task_finished", task_id, 1),
        ("task_cancelled", queued_id, 0),
        ("task_resumed", queued_id, 1),
        ("task_finished", queued_id, 1),
    ]
    assert (await tasks.get(ADA, task_id)).status == "finished"
    await agent.aclose()


# ---- resuming --------------------------------------------------------------------------------------------


async def test_a_failed_task_resumes_on_its_session_and_a_finished_or_running_one_does_not() -> None:
    researcher = Gated()
    agent, tasks = build(steps(), researcher.model)
    info = await tasks.start(ADA, "researcher", "Height?")
    assert info.parent_run_id is None
    assert info.call_id is None
    researcher.answer("Height?", RuntimeError("the model server is down"))
    failed = await tasks.result(ADA, info.task_id, wait=WAIT)
    assert (failed.status, failed.error) == ("failed", "RuntimeError: the model server is down")

    await asyncio.wait_for(researcher.entered("Height?").wait(), WAIT)
    researcher.entered("Height?").clear()
    resumed = await tasks.resume(ADA, info.task_id)
    assert resumed.attempt == 1
    assert resumed.status in ("queued", "running")
    await asyncio.wait_for(researcher.entered("Height?").wait(), WAIT)
    with pytest.raises(TaskError, match="is running: there is nothing to resume"):
        await tasks.resume(ADA, info.task_id)
    researcher.answer("Height?", "330 m.")
    done = await tasks.result(ADA, info.task_id, wait=WAIT)
    assert (done.status, done.answer, done.attempt) == ("finished", "330 m.", 1)
    with pytest.raises(TaskError, match="finished"):
        await tasks.resume(ADA, info.task_id)
    # the same session, twice: the instructions once, then the resumed run with no new input
    state = await tasks.agents["researcher"].sessions.state(done.context)
    assert [m.text for m in state.messages] == ["Height?", "330 m."]
    await tasks.aclose()
    assert [(kind, data["attempt"]) for kind, data in await task_facts(agent)] == [
        ("task_started", 0),
        ("task_failed", 0),
        ("task_resumed", 1),
        ("task_finished", 1),
    ]
    await agent.aclose()


# ---- tools -----------------------------------------------------------------------------------------------


async def test_a_subagent_gets_the_tools_it_names_with_the_parents_presets_and_those_granted() -> None:
    tenants: list[str] = []

    @tool
    def search(query: str, tenant: str) -> str:
        """Search the tenant's documents.

        Args:
            query: what to find.
            tenant: whose documents.
        """
        tenants.append(tenant)
        return f"{tenant}: {query}"

    @tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page.
        """
        return url

    researcher = Gated()
    parent = ScriptedModel([])
    toolkit_tasks = BackgroundTasks(
        [Subagent("researcher", "Finds facts.", tools=["search"], grant=[fetch], model=researcher.model)]
    )
    merged = compose_parts([toolkit_tasks.part])
    kit = Toolkit([lookup, *merged.tools])
    kit.register(search, preset={"tenant": "acme"})
    agent = Agent(parent, kit, middleware=merged.middleware)
    toolkit_tasks.attach(agent)

    info = await toolkit_tasks.start(ADA, "researcher", "Find the plans.")
    await asyncio.wait_for(researcher.entered("Find the plans.").wait(), WAIT)
    schemas = {t.name: t for t in researcher.requests[-1].tools}
    assert sorted(schemas) == ["fetch", "search"]  # not lookup, not the task tools
    assert "tenant" not in json.dumps(schemas["search"].parameters)  # the parent's preset stays hidden
    researcher.answer("Find the plans.", call("search", query="plans", tenant="evil"))
    researcher.answer("Find the plans.", "Found them.")
    assert (await toolkit_tasks.result(ADA, info.task_id, wait=WAIT)).answer == "Found them."
    assert tenants == ["acme"]

    # A caller's scope narrows the subagent as it narrows the parent.
    scoped = RuntimeContext(user_id="ada", session_id="scoped", tools=ToolScope(allow={"lookup", "fetch"}))
    narrowed = await toolkit_tasks.start(scoped, "researcher", "Narrow.")
    await asyncio.wait_for(researcher.entered("Narrow.").wait(), WAIT)
    assert [t.name for t in researcher.requests[-1].tools] == ["fetch"]
    researcher.answer("Narrow.", "ok")
    assert (await toolkit_tasks.result(scoped, narrowed.task_id, wait=WAIT)).status == "finished"
    await toolkit_tasks.aclose()


# ---- bad inputs ------------------------------------------------------------------------------------------


def test_subagents_and_hosts_with_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        Subagent("bad name", "Finds facts.")
    with pytest.raises(ValueError, match="needs a description"):
        Subagent("researcher", " ")
    with pytest.raises(ValueError, match="at least one Subagent"):
        BackgroundTasks([])
    with pytest.raises(ValueError, match="given twice: researcher"):
        BackgroundTasks([Subagent("researcher", "A."), Subagent("researcher", "B.")])
    for limit in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="max_tasks"):
            BackgroundTasks([Subagent("researcher", "A.")], max_tasks=limit)  # type: ignore[arg-type]


def test_a_subagent_naming_a_tool_its_parent_lacks_is_refused_when_attached() -> None:
    @tool
    def fetch(url: str) -> str:
        """Fetch a page.

        Args:
            url: the page.
        """
        return url

    def parent_of(subagent: Subagent) -> tuple[Agent, BackgroundTasks]:
        tasks = BackgroundTasks([subagent])
        return Agent(ScriptedModel([]), Toolkit([lookup, *tasks.part.tools])), tasks

    agent, tasks = parent_of(Subagent("researcher", "Finds facts.", tools=["lookup", "fetch"]))
    with pytest.raises(
        ValueError, match="names the tool 'fetch', which its parent agent 'agent' does not have"
    ):
        tasks.attach(agent)
    agent, tasks = parent_of(Subagent("researcher", "Finds facts.", tools=[fetch]))  # a tool object, by name
    with pytest.raises(ValueError, match=r"unless you grant it: Subagent\(\.\.\., grant=\[fetch\]\)"):
        tasks.attach(agent)
    agent, tasks = parent_of(Subagent("researcher", "Finds facts.", tools=["start_task"]))
    with pytest.raises(ValueError, match="a task does not start tasks"):
        tasks.attach(agent)
    agent, tasks = parent_of(Subagent("researcher", "Finds facts.", tools=["lookup"], grant=[lookup]))
    with pytest.raises(ValueError, match="inherits from its parent already"):
        tasks.attach(agent)
    agent, tasks = parent_of(Subagent("researcher", "Finds facts.", grant=[fetch]))  # granted: accepted
    tasks.attach(agent)
    assert sorted(tasks.agents["researcher"].toolkit.names) == ["fetch", "lookup"]
    with pytest.raises(RuntimeError, match="attached to agent 'agent' already"):
        tasks.attach(agent)


async def test_the_model_gets_a_plain_error_for_bad_task_calls_and_nothing_is_started() -> None:
    researcher = Gated()
    parent = steps(
        call("start_task", agent="astrologer", instructions="Stars?"),
        call("start_task", agent="researcher", instructions=""),
        call("task_status", task_id="task_nope"),
        call("task_result", task_id="task_nope", wait=-1),
        call("task_result", task_id="task_nope", wait="soon"),
        call("task_result", task_id="task_nope", wait=MAX_WAIT + 1),
        call("resume_task", task_id="task_nope"),
        "I could not.",
    )
    agent, tasks = build(parent, researcher.model)
    events = await to_list(agent.stream_events("Try.", ADA))
    results = [e.result for e in events if isinstance(e, ToolResult)]
    assert [r.status for r in results] == ["error"] * 7
    texts = [r.text for r in results]
    assert "agent" in texts[0]
    assert "astrologer" in texts[0]
    assert "researcher" in texts[0]
    assert "instructions" in texts[1]
    assert "there is no task 'task_nope' in this session (it has no tasks)" in texts[2]
    assert "wait" in texts[3]
    assert "wait" in texts[4]
    assert "wait" in texts[5]
    assert "there is no task 'task_nope'" in texts[6]
    assert researcher.calls == []
    assert await task_facts(agent) == []
    assert await tasks.list(ADA) == []
    await tasks.aclose()
    await agent.aclose()


async def test_the_application_gets_task_errors_for_bad_calls_and_nothing_is_started() -> None:
    researcher = Gated()
    unattached = BackgroundTasks([Subagent("researcher", "Finds facts.")])
    with pytest.raises(TaskError, match="not attached"):
        await unattached.start(ADA, "researcher", "Height?")
    agent, tasks = build(steps(), researcher.model)
    with pytest.raises(TaskError, match="no subagent named 'astrologer'; the subagents are: researcher"):
        await tasks.start(ADA, "astrologer", "Stars?")
    with pytest.raises(TaskError, match="empty"):
        await tasks.start(ADA, "researcher", "  ")
    with pytest.raises(TaskError, match="at most 20000"):
        await tasks.start(ADA, "researcher", "x" * 20_001)
    with pytest.raises(TaskError, match="no task 'task_nope'"):
        await tasks.get(ADA, "task_nope")
    info = await tasks.start(ADA, "researcher", "Height?")
    other = RuntimeContext(user_id="ada", session_id="another")
    with pytest.raises(TaskError, match=f"no task '{info.task_id}' in this session"):
        await tasks.get(other, info.task_id)  # a task belongs to its parent session
    for wait in (-1, "soon", math.nan, math.inf, MAX_WAIT + 1, True):
        with pytest.raises(TaskError, match="wait"):
            await tasks.result(ADA, info.task_id, wait=wait)  # type: ignore[arg-type]
    with pytest.raises(TaskError, match="a task id is the text start_task returned"):
        await tasks.get(ADA, 42)  # type: ignore[arg-type]
    assert [kind for kind, _ in await task_facts(agent)] == ["task_started"]  # only the good one
    await tasks.aclose()
    await agent.aclose()
