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

**Images and documents are kept inline up to a cap.** A user message may hold images and documents
(:class:`~rxagent.messages.ImageBlock`, :class:`~rxagent.messages.DocumentBlock`; in a sequence, text and
media parts next to each other make one user message). Inline bytes are stored in the session's log with
the message (as base64), so the same doors refuse a block whose inline bytes exceed the agent's
``AgentOptions.max_inline_media_bytes`` (:data:`MAX_INLINE_MEDIA_BYTES` by default) with
:class:`InvalidInputError`, before anything is queued or recorded; a block given by URL is stored as its
URL, whatever its size. They refuse as well an image or a document the agent's model does not take (its
``capabilities``, as :func:`~rxagent.model.types.refusal_of` reads them): a session saved with one would
fail every later turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias, cast

from pydantic import JsonValue

from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ToolResultStatus,
    ToolUseBlock,
    UserContent,
)
from rxagent.model.types import ChatModel, refusal_of
from rxagent.session.history import AnswerRecord
from rxagent.state import SessionKey

__all__ = [
    "MAX_INLINE_MEDIA_BYTES",
    "MAX_NESTING",
    "AgentInput",
    "AnswerTakenError",
    "AppliedInput",
    "ExternalResult",
    "InvalidInputError",
    "PendingToolCallsError",
    "RunInput",
    "SessionBusyError",
    "SharedState",
    "ToolDecision",
    "check_input_value",
    "check_message",
    "normalise_input",
]

MAX_NESTING = 100
"""How deep input may nest (lists and objects within each other): deeper is refused with
:class:`InvalidInputError` (an HTTP body with a 400) before it reaches a session's log."""

MAX_INLINE_MEDIA_BYTES = 20 * 1024 * 1024
"""The default cap on one image's or document's inline bytes (``AgentOptions.max_inline_media_bytes``):
20 MiB, OpenAI's limit for an image. Larger media is sent by URL."""


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A human's answer to a call that asked for permission.

    ``allow=True`` runs the *same* call; with ``arguments`` it runs the call with those arguments instead
    (an edit): they are checked against the tool's schema when the decision arrives and pass the
    permission gate again, and the edited call is what runs and what the history records. ``allow=False``
    refuses the call (``reason`` is shown to the model). ``always=True`` (with ``allow=True``) also allows
    the tool's later calls in the session without asking: a permission rule kept in the session (see
    :mod:`rxagent.agent.grants`).
    """

    call_id: str
    allow: bool
    reason: str = ""
    arguments: Mapping[str, JsonValue] | None = None
    always: bool = False


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """The caller's result for an external (suspended) tool call."""

    call_id: str
    output: str
    status: ToolResultStatus = "ok"


@dataclass(frozen=True, slots=True)
class SharedState:
    """The session's shared state as the caller has it: the run starts from it, replacing the session's
    (see :mod:`rxagent.agent.shared_state`). A JSON object; it is applied once the rest of the input
    fits the session, so a refused input leaves the state as it was too."""

    value: Mapping[str, JsonValue]


AgentInput: TypeAlias = (
    UserContent
    | Msg
    | ToolDecision
    | ExternalResult
    | SharedState
    | Sequence[Msg | ToolDecision | ExternalResult | SharedState | UserContent]
    | None
)
"""What a run starts from: user text (or an image or a document), messages, or decisions/results for the
session's pending calls (a sequence may mix answers and messages: the messages join the history after the
answered calls' results), and at most one :class:`SharedState`. In a sequence, text, images and
documents next to each other make one user message:
``["What is in this picture?", ImageBlock.from_path("cat.png")]``."""


@dataclass(frozen=True, slots=True)
class RunInput:
    """A run's input, normalised: the new messages, and the decisions or results for pending calls.

    It is what the ``agent`` cut point receives and what the :class:`~rxagent.agent.nodes.Start` node holds.
    """

    messages: tuple[Msg, ...]
    decisions: tuple[ToolDecision | ExternalResult, ...] = ()
    state: Mapping[str, JsonValue] | None = None
    """The shared state the run starts from (``None``: the session's, as it is)."""


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


def check_message(
    message: Msg,
    where: str = "input",
    max_media_bytes: int = MAX_INLINE_MEDIA_BYTES,
    model: ChatModel | None = None,
) -> None:
    """:func:`check_input_value` for a message: its text, calls, results and metadata; and no image or
    document with more than ``max_media_bytes`` inline, or of a kind ``model`` does not take.

    Raises:
        InvalidInputError: the first bad value found.
    """
    for index, block in enumerate(message.content):
        if not isinstance(block, ImageBlock | DocumentBlock):
            continue
        if (block.size or 0) > max_media_bytes:
            raise InvalidInputError(
                f"{where}.content[{index}]",
                f"the {block.type} holds {_megabytes(block.size or 0)} inline, more than the "
                f"{_megabytes(max_media_bytes)} a session's log keeps inline "
                "(AgentOptions.max_inline_media_bytes): send it by URL (from_url) or raise the cap",
            )
        refusal = refusal_of(block, model) if model is not None else None
        if refusal is not None:
            raise InvalidInputError(f"{where}.content[{index}]", f"{refusal}: use a model that takes them")
    check_input_value(message.model_dump(), where)


