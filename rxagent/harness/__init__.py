"""The harness: a workspace the agent works in, and the capabilities around its ReAct loop.

Each capability is a :class:`HarnessPart` (tools, middleware, a system-prompt section); the reasoning
stays with the inner :class:`~rxagent.agent.Agent`.
"""

from rxagent.harness._part import HarnessPart, compose_parts
from rxagent.harness.files import FileLimits, FileTools, atomic_write, files_part
from rxagent.harness.harness import Harness
from rxagent.harness.shell import Shell, ShellUnavailableError, shell_part
from rxagent.harness.tasks import BackgroundTasks, Subagent, TaskError, TaskInfo, TaskStatus
from rxagent.harness.workspace import Mount, PathRefused, Workspace, WorkspacePath

__all__ = [
    "BackgroundTasks",
    "FileLimits",
    "FileTools",
    "Harness",
    "HarnessPart",
    "Mount",
    "PathRefused",
    "Shell",
    "ShellUnavailableError",
    "Subagent",
    "TaskError",
    "TaskInfo",
    "TaskStatus",
    "Workspace",
    "WorkspacePath",
    "atomic_write",
    "compose_parts",
    "files_part",
    "shell_part",
]
