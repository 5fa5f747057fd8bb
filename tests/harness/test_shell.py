"""The shell tool: in bubblewrap it writes only in the workspace and reaches no network; it sees none of
this process's secrets; it asks first; and nothing it started outlives a timeout or a cancel.

The bubblewrap tests need ``bwrap`` (the set-up installs it): in CI they fail without it, never skip.

Bad inputs tried: an empty command; a shell with no sandbox that did not opt in; a shell without a
workspace; a timeout that is not positive; a command that writes outside, connects to a loopback
listener, or leaves a child running in the background.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import pytest

from rxagent.agent import ToolDecision
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.harness import Harness, Shell, ShellUnavailableError, Workspace, shell_part
from rxagent.messages import ToolResultBlock
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.tools import Tool, ToolArgumentError, ToolContext
from tests.harness.conftest import living, outliving

NO_BWRAP = "/nonexistent/bwrap"


async def _run(tool: Tool, command: str, context: ToolContext[object]) -> ToolResultBlock:
    result = await tool.invoke(tool.prepare({"command": command}), context)
    assert isinstance(result, ToolResultBlock)
    return result


def _shell_tool(workspace: Workspace, shell: Shell) -> Tool:
    [made] = shell_part(workspace, shell).tools
    assert isinstance(made, Tool)
    return made


@pytest.fixture
def far_outside() -> Iterator[Path]:
    """A folder outside the workspace and outside ``/tmp`` (which the sandbox replaces with its own)."""
    place = Path(tempfile.mkdtemp(dir="/var/tmp", prefix="rxagent-shell-test-"))
    try:
        yield place
    finally:
        shutil.rmtree(place)


# ---- the sandbox ----------------------------------------------------------------------------------------


async def test_under_bubblewrap_it_writes_in_the_workspace_and_nowhere_else(
    bwrap: str,
    workspace: Workspace,
    folder: Path,
    outside: Path,
    far_outside: Path,
    context: ToolContext[object],
) -> None:
    tool = _shell_tool(workspace, Shell(ask=False, bwrap=bwrap))
    targets = [
        outside / "escaped",
        far_outside / "escaped",
        folder.parent / "escaped",
        outside / "secret.txt",
    ]
    # Inside, some of these succeed in the sandbox's own /tmp, which is thrown away: what counts is here.
    tries = "; ".join(f"(echo pwned > {t}) 2>/dev/null" for t in targets)

    result = await _run(tool, f"echo mine > made.txt; {tries}; cat made.txt", context)

    assert result.text.splitlines()[-2:] == ["mine", "[exit status 0]"]
    assert (folder / "made.txt").read_text() == "mine\n"
    assert not any(t.exists() for t in targets[:3])
    assert (outside / "secret.txt").read_text() == "the secret outside the workspace\n"


async def test_under_bubblewrap_it_cannot_open_a_socket_to_a_listener_here(
    bwrap: str, workspace: Workspace, context: ToolContext[object]
) -> None:
    accepted: list[str] = []
    answered = asyncio.Event()

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(str(writer.get_extra_info("peername")))
        answered.set()
        writer.close()

    listener = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    try:
        # The listener answers this process: what the sandbox fails to reach is there.
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.close()
        await writer.wait_closed()
        await asyncio.wait_for(answered.wait(), 60)
        accepted.clear()

        tool = _shell_tool(workspace, Shell(ask=False, bwrap=bwrap))
        result = await _run(
            tool, f"bash -c 'echo hello > /dev/tcp/127.0.0.1/{port}' && echo CONNECTED", context
        )
    finally:
        listener.close()
        await listener.wait_closed()

    assert "CONNECTED" not in result.text
    assert result.status == "error"
    assert accepted == []


async def test_commands_get_no_secret_from_this_processs_environment(
    bwrap: str,
    workspace: Workspace,
    folder: Path,
    context: ToolContext[object],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-never-shown")
    tool = _shell_tool(workspace, Shell(ask=False, bwrap=bwrap, env={"PROJECT": "demo"}))

    result = await _run(tool, "env", context)

    shown = dict(line.split("=", 1) for line in result.text.splitlines()[:-1])
    assert "never-shown" not in result.text
    assert shown["HOME"] == shown["PWD"] == str(folder)
    assert shown["PROJECT"] == "demo"
    assert shown["PATH"] == os.environ["PATH"]
    allowed = {"PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ", "HOME", "PWD", "TMPDIR"}
    assert set(shown) <= allowed | {"PROJECT", "SHLVL", "_"}  # the last two: what the shell sets itself


async def test_long_output_is_cut_in_the_middle(
    bwrap: str, workspace: Workspace, context: ToolContext[object]
) -> None:
    tool = _shell_tool(workspace, Shell(ask=False, bwrap=bwrap, max_output_bytes=100))

    result = await _run(tool, "echo first; seq 1 100000; echo last", context)

    lines = result.text.splitlines()
    assert lines[0] == "first"
    assert lines[-2:] == ["last", "[exit status 0]"]
    assert any(line.startswith("[… ") and "bytes of output left out" in line for line in lines)
    assert len(result.text) < 250


# ---- nothing outlives the call ----------------------------------------------------------------------------


class Lingering:
    """A command that leaves a child (a ``sleep`` with a unique argument) running, holding the write end
    of the FIFO ``held``, and then says ``go`` through the FIFO ``ready``.

    Both FIFOs are read on the event loop (never in a thread a failure would leave blocked): ``ready``
    opened read-write so it never reads as ended before ``go``, and ``held`` opened before the command
    runs and read only after ``go``, so its end-of-file means the child died.
    """

    def __init__(self, folder: Path) -> None:
        os.mkfifo(folder / "held")
        os.mkfifo(folder / "ready")
        self.marker = f"sleep {random.randrange(10**6, 10**7)}"
        self.command = f"exec 3> held; {self.marker} >&3 & exec 3>&-; echo go > ready; wait"
        self._ready = open(os.open(folder / "ready", os.O_RDWR | os.O_NONBLOCK), "rb", buffering=0)  # noqa: SIM115
        self._held = open(os.open(folder / "held", os.O_RDONLY | os.O_NONBLOCK), "rb", buffering=0)  # noqa: SIM115

    async def started(self) -> None:
        """Once the child runs (the command said ``go``)."""
        line = await asyncio.wait_for((await _stream(self._ready)).readline(), 60)
        assert line == b"go\n"

    async def child_ended(self) -> bool:
        """Whether the child is gone within a minute (``held`` read to its end)."""
        try:
            await asyncio.wait_for((await _stream(self._held)).read(), 60)
        except TimeoutError:
            return False
        return True


async def _stream(pipe: BinaryIO) -> asyncio.StreamReader:
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), pipe)
    return reader


@pytest.mark.parametrize("sandbox", ["bubblewrap", "none"])
async def test_a_timeout_kills_the_command_and_everything_it_started(
    sandbox: str,
    request: pytest.FixtureRequest,
    workspace: Workspace,
    folder: Path,
    context: ToolContext[object],
) -> None:
    clock = VirtualClock()
    bwrap = request.getfixturevalue("bwrap") if sandbox == "bubblewrap" else NO_BWRAP
    tool = _shell_tool(workspace, Shell(ask=False, bwrap=bwrap, unsandboxed=True, timeout=30, clock=clock))
    lingering = Lingering(folder)

    running = asyncio.ensure_future(_run(tool, lingering.command, context))
    await lingering.started()
    assert living(lingering.marker)
    await clock.advance(30)

    assert await lingering.child_ended()
    result = await running
    assert result.status == "error"
    assert result.text.endswith("[killed: timed out after 30 s]")
    assert await outliving(lingering.marker) == []


@pytest.mark.parametrize("sandbox", ["bubblewrap", "none"])
async def test_cancelling_the_run_leaves_no_child_alive(
    sandbox: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    bwrap = request.getfixturevalue("bwrap") if sandbox == "bubblewrap" else NO_BWRAP
    harness = Harness(workspace=tmp_path / "work", shell=Shell(ask=False, bwrap=bwrap, unsandboxed=True))
    assert harness.workspace is not None
    ctx = RuntimeContext(session_id="s1")
    folder = harness.workspace.folder_for(ctx)
    lingering = Lingering(folder)
    call = ScriptedToolCall("shell", {"command": lingering.command})
    agent = harness.agent(ScriptedModel([ScriptedResponse(tool_calls=[call])]))

    run = asyncio.ensure_future(agent.call("Run it.", ctx))
    await lingering.started()
    assert living(lingering.marker)
    run.cancel()

    assert await lingering.child_ended()
    with pytest.raises(asyncio.CancelledError):
        await run
    assert await outliving(lingering.marker) == []
    await agent.aclose()


# ---- permission and set-up ------------------------------------------------------------------------------


async def test_it_asks_a_human_before_each_command_by_default(bwrap: str, tmp_path: Path) -> None:
    harness = Harness(workspace=tmp_path / "work", shell=Shell(bwrap=bwrap))
    assert harness.workspace is not None
    ctx = RuntimeContext(session_id="s1")
    folder = harness.workspace.folder_for(ctx)
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("shell", {"command": "touch one"}, id="c1")]),
            ScriptedResponse(tool_calls=[ScriptedToolCall("shell", {"command": "touch two"}, id="c2")]),
            "Done.",
        ]
    )
    agent = harness.agent(model)

    asked = await agent.call("Make two files.", ctx)
    assert (asked.reason, [c.id for c in asked.pending]) == ("PERMISSION_ASKING", ["c1"])
    assert not (folder / "one").exists()

    asked = await agent.call(ToolDecision("c1", allow=True), ctx)
    assert (folder / "one").exists()
    assert (asked.reason, [c.id for c in asked.pending]) == ("PERMISSION_ASKING", ["c2"])

    finished = await agent.call(ToolDecision("c2", allow=False, reason="enough files"), ctx)
    assert finished.text == "Done."
    assert not (folder / "two").exists()
    await agent.aclose()


def test_without_bubblewrap_it_refuses_unless_the_user_opts_in(workspace: Workspace) -> None:
    with pytest.raises(ShellUnavailableError, match="would not be a sandbox"):
        shell_part(workspace, Shell(bwrap=NO_BWRAP))
    with pytest.raises(ShellUnavailableError, match="would not be a sandbox"):
        Harness(workspace=workspace, shell=Shell(bwrap=NO_BWRAP))

    part = shell_part(workspace, Shell(bwrap=NO_BWRAP, unsandboxed=True))

    [made] = part.tools
    assert isinstance(made, Tool)
    assert "WITHOUT a sandbox" in made.description
    assert "WITHOUT a sandbox" in part.instructions


async def test_unsandboxed_it_still_runs_in_the_workspace(
    workspace: Workspace, folder: Path, context: ToolContext[object]
) -> None:
    tool = _shell_tool(workspace, Shell(ask=False, bwrap=NO_BWRAP, unsandboxed=True))
    result = await _run(tool, "pwd; echo hi > made.txt; exit 3", context)
    assert result.text == f"{folder}\n[exit status 3]"
    assert result.status == "error"
    assert (folder / "made.txt").read_text() == "hi\n"


def test_bad_settings_are_refused(workspace: Workspace) -> None:
    with pytest.raises(ValueError, match="timeout must be positive"):
        Shell(timeout=0)
    with pytest.raises(ValueError, match="the shell needs a workspace"):
        Harness(shell=True)
    tool = _shell_tool(workspace, Shell(bwrap=NO_BWRAP, unsandboxed=True))
    with pytest.raises(ToolArgumentError, match="command"):
        tool.prepare({"command": ""})
    with pytest.raises(ToolArgumentError, match="command"):
        tool.prepare({"command": ["ls"]})
