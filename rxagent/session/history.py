"""A session's log read as people think of it: turns, and the runs within each.

A *turn* is one request and everything it took to answer it: it starts with new input and may pause (a call
waiting for approval, an external tool) and resume in a later run. A *run* is one execution, with its own
id. :func:`turns_of` folds a session's facts into :class:`TurnRecord` values; :func:`answers_of` finds the
answers the log records for calls that waited for one (:class:`AnswerRecord`).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from rxagent.messages import Msg
from rxagent.session.facts import StoredFact, UnreadableFactError

__all__ = ["AnswerKind", "AnswerRecord", "RunRecord", "TurnRecord", "answers_of", "turns_of"]

AnswerKind: TypeAlias = Literal["approval", "denial", "external_result"]
"""What answered a waiting call: a human's approval or denial, or an external tool's result."""


@dataclass(slots=True)
class RunRecord:
    """One run of a turn.

    Attributes:
        run_id: the run's id (as in its events).
        started: the sequence number of its ``run_started`` fact.
        ended: that of the fact that ended it (``None``: running, or its process stopped).
        outcome: ``finished``, ``cancelled``, ``failed``, or ``None`` while no end is recorded.
        reason: the end reason of a finished run (``MODEL_STOP``, ``PERMISSION_ASKING``, …).
        error: why a failed run failed.
    """

    run_id: str
    started: int
    ended: int | None = None
    outcome: Literal["finished", "cancelled", "failed"] | None = None
    reason: str | None = None
    error: str | None = None


@dataclass(slots=True)
class TurnRecord:
    """One turn: its input, its runs, and how it ended.

    Attributes:
        turn_id: the turn's id.
        started: the sequence number of its ``turn_started`` fact.
        input: the texts of the messages that opened it.
        runs: its runs, in order.
        finished: the sequence number of its ``turn_finished`` fact (``None``: still open).
        reason: how it ended (a run's end reason, or ``SUPERSEDED`` when new input opened another turn).
    """

    turn_id: str
    started: int
    input: list[str] = field(default_factory=lambda: [])
    runs: list[RunRecord] = field(default_factory=lambda: [])
    finished: int | None = None
    reason: str | None = None


_KINDS = frozenset(
    {"turn_started", "turn_finished", "run_started", "run_finished", "run_cancelled", "run_failed"}
)
_OUTCOMES: dict[str, Literal["finished", "cancelled", "failed"]] = {
    "run_finished": "finished",
    "run_cancelled": "cancelled",
    "run_failed": "failed",
}


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """The answer a call that waited got (a call takes one answer: the first sent).

    Attributes:
        call_id: the call.
        kind: see :data:`AnswerKind`.
        run_id: the run that took it (``None``: not known).
        seq: the sequence number of its ``decision`` fact (``None``: taken by a run that has not recorded
            it yet).
    """

    call_id: str
    kind: AnswerKind
    run_id: str | None = None
    seq: int | None = None


def answers_of(
    facts: Iterable[StoredFact], call_ids: Collection[str] | None = None
) -> dict[str, AnswerRecord]:
    """The answers the log records (its ``decision`` facts), by call id, the last for each (a model may use
    an id again in a later turn); only for ``call_ids`` when given.

    Raises:
        UnreadableFactError: a ``decision`` fact that cannot be read.
    """
    found: dict[str, AnswerRecord] = {}
    for fact in facts:
        if fact.kind != "decision":
            continue
        try:
            data: dict[str, Any] = json.loads(fact.payload)
            call_id = str(data["call_id"])
            kind = data["kind"]
            if kind not in ("approval", "denial", "external_result"):
                raise ValueError(f"unknown answer kind {kind!r}")
        except (ValueError, KeyError, TypeError) as error:
            raise UnreadableFactError.of(fact, error) from error
        if call_ids is None or call_id in call_ids:  # the last one: a model may reuse a call id later
            found[call_id] = AnswerRecord(call_id, kind, fact.run_id, fact.seq)
    return found


def turns_of(facts: Iterable[StoredFact]) -> list[TurnRecord]:
    """The turns of a session, from its facts in sequence order (from the start of its log).

    Raises:
        UnreadableFactError: a turn or run fact that cannot be read.
    """
    turns: list[TurnRecord] = []
    by_turn: dict[str, TurnRecord] = {}
    runs: dict[str, RunRecord] = {}
    for fact in facts:
        if fact.kind not in _KINDS:
            continue
        try:
            _fold(fact, turns, by_turn, runs)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise UnreadableFactError.of(fact, error) from error
    return turns


def _fold(
    fact: StoredFact, turns: list[TurnRecord], by_turn: dict[str, TurnRecord], runs: dict[str, RunRecord]
) -> None:
    """Apply one turn or run fact to the turns read so far."""
    kind = fact.kind
    data: dict[str, Any] = json.loads(fact.payload)
    if kind == "turn_started":
        turn = TurnRecord(str(data["turn_id"]), fact.seq)
        turns.append(turn)
        by_turn[turn.turn_id] = turn
    elif kind == "turn_finished":
        ended = by_turn.get(str(data["turn_id"]))
        if ended is not None:
            ended.finished, ended.reason = fact.seq, str(data.get("reason"))
    elif kind == "run_started":
        run = RunRecord(str(data["run_id"]), fact.seq)
        runs[run.run_id] = run
        owner = by_turn.get(str(data.get("turn_id")))
        if owner is not None:
            owner.runs.append(run)
            if not owner.input:
                owner.input = [_text(m) for m in data.get("input") or ()]
    else:
        run = runs.get(str(data["run_id"]))
        if run is not None and run.outcome is None:
            run.ended = fact.seq
            run.outcome = _OUTCOMES[kind]
            run.reason = data.get("reason")
            run.error = data.get("error")


def _text(message: Any) -> str:
    """The text of a message as a fact stores it (its text blocks, joined)."""
    try:
        return Msg.model_validate(message).text
    except ValueError:
        return ""
