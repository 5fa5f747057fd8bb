"""The harness: a workspace the agent works in, and the capabilities around its ReAct loop.

Each capability is a :class:`HarnessPart` (tools, middleware, a system-prompt section); the reasoning
stays with the inner :class:`~rxagent.agent.Agent`.
"""

from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.budget import ContextBudget, ContextBudgetExceeded, budget_part
from rxagent.harness.files import FileLimits, FileTools, atomic_write, files_part
from rxagent.harness.harness import Harness, HarnessAgent
from rxagent.harness.shell import Shell, ShellUnavailableError, shell_part
from rxagent.harness.skills import Skill, SkillError, SkillSet, load_skills, skills_part
from rxagent.harness.tasks import BackgroundTasks, Subagent, TaskError, TaskInfo, TaskStatus
from rxagent.harness.todos import todos_part
from rxagent.harness.workspace import Mount, PathRefused, Workspace, WorkspacePath

__all__ = [
    "BackgroundTasks",
    "ContextBudget",
    "ContextBudgetExceeded",
    "FileLimits",
    "FileTools",
    "Harness",
    "HarnessAgent",
    "HarnessPart",
    "Mount",
    "PathRefused",
    "Shell",
    "ShellUnavailableError",
    "Skill",
    "SkillError",
    "SkillSet",
    "Subagent",
    "TaskError",
    "TaskInfo",
    "TaskStatus",
    "Workspace",
    "WorkspacePath",
    "atomic_write",
    "budget_part",
    "compose_parts",
    "files_part",
    "load_skills",
    "shell_part",
    "skills_part",
    "todos_part",
]
