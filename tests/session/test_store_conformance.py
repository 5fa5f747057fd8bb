"""The session store contract, checked against every store (see conftest.py's ``store`` fixture).

Bad inputs tried: a stale lease (expired and taken over, released, re-acquired by its own owner), a
renewal after a takeover, a checkpoint beyond the log's head and one older than the kept one, a fork onto a
session that has facts, payloads with every kind of character.
"""

from __future__ import annotations

import json

import pytest

from rxagent.messages import Msg
from rxagent.session import (
    Checkpoint,
    DelegatingStore,
    Fact,
    LeaseLostError,
    Projection,
    SessionExistsError,
    SessionStore,
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


def test_the_delegating_store_example_runs() -> None:
    """The subclassing example in DelegatingStore's docstring (the store itself is one of the kinds above)."""
    results = run_examples(DelegatingStore)
    assert results.attempted > 0
    assert results.failed == 0
