"""What the harness tests share: a workspace, a tool's context in it, a folder outside it, bubblewrap."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest
from pydantic import JsonValue

from rxagent.context import RuntimeContext
from rxagent.harness import FileTools, Workspace
from rxagent.tools import Tool, ToolContext

SECRET = "the secret outside the workspace\n"


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    """One folder per session below ``tmp_path/work``."""
    return Workspace(tmp_path / "work")


@pytest.fixture
def context() -> ToolContext[object]:
    """A tool call's context in session ``s1`` (a caller's plain context: nothing is recorded)."""
    return ToolContext("call_1", "tool", RuntimeContext(session_id="s1"))


@pytest.fixture
def folder(workspace: Workspace, context: ToolContext[object]) -> Path:
    """The folder of session ``s1``."""
    return workspace.folder_for(context)


@pytest.fixture
def files(workspace: Workspace) -> FileTools:
    return FileTools(workspace)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder beside the workspace, holding ``secret.txt``."""
    place = tmp_path / "outside"
    place.mkdir()
    (place / "secret.txt").write_text(SECRET)
    return place


async def call(tool: Tool, context: ToolContext[object], **arguments: JsonValue) -> str:
    """Call ``tool`` as the executor does: the arguments checked against its schema, then its body."""
    result = tool.invoke(tool.prepare(arguments), context)
    text = await result if tool.is_async else result
    assert isinstance(text, str)
    return text


def make_special(kind: str, path: Path) -> None:
    """Make a FIFO, a socket or a character device (``/dev/null``'s numbers) at ``path``.

    A device needs root (``mknod``): elsewhere the test says why it cannot run, and fails in CI, where
    nothing may be skipped.
    """
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        # A socket's address is at most 108 bytes: bound in a short folder, then moved into place.
        short = Path(tempfile.mkdtemp(dir="/tmp"))
        with socket.socket(socket.AF_UNIX) as bound:
            bound.bind(str(short / "s"))
        (short / "s").rename(path)
        short.rmdir()
    else:
        try:
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            problem = "making a device file (mknod) needs root; run the tests as root"
            if os.environ.get("CI"):
                pytest.fail(problem, pytrace=False)
            pytest.skip(problem)


@pytest.fixture(scope="session")
def bwrap() -> str:
    """The bubblewrap command. In CI a missing ``bwrap`` fails the tests that need it (the set-up installs
    it); elsewhere they are skipped, saying why."""
    wanted = os.environ.get("RXAGENT_BWRAP", "/usr/bin/bwrap")
    found = shutil.which(wanted)
    if found is None:
        problem = (
            f"bubblewrap is not at {wanted}: `bash scripts/test.sh` installs it with apt-get (as root, or "
            "with sudo); set RXAGENT_BWRAP to use another"
        )
        if os.environ.get("CI"):
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return found


def living(marker: str) -> list[int]:
    """The processes alive (zombies aside) whose command line contains ``marker``."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\x00", b" ").decode(errors="replace")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in command and state != "Z":
            found.append(int(entry.name))
    return found


async def outliving(marker: str, within: float = 30.0) -> list[int]:
    """The processes whose command line contains ``marker`` that are still alive ``within`` seconds from
    now (none is waited for longer than it lives).

    A process sent ``SIGKILL`` is torn down by the kernel after the signal: it closes its files (the end
    of file a test may wait for) before it exits. So each one still listed is awaited through its pidfd,
    which becomes readable when it exits, with no polling.
    """
    loop = asyncio.get_running_loop()
    still: list[int] = []
    for pid in living(marker):
        try:
            pidfd = os.pidfd_open(pid)
        except ProcessLookupError:
            continue  # gone between the listing and now
        exited = loop.create_future()
        loop.add_reader(pidfd, exited.set_result, None)
        try:
            await asyncio.wait_for(exited, within)
        except TimeoutError:
            still.append(pid)
        finally:
            loop.remove_reader(pidfd)
            with contextlib.suppress(OSError):
                os.close(pidfd)
    return still
