"""Where a run goes next: the nodes of the loop, the shape of a step, and the table of steps.

A **node** is a small frozen value naming the next thing to do; every node type subclasses :class:`Node`.
A **step** for nodes of type ``N`` is a function ``(node: N, run) -> Observable[AgentEvent | Next[To]]``
(:data:`Step`): it emits the run's events and ends with one :class:`Next` naming the node after it, of
one of the types ``To``. :class:`Steps` maps node types to steps; it is typed by the union of the node
types an assembly handles, so the type checker refuses a step registered for another node type
(``Steps[ReActNode]().on(Act, a_reason_step)``) and a step that goes to a node type the assembly has no
step for (a decision returning ``Plan`` in an assembly without ``Plan``).

::

    class Plan(Node): ...                                         # a node of your own
    steps = react_steps().on(Plan, plan_step)                     # plan_step: Step[Plan, Reason]
    steps = steps.on(Reason, reason_step(decide=read_plan))       # read_plan: (...) -> Plan | Finish
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, fields, is_dataclass
from typing import TYPE_CHECKING, ClassVar, Generic, Literal, Never, TypeAlias, cast

from pydantic import JsonValue
from reactivex import Observable
from typing_extensions import TypeVar

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
    "ReActNode",
    "Reason",
    "Reprompt",
    "Start",
    "Step",
    "StepOutput",
    "Steps",
]


class Node:
    """The base of every node: a frozen value naming what a run does next.

    Subclass it (as a frozen dataclass) for the nodes of your own assembly. ``cut_point`` says which
    middleware cut point the loop wraps this node's step in: ``"reasoning"`` for a model turn (the
    ``reasoning`` hooks see it, as they see :class:`Reason`), ``"acting"`` for a batch of tool calls
    (only :class:`Act` and its subclasses), ``None`` for anything else.
    """

    __slots__ = ()
    cut_point: ClassVar[Literal["reasoning", "acting"] | None] = None

    def describe(self) -> dict[str, JsonValue]:
        """A small JSON view of this node, for the :class:`~rxagent.events.StepStarted` the loop emits as
        its step begins: the dataclass fields whose values are plain JSON scalars (text, numbers,
        booleans, ``None``); others are left out. Built once per step: override it to tell more (or less),
        but keep it cheap (no dump of whole messages)."""
        if not is_dataclass(self):
            return {}
        view: dict[str, JsonValue] = {}
        for spec in fields(self):
            value: object = getattr(self, spec.name)
            if value is None or isinstance(value, str | int | float | bool):
                view[spec.name] = value
        return view


@dataclass(frozen=True, slots=True)
class Start(Node):
    """The run's entry: route its input (new messages, or answers for the calls the session waits on)."""

    input: RunInput

    def describe(self) -> dict[str, JsonValue]:
        """How many new messages and answers the input holds."""
        return {"messages": len(self.input.messages), "decisions": len(self.input.decisions)}


@dataclass(frozen=True, slots=True)
class Reason(Node):
    """One model turn.

    Attributes:
        summarising: the tool-less last turn after the iteration limit.
        reprompted: the model was already asked once more for an answer after a reply without one.
        attempts: structured answers refused so far in a row.
    """

    cut_point: ClassVar[Literal["reasoning", "acting"] | None] = "reasoning"
    summarising: bool = False
    reprompted: bool = False
    attempts: int = 0


@dataclass(frozen=True, slots=True)
class Act(Node):
    """Run the batch ``calls`` (of the last assistant message).

    Attributes:
        calls: the calls to run.
        approved: calls a human allowed (they skip the permission gate's ``ask``).
        then: messages that came with the decisions: they join the history after the batch's results.
    """

    cut_point: ClassVar[Literal["reasoning", "acting"] | None] = "acting"
    calls: tuple[ToolUseBlock, ...]
    approved: frozenset[str] = frozenset()
    then: tuple[Msg, ...] = ()

    def describe(self) -> dict[str, JsonValue]:
        """The calls' ids and names (and the ids of those a human approved)."""
        calls: list[JsonValue] = [{"id": c.id, "name": c.name} for c in self.calls]
        view: dict[str, JsonValue] = {"calls": calls}
        if self.approved:
            approved: list[JsonValue] = [*sorted(self.approved)]
            view["approved"] = approved
        return view


@dataclass(frozen=True, slots=True)
class Reprompt(Node):
    """Ask the model once more for an answer after a reply without answer text."""


