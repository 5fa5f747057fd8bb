"""``Harness.agent(...)``: an agent with the harness's parts, end to end on a real SQLite session store.

Bad inputs tried: a user tool named like a part's tool, two parts with one name, a shell without a
workspace.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rxagent.agent import Middleware
from rxagent.context import RuntimeContext
from rxagent.harness import Harness, HarnessPart, Workspace
from rxagent.harness.workspace import WORKSPACE_KEY
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
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
    assert [t.name for t in first.tools] == ["word_count", "read", "write", "edit", "list", "glob", "grep"]
    system = first.messages[0].text
    assert system.startswith("You are careful.\n\nYou work in a folder of your own, the workspace.")
    await agent.aclose()


async def test_the_users_middleware_is_outside_the_parts(tmp_path: Path) -> None:
    mine, theirs = Middleware(), Middleware()
    extra = HarnessPart("extra", middleware=(theirs,), instructions="Be brief.")
    harness = Harness(workspace=tmp_path / "work", parts=[extra])

    agent = harness.agent(ScriptedModel(["ok"]), middleware=[mine])

    assert agent.middleware == (mine, theirs)
    assert agent.system_prompt is not None
    assert agent.system_prompt.endswith("\n\nBe brief.")
    assert [p.name for p in harness.parts] == ["files", "extra"]


def test_a_harness_without_a_workspace_has_no_file_tools() -> None:
    harness = Harness()
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
    with pytest.raises(ValueError, match="runs in a workspace"):
        Harness(shell=True)
