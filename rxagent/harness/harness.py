"""The :class:`Harness`: the capabilities chosen once, and agents built with them.

A harness holds its parts (:class:`~rxagent.harness.HarnessPart`: the file tools of a workspace, the
shell, and any part given) and makes an :class:`~rxagent.agent.Agent` with them: the user's tools and the
parts' tools in one toolkit, the user's system prompt followed by each part's instructions, the user's
middleware outside the parts'. The reasoning stays with that agent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

from rxagent.agent import Agent, AgentOptions
from rxagent.agent.middleware import AnyMiddleware
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.files import FileLimits, files_part
from rxagent.harness.shell import Shell, shell_part
from rxagent.harness.workspace import Workspace
from rxagent.model.types import ChatModel
from rxagent.session import SessionStore
from rxagent.tools import Permissions, Tool, Toolkit

__all__ = ["Harness"]


class Harness:
    """A workspace with file tools, an optional shell, and other parts, around agents it makes.

    Args:
        workspace: the folder the agents work in: a :class:`~rxagent.harness.Workspace` (one folder per
            session, or shared), or a path (one folder per session below it); ``None``: no file tools.
        shell: the ``shell`` tool: ``False`` (the default: none), ``True`` (default settings), or a
            :class:`~rxagent.harness.Shell`. It needs a workspace.
        files: the file tools' limits (default :class:`~rxagent.harness.FileLimits`).
        parts: more parts, after the workspace's and the shell's.

    Raises:
        ValueError: a shell without a workspace, or two parts with one name.
        ShellUnavailableError: a shell is asked for, ``bwrap`` is missing and the shell did not opt in to
            running without a sandbox.

    Example:
        >>> harness = Harness(workspace=Workspace("work/", per_session=True))  # doctest: +SKIP
        >>> agent = harness.agent(model, system_prompt="You are careful.", store="sessions.db")
        >>> result = await agent.call("Write hello.txt saying hello.")
    """

    def __init__(
        self,
        *,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        shell: bool | Shell = False,
        files: FileLimits | None = None,
        parts: Sequence[HarnessPart] = (),
    ) -> None:
        if workspace is not None and not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
        self.workspace: Workspace | None = workspace
        """The workspace (``None``: none): ``harness.workspace.folder_for(ctx)`` is a run's folder, and
        ``harness.workspace.mount(prefix, folder)`` shows another folder read-only to the file tools."""
        own: list[HarnessPart] = []
        if self.workspace is not None:
            own.append(files_part(self.workspace, files))
        if shell is not False:
            if self.workspace is None:
                raise ValueError("the shell runs in a workspace: give Harness(workspace=...) as well")
            own.append(shell_part(self.workspace, shell if isinstance(shell, Shell) else None))
        self.parts: tuple[HarnessPart, ...] = (*own, *parts)
        """Every part, in order: the file tools, the shell, then the ones given."""
        compose_parts(self.parts)  # two parts with one name fail here, not at the first agent

    def agent(
        self,
        model: ChatModel,
        tools: Iterable[Tool | Callable[..., object]] = (),
        *,
        system_prompt: str | None = None,
        name: str = "agent",
        options: AgentOptions | None = None,
        middleware: Sequence[AnyMiddleware] = (),
        permissions: Permissions | None = None,
        store: SessionStore | str | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> Agent:
        """An agent with the harness's parts: its own toolkit (``tools`` and the parts' tools), the system
        prompt followed by the parts' instructions, and ``middleware`` outside the parts' middleware.

        The other arguments are :class:`~rxagent.agent.Agent`'s. Each call makes a new agent (and toolkit);
        the parts, and the workspace's sessions and folders, are shared by all of them.

        Raises:
            ValueError: a tool of ``tools`` has the name of a part's tool.
        """
        merged = compose_parts(self.parts, system_prompt)
        return Agent(
            model,
            Toolkit([*tools, *merged.tools]),
            system_prompt=merged.instructions or None,
            name=name,
            options=options,
            middleware=(*middleware, *merged.middleware),
            permissions=permissions,
            store=store,
            clock=clock,
        )
