"""The :class:`Harness`: the capabilities chosen once, and agents built with them.

A harness holds its parts (:class:`~rxagent.harness.HarnessPart`: the file tools of a workspace, the
shell, the todo list, the skills, background subagent tasks, any part given, and the context budget last)
and makes a :class:`HarnessAgent` with them: the user's tools and the parts' tools in one toolkit, the
user's system prompt followed by each part's instructions, the user's middleware outside the parts'. The
reasoning stays with that agent.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

from rxagent.agent import Agent, AgentOptions
from rxagent.agent.middleware import AnyMiddleware
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.budget import ContextBudget, budget_part
from rxagent.harness.files import FileLimits, files_part
from rxagent.harness.shell import Shell, shell_part
from rxagent.harness.skills import SkillSet, load_skills
from rxagent.harness.tasks import BackgroundTasks, Subagent
from rxagent.harness.todos import todos_part
from rxagent.harness.workspace import Workspace
from rxagent.model.types import ChatModel
from rxagent.session import SessionStore
from rxagent.tools import Permissions, Tool, Toolkit

__all__ = ["Harness", "HarnessAgent"]


class HarnessAgent(Agent[None, None]):
    """An :class:`~rxagent.agent.Agent` made by :meth:`Harness.agent`: the agent, and what its harness
    gave it to work with.

    Closing it (:meth:`aclose`, or ``close`` after ``run_sync``) first cancels its background tasks (each
    recorded ``cancelled``, resumable later), then closes the agent.
    """

    workspace: Workspace | None
    """The folder its runs work in (``None``: no file tools)."""
    tasks: BackgroundTasks | None
    """Its background subagent tasks (``None``: no subagents were declared): ``tasks.list(ctx)`` and
    ``tasks.get(ctx, task_id)`` report them, ``tasks.events`` streams their events."""
    skills: SkillSet
    """The skills its system prompt lists (empty: none)."""

    async def aclose(self) -> None:
        """Cancel the background tasks still running (recorded as cancelled), then close the agent."""
        if self.tasks is not None:
            await self.tasks.aclose()
        await super().aclose()


class Harness:
    """A workspace with file tools, an optional shell, a todo list, skills, background subagent tasks and a
    context budget, around agents it makes.

    Args:
        workspace: the folder the agents work in: a :class:`~rxagent.harness.Workspace` (one folder per
            session, or shared), or a path (one folder per session below it); ``None``: no file tools.
        shell: the ``shell`` tool: ``False`` (the default: none), ``True`` (default settings), or a
            :class:`~rxagent.harness.Shell`. It needs a workspace.
        files: the file tools' limits (default :class:`~rxagent.harness.FileLimits`).
        todos: the ``write_todos``/``read_todos`` tools, kept in the session, with a reminder of open items
            in each request (never stored).
        skills: folders of skills (each a folder with a ``SKILL.md``), or a loaded
            :class:`~rxagent.harness.SkillSet`: the system prompt lists their names and descriptions,
            ``use_skill`` loads a body, and the file tools read a skill's files (read-only, under
            ``skills/<name>/``; needs a workspace).
        subagents: the subagents background tasks may run (``start_task``, ``task_status``,
            ``task_result``, ``cancel_task``, ``resume_task``); none: no task tools.
        max_tasks: how many background tasks run at once per agent (the rest wait in line).
        budget: the context budget of the whole request (a :class:`~rxagent.harness.ContextBudget`, or
            the model's context in tokens): large tool results are evicted to the workspace and an overflow
            compresses and retries once. Needs a workspace; ``None``: no budget.
        parts: more parts, after the ones above and before the budget (which sees what they add).

    Raises:
        ValueError: a shell, skills or a budget without a workspace, or two parts with one name.
        ShellUnavailableError: a shell is asked for, ``bwrap`` is missing and the shell did not opt in to
            running without a sandbox.
        SkillError: a skills folder that is missing, or a skill that cannot be loaded.

    Example:
        >>> harness = Harness(workspace="work/", skills=["skills/"], budget=8_000)  # doctest: +SKIP
        >>> agent = harness.agent(model, system_prompt="You are careful.", store="sessions.db")
        >>> result = await agent.call("Write hello.txt saying hello.")
    """

    def __init__(
        self,
        *,
        workspace: Workspace | str | os.PathLike[str] | None = None,
        shell: bool | Shell = False,
        files: FileLimits | None = None,
        todos: bool = True,
        skills: Iterable[str | os.PathLike[str]] | SkillSet = (),
        subagents: Sequence[Subagent] = (),
        max_tasks: int = 2,
        budget: ContextBudget | int | None = None,
        parts: Sequence[HarnessPart] = (),
    ) -> None:
        if workspace is not None and not isinstance(workspace, Workspace):
            workspace = Workspace(workspace)
        self.workspace: Workspace | None = workspace
        """The workspace (``None``: none): ``harness.workspace.folder_for(ctx)`` is a run's folder, and
        ``harness.workspace.mount(prefix, folder)`` shows another folder read-only to the file tools."""
        self.skills: SkillSet = skills if isinstance(skills, SkillSet) else load_skills(skills)
        """The skills every agent's system prompt lists."""
        self.subagents: tuple[Subagent, ...] = tuple(subagents)
        """The subagents of every agent's background tasks (each agent runs its own tasks)."""
        self.max_tasks = max_tasks
        if isinstance(budget, int):
            budget = ContextBudget(budget)
        for asked, what in (
            (shell is not False, "the shell"),
            (bool(self.skills.skills), "skills"),
            (budget is not None, "a context budget"),
        ):
            if asked and self.workspace is None:
                raise ValueError(f"{what} needs a workspace: give Harness(workspace=...) as well")
        own: list[HarnessPart] = []
        if self.workspace is not None:
            own.append(files_part(self.workspace, files))
            for prefix, folder in self.skills.mounts().items():
                self.workspace.mount(prefix, folder)
        if shell is not False and self.workspace is not None:
            own.append(shell_part(self.workspace, shell if isinstance(shell, Shell) else None))
        if todos:
            own.append(todos_part())
        if self.skills.skills:
            own.append(self.skills.part())
        own.extend(parts)
        if budget is not None and self.workspace is not None:
            own.append(budget_part(budget, folder=self.workspace.folder_for))  # last: it counts the rest
        self.parts: tuple[HarnessPart, ...] = tuple(own)
        """Every part but the tasks' (made per agent), in order: files, shell, todos, skills, the ones
        given, the budget."""
        compose_parts(self.parts)  # two parts with one name fail here, not at the first agent
        if self.subagents:  # the subagents' own checks (names, descriptions, limits) fail here too
            BackgroundTasks(self.subagents, max_tasks=max_tasks)

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
    ) -> HarnessAgent:
        """An agent with the harness's parts: its own toolkit (``tools`` and the parts' tools), the system
        prompt followed by the parts' instructions, and ``middleware`` outside the parts' middleware.

        The other arguments are :class:`~rxagent.agent.Agent`'s. Each call makes a new agent (and toolkit,
        and background tasks of its own); the other parts, and the workspace's sessions and folders, are
        shared by all of them.

        Raises:
            ValueError: a tool of ``tools`` has the name of a part's tool, or a subagent names a tool the
                agent lacks.
        """
        tasks = BackgroundTasks(self.subagents, max_tasks=self.max_tasks) if self.subagents else None
        parts = self.parts
        if tasks is not None:  # before the budget, which counts what every other part adds
            cut = len(parts) - (1 if parts and parts[-1].name == "budget" else 0)
            parts = (*parts[:cut], tasks.part, *parts[cut:])
        merged = compose_parts(parts, system_prompt)
        agent = HarnessAgent(
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
        agent.workspace, agent.tasks, agent.skills = self.workspace, tasks, self.skills
        if tasks is not None:
            tasks.attach(agent)
        return agent
