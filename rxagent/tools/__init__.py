"""Tools: plain functions become schema-validated, permission-gated, parallel-executable tools.

>>> from rxagent.tools import Toolkit, ToolExecutor, tool
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rxagent.deprecation import renamed
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
    __getattr__ = renamed(__name__, {"ToolCallFinished": ("ToolCallSettled", ToolCallSettled)})
