"""What a run starts from: user text and messages, or answers for the tool calls a session waits on.

:data:`AgentInput` is what ``ReActAgent.call`` and ``stream_events`` accept; :func:`normalise_input` turns it
into the :class:`RunInput` the ``agent`` cut point and the start step see. Input that cannot fit the
session is refused with :class:`PendingToolCallsError` before anything changes; an answer for a call that
another answer already took, with :class:`AnswerTakenError` (only the first answer to a call counts).

**Text the log cannot keep is refused, not repaired.** A session's log is UTF-8 JSON, and text with a lone
surrogate (``"\\udc80"``: half of a UTF-16 pair, which UTF-8 cannot encode, as text decoded with
``errors="surrogateescape"`` holds) would make every later read of the session fail. So
:func:`normalise_input` (every ``call``, ``stream_events`` and session handle door), ``steer``, ``inject``
and ``add_messages`` refuse such input with :class:`InvalidInputError`, naming where it is, as they refuse
values nested deeper than :data:`MAX_NESTING`; nothing is queued or recorded then. The text is not
replaced: a silent ``U+FFFD`` would change what the caller meant without telling them. (The HTTP doors of
``rxagent serve`` refuse the same input with a 400.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from pydantic import JsonValue

from rxagent.messages import Msg, ToolResultStatus, ToolUseBlock
from rxagent.session.history import AnswerRecord
from rxagent.state import SessionKey

__all__ = [
    "MAX_NESTING",
    "AgentInput",
    "AnswerTakenError",
    "AppliedInput",
    "ExternalResult",
    "InvalidInputError",
    "PendingToolCallsError",
    "RunInput",
    "SessionBusyError",
    "ToolDecision",
    "check_input_value",
    "check_message",
    "normalise_input",
]

MAX_NESTING = 100
"""How deep input may nest (lists and objects within each other): deeper is refused with
:class:`InvalidInputError` (an HTTP body with a 400) before it reaches a session's log."""


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A human's answer to a call that asked for permission.

    ``allow=True`` runs the *same* call; with ``arguments`` it runs the call with those arguments instead
    (an edit): they are checked against the tool's schema when the decision arrives and pass the
    permission gate again, and the edited call is what runs and what the history records. ``allow=False``
    refuses the call (``reason`` is shown to the model).
    """

    call_id: str
    allow: bool
    reason: str = ""
    arguments: Mapping[str, JsonValue] | None = None


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """The caller's result for an external (suspended) tool call."""

    call_id: str
    output: str
    status: ToolResultStatus = "ok"


AgentInput: TypeAlias = (
    str | Msg | ToolDecision | ExternalResult | Sequence[Msg | ToolDecision | ExternalResult] | None
)
"""What a run starts from: user text, messages, or decisions/results for the session's pending calls (a
sequence may mix answers and messages: the messages join the history after the answered calls' results)."""


@dataclass(frozen=True, slots=True)
class RunInput:
    """A run's input, normalised: the new messages, and the decisions or results for pending calls.

    It is what the ``agent`` cut point receives and what the :class:`~rxagent.agent.nodes.Start` node holds.
    """

    messages: tuple[Msg, ...]
    decisions: tuple[ToolDecision | ExternalResult, ...] = ()


@dataclass(frozen=True, slots=True)
class AppliedInput:
    """A run's input once the start step applied it to the session: what its route decides on.

    Attributes:
        approved: the calls to run now (a human approved them, or their outcome was lost and running
            them again is safe), in order.
        follow: new messages that came with answers: they join the history after the results of the
            batch they answer.
    """

    approved: tuple[ToolUseBlock, ...] = ()
    follow: tuple[Msg, ...] = ()


class PendingToolCallsError(RuntimeError):
    """The input does not fit the session's pending tool calls, and nothing was changed.

    Raised when new text arrives while calls wait for decisions or results (and recovery is off), and
    when decisions or results are refused: an unknown call id, two answers for one call, the wrong kind
    of answer for a call, or edited arguments the tool's schema rejects.
    """


class AnswerTakenError(PendingToolCallsError):
    """An answer for a call that another answer already took; nothing was changed, and no run started.

    Only the first answer to a pending call counts: checking it and recording it are one step under the
    session's lease (the run that carries the answer checks it as it takes the session, before it starts,
    and records it before it lets the session go), and a session handle refuses a second answer at once
    while the run carrying the first is queued or going.

    Attributes:
        taken: the answer taken: its call, its kind (``approval``, ``denial``, ``external_result``) and the
            run that took it.
    """

    def __init__(self, taken: AnswerRecord) -> None:
        what = {"approval": "approved", "denial": "denied", "external_result": "given its external result"}
        by = f" by run {taken.run_id}" if taken.run_id else ""
        super().__init__(
            f"tool call {taken.call_id!r} was answered already: {what[taken.kind]}{by}; only the first "
            "answer to a call is taken"
        )
        self.taken = taken

    @property
    def call_id(self) -> str:
        """The call that was answered already."""
        return self.taken.call_id


