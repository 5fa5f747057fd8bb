"""The workspace: a folder per session or one shared, recorded in the session, and read-only mounts.

Bad inputs tried: a mount prefix that is empty, absolute, with ``..`` or a NUL character, or taken; a
mount of something that is not a folder; a workspace root that is empty or has a NUL character; a write
or an edit into a mount; a symlink in a mount pointing out of it; a recorded folder that is not a path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rxagent.context import RunContext, RuntimeContext
from rxagent.harness import FileTools, Harness, PathRefused, Workspace
from rxagent.harness.workspace import WORKSPACE_KEY
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.session import SQLiteStore
from rxagent.state import AgentState
from rxagent.tools import ToolContext
from tests.harness.conftest import call


def _tool_context(ctx: RuntimeContext) -> ToolContext[object]:
    return ToolContext("call_1", "read", ctx)


def test_each_session_has_a_folder_of_its_own_unless_the_workspace_is_shared(tmp_path: Path) -> None:
    own = Workspace(tmp_path / "work")
    shared = Workspace(tmp_path / "shared", per_session=False)
    first, second = RuntimeContext(session_id="chat/1"), RuntimeContext(session_id="chat 2")
    other_user = RuntimeContext(session_id="chat/1", user_id="bob")

    folders = {own.folder_for(first), own.folder_for(second), own.folder_for(other_user)}

    assert len(folders) == 3
    assert all(f.parent == tmp_path / "work" and f.is_dir() for f in folders)
    assert own.folder_for(first).name.startswith("chat_1-")
    assert own.folder_for(first) == own.folder_for(_tool_context(first))
    assert shared.folder_for(first) == shared.folder_for(second) == tmp_path / "shared"


def test_the_folder_is_recorded_in_the_runs_session_state(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "work")
    state = AgentState()
    run = RunContext(session_id="s1", state=state)

    folder = workspace.folder_for(_tool_context(run))

    assert state.extras[WORKSPACE_KEY] == {"folder": str(folder)}
    # A session that recorded a folder keeps it, whatever the workspace's root is now.
    assert Workspace(tmp_path / "elsewhere").folder_for(run) == folder
    # A plain caller's context has no session state: nothing to record, the folder is computed.
    assert Workspace(tmp_path / "elsewhere").folder_for(RuntimeContext(session_id="s1")).parent == (
        tmp_path / "elsewhere"
    )


@pytest.mark.parametrize("recorded", [None, 42, {"folder": "relative/path"}, {"folder": "/a\x00b"}, "x"])
def test_a_recorded_value_that_is_no_folder_is_replaced(tmp_path: Path, recorded: object) -> None:
    state = AgentState(extras={WORKSPACE_KEY: recorded})  # pyright: ignore[reportArgumentType]
    folder = Workspace(tmp_path / "work").folder_for(RunContext(session_id="s1", state=state))
    assert folder.parent == tmp_path / "work"
    assert state.extras[WORKSPACE_KEY] == {"folder": str(folder)}


async def test_a_resumed_session_finds_its_workspace(tmp_path: Path) -> None:
    ctx = RuntimeContext(session_id="report")
    first = Harness(workspace=tmp_path / "first-root").agent(
        ScriptedModel(
            [
                ScriptedResponse(
                    tool_calls=[ScriptedToolCall("write", {"path": "draft.md", "content": "# Draft\n"})]
                ),
                "Saved.",
            ]
        ),
        store=str(tmp_path / "sessions.db"),
    )
    await first.call("Start a draft.", ctx)
    await first.aclose()

    # Another process, set up with another root: the session still works in the folder it recorded.
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("read", {"path": "draft.md"}, id="c2")]), "Read."]
    )
    store = SQLiteStore(tmp_path / "sessions.db")
    harness = Harness(workspace=tmp_path / "second-root")
    second = harness.agent(model, store=store)
    await second.call("Go on with the draft.", ctx)

    state = await second.sessions.state(ctx)
    [result] = [r for m in state.messages for r in m.tool_results if r.tool_use_id == "c2"]
    assert result.text == "     1\t# Draft"
    recorded = state.extras[WORKSPACE_KEY]
    assert isinstance(recorded, dict)
    assert Path(str(recorded["folder"])).parent == tmp_path / "first-root"
    assert harness.workspace is not None
    assert harness.workspace.folder_for(RuntimeContext(session_id="new")).parent == tmp_path / "second-root"
    await second.aclose()
    await store.aclose()


# ---- mounts ---------------------------------------------------------------------------------------------


@pytest.fixture
def skill(tmp_path: Path) -> Path:
    folder = tmp_path / "skills" / "pdf"
    (folder / "scripts").mkdir(parents=True)
    (folder / "SKILL.md").write_text("---\nname: pdf\n---\nFill forms.\n")
    (folder / "scripts" / "fill.py").write_text("print('fill')\n")
    return folder


async def test_a_mount_is_readable_by_every_reading_tool(
    skill: Path, workspace: Workspace, files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "notes.md").write_text("mine\n")
    workspace.mount("skills/pdf", skill)

    assert await call(files.list_folder, context) == "notes.md  (5 bytes)\nskills/ (read-only)"
    assert await call(files.list_folder, context, path="skills") == "pdf/ (read-only)"
    assert await call(files.list_folder, context, path="skills/pdf") == "SKILL.md  (30 bytes)\nscripts/"
    assert await call(files.read, context, path="skills/pdf/scripts/fill.py") == "     1\tprint('fill')"
    assert await call(files.glob, context, pattern="**/*.py") == "skills/pdf/scripts/fill.py"
    assert await call(files.glob, context, pattern="*/*.md", path="skills") == "skills/pdf/SKILL.md"
    assert await call(files.grep, context, pattern="(?i)fill|mine") == (
        "notes.md:1: mine\nskills/pdf/SKILL.md:4: Fill forms.\nskills/pdf/scripts/fill.py:1: print('fill')"
    )


async def test_a_mount_is_read_only_and_confined_to_its_folder(
    skill: Path, workspace: Workspace, files: FileTools, outside: Path, context: ToolContext[object]
) -> None:
    workspace.mount("skills/pdf", skill)
    (skill / "leak.md").symlink_to(outside / "secret.txt")

    with pytest.raises(PathRefused, match="read-only"):
        await call(files.write, context, path="skills/pdf/SKILL.md", content="changed")
    with pytest.raises(PathRefused, match="read-only"):
        await call(files.edit, context, path="skills/pdf/SKILL.md", old_text="Fill", new_text="Burn")
    with pytest.raises(PathRefused, match="outside skills/pdf/"):
        await call(files.read, context, path="skills/pdf/leak.md")
    with pytest.raises(PathRefused, match=r"'\.\.'"):
        await call(files.read, context, path="skills/pdf/../../outside/secret.txt")
    assert (skill / "SKILL.md").read_text() == "---\nname: pdf\n---\nFill forms.\n"


async def test_a_mount_shows_only_in_the_runs_it_is_for(
    skill: Path, workspace: Workspace, files: FileTools, context: ToolContext[object]
) -> None:
    workspace.mount("skills/pdf", skill, when=lambda ctx: ctx.session_id == "loaded")
    loaded = _tool_context(RuntimeContext(session_id="loaded"))

    assert "Fill forms." in await call(files.read, loaded, path="skills/pdf/SKILL.md")
    with pytest.raises(FileNotFoundError):
        await call(files.read, context, path="skills/pdf/SKILL.md")
    assert await call(files.list_folder, context) == "(. is empty)"


@pytest.mark.parametrize("prefix", ["", "/skills", "skills/../x", "..", "a\x00b", "skills/pdf"])
def test_a_mount_needs_a_plain_free_prefix_and_a_folder(skill: Path, tmp_path: Path, prefix: str) -> None:
    workspace = Workspace(tmp_path / "work")
    workspace.mount("skills/pdf", skill)
    with pytest.raises(ValueError, match=r"prefix|mounted at"):
        workspace.mount(prefix, skill)
    with pytest.raises(ValueError, match="not a folder"):
        workspace.mount("other", skill / "SKILL.md")
    assert [m.prefix for m in workspace.mounts] == ["skills/pdf"]


@pytest.mark.parametrize("root", ["", "a\x00b"])
def test_a_workspace_root_must_be_a_path(root: str) -> None:
    with pytest.raises(ValueError, match="folder's path"):
        Workspace(root)
