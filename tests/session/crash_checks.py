"""What a SIGKILL must leave, checked from the session's log and from the side effects' ledger (a file
outside the store): the crash torture tests of the library (test_crash.py) and of the server
(tests/serve/test_crash_serve.py) share these checks, and how they pick the moment of a kill
(:func:`kill_at_random`).

After a kill (:func:`check_killed`):

- the log is numbered 1..head with no gap;
- each call's side effect happened at most once, and one that happened has its recorded result or is
  reported uncertain (a recorded result always means it happened);

after the session was taken over and the round finished (:func:`check_recovered`):

- each call of the round's batch happened exactly once, and the history holds its result once, in the
  batch's order;
- every run the log started has its end recorded, and a killed run ended ``run_failed`` with why;
- nothing is uncertain, no run is open.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rxagent.messages import ToolUseBlock
from rxagent.session import Projection, Reconcile, SessionStore, StoredFact
from rxagent.session.recorder import LOST_RUN
from rxagent.state import SessionKey

from .child_process import ChildProcess
from .crash_process import ledger_counts

__all__ = ["Kills", "Landed", "check_killed", "check_recovered", "kill_at_random", "outcomes_from_ledger"]

_ENDS = ("run_finished", "run_failed", "run_cancelled")

Where = Literal["before the batch", "inside the batch", "after the batch"]


@dataclass(frozen=True)
class Landed:
    """Where a kill landed, as the log tells, and what it left uncertain."""

    where: Where
    uncertain: list[str]
    open_runs: list[str]
    """Runs the log started and did not end: the killed one, if it had started."""


@dataclass
class Kills:
    """Counts over a torture test: kills by where they landed, calls left uncertain, by how they ended."""

    where: Counter[str]
    outcomes: Counter[str]

    @classmethod
    def new(cls) -> Kills:
        return cls(Counter(), Counter())

    def add(self, landed: Landed) -> None:
        self.where[landed.where] += 1
        self.outcomes["uncertain"] += len(landed.uncertain)

    @property
    def total(self) -> int:
        return sum(self.where.values())

    def __str__(self) -> str:
        places = ", ".join(f"{n} {w}" for w, n in sorted(self.where.items()))
        outcomes = ", ".join(f"{n} {w}" for w, n in sorted(self.outcomes.items()))
        return f"{self.total} kills ({places}); calls: {outcomes}"


def _numbered(facts: Sequence[StoredFact]) -> None:
    assert [f.seq for f in facts] == list(range(1, len(facts) + 1)), "the log has a gap or a repeat"


def _answered(projection: Projection) -> dict[str, list[str]]:
    """Each call's results as the projection holds them: in the history, and waiting for their batch."""
    state = projection.state
    results: dict[str, list[str]] = {}
    for block in [r for m in state.messages for r in m.tool_results] + list(state.partial_results):
        results.setdefault(block.tool_use_id, []).append(block.text)
    return results


def _open_runs(facts: Sequence[StoredFact]) -> list[str]:
    started = [str(json.loads(f.payload)["run_id"]) for f in facts if f.kind == "run_started"]
    ended = {str(json.loads(f.payload)["run_id"]) for f in facts if f.kind in _ENDS}
    return [r for r in started if r not in ended]


async def check_killed(store: SessionStore, key: SessionKey, ledger: Path, ids: Sequence[str]) -> Landed:
    """Check what a kill during the round of calls ``ids`` left (see the module); where it landed."""
    facts = await store.read(key)
    _numbered(facts)
    projection = Projection.replay(None, facts)
    counts = ledger_counts(ledger)
    answered = _answered(projection)
    for call_id in ids:
        assert counts[call_id] <= 1, f"{call_id} did its side effect {counts[call_id]} times"
        if counts[call_id]:
            assert call_id in answered or call_id in projection.uncertain, (
                f"{call_id} did its side effect, and the log neither has its result nor calls it uncertain"
            )
        if call_id in answered:
            assert answered[call_id] == [f"did {call_id}"], answered[call_id]
            assert counts[call_id] == 1, f"{call_id} has a result recorded and never ran"
    asked = {c.id for m in projection.state.messages for c in m.tool_calls}
    sent_on = {r.tool_use_id for m in projection.state.messages for r in m.tool_results}
    where: Where = (
        "before the batch"
        if not asked.intersection(ids)
        else "after the batch"
        if sent_on.issuperset(ids)
        else "inside the batch"
    )
    uncertain = sorted(i for i in projection.uncertain if i in ids)
    return Landed(where, uncertain, _open_runs(facts))


def outcomes_from_ledger(calls: Sequence[ToolUseBlock], ledger: Path) -> list[Reconcile]:
    """What an operator finds: a call whose side effect is in the ledger succeeded (with the result its
    tool gives), one whose is not is to run again."""
    counts = ledger_counts(ledger)
    return [
        Reconcile(c.id, "succeeded", f"did {c.id}") if counts[c.id] else Reconcile(c.id, "retry")
        for c in calls
    ]


async def check_recovered(
    store: SessionStore, key: SessionKey, ledger: Path, ids: Sequence[str], killed: Sequence[str]
) -> None:
    """Check the session once the round of calls ``ids`` finished after the kill (see the module);
    ``killed``: the runs the kill left open."""
    facts = await store.read(key)
    _numbered(facts)
    counts = ledger_counts(ledger)
    assert {i: counts[i] for i in ids} == dict.fromkeys(ids, 1), "a call did not happen exactly once"
    projection = Projection.replay(None, facts)
    assert (dict(projection.uncertain), projection.open_run) == ({}, None)
    answered = _answered(projection)
    assert {i: answered.get(i) for i in ids} == {i: [f"did {i}"] for i in ids}
    (batch,) = [m for m in projection.state.messages if any(r.tool_use_id in ids for r in m.tool_results)]
    assert [r.tool_use_id for r in batch.tool_results] == list(ids)  # one message, in the calls' order
    assert _open_runs(facts) == []
    for run_id in killed:
        (end,) = [f for f in facts if f.kind in _ENDS and json.loads(f.payload)["run_id"] == run_id]
        assert (end.kind, json.loads(end.payload)["error"]) == ("run_failed", LOST_RUN)


async def kill_at_random(child: ChildProcess, rng: random.Random, ids: Sequence[str]) -> None:
    """SIGKILL ``child`` at a random moment of the round of calls ``ids``: one time in four anywhere from
    its start (its model call, its first writes), else from its first call's start on (its calls, each a
    few ms to 60 ms, their writes, the batch's end, the last model call, or after the run)."""
    if rng.random() < 0.25:
        await asyncio.sleep(rng.uniform(0.0, 0.05))
    else:
        while (await child.answer()).get("started") not in ids:  # lines of earlier rounds' calls
            pass
        await asyncio.sleep(rng.uniform(0.0, 0.04 * len(ids) + 0.03))
    await child.kill()
