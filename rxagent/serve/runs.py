"""A run as the session API reports it, read from its session's log (:func:`run_record`).

A run's log facts say when it started and how it ended (``run_started``; ``run_finished`` with its reason,
``run_failed`` with its error, ``run_cancelled``); its recorded ``agent_result`` event holds its result:
the final message, the reason, structured output, the calls it left waiting, and the tokens it used.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias

from rxagent.session import StoredFact, UnreadableFactError

__all__ = ["RunRecordStatus", "RunView", "run_record"]

RunRecordStatus: TypeAlias = Literal["finished", "failed", "cancelled", "unfinished"]
"""How a run stands in its log: ended one of three ways, or started with no end recorded
(``unfinished``: running, here or on another server of the same store, or its server stopped before it
could record its end, which the session's next run then records as ``failed``)."""

_ENDS: dict[str, RunRecordStatus] = {
    "run_finished": "finished",
    "run_failed": "failed",
    "run_cancelled": "cancelled",
}
_HEADER = frozenset({"run_id", "session_id", "trace_id", "seq", "time", "parent_run_id", "type"})
"""Fields of an event that say where it comes from, not what the run gave."""


@dataclass(frozen=True, slots=True)
class RunView:
    """One run as its session's log has it.

    Attributes:
        status: see :data:`RunRecordStatus`.
        started: the sequence number of its ``run_started`` fact.
        ended: that of the fact that ended it (``None``: unfinished).
        reason: the end reason of a finished run (``MODEL_STOP``, ``PERMISSION_ASKING``, …).
        error: why a failed run failed.
        result: its ``agent_result`` event without the fields that say where it comes from: ``message``,
            ``reason``, ``structured``, ``structured_error``, ``usage``, ``iterations``, ``pending``,
            ``detail`` (``None`` when the run recorded none: it failed or was cancelled first).
    """

    status: RunRecordStatus
    started: int
    ended: int | None = None
    reason: str | None = None
    error: str | None = None
    result: dict[str, Any] | None = None


def run_record(facts: Iterable[StoredFact], run_id: str) -> RunView | None:
    """The run ``run_id`` as ``facts`` (a session's log, in order) have it; ``None`` if it never started
    there.

    Raises:
        UnreadableFactError: a fact of the run that cannot be read.
    """
    started: int | None = None
    end: tuple[RunRecordStatus, int, dict[str, Any]] | None = None
    result: dict[str, Any] | None = None
    for fact in facts:
        kind = fact.kind
        if kind == "event":
            if fact.run_id == run_id and '"agent_result"' in fact.payload:
                data = fact_data(fact)
                if data.get("type") == "agent_result" and data.get("run_id") == run_id:
                    result = {k: v for k, v in data.items() if k not in _HEADER}
        elif kind == "run_started" or kind in _ENDS:
            data = fact_data(fact)  # a lost run's end is written by the next run: read the payload's id
            if data.get("run_id") != run_id:
                continue
            if kind == "run_started":
                started = fact.seq
            elif end is None:
                end = (_ENDS[kind], fact.seq, data)
    if started is None:
        return None
    if end is None:
        return RunView("unfinished", started, result=result)
    status, ended, data = end
    reason, error = data.get("reason"), data.get("error")
    return RunView(
        status,
        started,
        ended,
        reason if isinstance(reason, str) else None,
        error if isinstance(error, str) else None,
        result,
    )


def fact_data(fact: StoredFact) -> dict[str, Any]:
    """The JSON object a fact's payload holds; :class:`UnreadableFactError` for anything else."""
    try:
        data = json.loads(fact.payload)
        if not isinstance(data, dict):
            raise ValueError("not an object")
    except ValueError as error:
        raise UnreadableFactError.of(fact, error) from error
    return data  # pyright: ignore[reportUnknownVariableType]
