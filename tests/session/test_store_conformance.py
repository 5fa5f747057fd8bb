"""The session store contract, checked against every store (see conftest.py's ``store`` fixture).

Bad inputs tried: a stale lease (expired and taken over, released, re-acquired by its own owner), a
renewal after a takeover, a checkpoint beyond the log's head and one older than the kept one, a fork onto a
session that has facts, payloads with every kind of character; in the line for a lease: a ticket that was
spent, dropped, expired or never issued, one presented with another session's key or another owner, and a
ticket dropped twice; for idempotent appends: a batch sent twice (also under a lease lost since), a batch
that does not start right after the head (before it, past it), a stale lease with a batch, a batch of no
facts, an empty batch id, one of 129 characters, a first sequence number of 0, and an append cancelled at
every point between its call and its return.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence

import pytest

from rxagent.messages import Msg
from rxagent.session import (
    Batch,
    Checkpoint,
    DelegatingStore,
    Fact,
    HeadMovedError,
    Lease,
    LeaseLostError,
    Projection,
    SessionExistsError,
    SessionStore,
    StoredFact,
    Ticket,
    TicketLostError,
    Waiting,
)
from rxagent.state import SessionKey
from tests.examples import run_examples

from .conftest import FakeNow

KEY: SessionKey = ("ada", "s1")
OTHER: SessionKey = (None, "s1")  # the same session id for no user is another session


def message_fact(text: str, run_id: str | None = "run_1") -> Fact:
    return Fact("message", json.dumps({"message": Msg.user(text).model_dump(mode="json")}), run_id)


async def test_appends_are_numbered_from_one_and_read_back_in_order(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    assert await store.head(KEY) == 0
    assert await store.append(lease, [message_fact("a"), message_fact("b")]) == 2
    assert await store.append(lease, [message_fact("c")]) == 3
    facts = await store.read(KEY)
    assert [f.seq for f in facts] == [1, 2, 3]
    assert [f.kind for f in facts] == ["message"] * 3
    assert [json.loads(f.payload)["message"]["content"][0]["text"] for f in facts] == ["a", "b", "c"]
    assert [f.seq for f in await store.read(KEY, after=1)] == [2, 3]
    assert [f.seq for f in await store.read(KEY, after=1, limit=1)] == [2]
    assert await store.head(KEY) == 3
    assert await store.read(OTHER) == []


async def test_payloads_come_back_exactly(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    tricky = "quotes \" ' \\ newline\n tab\t nul-free unicode ✓ 𝄞 emoji 🎉 " + "x" * 100_000
    fact = message_fact(tricky, run_id=None)
    await store.append(lease, [fact])
    [stored] = await store.read(KEY)
    assert stored.payload == fact.payload
    assert stored.run_id is None
    assert stored.at == pytest.approx(fact.at)


async def test_one_lease_at_a_time_and_fencing_rejects_a_stale_one(store: SessionStore, now: FakeNow) -> None:
    first = await store.acquire(KEY, "process-a", 10)
    assert first is not None
    assert await store.acquire(KEY, "process-b", 10) is None  # held and unexpired
    assert await store.acquire(OTHER, "process-b", 10) is not None  # other sessions are free
    await store.append(first, [message_fact("from a")])
    now.advance(11)  # a's lease expires (say its process was paused)
    second = await store.acquire(KEY, "process-b", 10)
    assert second is not None
    assert second.token > first.token
    with pytest.raises(LeaseLostError):
        await store.append(first, [message_fact("late write from a")])
    with pytest.raises(LeaseLostError):
        await store.renew(first, 10)
    await store.append(second, [message_fact("from b")])
    texts = [json.loads(f.payload)["message"]["content"][0]["text"] for f in await store.read(KEY)]
    assert texts == ["from a", "from b"]  # the stale append wrote nothing


async def test_an_expired_lease_cannot_append_even_before_a_takeover(
    store: SessionStore, now: FakeNow
) -> None:
    lease = await store.acquire(KEY, "me", 5)
    assert lease is not None
    now.advance(6)
    with pytest.raises(LeaseLostError):
        await store.append(lease, [message_fact("too late")])
    assert await store.head(KEY) == 0


async def test_renewal_keeps_the_lease_and_release_frees_it(store: SessionStore, now: FakeNow) -> None:
    lease = await store.acquire(KEY, "me", 5)
    assert lease is not None
    now.advance(4)
    renewed = await store.renew(lease, 5)
    assert (renewed.token, renewed.owner) == (lease.token, "me")
    now.advance(4)  # past the first expiry, within the renewed one
    assert await store.acquire(KEY, "someone", 5) is None
    await store.append(renewed, [message_fact("still mine")])
    await store.release(renewed)
    with pytest.raises(LeaseLostError):
        await store.append(renewed, [message_fact("after release")])
    taken = await store.acquire(KEY, "someone", 5)
    assert taken is not None
    await store.release(renewed)  # releasing a stale lease leaves the current one alone
    await store.append(taken, [message_fact("someone's")])
    assert await store.head(KEY) == 2


async def test_the_same_owner_acquiring_again_gets_a_new_token(store: SessionStore) -> None:
    first = await store.acquire(KEY, "me", 30)
    again = await store.acquire(KEY, "me", 30)
    assert first is not None
    assert again is not None
    assert again.token > first.token
    with pytest.raises(LeaseLostError):
        await store.append(first, [message_fact("old token")])


async def test_checkpoints_shorten_loading(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    await store.append(lease, [message_fact(str(n)) for n in range(5)])
    checkpoint, facts = await store.load(KEY)
    assert checkpoint is None
    assert len(facts) == 5
    projection = Projection.replay(checkpoint, facts)
    await store.save_checkpoint(KEY, projection.checkpoint())
    await store.append(lease, [message_fact("5"), message_fact("6")])
    checkpoint, facts = await store.load(KEY)
    assert checkpoint is not None
    assert checkpoint.seq == 5
    assert [f.seq for f in facts] == [6, 7]
    loaded = Projection.replay(checkpoint, facts)
    assert [m.text for m in loaded.state.messages] == [str(n) for n in range(7)]
    assert loaded.seq == 7
    await store.save_checkpoint(KEY, Checkpoint(3, projection.checkpoint().payload))  # older: ignored
    assert (await store.load(KEY))[0] == checkpoint
    with pytest.raises(ValueError, match="beyond"):
        await store.save_checkpoint(KEY, Checkpoint(99, "{}"))


async def test_sessions_are_listed_with_their_head_and_owner(store: SessionStore, now: FakeNow) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    await store.append(lease, [message_fact("a")])
    other = await store.acquire(OTHER, "you", 30)
    assert other is not None
    await store.append(other, [message_fact("b"), message_fact("c")])
    await store.release(other)
    listed = {info.key: info for info in await store.sessions()}
    assert set(listed) == {KEY, OTHER}
    assert (listed[KEY].facts, listed[KEY].owner) == (1, "me")
    assert (listed[OTHER].facts, listed[OTHER].owner) == (2, None)
    now.advance(31)
    assert {info.key: info.owner for info in await store.sessions()}[KEY] is None  # expired


async def test_fork_copies_a_prefix_and_delete_forgets(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    await store.append(lease, [message_fact(str(n)) for n in range(4)])
    checkpoint, facts = await store.load(KEY)
    await store.save_checkpoint(KEY, Projection.replay(checkpoint, facts[:2]).checkpoint())
    fork: SessionKey = ("ada", "s1-fork")
    await store.fork(KEY, 3, fork)
    assert [f.seq for f in await store.read(fork)] == [1, 2, 3]
    checkpoint, facts = await store.load(fork)
    assert checkpoint is not None
    assert checkpoint.seq == 2
    assert [m.text for m in Projection.replay(checkpoint, facts).state.messages] == ["0", "1", "2"]
    with pytest.raises(SessionExistsError):
        await store.fork(KEY, 1, fork)
    forked_lease = await store.acquire(fork, "me", 30)
    assert forked_lease is not None
    assert await store.append(forked_lease, [message_fact("new branch")]) == 4
    assert await store.head(KEY) == 4  # the original is untouched
    await store.delete(fork)
    assert await store.head(fork) == 0
    assert fork not in {info.key for info in await store.sessions()}


async def test_tokens_keep_counting_across_a_delete(store: SessionStore) -> None:
    before = await store.acquire(KEY, "me", 30)
    assert before is not None
    await store.append(before, [message_fact("a")])
    await store.delete(KEY)
    after = await store.acquire(KEY, "you", 30)
    assert after is not None
    assert after.token > before.token
    with pytest.raises(LeaseLostError):
        await store.append(before, [message_fact("from before the delete")])
    assert await store.append(after, [message_fact("fresh")]) == 1


async def test_only_the_newest_checkpoints_are_kept(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    facts_so_far = 0
    for _ in range(4):
        await store.append(lease, [message_fact(str(facts_so_far)), message_fact(str(facts_so_far + 1))])
        facts_so_far += 2
        checkpoint, facts = await store.load(KEY)
        await store.save_checkpoint(KEY, Projection.replay(checkpoint, facts).checkpoint())
    checkpoint, facts = await store.load(KEY)
    assert checkpoint is not None
    assert (checkpoint.seq, facts) == (8, [])
    await store.fork(KEY, 5, ("ada", "early"))  # the checkpoints at 2 and 4 are gone: replay from the start
    early_checkpoint, early = await store.load(("ada", "early"))
    assert early_checkpoint is None
    assert [m.text for m in Projection.replay(None, early).state.messages] == ["0", "1", "2", "3", "4"]
    await store.fork(KEY, 7, ("ada", "late"))  # the checkpoint at 6 is kept
    late_checkpoint, late = await store.load(("ada", "late"))
    assert late_checkpoint is not None
    assert (late_checkpoint.seq, [f.seq for f in late]) == (6, [7])


# ---- the line for the lease --------------------------------------------------------------------------


def waiting(outcome: Lease | Waiting) -> Waiting:
    assert isinstance(outcome, Waiting), outcome
    return outcome


def leased(outcome: Lease | Waiting) -> Lease:
    assert isinstance(outcome, Lease), outcome
    return outcome


async def test_the_lease_goes_to_the_tickets_in_the_order_they_were_taken(store: SessionStore) -> None:
    first = leased(await store.enqueue(KEY, "a", 30))  # nobody holds it, nobody waits: the lease at once
    b = waiting(await store.enqueue(KEY, "b", 30))
    c = waiting(await store.enqueue(KEY, "c", 30))
    assert (b.ahead, b.holder, c.ahead, c.holder) == (0, "a", 1, "a")
    assert b.ticket.number < c.ticket.number
    assert (b.ticket.key, b.ticket.owner) == (KEY, "b")
    assert leased(await store.enqueue(OTHER, "c", 30)).owner == "c"  # other sessions have lines of their own
    await store.release(first)
    # The lease is free, but c is not first in line, and a newcomer goes to the end of it.
    assert (waiting(await store.take_turn(c.ticket, 30)).ahead, c.holder) == (1, "a")
    d = waiting(await store.enqueue(KEY, "d", 30))
    assert (d.ahead, d.holder) == (2, None)
    assert await store.acquire(KEY, "x", 30) is not None  # acquire takes no ticket: it is not in line
    assert waiting(await store.take_turn(b.ticket, 30)).holder == "x"
    await store.release(leased(await store.acquire(KEY, "x", 30)))
    second = leased(await store.take_turn(b.ticket, 30))
    assert (second.owner, second.key) == ("b", KEY)
    assert second.token > first.token
    with pytest.raises(TicketLostError):  # spent: it is no longer in line
        await store.take_turn(b.ticket, 30)
    now_c = waiting(await store.take_turn(c.ticket, 30))
    assert (now_c.ahead, now_c.holder) == (0, "b")
    await store.append(second, [message_fact("b's run")])
    await store.release(second)
    third = leased(await store.take_turn(c.ticket, 30))
    assert third.owner == "c"
    await store.append(third, [message_fact("c's run")])
    assert await store.head(KEY) == 2


async def test_the_same_owner_waits_its_turn_too(store: SessionStore) -> None:
    held = leased(await store.enqueue(KEY, "me", 30))
    mine = waiting(await store.enqueue(KEY, "me", 30))  # a second run of the same keeper
    assert (mine.ahead, mine.holder) == (0, "me")
    assert waiting(await store.take_turn(mine.ticket, 30)).holder == "me"
    await store.append(held, [message_fact("still the first run's")])  # not fenced off by the waiter
    await store.release(held)
    assert leased(await store.take_turn(mine.ticket, 30)).token > held.token


async def test_a_ticket_that_is_not_renewed_expires_and_stops_counting(
    store: SessionStore, now: FakeNow
) -> None:
    holder = leased(await store.enqueue(KEY, "holder", 100))
    crashed = waiting(await store.enqueue(KEY, "crashed", 10))  # its waiter will never renew it
    alive = waiting(await store.enqueue(KEY, "alive", 30))
    assert alive.retry_in == pytest.approx(10)  # the line may move when the ticket ahead expires
    assert crashed.retry_in == pytest.approx(100)  # or when the lease does
    now.advance(8)
    renewed = await store.renew_ticket(alive.ticket, 30)
    assert (renewed.number, renewed.owner) == (alive.ticket.number, "alive")
    assert renewed.expires_at == pytest.approx(now() + 30)
    now.advance(3)  # crashed's ticket expired; alive's, renewed, lives on
    await store.release(holder)
    taken = leased(await store.take_turn(renewed, 30))
    assert taken.owner == "alive"
    with pytest.raises(TicketLostError):
        await store.take_turn(crashed.ticket, 30)
    with pytest.raises(TicketLostError):
        await store.renew_ticket(crashed.ticket, 30)


async def test_a_waiting_ticket_keeps_its_place_while_renewed_past_its_first_expiry(
    store: SessionStore, now: FakeNow
) -> None:
    holder = leased(await store.enqueue(KEY, "holder", 100))
    ticket = waiting(await store.enqueue(KEY, "waiter", 10)).ticket
    behind = waiting(await store.enqueue(KEY, "behind", 100))
    for _ in range(5):  # 25 s in all, renewed every 5
        now.advance(5)
        ticket = await store.renew_ticket(ticket, 10)
    assert waiting(await store.take_turn(behind.ticket, 100)).ahead == 1
    await store.release(holder)
    assert leased(await store.take_turn(ticket, 10)).owner == "waiter"


async def test_a_dropped_ticket_leaves_the_line(store: SessionStore) -> None:
    holder = leased(await store.enqueue(KEY, "holder", 30))
    b = waiting(await store.enqueue(KEY, "b", 30))
    c = waiting(await store.enqueue(KEY, "c", 30))
    await store.drop_ticket(b.ticket)
    await store.drop_ticket(b.ticket)  # twice: a no-op
    assert waiting(await store.take_turn(c.ticket, 30)).ahead == 0
    with pytest.raises(TicketLostError):
        await store.take_turn(b.ticket, 30)
    await store.release(holder)
    assert leased(await store.take_turn(c.ticket, 30)).owner == "c"


async def test_a_ticket_the_line_does_not_hold_is_refused(store: SessionStore) -> None:
    holder = leased(await store.enqueue(KEY, "holder", 30))
    real = waiting(await store.enqueue(KEY, "b", 30)).ticket
    other = waiting(await store.enqueue(KEY, "c", 30)).ticket
    forged = [
        Ticket(KEY, "b", real.number + 1_000_000, real.expires_at),  # never issued
        Ticket(OTHER, "b", real.number, real.expires_at),  # another session's key
        Ticket(KEY, "someone else", real.number, real.expires_at),  # another owner
    ]
    for ticket in forged:
        with pytest.raises(TicketLostError):
            await store.take_turn(ticket, 30)
        with pytest.raises(TicketLostError):
            await store.renew_ticket(ticket, 30)
        await store.drop_ticket(ticket)  # a no-op: the real ticket stays in line
    assert waiting(await store.take_turn(other, 30)).ahead == 1
    await store.release(holder)
    assert leased(await store.take_turn(real, 30)).owner == "b"


async def test_the_line_outlives_a_delete_of_the_session(store: SessionStore) -> None:
    holder = leased(await store.enqueue(KEY, "holder", 30))
    await store.append(holder, [message_fact("gone soon")])
    b = waiting(await store.enqueue(KEY, "b", 30))
    await store.delete(KEY)
    await store.release(holder)
    taken = leased(await store.take_turn(b.ticket, 30))
    assert taken.token > holder.token
    assert await store.append(taken, [message_fact("fresh")]) == 1


async def test_tickets_taken_at_once_are_numbered_in_the_order_the_line_got_them(store: SessionStore) -> None:
    leased(await store.enqueue(KEY, "holder", 30))
    joined = [waiting(w) for w in await asyncio.gather(*(store.enqueue(KEY, f"w{n}", 30) for n in range(20)))]
    # Whatever order they were answered in, each counts exactly the tickets numbered before it as ahead.
    in_line = sorted(joined, key=lambda w: w.ticket.number)
    assert [w.ahead for w in in_line] == list(range(20))
    assert len({w.ticket.number for w in joined}) == 20


async def test_the_line_wakes_its_listeners_when_it_may_have_moved(store: SessionStore) -> None:
    wakes: list[None] = []
    listening = store.listen_turns(KEY, lambda: wakes.append(None))
    try:
        holder = leased(await store.enqueue(KEY, "holder", 30))
        b = waiting(await store.enqueue(KEY, "b", 30))
        c = waiting(await store.enqueue(KEY, "c", 30))
        d = waiting(await store.enqueue(KEY, "d", 30))
        changes = [
            store.release(holder),  # the lease is free
            store.take_turn(b.ticket, 30),  # b leaves the line with the lease
            store.drop_ticket(c.ticket),  # c leaves it without
        ]
        for change in changes:
            before = len(wakes)
            await change
            assert len(wakes) > before  # at once: made through this store object
        assert waiting(await store.take_turn(d.ticket, 30)).ahead == 0
    finally:
        listening.close()


# ---- idempotent appends -----------------------------------------------------------------------------------


def texts(facts: Sequence[StoredFact]) -> list[str]:
    return [json.loads(f.payload)["message"]["content"][0]["text"] for f in facts]


async def test_an_append_with_a_batch_is_found_by_its_id(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    first, second = Batch.new(1), Batch.new(3)
    assert await store.append(lease, [message_fact("a"), message_fact("b")], batch=first) == 2
    assert await store.append(lease, [message_fact("c")], batch=second) == 3
    assert await store.append(lease, [message_fact("d")]) == 4  # without a batch, as before
    assert (await store.appended(KEY, first.id), await store.appended(KEY, second.id)) == (2, 3)
    assert await store.appended(KEY, Batch.new(5).id) is None  # never appended
    assert await store.appended(OTHER, first.id) is None  # the id is the session's
    assert await store.appended(("nobody", "nothing"), first.id) is None


async def test_a_batch_sent_twice_is_written_once(store: SessionStore, now: FakeNow) -> None:
    lease = await store.acquire(KEY, "me", 10)
    assert lease is not None
    batch = Batch.new(1)
    assert await store.append(lease, [message_fact("once"), message_fact("only")], batch=batch) == 2
    assert await store.append(lease, [message_fact("once"), message_fact("only")], batch=batch) == 2
    now.advance(11)  # the lease is lost since: what committed stays committed, and is told so
    assert await store.acquire(KEY, "someone", 10) is not None
    assert await store.append(lease, [message_fact("once"), message_fact("only")], batch=batch) == 2
    assert texts(await store.read(KEY)) == ["once", "only"]
    assert await store.head(KEY) == 2


async def test_a_batch_that_does_not_start_right_after_the_head_is_refused(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    await store.append(lease, [message_fact("a"), message_fact("b")], batch=Batch.new(1))
    for first in (1, 2, 4, 99):  # before the head (it would overwrite), at it, past it (a gap)
        batch = Batch.new(first)
        with pytest.raises(HeadMovedError, match="the log's head is 2") as refused:
            await store.append(lease, [message_fact("misplaced")], batch=batch)
        assert (refused.value.key, refused.value.first, refused.value.head) == (KEY, first, 2)
        assert await store.appended(KEY, batch.id) is None
    assert texts(await store.read(KEY)) == ["a", "b"]
    assert await store.append(lease, [message_fact("c")], batch=Batch.new(3)) == 3


async def test_a_stale_lease_with_a_batch_is_refused_as_stale(store: SessionStore, now: FakeNow) -> None:
    lease = await store.acquire(KEY, "me", 10)
    assert lease is not None
    now.advance(11)
    taken = await store.acquire(KEY, "someone", 10)
    assert taken is not None
    batch = Batch.new(1)
    with pytest.raises(LeaseLostError):
        await store.append(lease, [message_fact("late")], batch=batch)
    assert await store.appended(KEY, batch.id) is None
    assert await store.append(taken, [message_fact("theirs")], batch=Batch.new(1)) == 1


async def test_bad_batches_are_refused_before_anything_is_written(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    with pytest.raises(ValueError, match="needs facts"):
        await store.append(lease, [], batch=Batch.new(1))
    with pytest.raises(ValueError, match="1 to 128 characters"):
        Batch("", 1)
    with pytest.raises(ValueError, match="1 to 128 characters"):
        Batch("x" * 129, 1)
    with pytest.raises(ValueError, match="1 or more"):
        Batch("b", 0)
    assert await store.head(KEY) == 0
    assert await store.append(lease, [message_fact("fine")], batch=Batch("x" * 128, 1)) == 1


async def test_a_deleted_session_forgets_its_batches(store: SessionStore) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    batch = Batch.new(1)
    await store.append(lease, [message_fact("a")], batch=batch)
    await store.fork(KEY, 1, ("ada", "fork"))
    assert await store.appended(("ada", "fork"), batch.id) is None  # a fork is a new log
    await store.delete(KEY)
    assert await store.appended(KEY, batch.id) is None
    again = await store.acquire(KEY, "me", 30)
    assert again is not None
    assert await store.append(again, [message_fact("anew")], batch=batch) == 1
    assert texts(await store.read(KEY)) == ["anew"]


class CommitsThenHangs(DelegatingStore):
    """Commits an append, then keeps its caller waiting (as a reply on its way would) until cancelled."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.committed = asyncio.Event()

    async def append(self, lease: Lease, facts: Sequence[Fact], *, batch: Batch | None = None) -> int:
        await super().append(lease, facts, batch=batch)
        self.committed.set()
        await asyncio.Event().wait()
        raise AssertionError("unreachable: the caller is cancelled")