def _megabytes(size: int) -> str:
    if size < 1024 * 1024:
        return f"{size:,} bytes"
    return f"{size / (1024 * 1024):.1f} MiB ({size:,} bytes)"


class SessionBusyError(RuntimeError):
    """A run waited longer than ``AgentOptions.session_wait`` for its session, which other runs held."""

    def __init__(self, key: SessionKey, waited: float, ahead: int, holder: str | None = None) -> None:
        user = f"user {key[0]!r}, " if key[0] is not None else ""
        by = f"held by {holder}" if holder else f"{ahead} run(s) still ahead of this one"
        super().__init__(f"session {key[1]!r} ({user}) stayed busy for {waited:g} s ({by}); the run gave up")
        self.key = key
        self.holder = holder


def normalise_input(
    value: AgentInput, max_media_bytes: int = MAX_INLINE_MEDIA_BYTES, model: ChatModel | None = None
) -> RunInput:
    """``value`` as a :class:`RunInput`; text becomes a user message, and so do text, images and
    documents next to each other in a sequence (one message for each such run of parts).

    Args:
        value: the input.
        max_media_bytes: the most inline bytes an image or document may hold (see the module).
        model: the model the input goes to: images or documents it does not take are refused.

    Raises:
        TypeError: anything that is not text, an image, a document, a message, a decision, an external
            result or a shared state (or a sequence of those), or a shared state that is not a JSON
            object.
        InvalidInputError: text a log cannot keep (a lone surrogate), values nested too deep, media over
            the cap, media the model does not take (see the module), or a second shared state.
    """
    if value is None:
        return RunInput(())
    if isinstance(value, SharedState):
        return RunInput((), state=_checked_state(value, "input"))
    if isinstance(value, str):
        _check_text(value, "input")
        return RunInput((Msg.user(value),))
    if isinstance(value, TextBlock | ImageBlock | DocumentBlock):
        value = Msg.user([value])  # then checked as the message it is
    if isinstance(value, Msg):
        check_message(value, "input", max_media_bytes, model)
        return RunInput((value,))
    if isinstance(value, ToolDecision | ExternalResult):
        _check_answer(value, "input")
        return RunInput((), (value,))
    if not isinstance(value, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
        raise TypeError(
            "agent input must be text, images, documents, messages, ToolDecision or ExternalResult "
            f"values, got {value!r}"
        )
    messages: list[Msg] = []
    decisions: list[ToolDecision | ExternalResult] = []
    state: Mapping[str, JsonValue] | None = None
    parts: list[UserContent] = []  # the run of text and media parts not yet made a message
    first_part = 0
    for index, item in enumerate(value):
        if isinstance(item, str | TextBlock | ImageBlock | DocumentBlock):
            if not parts:
                first_part = index
            parts.append(item)
            continue
        if parts:
            messages.append(_parts_message(parts, first_part, max_media_bytes, model))
            parts = []
        if isinstance(item, Msg):
            check_message(item, f"input[{index}]", max_media_bytes, model)
            messages.append(item)
        elif isinstance(item, ToolDecision | ExternalResult):
            _check_answer(item, f"input[{index}]")
            decisions.append(item)
        elif isinstance(item, SharedState):  # pyright: ignore[reportUnnecessaryIsInstance]
            if state is not None:
                raise InvalidInputError(f"input[{index}]", "a second SharedState: give the state once")
            state = _checked_state(item, f"input[{index}]")
        else:
            raise TypeError(
                f"input[{index}] is {type(item).__name__}: agent input must be text, images, documents, "
                "messages, ToolDecision, ExternalResult or SharedState values"
            )
    if parts:
        messages.append(_parts_message(parts, first_part, max_media_bytes, model))
    return RunInput(tuple(messages), tuple(decisions), state)


def _checked_state(state: SharedState, where: str) -> dict[str, JsonValue]:
    """The state's value, copied (the caller's dict may change after submitting), once a log can keep it."""
    value: object = state.value
    if not isinstance(value, Mapping):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
        raise TypeError(f"{where}: a SharedState holds a JSON object, not {type(value).__name__}")
    check_input_value(value, f"{where}.value")
    try:
        copied: dict[str, JsonValue] = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as error:  # a value JSON has no form for (a set, NaN)
        raise TypeError(f"{where}: a SharedState holds JSON values only: {error}") from None
    return copied


def _parts_message(
    parts: list[UserContent], first: int, max_media_bytes: int, model: ChatModel | None
) -> Msg:
    message = Msg.user(parts)
    # Named by where the run of parts began: input[2:4].content[1] is the part at input[3].
    check_message(message, f"input[{first}:{first + len(parts)}]", max_media_bytes, model)
    return message


def _check_answer(answer: ToolDecision | ExternalResult, where: str) -> None:
    if isinstance(answer, ExternalResult):
        check_input_value({"call_id": answer.call_id, "output": answer.output}, where)
    else:
        arguments = answer.arguments
        check_input_value({"call_id": answer.call_id, "reason": answer.reason, "arguments": arguments}, where)
