"""Crashes: a process running an agent on a session is SIGKILLed while side-effecting tools run.

Each kill comes at a random moment of the tool's run (a seeded RNG picks whether the side effect was done
yet, and a delay): before the tool wrote its line, or after it wrote it and before its result was
recorded. After each kill the test process loads the session and checks what the log promises:

- every fact the child saw committed (it printed the log from inside the tool) is still there, unchanged;
- the dispatched call is *uncertain*: ``agent.sessions.uncertain`` lists it and a run refuses with
  :class:`UncertainToolCallsError` naming it;
- reconciled from the ledger file (``succeeded`` when its line is there, ``retry`` when not), the session
  completes (``MODEL_STOP``), and the ledger holds exactly one line per intended call: the side effect
  never happens twice;
- a call of an idempotent tool is run again by the next run without asking.

The next session's child starts (and imports) while the test checks the last one, so 20 kills stay
within about a minute.

**The torture test** (:func:`test_random_kills_of_batches_never_do_a_side_effect_twice`): on SQLite and on
PostgreSQL, rounds of batches of two and three side-effecting calls, run one by one and ``concurrency_safe``
together, each round's process SIGKILLed at a random moment (seeded: ``RXAGENT_CRASH_SEED`` picks another
seed; the seed and the counts are printed). Each call appends its id to a ledger file (fsync) outside the
store. After each kill (tests/session/crash_checks.py): every call's side effect happened 0 or 1 times,
and one that happened has its recorded result or is reported uncertain. Then this process takes the
session over (reconciling uncertain calls from the ledger), and the round ends with every call done
exactly once and the killed run recorded as failed.

Bad inputs tried: reconciling a call id that is not uncertain, reconciling a call twice in one request,
and reconciling once nothing is uncertain (each a :class:`ReconcileError`, nothing recorded).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.model.scripted import ScriptedModel
from rxagent.session import (
    Reconcile,
    ReconcileError,
    SessionStore,
    SQLiteStore,
    UncertainToolCallsError,
    open_store,
)
from rxagent.session.recorder import LOST_RUN

from .child_process import ChildProcess
from .crash_checks import Kills, check_killed, check_recovered, kill_at_random, outcomes_from_ledger
from .crash_process import batch_model, call_ids, effect_toolkit, ledger_toolkit, round_text

SCRIPT = Path(__file__).with_name("crash_process.py")
USER, SESSION = "ada", "orders"
CTX = RuntimeContext(user_id=USER, session_id=SESSION)
KEY = (USER, SESSION)
LEASE_TTL = 30.0
"""The child's lease. A killed child's lease is taken over at once, whatever its TTL: the next run on this
host finds its process gone (rxagent.session.owner). A long one keeps a live child's lease from expiring
while the machine is busy (the next child imports meanwhile)."""


@dataclass(frozen=True)
class Files:
    db: Path
    ledger: Path
    statuses: Path

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []


@pytest.fixture
def files(tmp_path: Path) -> Files:
    statuses = tmp_path / "statuses"
    statuses.mkdir()
    return Files(tmp_path / "sessions.db", tmp_path / "ledger.txt", statuses)


async def start_child(files: Files, tool: str, arguments: dict[str, str], call_id: str) -> ChildProcess:
    config = {
        "db": str(files.db),
        "user": USER,
        "session": SESSION,
        "ledger": str(files.ledger),
        "statuses": str(files.statuses),
        "tool": tool,
        "arguments": arguments,
        "call_id": call_id,
        "lease_ttl": LEASE_TTL,
    }
    return await ChildProcess.ready(SCRIPT, json.dumps(config))


@dataclass(frozen=True)
class Crash:
    """What the child saw before it was killed."""

    committed: list[tuple[int, str, str]]
    written: bool


async def kill_in_tool(child: ChildProcess, text: str, rng: random.Random) -> Crash:
    """Run the child's agent on ``text``; SIGKILL it at a random moment while its tool runs."""
    child.send(input=text)
    started = await child.answer()
    assert started["started"] is True
    committed = [(seq, kind, payload) for seq, kind, payload in started["facts"]]
    written = rng.random() < 0.5
    if written:
        child.send(go=True)
        assert await child.answer() == {"written": True}
    await asyncio.sleep(rng.uniform(0.0, 0.05))  # a random moment in this part of the tool's run
    await child.kill()
    return Crash(committed, written)


async def stored(store: SQLiteStore) -> list[tuple[int, str, str]]:
    return [(f.seq, f.kind, f.payload) for f in await store.read(KEY)]


