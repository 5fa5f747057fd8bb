"""The ``shell`` tool: a command run in the run's workspace, inside bubblewrap, after a human said yes.

Off by default (``Harness(shell=True)`` or :func:`shell_part` turns it on). Each call runs
``/bin/sh -c COMMAND`` in the workspace folder with:

- **a sandbox** where ``bwrap`` (bubblewrap) is installed: the whole system read-only, the workspace
  read-write, a private ``/tmp``, the home folder hidden, no network (a namespace with only its own
  loopback), its own process ids, and nothing left running when the command ends. Without ``bwrap``
  :func:`shell_part` refuses to make the tool, saying it would not be a sandbox, unless the user opts in
  with ``Shell(unsandboxed=True)``; the tool then tells the model it is not one;
- **an environment without the process's secrets**: only the variables named in ``Shell.inherit``
  (``PATH``, the locale, ``TERM``, ``TZ``) are passed on, plus ``HOME`` and ``PWD`` (the workspace),
  ``TMPDIR`` and the user's own ``Shell.env``; API keys and tokens in this process's environment never
  reach a command;
- **a timeout** (``Shell.timeout``, on ``Shell.clock``) and **an output cap** (``Shell.max_output_bytes``:
  the start and the end are kept);
- **a permission question**: the tool's own permission check answers ``ask``, so each call waits for a
  human's :class:`~rxagent.agent.ToolDecision` (``Shell(ask=False)`` leaves it to the agent's
  :class:`~rxagent.tools.Permissions`).

The command runs in a process group of its own, and the whole group is killed (``SIGKILL``) when the
command ends, times out, or the call is cancelled (the run cancelled, the task awaiting it cancelled), so
no child outlives the call. Under bubblewrap the command also runs as the init of its own process-id
namespace, which takes every process of the command with it (even one that left the group), and dies
with this process (``--die-with-parent``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.context import RuntimeContext
from rxagent.harness._part import HarnessPart
from rxagent.harness.workspace import Workspace
from rxagent.messages import TextBlock, ToolResultBlock
from rxagent.tools import FunctionTool, ToolContext, ToolTraits

__all__ = ["INHERITED_ENV", "Shell", "ShellUnavailableError", "shell_part"]

INHERITED_ENV: tuple[str, ...] = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TERM", "TZ")
"""The environment variables a command gets from this process by default: none that holds a secret."""


class ShellUnavailableError(RuntimeError):
    """The shell cannot be a sandbox here (``bwrap`` is missing) and the user did not opt in to running
    commands without one."""


@dataclass(frozen=True, slots=True)
class Shell:
    """How the ``shell`` tool runs commands.

    Attributes:
        timeout: seconds a command may run; then its whole process group is killed.
        max_output_bytes: the most output (stdout and stderr together) given back; the start and the end
            of a longer one are kept.
        ask: each call asks a human first (the tool's own permission check answers ``ask``); ``False``
            leaves the decision to the agent's permission rules and mode.
        unsandboxed: run commands without a sandbox when ``bwrap`` is missing (the user's explicit
            opt-in: the commands then run with this process's rights, on its network).
        bwrap: the bubblewrap command (a name looked up on ``PATH``, or a path).
        inherit: the environment variables passed on from this process (see :data:`INHERITED_ENV`).
        env: more variables for every command (they win over inherited ones).
        hide_home: under bubblewrap, show an empty folder instead of ``$HOME`` (where keys and tokens
            live); the workspace stays visible if it is inside it.
        clock: what the timeout runs on.
    """

    timeout: float = 120.0
    max_output_bytes: int = 30_000
    ask: bool = True
    unsandboxed: bool = False
    bwrap: str = "bwrap"
    inherit: Sequence[str] = INHERITED_ENV
    env: Mapping[str, str] = field(default_factory=lambda: {})
    hide_home: bool = True
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        if not self.timeout > 0:
            raise ValueError(f"Shell.timeout must be positive, got {self.timeout!r}")
        if self.max_output_bytes < 2:
            raise ValueError(f"Shell.max_output_bytes must be at least 2, got {self.max_output_bytes!r}")

    def sandbox(self) -> str | None:
        """The path of the bubblewrap command, or ``None`` when it is not installed."""
        return shutil.which(self.bwrap)


class _Runner:
    """Runs one command of the ``shell`` tool (one instance per tool)."""

    def __init__(self, workspace: Workspace, shell: Shell, bwrap: str | None) -> None:
        self.workspace = workspace
        self.shell = shell
        self.bwrap = bwrap

    def argv(self, folder: Path, command: str) -> list[str]:
        if self.bwrap is None:
            return ["/bin/sh", "-c", command]
        where = str(folder)
        argv = [self.bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
        home = os.environ.get("HOME", "")
        if self.shell.hide_home and home not in ("", "/") and os.path.isdir(home):
            argv += ["--tmpfs", os.path.realpath(home)]
        argv += ["--bind", where, where, "--chdir", where]
        argv += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"]
        return [*argv, "--", "/bin/sh", "-c", command]

    def environment(self, folder: Path) -> dict[str, str]:
        inherited = {name: os.environ[name] for name in self.shell.inherit if name in os.environ}
        inherited.setdefault("PATH", os.defpath)
        own = {"HOME": str(folder), "PWD": str(folder), "TMPDIR": "/tmp"}
        return {**inherited, **own, **self.shell.env}

    async def run(self, command: str, context: ToolContext[object]) -> ToolResultBlock:
        shell = self.shell
        folder = self.workspace.folder_for(context)
        output = _Output(shell.max_output_bytes)
        process: asyncio.subprocess.Process | None = None
        reader: asyncio.Future[None] | None = None
        try:
            # The deadline is armed before the process starts: its whole life is under it.
            async with shell.clock.timeout(shell.timeout):
                process = await asyncio.create_subprocess_exec(
                    *self.argv(folder, command),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.STDOUT,
                    cwd=folder,
                    env=self.environment(folder),
                    start_new_session=True,  # its own process group, killed whole
                )
                assert process.stdout is not None
                reader = asyncio.ensure_future(output.pump(process.stdout))
                status = await process.wait()
                _kill_group(process.pid)  # what it left running in the background
                await reader
        except TimeoutError:
            if process is not None:
                _kill_group(process.pid)
                await process.wait()
            killed = f"[killed: timed out after {shell.timeout:g} s]"
            return _result(context, f"{output.text()}\n{killed}", "error")
        except OSError as error:
            return _result(context, f"the command could not start: {error}", "error")
        finally:
            if process is not None and process.returncode is None:  # cancelled: nothing may outlive it
                _kill_group(process.pid)
            if reader is not None:
                reader.cancel()
        return _result(context, f"{output.text()}\n{_ending(status)}", "ok" if status == 0 else "error")


class _Output:
    """A command's output, capped: the first and the last halves of ``cap`` bytes are kept."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.dropped = 0

    async def pump(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.add(chunk)

    def add(self, chunk: bytes) -> None:
        room = self.cap // 2 - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        self.tail += chunk
        keep = self.cap - self.cap // 2
        if len(self.tail) > keep:
            self.dropped += len(self.tail) - keep
            del self.tail[:-keep]

    def text(self) -> str:
        if not self.head and not self.tail:
            return "(no output)"
        head = self.head.decode("utf-8", "replace")
        tail = self.tail.decode("utf-8", "replace")
        if not self.dropped:
            return (head + tail).rstrip("\n")
        return f"{head}\n[… {self.dropped} bytes of output left out …]\n{tail}".rstrip("\n")


def _ending(status: int) -> str:
    if status >= 0:
        return f"[exit status {status}]"
    try:
        name = signal.Signals(-status).name
    except ValueError:  # a signal Python has no name for
        name = str(-status)
    return f"[killed by signal {name}]"


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _result(context: ToolContext[object], text: str, status: Literal["ok", "error"]) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=context.call_id, name=context.tool_name, output=(TextBlock(text=text),), status=status
    )


def _ask(arguments: Mapping[str, object], ctx: RuntimeContext) -> Literal["ask"]:
    return "ask"


def shell_part(workspace: Workspace, shell: Shell | None = None) -> HarnessPart:
    """The ``shell`` tool over ``workspace`` as a harness part named ``shell`` (see the module).

    Raises:
        ShellUnavailableError: ``bwrap`` is not installed and ``shell.unsandboxed`` is false: the tool
            would not be a sandbox.
    """
    settings = shell or Shell()
    bwrap = settings.sandbox()
    if bwrap is None and not settings.unsandboxed:
        raise ShellUnavailableError(
            f"bubblewrap ({settings.bwrap!r}) is not installed, so the shell tool would not be a sandbox: "
            "install it (apt-get install bubblewrap), or pass Shell(unsandboxed=True) to run commands "
            "with this process's rights and network"
        )
    runner = _Runner(workspace, settings, bwrap)
    if bwrap is not None:
        where = (
            "in a sandbox: the workspace is writable, the rest of the system read-only, and there is no "
            "network"
        )
    else:
        where = "WITHOUT a sandbox: commands run with this process's rights and network"
    description = (
        f"Run a shell command (/bin/sh -c) in the workspace folder, {where}. It is killed after "
        f"{settings.timeout:g} s; long output is cut in the middle. Answers the output and the exit status."
    )

    async def shell_command(
        command: Annotated[str, Field(description="the command line, run by /bin/sh -c", min_length=1)],
        context: ToolContext,
    ) -> ToolResultBlock:
        return await runner.run(command, context)

    traits = ToolTraits(permission=_ask if settings.ask else None)
    made = FunctionTool(shell_command, name="shell", description=description, traits=traits)
    return HarnessPart("shell", tools=(made,), instructions=f"The shell tool runs commands {where}.")