async def test_an_append_cancelled_between_its_commit_and_its_return_is_found_and_not_made_again(
    store: SessionStore,
) -> None:
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    hanging = CommitsThenHangs(store)
    batch = Batch.new(1)
    facts = [message_fact("a"), message_fact("b")]
    appending = asyncio.ensure_future(hanging.append(lease, facts, batch=batch))
    await asyncio.wait_for(hanging.committed.wait(), 10)
    appending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await appending
    # The writer does not know the outcome: it asks, and a retry of the same batch writes nothing.
    assert await store.appended(KEY, batch.id) == 2
    assert await store.append(lease, facts, batch=batch) == 2
    with pytest.raises(HeadMovedError):  # sent again as a new batch, the facts are refused
        await store.append(lease, facts, batch=Batch.new(1))
    assert texts(await store.read(KEY)) == ["a", "b"]


async def test_an_append_cancelled_at_any_moment_is_made_once_when_its_batch_is_sent_again(
    store: SessionStore,
) -> None:
    # Cancelled after 0, 1, 2, ... turns of the loop: before the store queued it, while its transaction
    # was on its way, after it committed; whatever the store did, sending the batch again makes it once.
    lease = await store.acquire(KEY, "me", 30)
    assert lease is not None
    head = 0
    for turns in range(12):
        batch = Batch.new(head + 1)
        facts = [message_fact(f"{turns}a"), message_fact(f"{turns}b")]
        appending = asyncio.ensure_future(store.append(lease, facts, batch=batch))
        for _ in range(turns):
            await asyncio.sleep(0)  # one turn of the loop (the append goes on meanwhile), not a wait
        appending.cancel()
        with contextlib.suppress(asyncio.CancelledError):  # or it returned before the cancel came
            await appending
        head = await store.append(lease, facts, batch=batch)
        assert head == 2 * (turns + 1)
        assert await store.appended(KEY, batch.id) == head
    # An append of each that is still on its way would land before this one (the stores keep a session's
    # appends in order), and be refused: the log holds each pair once.
    assert await store.append(lease, [message_fact("last")], batch=Batch.new(head + 1)) == head + 1
    assert texts(await store.read(KEY)) == [f"{t}{x}" for t in range(12) for x in "ab"] + ["last"]


# ---- who holds a session ----------------------------------------------------------------------------------


async def test_the_current_lease_is_told_and_can_be_released_by_another_keeper(
    store: SessionStore, now: FakeNow
) -> None:
    assert await store.lease(KEY) is None
    held = await store.acquire(KEY, "process-a", 10)
    assert held is not None
    assert await store.lease(KEY) == held
    assert await store.lease(OTHER) is None
    # Another keeper that knows process-a is gone releases its lease by what lease() told it.
    told = await store.lease(KEY)
    assert told is not None
    await store.release(told)
    assert await store.lease(KEY) is None
    with pytest.raises(LeaseLostError):
        await store.append(held, [message_fact("from the gone process")])
    taken = await store.acquire(KEY, "process-b", 10)
    assert taken is not None
    assert await store.lease(KEY) == taken
    await store.release(told)  # stale now: the current lease stays
    assert await store.lease(KEY) == taken
    now.advance(11)
    assert await store.lease(KEY) is None  # expired: nobody holds it


def test_the_delegating_store_example_runs() -> None:
    """The subclassing example in DelegatingStore's docstring (the store itself is one of the kinds above)."""
    results = run_examples(DelegatingStore)
    assert results.attempted > 0
    assert results.failed == 0