@pytest.fixture
async def children() -> AsyncIterator[list[ChildProcess]]:
    """Children to kill at the end whatever happens (a failing test leaves none running)."""
    started: list[ChildProcess] = []
    yield started
    await asyncio.gather(*(child.close() for child in started))


async def test_a_side_effect_cut_short_by_a_kill_is_uncertain_until_reconciled_and_never_happens_twice(
    files: Files, children: list[ChildProcess]
) -> None:
    rng = random.Random(13)
    kills = 20
    intended: list[str] = []
    outcomes: Counter[str] = Counter()

    async def start(i: int) -> ChildProcess:
        child = await start_child(files, "append_line", {"line": f"refund order {i}"}, f"refund-{i}")
        children.append(child)
        return child

    upcoming = asyncio.ensure_future(start(0))
    for i in range(kills):
        child = await upcoming
        call_id, line = f"refund-{i}", f"refund order {i}"
        crash = await kill_in_tool(child, f"Refund order {i}.", rng)
        intended.append(line)
        if i + 1 < kills:
            upcoming = asyncio.ensure_future(start(i + 1))  # imports while this crash is checked

        async with SQLiteStore(files.db) as store:
            # Nothing committed is lost; the log ends with the call, dispatched before its body ran.
            facts = await stored(store)
            assert facts == crash.committed
            assert facts[-1][1] == "tool_dispatched"
            assert json.loads(facts[-1][2])["call"]["id"] == call_id
            assert files.lines() == (intended if crash.written else intended[:-1])

            model = ScriptedModel([f"Order {i} is refunded."])
            agent = ReActAgent(model, ledger_toolkit(files.ledger, files.statuses), store=store)
            uncertain = await agent.sessions.uncertain(CTX)
            assert [(c.id, c.name, c.input) for c in uncertain] == [(call_id, "append_line", {"line": line})]
            async with asyncio.timeout(30):  # the dead child's lease is taken over at once
                with pytest.raises(UncertainToolCallsError, match=call_id) as refused:
                    await agent.call(None, CTX)
            assert [c.id for c in refused.value.calls] == [call_id]
            # Refusing recorded only what the log lacked: the killed run ended, failed, and why.
            (ended,) = (await store.read(KEY))[len(facts) :]
            killed = [json.loads(p)["run_id"] for _, kind, p in facts if kind == "run_started"][-1]
            assert (ended.kind, ended.data()) == ("run_failed", {"run_id": killed, "error": LOST_RUN})
            head = len(facts) + 1

            with pytest.raises(ReconcileError, match="no uncertain call with id 'refund-x'"):
                await agent.sessions.reconcile(CTX, [Reconcile("refund-x", "failed")])
            with pytest.raises(ReconcileError, match="reconciled twice"):
                await agent.sessions.reconcile(
                    CTX, [Reconcile(call_id, "retry"), Reconcile(call_id, "failed")]
                )
            assert await store.head(KEY) == head

            # What the operator finds decides: the line is in the ledger, or the refund is to run again.
            done = line in files.lines()
            outcome = (
                Reconcile(call_id, "succeeded", f"appended {line!r}") if done else Reconcile(call_id, "retry")
            )
            outcomes[outcome.outcome] += 1
            await agent.sessions.reconcile(CTX, [outcome])
            assert await agent.sessions.uncertain(CTX) == []
            with pytest.raises(ReconcileError, match="uncertain: none"):
                await agent.sessions.reconcile(CTX, [outcome])

            result = await agent.call(None, CTX)
            assert result.reason == "MODEL_STOP"
            assert result.message is not None
            assert result.message.text == f"Order {i} is refunded."
            model.assert_complete()
            assert files.lines() == intended  # exactly one line per intended call, whatever the moment

            state = await agent.sessions.state(CTX)
            results = [r for m in state.messages for r in m.tool_results if r.tool_use_id == call_id]
            assert len(results) == 1
            assert results[0].status == "ok"
            kinds = [kind for _, kind, _ in (await stored(store))[head:]]
            assert kinds.count("reconciled") == 1
            assert kinds[-2:] == ["run_finished", "turn_finished"]
            await agent.aclose()

    assert outcomes["succeeded"] >= 1
    assert outcomes["retry"] >= 1  # the seed kills on both sides of the side effect