@dataclass(frozen=True, slots=True)
class CheckOutput(Node):
    """Validate the structured answer in ``message``; ``attempts``: answers refused before this one."""

    message: Msg
    attempts: int = 0

    def describe(self) -> dict[str, JsonValue]:
        """The id of the message checked and the refusals before it."""
        return {"message_id": self.message.id, "attempts": self.attempts}


@dataclass(frozen=True, slots=True)
class Interrupt(Node):
    """The user interrupted: settle the calls in flight and finish with reason ``INTERRUPTED``."""


@dataclass(frozen=True, slots=True)
class Finish(Node):
    """Save the session and emit the run's one :class:`~rxagent.events.AgentResult`.

    Attributes:
        reason: why the run ends.
        message: the final message (``None`` when the run ends waiting for tools, or failed).
        detail: a note on the reason.
        structured: the validated structured output (of the agent's output type).
        structured_error: why there is none although an output type was asked for.
    """

    reason: RunReason
    message: Msg | None = None
    detail: str | None = None
    structured: object = None
    structured_error: str | None = None

    def describe(self) -> dict[str, JsonValue]:
        """The reason and its note (not the message or the structured value)."""
        return {"reason": self.reason, "detail": self.detail}


ReActNode: TypeAlias = Start | Reason | Act | Reprompt | CheckOutput | Interrupt | Finish
"""The nodes of the ReAct assembly (:func:`~rxagent.agent.loop.react_steps`)."""

N = TypeVar("N", bound=Node, default=Never)
"""A node type (a table's: the union of the node types it handles; none by default)."""
To = TypeVar("To", bound=Node, default=Node, covariant=True)
"""The node types a step may go to."""
M = TypeVar("M", bound=Node)


@dataclass(frozen=True, slots=True)
class Next(Generic[To]):
    """The last item of a step: the node the run goes to next (the loop consumes it; nobody else sees it)."""

    node: To


StepOutput: TypeAlias = AgentEvent | Next[To]
"""What a step emits: the run's events, then one :class:`Next` to a node of type ``To``."""

Step: TypeAlias = Callable[[N, "RunState"], Observable[StepOutput[To]]]
"""A step for nodes of type ``N`` going to nodes of type ``To``: ``(node, run) -> events, then Next``. A
step for :class:`Finish` ends without ``Next``."""


class Steps(Generic[N]):
    """An assembly: a step per node type, typed by ``N``, the union of the node types it handles.

    Immutable: :meth:`on` returns a new table whose union includes the registered node type. The
    checker verifies that each step fits its node type and goes only to node types the table already
    handles (or the one being registered), so register the nodes a step goes to before the step that
    goes to them; :meth:`widen` announces a node type first where two new nodes go to each other.
    ``Steps()`` is an empty table (it handles no node type yet); :func:`~rxagent.agent.loop.react_steps`
    is the ReAct assembly to extend.

    Example:
        >>> steps = react_steps().on(Plan, plan_step).on(Reason, reason_step(read_plan))  # doctest: +SKIP
    """

    __slots__ = ("_table",)

    def __init__(self, table: Mapping[type[Node], Step[Node, Node]] | None = None) -> None:
        self._table: dict[type[Node], Step[Node, Node]] = dict(table or {})

    def on(self, kind: type[M], step: Step[M, N | M]) -> Steps[N | M]:
        """These steps with ``step`` for nodes of type ``kind`` (replacing the one it had).

        Raises:
            TypeError: ``kind`` is not a :class:`Node` subclass.
        """
        if not (isinstance(kind, type) and issubclass(kind, Node)):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"steps are registered for Node subclasses, got {kind!r}")
        return Steps({**self._table, kind: cast("Step[Node, Node]", step)})

    def widen(self, kind: type[M]) -> Steps[N | M]:
        """These steps, typed as handling ``kind`` too, before its step is registered (nothing changes at
        run time; the loop fails with ``KeyError`` if a run reaches a node type that has no step)."""
        del kind
        return cast("Steps[N | M]", self)

    def get(self, kind: type[Node]) -> Step[Node, Node] | None:
        """The step for nodes of exactly type ``kind`` (``None``: none)."""
        return self._table.get(kind)

    def __iter__(self) -> Iterator[type[Node]]:
        return iter(self._table)

    def __len__(self) -> int:
        return len(self._table)

    def __repr__(self) -> str:
        return f"Steps({', '.join(sorted(t.__name__ for t in self._table))})"
