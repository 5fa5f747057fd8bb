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
``task_started``     ``task_id``, ``attempt``, ``agent``,               (a background task accepted: see
                     ``instructions``, ``session_id``, ``call_id``      :mod:`rxagent.harness.tasks`)
``task_resumed``     ``task_id``, ``attempt``                           (it runs again, on its session)
``task_finished``    ``task_id``, ``attempt``, ``run_id``, ``answer``,  (it answered)
                     ``usage``
``task_failed``      ``task_id``, ``attempt``, ``run_id``, ``error``,   (it failed)
                     ``usage``
``task_cancelled``   ``task_id``, ``attempt``, ``run_id``, ``why``      (it was cancelled)
``task_collected``   ``task_id``, ``attempt``, ``run_id``               (a run counted its usage)
===================  =================================================  ======================================

A ``decision`` may also say ``"always": true`` (the approval added a permission rule to the session) or
``"by": "rule"`` (a rule of the session answered the call): see :mod:`rxagent.agent.grants`.

A **checkpoint** is the projection at a sequence number, whole (:class:`Checkpoint`). Stores keep them
beside the log rather than in it: a checkpoint of sequence ``n`` stays true whatever is appended after
``n``, so it can be written in the background, after the writer has let the session go, and loading a
session reads its last checkpoint and only the facts after it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, TypeVar

from pydantic import JsonValue

__all__ = ["PROJECTING", "Checkpoint", "Fact", "FactKind", "StoredFact", "UnreadableFactError"]

_S = TypeVar("_S")

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
    "task_started",
    "task_resumed",
    "task_finished",
    "task_failed",
    "task_cancelled",
    "task_collected",
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


class Fact:
    """A fact to append: its kind, its payload as JSON text, the run that wrote it.

    The payload may be left to encode later: ``Fact.later(kind, encode, source)`` keeps ``source`` and
    calls ``encode(source)`` once, the first time anyone needs the text (a store that writes it, a
    watcher that sends it), and never when nobody does (an in-memory log nobody reads back). ``source``
    must not change meanwhile (messages and blocks are frozen; a run's events are not touched once
    emitted). A shared encoder and its source, rather than a closure per fact, keep a long in-memory log
    at one object a fact (the garbage collector walks every one of them).
    """

    __slots__ = ("_encode", "_payload", "_source", "at", "kind", "run_id")

    def __init__(
        self, kind: FactKind, payload: str, run_id: str | None = None, at: float | None = None
    ) -> None:
        if not isinstance(payload, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TypeError(f"a fact's payload is JSON text (or see Fact.later), not {payload!r}")
        self.kind: FactKind = kind
        self.run_id = run_id
        self.at = time.time() if at is None else at
        self._payload: str | None = payload
        self._encode: Callable[[Any], str] | None = None
        self._source: object = None

    @classmethod
    def later(
        cls, kind: FactKind, encode: Callable[[_S], str], source: _S, run_id: str | None = None
    ) -> Fact:
        """A fact whose payload is ``encode(source)``, encoded the first time it is needed (see above)."""
        made = cls.__new__(cls)
        made.kind = kind
        made.run_id = run_id
        made.at = time.time()
        made._payload, made._encode, made._source = None, encode, source
        return made

    @property
    def payload(self) -> str:
        """The payload as JSON text (encoded now if it was not yet)."""
        if self._payload is None:
            assert self._encode is not None
            self._payload = self._encode(self._source)
            self._encode = self._source = None
        return self._payload

    def deferred(self) -> tuple[Callable[[Any], str], object] | None:
        """``(encode, source)`` while the payload is not encoded yet (``None`` once it is, or if it was
        given as text): what a store that keeps facts in memory may keep instead of the fact, to encode
        when it is read."""
        return None if self._encode is None else (self._encode, self._source)

    def __repr__(self) -> str:
        return f"Fact({self.kind!r}, run_id={self.run_id!r})"


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


class UnreadableFactError(ValueError):
    """A fact of a session's log cannot be read: its payload is not the JSON its kind needs (the log was
    damaged, or written by something that does not keep this format). Reading the session stops at it and
    says which fact it is; the facts before it are intact (``fork`` the session up to ``seq - 1`` to go on
    from there).

    Attributes:
        seq: the fact's sequence number.
        kind: its kind.
        reason: what could not be read.
    """

    def __init__(self, seq: int, kind: str, reason: str) -> None:
        super().__init__(f"fact {seq} ({kind}) of the session's log cannot be read: {reason}")
        self.seq = seq
        self.kind = kind
        self.reason = reason

    @classmethod
    def of(cls, fact: StoredFact, error: Exception) -> UnreadableFactError:
        """The error for ``fact``, whose payload failed to decode with ``error``."""
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        return cls(fact.seq, fact.kind, reason[:300])


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """A session's projection at sequence ``seq``, as JSON text (see the module)."""

    seq: int
    payload: str