async def test_an_idempotent_call_cut_short_by_a_kill_is_run_again_by_the_next_run(
    files: Files, children: list[ChildProcess]
) -> None:
    rng = random.Random(31)
    for i in range(3):
        order, call_id = f"order-{i}", f"ship-{i}"
        child = await start_child(files, "set_status", {"order": order, "status": "shipped"}, call_id)
        children.append(child)
        crash = await kill_in_tool(child, f"Ship order {i}.", rng)
        assert (files.statuses / order).exists() == crash.written

        async with SQLiteStore(files.db) as store:
            assert await stored(store) == crash.committed
            head = len(crash.committed)
            ran: list[str] = []

            async def count(point: str, ran: list[str] = ran) -> None:
                ran.append(point)

            model = ScriptedModel([f"Order {i} is shipped."])
            agent = ReActAgent(model, ledger_toolkit(files.ledger, files.statuses, count), store=store)
            assert [c.id for c in await agent.sessions.uncertain(CTX)] == [call_id]
            async with asyncio.timeout(30):
                result = await agent.call(None, CTX)  # no reconciliation asked: the tool is idempotent
            assert result.reason == "MODEL_STOP"
            assert ran == ["started", "written"]  # run again, once
            assert (files.statuses / order).read_text() == "shipped"
            assert await agent.sessions.uncertain(CTX) == []

            after = (await store.read(KEY))[head:]
            reconciled = [f.data() for f in after if f.kind == "reconciled"]
            assert reconciled == [{"call_id": call_id, "outcome": "retry", "automatic": True}]
            results = [f.data() for f in after if f.kind == "tool_result"]
            assert [r["result"]["tool_use_id"] for r in results] == [call_id]  # type: ignore[index,call-overload]
            await agent.aclose()


# ---- the torture test --------------------------------------------------------------------------------------

SEED = int(os.environ.get("RXAGENT_CRASH_SEED", "2112"))
ROUNDS = 16
"""Kills per store: two sizes of batch, sequential and together, four rounds each."""


async def start_batches_child(where: str, ledger: Path, seed: int) -> ChildProcess:
    config = {
        "batches": True,
        "store": where,
        "user": USER,
        "session": SESSION,
        "ledger": str(ledger),
        "seed": seed,
        "lease_ttl": LEASE_TTL,
    }
    return await ChildProcess.ready(SCRIPT, json.dumps(config))


async def take_over(store: SessionStore, ledger: Path, text: str) -> str:
    """Finish the round in this process, as an operator would: reconcile what is uncertain from the
    ledger, then run the session on (with the round's input again if the log never got it); how."""
    agent = ReActAgent(batch_model(), effect_toolkit(ledger), store=store, options=AgentOptions(lease_ttl=5))
    try:
        messages = (await agent.sessions.state(CTX)).messages
        again = None if any(m.role == "user" and m.text == text for m in messages) else text
        how = "asked again" if again else "carried on"
        async with asyncio.timeout(30):  # the dead child's lease is taken over at once
            try:
                result = await agent.call(again, CTX)
            except UncertainToolCallsError as refused:
                outcomes = outcomes_from_ledger(refused.calls, ledger)
                how = "reconciled: " + ",".join(sorted(o.outcome for o in outcomes))
                await agent.sessions.reconcile(CTX, outcomes)
                result = await agent.call(None, CTX)
        assert (result.reason, result.text) == ("MODEL_STOP", "done")
        return how
    finally:
        await agent.aclose()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_random_kills_of_batches_never_do_a_side_effect_twice(
    kind: str, request: pytest.FixtureRequest, tmp_path: Path, children: list[ChildProcess]
) -> None:
    where = str(tmp_path / "sessions.db") if kind == "sqlite" else request.getfixturevalue("postgres_url")
    ledger = tmp_path / "ledger.txt"
    seed = SEED + (kind == "postgres")
    rng = random.Random(seed)
    kills = Kills.new()

    async def start(number: int) -> ChildProcess:
        child = await start_batches_child(where, ledger, seed * 1000 + number)
        children.append(child)
        return child

    store = open_store(where)
    upcoming = asyncio.ensure_future(start(0))
    try:
        for number in range(ROUNDS):
            together, calls = bool(number % 2), 2 + (number // 2) % 2
            ids, text = call_ids(number, calls), round_text(number, calls, together)
            child = await upcoming
            child.send(input=text)
            assert await child.answer() == {"running": True}
            await kill_at_random(child, rng, ids)
            if number + 1 < ROUNDS:
                upcoming = asyncio.ensure_future(start(number + 1))  # imports while this kill is checked

            landed = await check_killed(store, KEY, ledger, ids)
            kills.add(landed)
            kills.outcomes[await take_over(store, ledger, text)] += 1
            await check_recovered(store, KEY, ledger, ids, landed.open_runs)
    finally:
        await store.aclose()
    print(f"crash torture on {kind}, seed {seed}: {kills}")
    assert kills.total == ROUNDS
    assert kills.where["inside the batch"] >= ROUNDS // 4  # the moments do fall inside the batches