class InvalidInputError(ValueError):
    """Input a session's log could not keep, refused before anything changed (see the module): text that
    is not valid Unicode (a lone surrogate), or values nested deeper than :data:`MAX_NESTING`.

    Attributes:
        where: where in the input the bad value is (``input``, ``input[1].arguments.items[0]``).
        problem: what is wrong with it.
    """

    def __init__(self, where: str, problem: str) -> None:
        shown = where if len(where) <= 120 else f"{where[:60]}…{where[-50:]}"  # a deep path stays readable
        super().__init__(f"{shown}: {problem}")
        self.where = where
        self.problem = problem


def check_input_value(value: object, where: str = "input") -> None:
    """Refuse ``value`` (text, or JSON-like lists and mappings of it) if a log could not keep it: a string
    (or a mapping's key) that UTF-8 cannot encode, or nesting deeper than :data:`MAX_NESTING`. Other
    values (numbers, booleans, ``None``) pass. Walks without recursion, so any depth is refused cleanly.

    Raises:
        InvalidInputError: the first bad value found, with its path under ``where``.
    """
    stack: list[tuple[object, str, int]] = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item, path)
        elif isinstance(item, Mapping | list | tuple):
            if depth >= MAX_NESTING:
                raise InvalidInputError(path, f"nested deeper than {MAX_NESTING} levels")
            if isinstance(item, Mapping):
                mapping = cast("Mapping[object, object]", item)
                for key, inner in mapping.items():
                    name = str(key)
                    _check_text(name, f"{path} (the key {name[:40]!r})")
                    stack.append((inner, f"{path}.{name}", depth + 1))
            else:
                items = cast("list[object] | tuple[object, ...]", item)
                stack.extend((inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(items))


def _check_text(text: str, where: str) -> None:
    if text.isascii():  # the usual case, and O(1)
        return
    try:
        text.encode()
    except UnicodeEncodeError as error:
        bad = text[error.start]
        raise InvalidInputError(
            where,
            f"the text holds {bad!r}, a lone surrogate, which is not valid Unicode (UTF-8 cannot encode "
            "it): send valid text",
        ) from None


def check_message(message: Msg, where: str = "input") -> None:
    """:func:`check_input_value` for a message: its text, calls, results and metadata.

    Raises:
        InvalidInputError: the first bad value found.
    """
    check_input_value(message.model_dump(), where)


class SessionBusyError(RuntimeError):
    """A run waited longer than ``AgentOptions.session_wait`` for its session, which other runs held."""

    def __init__(self, key: SessionKey, waited: float, ahead: int, holder: str | None = None) -> None:
        user = f"user {key[0]!r}, " if key[0] is not None else ""
        by = f"held by {holder}" if holder else f"{ahead} run(s) still ahead of this one"
        super().__init__(f"session {key[1]!r} ({user}) stayed busy for {waited:g} s ({by}); the run gave up")
        self.key = key
        self.holder = holder


def normalise_input(value: AgentInput) -> RunInput:
    """``value`` as a :class:`RunInput`; text becomes a user message.

    Raises:
        TypeError: anything that is not text, a message, a decision or an external result (or a
            sequence of those).
        InvalidInputError: text a log cannot keep (a lone surrogate), or values nested too deep (see the
            module).
    """
    if value is None:
        return RunInput(())
    if isinstance(value, str):
        _check_text(value, "input")
        return RunInput((Msg.user(value),))
    if isinstance(value, Msg):
        check_message(value)
        return RunInput((value,))
    if isinstance(value, ToolDecision | ExternalResult):
        _check_answer(value, "input")
        return RunInput((), (value,))
    if not isinstance(value, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
        raise TypeError(
            f"agent input must be text, messages, ToolDecision or ExternalResult values, got {value!r}"
        )
    items = list(value)
    messages = tuple(item for item in items if isinstance(item, Msg))
    decisions = tuple(item for item in items if isinstance(item, ToolDecision | ExternalResult))
    if len(messages) + len(decisions) != len(items):
        raise TypeError("agent input must be text, messages, ToolDecision or ExternalResult values")
    for index, item in enumerate(items):
        if isinstance(item, Msg):
            check_message(item, f"input[{index}]")
        else:
            _check_answer(item, f"input[{index}]")
    return RunInput(messages, decisions)


def _check_answer(answer: ToolDecision | ExternalResult, where: str) -> None:
    if isinstance(answer, ExternalResult):
        check_input_value({"call_id": answer.call_id, "output": answer.output}, where)
    else:
        arguments = answer.arguments
        check_input_value({"call_id": answer.call_id, "reason": answer.reason, "arguments": arguments}, where)
