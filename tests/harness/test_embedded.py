"""The harness on the embedded model (SmolLM2-135M-Instruct on llama.cpp): a write through the file tool.

The first step is forced as the main job forces it (``first_tool_choice``; here the ``write`` tool by name,
:class:`~rxagent.model.types.ForceTool`), so the grammar makes the model's first message a well-formed call
of ``write``. What the model writes, and what it says after, are its own: the test checks only what rxagent
guarantees about the call: a well-formed write that lands inside the workspace, an ok result that says
so, the session recording the folder, and nothing outside the workspace touched.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rxagent.agent import AgentOptions
from rxagent.context import RuntimeContext
from rxagent.harness import Harness, Workspace
from rxagent.harness.workspace import WORKSPACE_KEY
from rxagent.model.llama_cpp import LlamaCppModel
from rxagent.model.types import ForceTool

pytestmark = pytest.mark.llm


def tree(root: Path) -> dict[str, tuple[int, int]]:
    """Every file below ``root`` with its size and modification time (what "nothing changed" compares)."""
    found: dict[str, tuple[int, int]] = {}
    for folder, _, names in os.walk(root):
        for name in names:
            path = Path(folder) / name
            status = path.lstat()
            found[str(path.relative_to(root))] = (status.st_size, status.st_mtime_ns)
    return found


async def test_the_embedded_model_writes_a_file_inside_its_workspace(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("left alone\n")
    work = tmp_path / "work"
    work.mkdir()
    harness = Harness(workspace=Workspace(work, per_session=False))
    agent = harness.agent(
        # Strings of at most 40 characters: the call's JSON fits in the 96 tokens, so it is always whole.
        LlamaCppModel(n_ctx=4096, max_tokens=96, string_max_length=40),
        system_prompt="You are a helpful assistant. Use the tools.",
        options=AgentOptions(max_iters=1, max_tokens=96, first_tool_choice=ForceTool("write")),
        store=str(tmp_path / "sessions.db"),
    )
    before = {k: v for k, v in tree(tmp_path).items() if not k.startswith(("work/", "sessions.db"))}
    ctx = RuntimeContext(session_id="embedded")

    result = await agent.call("Write the word hello into the file hello.txt.", ctx)
    state = await agent.sessions.state(ctx)
    await agent.aclose()

    calls = [call for message in state.messages for call in message.tool_calls]
    assert calls, f"the forced first step made no call ({result.reason})"
    write = calls[0]
    assert (write.name, write.state) == ("write", "complete")  # the grammar made it well-formed
    assert write.input is not None
    path, content = write.input["path"], write.input["content"]
    assert isinstance(path, str)
    assert isinstance(content, str)
    [written] = [r for m in state.messages for r in m.tool_results if r.tool_use_id == write.id]
    assert written.status == "ok", written.text
    target = (work / path).resolve()
    assert target.is_relative_to(work.resolve())
    assert target.read_text(encoding="utf-8") == content
    assert written.text.startswith("Wrote ")
    assert written.text.endswith(f" bytes) to {target.relative_to(work.resolve()).as_posix()} (a new file).")
    assert state.extras[WORKSPACE_KEY] == {"folder": str(work.resolve())}
    after = {k: v for k, v in tree(tmp_path).items() if not k.startswith(("work/", "sessions.db"))}
    assert after == before  # nothing outside the workspace (and the session store) changed
