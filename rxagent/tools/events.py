"""What the tool executor emits while it runs a batch of calls.

Events are small frozen dataclasses (cheap to build; the agent layer turns them into JSON events). A
batch emits, as things happen: :class:`ToolBodyStarted`, :class:`ToolCallProgress`,
:class:`ToolCallNested` (events of a run the tool runs, see ``ToolContext.publish``),
:class:`ToolCallSettled` for every call that runs (or is refused or rejected), plus
:class:`ToolPermissionRequired` / :class:`ToolCallSuspended` for calls that wait for a human or for the
caller, and last of all one :class:`ToolBatchFinished` with the results in the order of the calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from rxagent.deprecation import renamed
from rxagent.events import AgentEvent
from rxagent.messages import ToolResultBlock, ToolUseBlock
from rxagent.tools._tool import ProgressUpdate
from rxagent.tools.permissions import PermissionDecision

__all__ = [
    "ToolBatchFinished",
    "ToolBodyStarted",
    "ToolCallNested",
    "ToolCallProgress",
    "ToolCallSettled",
    "ToolCallSuspended",
    "ToolEvent",
    "ToolPermissionRequired",
]


@dataclass(frozen=True, slots=True)
class ToolBodyStarted:
    """A call passed the gate and its body started; ``arguments`` are the final values (presets included)."""

    call: ToolUseBlock
    arguments: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ToolCallProgress:
    """A running tool reported progress (never a result)."""

    call: ToolUseBlock
    update: ProgressUpdate


@dataclass(frozen=True, slots=True)
class ToolCallNested:
    """A running tool published an event of a run nested in the call (``ToolContext.publish``)."""

    call: ToolUseBlock
    event: AgentEvent


@dataclass(frozen=True, slots=True)
class ToolCallSettled:
    """A call has its result: ran (``ok``/``error``), refused (``denied``), or rejected before running.

    The executor's event, after the call was *run* (or refused); the agent reports it as a
    :class:`~rxagent.events.ToolResult`. Not to be confused with the agent event
    :class:`~rxagent.events.ToolCallCompleted`, which comes earlier: the model finished *writing* the call.
    (Named ``ToolCallFinished`` before; that name is a deprecated alias for one release.)
    """

    call: ToolUseBlock
    result: ToolResultBlock
    duration_s: float
    value: Any = None
    """What the tool body returned, before it was turned into result text (``None`` if it did not run)."""
    error_type: str | None = None
    """The class of error an ``error`` result came from: the name of the exception the tool raised (or of
    the argument or encoding failure), ``TimeoutError`` for the tool's deadline; ``None`` when the call
    succeeded or nothing says (a tool that returned an error result itself)."""


@dataclass(frozen=True, slots=True)
class ToolPermissionRequired:
    """The gate said *ask*: the call waits for a human decision and did not run."""

    call: ToolUseBlock
    decision: PermissionDecision


@dataclass(frozen=True, slots=True)
class ToolCallSuspended:
    """An external tool: the caller must execute it and supply the result; nothing ran here."""

    call: ToolUseBlock


@dataclass(frozen=True, slots=True)
class ToolBatchFinished:
    """The last event of a batch.

    Attributes:
        results: one per call that has a result, in the order of the calls.
        waiting: calls without a result yet (permission asked, or external), in call order.
        return_direct: every call of the batch is a return-direct tool and succeeded.
    """

    results: tuple[ToolResultBlock, ...]
    waiting: tuple[ToolPermissionRequired | ToolCallSuspended, ...]
    return_direct: bool


ToolEvent: TypeAlias = (
    ToolBodyStarted
    | ToolCallProgress
    | ToolCallNested
    | ToolCallSettled
    | ToolPermissionRequired
    | ToolCallSuspended
    | ToolBatchFinished
)
"""Anything the executor emits."""

if TYPE_CHECKING:
    ToolCallFinished = ToolCallSettled
    """Deprecated: the old name of :class:`ToolCallSettled`, kept one release."""
else:
    __getattr__ = renamed(__name__, {"ToolCallFinished": ("ToolCallSettled", ToolCallSettled)})
