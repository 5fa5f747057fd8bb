"""One answer per pending call, on the Python API: an allow and a deny sent at once, a hundred times; one is
taken, the other refused with ``AnswerTakenError`` naming the call and the answer taken, and the tool runs
exactly when the allow was taken.

Real parts: a real SQLite file; answers from two threads at once through one session handle, and from
two agent objects on one file (each its own keeper and lease, as two processes have) at once.

Bad inputs tried: a second answer to a call (allow against deny, deny against allow, the same answer
twice), answered through the same handle while the first run is queued or going, after it ended, and from
another agent object; an answer for a call the log already has an answer for, through ``check``.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from pathlib import Path

import pytest

from rxagent.agent import AnswerTakenError, ReActAgent, RunHandle, ToolDecision
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult
from rxagent.session import SQLiteStore
from tests.agent.refunds import refund_agent, refunds

WAIT = 10.0
ROUNDS = 100


@pytest.fixture(autouse=True)
def no_refunds() -> None:
    refunds.clear()


async def waiting_for_approval(agent: ReActAgent, ctx: RuntimeContext, order: str) -> None:
    result = await asyncio.wait_for(agent.call(order, ctx), WAIT)
    assert result.reason == "PERMISSION_ASKING"


async def refused_run_left_no_trace(agent: ReActAgent, ctx: RuntimeContext, run_id: str) -> None:
    facts = await agent.sessions.facts(ctx)
    assert not [f for f in facts if f.run_id == run_id], "a refused answer's run left facts"


async def test_allow_and_deny_from_two_threads_at_once_one_is_taken(tmp_path: Path) -> None:
    agent = refund_agent(SQLiteStore(tmp_path / "sessions.db"))
    taken_kinds: Counter[str] = Counter()
    try:
        for round_ in range(ROUNDS):
            ctx = RuntimeContext(session_id=f"threads-{round_}")
            order = f"T-{round_}"
            await waiting_for_approval(agent, ctx, order)
            handle = agent.session(ctx)
            call_id = f"r-{order}"
            start = threading.Barrier(2)
            answered: dict[bool, RunHandle | AnswerTakenError] = {}

            def answer(allow: bool) -> None:
                start.wait(WAIT)  # noqa: B023
                try:
                    answered[allow] = handle.respond(ToolDecision(call_id, allow))  # noqa: B023
                except AnswerTakenError as refused:
                    answered[allow] = refused  # noqa: B023

            first_answer = round_ % 2 == 0  # each answer goes first in half the rounds
            threads = [threading.Thread(target=answer, args=(a,)) for a in (first_answer, not first_answer)]
            for thread in threads:
                thread.start()
            await asyncio.to_thread(lambda: [t.join(WAIT) for t in threads])  # noqa: B023

            outcomes: dict[bool, AgentResult | AnswerTakenError] = {}
            for allow, got in answered.items():
                if isinstance(got, AnswerTakenError):
                    outcomes[allow] = got
                    continue
                try:
                    outcomes[allow] = await asyncio.wait_for(got, WAIT)
                except AnswerTakenError as refused:  # the first run ended before this answer came
                    await refused_run_left_no_trace(agent, ctx, got.id)
                    outcomes[allow] = refused
            results = [a for a, o in outcomes.items() if isinstance(o, AgentResult)]
            refusals = [o for o in outcomes.values() if isinstance(o, AnswerTakenError)]
            assert len(results) == 1, outcomes
            assert len(refusals) == 1, outcomes
            allowed = results[0]
            assert refusals[0].call_id == call_id
            assert refusals[0].taken.kind == ("approval" if allowed else "denial")
            assert f"tool call '{call_id}' was answered already" in str(refusals[0])
            assert refunds[order] == (1 if allowed else 0)
            taken_kinds[refusals[0].taken.kind] += 1
            await asyncio.wait_for(handle.wait(), WAIT)
    finally:
        await agent.aclose()
    assert sum(refunds.values()) == taken_kinds["approval"]
    assert taken_kinds["approval"] > 0, "the allow was never taken: half the contract went untested"
    assert taken_kinds["denial"] > 0, "the deny was never taken: half the contract went untested"
    print(f"\nthreads: {dict(taken_kinds)} taken in {ROUNDS} rounds; refunds: {sum(refunds.values())}")


@pytest.mark.parametrize("agents", [1, 2], ids=["one agent", "two agents on one file"])
async def test_allow_and_deny_through_call_at_once_one_is_taken_under_the_lease(
    tmp_path: Path, agents: int
) -> None:
    path = tmp_path / "sessions.db"
    first = refund_agent(SQLiteStore(path))
    second = refund_agent(SQLiteStore(path)) if agents == 2 else first
    rounds = ROUNDS if agents == 1 else 40  # another keeper polls for the lease: slower, same contract
    taken_kinds: Counter[str] = Counter()
    try:
        for round_ in range(rounds):
            ctx = RuntimeContext(session_id=f"calls-{round_}")
            order = f"C-{round_}"
            await waiting_for_approval(first, ctx, order)
            call_id = f"r-{order}"
            allow_first = round_ % 2 == 0  # each answer goes first in half the rounds
            calls = [
                first.call(ToolDecision(call_id, allow_first), ctx),
                second.call(ToolDecision(call_id, not allow_first), ctx),
            ]
            one, other = await asyncio.wait_for(asyncio.gather(*calls, return_exceptions=True), WAIT)
            outcomes = {allow_first: one, not allow_first: other}
            taken = [a for a, o in outcomes.items() if isinstance(o, AgentResult)]
            refused = [o for o in outcomes.values() if isinstance(o, AnswerTakenError)]
            assert len(taken) == 1, outcomes
            assert len(refused) == 1, outcomes
            assert refused[0].call_id == call_id
            assert refused[0].taken.kind == ("approval" if taken[0] else "denial")
            assert refused[0].taken.seq is not None  # found in the log, under the lease
            assert refunds[order] == (1 if taken[0] else 0)
            facts = await first.sessions.facts(ctx)
            assert sum(f.kind == "decision" for f in facts) == 1  # the refused one recorded nothing
            assert sum(f.kind == "run_started" for f in facts) == 2  # the asking run and the taken one
            taken_kinds[refused[0].taken.kind] += 1
    finally:
        await first.aclose()
        if second is not first:
            await second.aclose()
    assert sum(refunds.values()) == taken_kinds["approval"]
    assert taken_kinds["approval"] > 0, "the allow was never taken: half the contract went untested"
    assert taken_kinds["denial"] > 0, "the deny was never taken: half the contract went untested"
    print(f"\n{agents} agent(s): {dict(taken_kinds)} taken in {rounds} rounds")


async def test_a_second_answer_is_refused_at_once_while_the_first_is_queued_and_after_it_ended(
    tmp_path: Path,
) -> None:
    agent = refund_agent(SQLiteStore(tmp_path / "sessions.db"))
    ctx = RuntimeContext(session_id="queued")
    try:
        await waiting_for_approval(agent, ctx, "Q-1")
        handle = agent.session(ctx)
        first = handle.respond(ToolDecision("r-Q-1", False, "no"))
        for second in (ToolDecision("r-Q-1", True), ToolDecision("r-Q-1", False)):
            with pytest.raises(AnswerTakenError) as refused:
                handle.respond(second)
            assert (refused.value.taken.kind, refused.value.taken.run_id) == ("denial", first.id)
            assert refused.value.taken.seq is None  # taken by a run that has not recorded it yet
        assert handle.status().queued + (handle.status().running is not None) == 1  # nothing else queued
        assert (await asyncio.wait_for(first, WAIT)).reason == "MODEL_STOP"
        # Ended: the log has the answer, and names it.
        with pytest.raises(AnswerTakenError, match="denied by run") as again:
            await handle.check([ToolDecision("r-Q-1", True)])
        assert again.value.taken.run_id == first.id
        assert again.value.taken.seq is not None
        late = handle.respond(ToolDecision("r-Q-1", True))
        with pytest.raises(AnswerTakenError):
            await asyncio.wait_for(late, WAIT)
        assert not await late.began()  # refused as it took the session: it never began
        await refused_run_left_no_trace(agent, ctx, late.id)
        assert refunds["Q-1"] == 0
    finally:
        await agent.aclose()


async def test_a_cancelled_wait_for_a_run_to_begin_is_only_that_waiters(tmp_path: Path) -> None:
    # An HTTP client that leaves while its answer's run takes the session cancels its wait, not the run's
    # beginning: other waiters still learn of it.
    agent = refund_agent(SQLiteStore(tmp_path / "sessions.db"))
    ctx = RuntimeContext(session_id="began")
    try:
        await waiting_for_approval(agent, ctx, "B-1")
        run = agent.session(ctx).respond(ToolDecision("r-B-1", True))
        waiting = asyncio.Event()

        async def wait() -> bool:
            waiting.set()
            return await run.began()  # in the same step as set(): inside this await when the test resumes

        waiter = asyncio.ensure_future(wait())
        await waiting.wait()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert await asyncio.wait_for(run.began(), WAIT)
        assert (await asyncio.wait_for(run, WAIT)).reason == "MODEL_STOP"
        assert refunds["B-1"] == 1
    finally:
        await agent.aclose()
