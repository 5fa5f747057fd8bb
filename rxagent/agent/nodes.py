"""Where a run goes next: the nodes of the loop, and the shape of a step (see :mod:`rxagent.agent.steps`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from reactivex import Observable

from rxagent.agent.inputs import RunInput
from rxagent.events import AgentEvent, RunReason
from rxagent.messages import Msg, ToolUseBlock

if TYPE_CHECKING:
    from rxagent.agent.run import RunState

__all__ = [
    "Act",
    "CheckOutput",
    "Finish",
    "Interrupt",
    "Next",
    "Node",
    "Reason",
    "Reprompt",
    "Start",
    "Step",
    "StepOutput",
]


@dataclass(frozen=True, slots=True)
class Start:
    """The run's entry: route its input (new messages, or answers for the calls the session waits on)."""

    input: RunInput


@dataclass(frozen=True, slots=True)
class Reason:
    """One model turn; ``summarising`` is the tool-less last turn after the iteration limit."""

    summarising: bool = False


@dataclass(frozen=True, slots=True)
class Act:
    """Run the batch ``calls`` (of the last assistant message); ``approved`` names calls a human allowed."""

    calls: tuple[ToolUseBlock, ...]
    approved: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Reprompt:
    """Ask the model once more for an answer after a reply without answer text."""


@dataclass(frozen=True, slots=True)
class CheckOutput:
    """Validate the structured answer in ``message`` (its output-tool call, or its JSON text)."""

    message: Msg


@dataclass(frozen=True, slots=True)
class Interrupt:
    """The user interrupted: settle the calls in flight and finish with reason ``INTERRUPTED``."""


@dataclass(frozen=True, slots=True)
class Finish:
    """Save the session and emit the run's one :class:`~rxagent.events.AgentResult`.

    Attributes:
        reason: why the run ends.
        message: the final message (``None`` when the run ends waiting for tools, or failed).
        detail: a note on the reason.
        structured: the validated structured output.
        structured_error: why there is none although an output type was asked for.
    """

    reason: RunReason
    message: Msg | None = None
    detail: str | None = None
    structured: Any = None
    structured_error: str | None = None


Node: TypeAlias = Start | Reason | Act | Reprompt | CheckOutput | Interrupt | Finish
"""The built-in nodes. A custom assembly may add node types of its own: any value can be a node."""


@dataclass(frozen=True, slots=True)
class Next:
    """The last item of a step: the node the run goes to next (the loop consumes it; nobody else sees it)."""

    node: Any


StepOutput: TypeAlias = AgentEvent | Next
"""What a step emits: the run's events, then one :class:`Next`."""

Step: TypeAlias = Callable[[Any, "RunState"], Observable[StepOutput]]
"""A step: ``(node, run) -> events, then Next(node)``. A step for :class:`Finish` ends without ``Next``."""
