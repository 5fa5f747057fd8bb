"""A session's log read as people think of it: turns, and the runs within each.

A *turn* is one request and everything it took to answer it: it starts with new input and may pause (a call
waiting for approval, an external tool) and resume in a later run. A *run* is one execution, with its own
id. :func:`turns_of` folds a session's facts into :class:`TurnRecord` values.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from rxagent.messages import Msg
from rxagent.session.facts import StoredFact

__all__ = ["RunRecord", "TurnRecord", "turns_of"]


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


def turns_of(facts: Iterable[StoredFact]) -> list[TurnRecord]:
    """The turns of a session, from its facts in sequence order (from the start of its log)."""
    turns: list[TurnRecord] = []
    by_turn: dict[str, TurnRecord] = {}
    runs: dict[str, RunRecord] = {}
    for fact in facts:
        kind = fact.kind
        if kind not in _KINDS:
            continue
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
    return turns


def _text(message: Any) -> str:
    """The text of a message as a fact stores it (its text blocks, joined)."""
    try:
        return Msg.model_validate(message).text
    except ValueError:
        return ""
