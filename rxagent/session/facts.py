"""What a session's log holds: facts, each a kind and a JSON payload, numbered by the session's sequence.

A session is an append-only log. Some facts change the conversation (a message, the pending calls, the
session's extras) and :class:`~rxagent.session.projection.Projection` replays them into an
:class:`~rxagent.state.AgentState`; others record what happened around it (a run started or ended, a
tool call dispatched, a decision, a reconciliation) so that a later reader knows it — above all which
side effects may have happened without a recorded outcome.

===================  =================================================  ======================================
kind                 payload                                            projection
===================  =================================================  ======================================
``turn_started``     ``turn_id``                                        opens a turn (a request, across runs)
``turn_finished``    ``turn_id``, ``reason``                            closes it
``run_started``      ``run_id``, ``turn_id``, ``agent``, ``input``      the run that writes the next facts
``run_finished``     ``run_id``, ``reason``                             ends it
``run_cancelled``    ``run_id``                                         ends it (what it did stays recorded)
``run_failed``       ``run_id``, ``error``                              ends it
``message``          ``message`` (a ``Msg``)                            appended to the history
``message_replaced`` ``message``                                        replaces the message with its id
``pending``          ``pending`` (``PendingCall`` list)                 the calls waiting for answers
``partial_results``  ``results`` (``ToolResultBlock`` list)             results waiting for their batch
``extras``           ``extras``                                         the session's extras, whole
``active_groups``    ``groups``                                         the active tool groups
``tool_dispatched``  ``call`` (a ``ToolUseBlock``)                      uncertain until a result is known
``tool_result``      ``result`` (a ``ToolResultBlock``)                 the call's outcome is known
``decision``         ``call_id``, ``allow``, ``reason``, ``arguments``  (a record of who decided what)
``reconciled``       ``call_id``, ``outcome``, ``output``               an uncertain call's outcome, settled
``steer``            ``message``                                        (a message delivered mid-run)
``event``            an :class:`~rxagent.events.AgentEvent` as JSON     (what a run emitted, when recorded)
===================  =================================================  ======================================

A **checkpoint** is the projection at a sequence number, whole (:class:`Checkpoint`). Stores keep them
beside the log rather than in it: a checkpoint of sequence ``n`` stays true whatever is appended after
``n``, so it can be written in the background, after the writer has let the session go, and loading a
session reads its last checkpoint and only the facts after it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from pydantic import JsonValue

__all__ = ["PROJECTING", "Checkpoint", "Fact", "FactKind", "StoredFact"]

FactKind: TypeAlias = Literal[
    "turn_started",
    "turn_finished",
    "run_started",
    "run_finished",
    "run_cancelled",
    "run_failed",
    "message",
    "message_replaced",
    "pending",
    "partial_results",
    "extras",
    "active_groups",
    "tool_dispatched",
    "tool_result",
    "decision",
    "reconciled",
    "steer",
    "event",
]
"""The kinds of facts (see the module's table)."""

PROJECTING: frozenset[FactKind] = frozenset(
    {
        "message",
        "message_replaced",
        "pending",
        "partial_results",
        "extras",
        "active_groups",
        "tool_dispatched",
        "tool_result",
        "reconciled",
        "turn_started",
        "turn_finished",
        "run_started",
        "run_finished",
        "run_cancelled",
        "run_failed",
    }
)
"""The kinds a projection reads (the others are records only)."""


@dataclass(frozen=True, slots=True)
class Fact:
    """A fact to append: its kind, its payload as JSON text, the run that wrote it.

    The payload is encoded once, by whoever creates the fact, so stores write it as it is.
    """

    kind: FactKind
    payload: str
    run_id: str | None = None
    at: float = field(default_factory=time.time)


@dataclass(frozen=True, slots=True)
class StoredFact:
    """A fact as a store returns it: numbered by the session's sequence (1, 2, 3, …)."""

    seq: int
    kind: FactKind
    payload: str
    run_id: str | None
    at: float

    def data(self) -> JsonValue:
        """The payload, decoded."""
        import json

        value: JsonValue = json.loads(self.payload)
        return value


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A session's projection at sequence ``seq``, as JSON text (see the module)."""

    seq: int
    payload: str
