"""Tools: plain functions become schema-validated, permission-gated, parallel-executable tools.

>>> from rxagent.tools import Toolkit, ToolExecutor, tool
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

from rxagent.tools._tool import (
    FunctionTool,
    PermissionCheck,
    ProgressUpdate,
    SchemaTool,
    Tool,
    ToolContext,
    ToolSystemError,
    ToolTraits,
    tool,
)
from rxagent.tools.arguments import ArgumentProblem, ToolArgumentError
from rxagent.tools.events import (
    ToolBatchFinished,
    ToolBodyStarted,
    ToolCallNested,
    ToolCallProgress,
    ToolCallSettled,
    ToolCallSuspended,
    ToolEvent,
    ToolPermissionRequired,
)
from rxagent.tools.executor import (
    ToolCallNext,
    ToolExecutor,
    ToolInterceptor,
    ToolInvocation,
    ToolJournal,
    ToolRecordingError,
    result_of,
)
from rxagent.tools.permissions import (
    Decision,
    PathPattern,
    PermissionDecision,
    PermissionMode,
    PermissionRule,
    Permissions,
)
from rxagent.tools.toolkit import ResolvedTool, ToolGroup, Toolkit, ToolView, Unavailable

__all__ = [
    "ArgumentProblem",
    "Decision",
    "FunctionTool",
    "PathPattern",
    "PermissionCheck",
    "PermissionDecision",
    "PermissionMode",
    "PermissionRule",
    "Permissions",
    "ProgressUpdate",
    "ResolvedTool",
    "SchemaTool",
    "Tool",
    "ToolArgumentError",
    "ToolBatchFinished",
    "ToolBodyStarted",
    "ToolCallNested",
    "ToolCallNext",
    "ToolCallProgress",
    "ToolCallSettled",
    "ToolCallSuspended",
    "ToolContext",
    "ToolEvent",
    "ToolExecutor",
    "ToolGroup",
    "ToolInterceptor",
    "ToolInvocation",
    "ToolJournal",
    "ToolPermissionRequired",
    "ToolRecordingError",
    "ToolSystemError",
    "ToolTraits",
    "ToolView",
    "Toolkit",
    "Unavailable",
    "result_of",
    "tool",
]

if TYPE_CHECKING:
    ToolCallFinished = ToolCallSettled
    """Deprecated: the old name of :class:`ToolCallSettled`, kept one release."""
else:

    def __getattr__(name: str) -> object:
        # Old names stay importable one release: they warn, and give the renamed object.
        if name == "ToolCallFinished":
            warnings.warn(
                "rxagent.tools.ToolCallFinished is renamed ToolCallSettled;"
                " the old name goes in the next release",
                DeprecationWarning,
                stacklevel=2,
            )
            return ToolCallSettled
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
