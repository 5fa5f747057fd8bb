"""What a run starts from: user text and messages, or answers for the tool calls a session waits on.

:data:`AgentInput` is what ``ReActAgent.call`` and ``stream_events`` accept; :func:`normalise_input` turns it
into the :class:`RunInput` the ``agent`` cut point and the start step see. Input that cannot fit the
session is refused with :class:`PendingToolCallsError` before anything changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeAlias

from pydantic import JsonValue

from rxagent.messages import Msg, ToolResultStatus
from rxagent.state import SessionKey

__all__ = [
    "AgentInput",
    "ExternalResult",
    "PendingToolCallsError",
    "RunInput",
    "SessionBusyError",
    "ToolDecision",
    "normalise_input",
]


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

    It is what the ``agent`` cut point receives and what the :class:`~rxagent.agent.steps.Start` node holds.
    """

    messages: tuple[Msg, ...]
    decisions: tuple[ToolDecision | ExternalResult, ...] = ()


class PendingToolCallsError(RuntimeError):
    """The input does not fit the session's pending tool calls, and nothing was changed.

    Raised when new text arrives while calls wait for decisions or results (and recovery is off), and
    when decisions or results are refused: an unknown call id, two answers for one call, the wrong kind
    of answer for a call, or edited arguments the tool's schema rejects.
    """


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
    """
    if value is None:
        return RunInput(())
    if isinstance(value, str):
        return RunInput((Msg.user(value),))
    if isinstance(value, Msg):
        return RunInput((value,))
    if isinstance(value, ToolDecision | ExternalResult):
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
    return RunInput(messages, decisions)
