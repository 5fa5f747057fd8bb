"""``Harness.agent(...)``: an agent with the harness's parts, end to end on a real SQLite session store.

Bad inputs tried: a user tool named like a part's tool, two parts with one name, a shell, skills or a
budget without a workspace, two subagents with one name.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rxagent.agent import Middleware
from rxagent.context import RuntimeContext
from rxagent.harness import Harness, HarnessAgent, HarnessPart, Subagent, Workspace
from rxagent.harness.workspace import WORKSPACE_KEY
from rxagent.model.scripted import FunctionModel, ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.model.types import ChatRequest
from rxagent.tools import tool


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


async def test_an_agent_writes_and_reads_a_file_through_the_tools(tmp_path: Path) -> None:
    plan = {"path": "notes/plan.md", "content": "1. write\n2. read\n"}
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("write", plan, id="w")]),
            ScriptedResponse(tool_calls=[ScriptedToolCall("read", {"path": "notes/plan.md"}, id="r")]),
            "The plan has two steps.",
        ]
    )
    harness = Harness(workspace=Workspace(tmp_path / "work", per_session=True))
    agent = harness.agent(
        model, [word_count], system_prompt="You are careful.", store=str(tmp_path / "sessions.db")
    )
    ctx = RuntimeContext(session_id="planning")

    result = await agent.call("Write a plan, then read it back.", ctx)

    assert result.text == "The plan has two steps."
    assert harness.workspace is not None
    folder = harness.workspace.folder_for(ctx)
    assert (folder / "notes" / "plan.md").read_text() == "1. write\n2. read\n"
    state = await agent.sessions.state(ctx)
    results = {r.tool_use_id: r for m in state.messages for r in m.tool_results}
    assert results["w"].text == "Wrote 2 lines (17 bytes) to notes/plan.md (a new file)."
    assert results["r"].text == "     1\t1. write\n     2\t2. read"
    assert state.extras[WORKSPACE_KEY] == {"folder": str(folder)}
    first = model.requests[0]
    assert [t.name for t in first.tools] == [
        "word_count",
        *("read", "write", "edit", "list", "glob", "grep"),
        *("write_todos", "read_todos"),
    ]
    system = first.messages[0].text
    assert system.startswith("You are careful.\n\nYou work in a folder of your own, the workspace.")
    await agent.aclose()


async def test_the_users_middleware_is_outside_the_parts(tmp_path: Path) -> None:
    mine, theirs = Middleware(), Middleware()
    extra = HarnessPart("extra", middleware=(theirs,), instructions="Be brief.")
    harness = Harness(workspace=tmp_path / "work", todos=False, parts=[extra])

    agent = harness.agent(ScriptedModel(["ok"]), middleware=[mine])

    assert agent.middleware == (mine, theirs)
    assert agent.system_prompt is not None
    assert agent.system_prompt.endswith("\n\nBe brief.")
    assert [p.name for p in harness.parts] == ["files", "extra"]


def test_a_harness_without_a_workspace_has_no_file_tools() -> None:
    harness = Harness(todos=False)
    agent = harness.agent(ScriptedModel(["ok"]), [word_count])
    assert harness.parts == ()
    assert [s.name for s in agent.toolkit.view().schemas()] == ["word_count"]
    assert agent.system_prompt is None


def test_bad_assemblies_are_refused(tmp_path: Path) -> None:
    @tool
    def read(path: str) -> str:
        """Another read."""
        return path

    harness = Harness(workspace=tmp_path / "work")
    with pytest.raises(ValueError, match="already registered"):
        harness.agent(ScriptedModel(["ok"]), [read])
    with pytest.raises(ValueError, match="distinct names"):
        Harness(workspace=tmp_path / "work", parts=[HarnessPart("files")])
    with pytest.raises(ValueError, match="the shell needs a workspace"):
        Harness(shell=True)
    with pytest.raises(ValueError, match="a context budget needs a workspace"):
        Harness(budget=8_000)
    skills = tmp_path / "skills"
    (skills / "report").mkdir(parents=True)
    (skills / "report" / "SKILL.md").write_text(
        "---\nname: report\ndescription: Writes reports.\n---\nBody.\n"
    )
    with pytest.raises(ValueError, match="skills needs a workspace"):
        Harness(skills=[skills])
    with pytest.raises(ValueError, match="distinct names"):
        Harness(subagents=[Subagent("w", "Writes."), Subagent("w", "Writes again.")])


async def test_every_part_together_skills_todos_a_task_and_the_budget(tmp_path: Path) -> None:
    """One agent with every capability: it reads a skill's file through the file tools, keeps a todo list,
    and starts a background task whose subagent writes into the parent's own folder."""
    skills = tmp_path / "skills"
    (skills / "report").mkdir(parents=True)
    (skills / "report" / "SKILL.md").write_text(
        "---\nname: report\ndescription: How to write a report.\n---\nUse the template.\n"
    )
    (skills / "report" / "template.md").write_text("# Title\n")
    writer = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[ScriptedToolCall("write", {"path": "task.txt", "content": "done\n"}, id="tw")]
            ),
            "Written.",
        ]
    )

    def parent_turn(request: ChatRequest) -> ScriptedResponse | str:
        results = [r for m in request.messages for r in m.tool_results]
        if not results:
            return ScriptedResponse(tool_calls=[ScriptedToolCall("use_skill", {"name": "report"}, id="s")])
        last = results[-1]
        step = {
            "s": ScriptedToolCall("read", {"path": "skills/report/template.md"}, id="r"),
            "r": ScriptedToolCall(
                "write_todos", {"todos": [{"content": "report", "status": "pending"}]}, id="t"
            ),
            "t": ScriptedToolCall(
                "start_task", {"agent": "writer", "instructions": "Write task.txt"}, id="a"
            ),
        }.get(last.tool_use_id)
        if step is not None:
            return ScriptedResponse(tool_calls=[step])
        if last.tool_use_id == "a":
            task_id = last.text.split()[1]  # "Task <id> accepted ..."
            return ScriptedResponse(
                tool_calls=[ScriptedToolCall("task_result", {"task_id": task_id, "wait": 30}, id="w")]
            )
        return "All done."

    harness = Harness(
        workspace=tmp_path / "work",
        skills=[skills],
        subagents=[Subagent("writer", "Writes files.", tools=["write"], model=writer)],
        budget=50_000,
    )
    agent = harness.agent(FunctionModel(parent_turn), store=str(tmp_path / "sessions.db"))
    assert isinstance(agent, HarnessAgent)
    ctx = RuntimeContext(session_id="reports")

    result = await agent.call("Write the report.", ctx)

    assert result.text == "All done.", result
    state = await agent.sessions.state(ctx)
    texts = {r.tool_use_id: r.text for m in state.messages for r in m.tool_results}
    assert "Use the template." in texts["s"]
    assert texts["r"] == "     1\t# Title"
    assert texts["w"] == "Written."  # the subagent's answer, read back by task_result
    assert harness.workspace is not None
    assert (harness.workspace.folder_for(ctx) / "task.txt").read_text() == "done\n"  # the parent's folder
    assert state.extras["todos"] == [{"content": "report", "status": "pending"}]
    assert agent.tasks is not None
    [task] = await agent.tasks.list(ctx)
    assert task.status == "finished"
    assert [p.name for p in harness.parts] == ["files", "todos", "skills", "budget"]
    await agent.aclose()
