"""How a run's work reaches its session's log: the :class:`Recorder`.

A run changes its :class:`~rxagent.state.AgentState` in place (steps append messages, set pending calls,
keep extras). The recorder turns those changes into facts when the run *flushes*, by comparing the state
with what it recorded last: new messages, a replaced message near the end, changed pending calls,
partial results, extras or groups. The cost is that of what changed, never of the whole history: only
the messages past the recorded count are read, and only the last few recorded ones are checked for
replacement (an approval with edited arguments replaces the newest assistant message).

Some facts are not state: a run or turn starting and ending, a decision, a tool call dispatched or its
result. Those are noted as they happen and appended with the next flush, after the state's changes.
Tool calls are flushed at once (as the executor's journal): the call is in the log before its body runs,
and its result right after, so a process that dies in between leaves the call *uncertain*, never
forgotten.

Flushes are serialised (parallel tools flush concurrently), and each one is one atomic append under the
run's lease; a flush that fails leaves the recorder where it was, so the caller can drop its cached
projection and load the log again.

**Appends of unknown outcome.** Each append carries a :class:`~rxagent.session.store.Batch`: a fresh id,
and the sequence number its first fact must get (the recorded head plus one), so the store refuses it if
anything else was appended since. An append that failed, or whose caller was cancelled, may still have
committed (a database goes on with a statement whose caller went away). The recorder keeps its id, and
before it sends anything again it asks the store (:meth:`~rxagent.session.store.SessionStore.appended`)
whether one of those appends committed: if one did, its facts count as appended and only what was queued
after them is sent; if none did, the queue is sent once, as a new batch. An append of unknown outcome that
commits after that question can only make the new one refused (:class:`~rxagent.session.store.HeadMovedError`:
its head moved), and the recorder asks again. So a batch that committed is never appended twice.

**What others see, and when.** Nobody sees a fact before the log has it: watchers in this process get it
through the session's feed once it is appended, and other processes (and other agents on the same store)
read the log. Everything queued is flushed in the background ``flush_interval`` seconds after the first of
it was queued (50 ms by default; 10 ms while watchers follow the session's feed in this process), or as
soon as 256 facts are queued, whichever comes first, besides the flushes the run makes itself (at tool
calls and at its end). A model streaming for minutes is thus followed a few tens of milliseconds behind,
and a process that dies mid-stream leaves everything but its last ``flush_interval`` in the log.
"""

from __future__ import annotations

import asyncio
import json
import logging
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, JsonValue
from pydantic_core import PydanticSerializationError

from rxagent.clock import SYSTEM_CLOCK, Clock, Timer
from rxagent.events import AgentEvent, event_to_json
from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock
from rxagent.operators import start_task
from rxagent.session.facts import Fact, FactKind
from rxagent.session.feed import FeedItem, SessionFeed
from rxagent.session.projection import Projection
from rxagent.session.store import Batch, HeadMovedError, Lease, LeaseLostError, SessionStore
from rxagent.state import AgentState

__all__ = ["LOST_RUN", "Recorder", "fact", "message_fact", "run_started_fact", "seed_session"]

_TAIL = 4
"""Recorded messages checked for in-place replacement at each flush."""
_FLUSH_AT = 256
"""Queued facts (recorded events, mostly) that start a flush in the background."""
_log = logging.getLogger("rxagent")
_NOTHING: frozenset[str] = frozenset()
"""No call ids (shared: the usual value, which costs no object per recorder)."""

LOST_RUN = "the run ended with no record of how (its process stopped)"
"""The error recorded for a run whose end the log lacks, by whoever takes the session next."""


_COMPACT = json.JSONEncoder(separators=(",", ":"))
"""``json.dumps(..., separators=(",", ":"))`` without a new encoder each time."""


def fact(kind: FactKind, data: dict[str, JsonValue], run_id: str | None = None) -> Fact:
    """A fact of ``kind`` whose payload is ``data`` as JSON."""
    return Fact(kind, _COMPACT.encode(data), run_id)


def message_fact(kind: FactKind, message: Msg, run_id: str | None) -> Fact:
    """A ``message`` or ``message_replaced`` fact (the message encoded once, by pydantic)."""
    return Fact.later(kind, _message_payload, message, run_id)


def run_started_fact(
    run_id: str, turn_id: str, agent: str, input: Sequence[Msg], decisions: list[JsonValue]
) -> Fact:
    """The ``run_started`` fact of a run (see :mod:`rxagent.session.facts`): its input messages encoded
    once, by pydantic, straight to JSON text (not to Python data first, then to text).

    Encoded now rather than later: a log in memory then keeps the text, not the input and decisions
    beside it (objects the garbage collector would walk for as long as the session lives).
    """
    head = _COMPACT.encode({"run_id": run_id, "turn_id": turn_id, "agent": agent})
    messages = ",".join(json_of(message) for message in input)
    payload = f'{head[:-1]},"input":[{messages}],"decisions":{_COMPACT.encode(decisions)}}}'
    return Fact("run_started", payload, run_id)


def _message_payload(message: Msg) -> str:
    return f'{{"message":{json_of(message)}}}'


def _call_payload(call: ToolUseBlock) -> str:
    return f'{{"call":{json_of(call)}}}'


def _result_payload(result: ToolResultBlock) -> str:
    return f'{{"result":{json_of(result)}}}'


def _pending_payload(pending: Sequence[Any]) -> str:
    return '{"pending":[' + ",".join(json_of(p) for p in pending) + "]}"


def _results_payload(results: Sequence[ToolResultBlock]) -> str:
    return '{"results":[' + ",".join(json_of(r) for r in results) + "]}"


def json_of(model: BaseModel) -> str:
    """``model`` as JSON text; text with a lone surrogate (half an emoji's pair, as some servers stream)
    is written with ``\\u`` escapes, which read back as the same text, instead of failing the run."""
    try:
        return model.model_dump_json()
    except PydanticSerializationError:
        return json.dumps(model.model_dump(mode="json"))


class Recorder:
    """Records one run's changes to a session as facts, under the run's lease.

    Args:
        store: the session store.
        lease: the run's lease on the session.
        projection: the session's projection; its ``state`` is the state the run changes.
        run_id: the run's id, written on its facts.
        feed: the session's feed in this process, which gets each fact as it is queued.
        flush_interval: seconds after which queued facts are appended in the background (``None``: only
            when 256 are queued, or the run flushes).
        clock: what that wait is timed on.
    """

    def __init__(
        self,
        store: SessionStore,
        lease: Lease,
        projection: Projection,
        run_id: str | None = None,
        *,
        feed: SessionFeed | None = None,
        flush_interval: float | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        if flush_interval is not None and not flush_interval > 0:
            raise ValueError("flush_interval must be None or a positive number of seconds")
        self.flush_interval = flush_interval
        self.clock = clock
        self._timer: Timer | None = None
        self.store = store
        self.lease = lease
        self.projection = projection
        self.run_id = run_id
        self.feed = feed
        # What a run in flight keeps is walked by the garbage collector at every full collection (see
        # bench/turn_objects.py): the lock is made at the first flush, and what is usually empty is an
        # immutable empty value (a frozenset of ids, a tuple) until it is not.
        self._lock: asyncio.Lock | None = None
        self._queue: list[Fact] = []
        self._next = projection.seq + 1
        """The sequence number the next queued fact gets (the lease makes this the only writer)."""
        self._answered: frozenset[str] = _NOTHING
        self._unsure: tuple[_Sent, ...] = ()
        """Appends that failed or were cancelled and may have committed all the same: each was the queue's
        first ``count`` facts, to start right after the recorded head (so at most one of them commits)."""
        self._snapshot = _Snapshot.of(projection)
        self._background: asyncio.Task[None] | None = None
        self._closed = False
        self._lost: str | None = None

    def lost(self, run_id: str) -> None:
        """Record, before anything else this recorder writes, that the run ``run_id`` (which the log leaves
        open) ended without a record of how: ``run_failed`` with :data:`LOST_RUN`, written by this
        recorder's run (named by then, if a run uses it)."""
        self._lost = run_id

    def note(self, kind: FactKind, data: dict[str, JsonValue]) -> None:
        """Queue a fact that is not a state change, after the state's changes so far (so the log keeps
        the order things happened in); it is appended with the next flush."""
        self.note_facts(fact(kind, data, self.run_id))

    def note_facts(self, *noted: Fact) -> None:
        """:meth:`note` for facts built already (such as :func:`run_started_fact`), noted together: the
        state's changes are looked for once, before them."""
        self._capture()
        self._enqueue(noted)

    def event(self, event: AgentEvent) -> None:
        """Queue one of the run's events (the feed gets it at once; the log with the next flush, which
        starts by itself once enough has piled up)."""
        self._capture()
        self._enqueue([Fact.later("event", event_to_json, event, self.run_id)], event)
        if len(self._queue) >= _FLUSH_AT:
            self._flush_in_background()

    def _flush_in_background(self) -> None:
        if self._background is None:
            self._background = start_task(asyncio.get_running_loop(), self._flush_queued(), "rxagent.record")

    def _flush_due(self) -> None:
        self._timer = None
        if self._queue and not self._closed:
            self._flush_in_background()

    async def aclose(self) -> None:
        """Stop flushing by itself, and let a background flush under way end first: the run gave the
        session back, and its own last flush decided what the log keeps (after a failed one, nothing
        more is tried under a lease about to be released)."""
        self._closed = True
        timer, self._timer = self._timer, None
        if timer is not None:
            timer.cancel()
        background = self._background
        if background is not None:
            await asyncio.wait([background])  # it reports its own failures; waiting must not raise them

    async def _flush_queued(self) -> None:
        try:
            async with self._flushing():
                if not self._closed:  # closed while this waited for the run's own flush: that one decided
                    await self._append_queued(())
        except Exception:  # the facts stay queued: the run's next flush tries them again, and raises
            _log.debug("rxagent: a background flush of the session log failed", exc_info=True)
        finally:
            self._background = None
            if self._queue and self._timer is None:
                # Queued while this flush was on its way (its timer found a flush going): not left behind.
                self._arm()

    def _capture(self) -> None:
        if self._lost is not None:
            lost, self._lost = self._lost, None
            self._enqueue([fact("run_failed", {"run_id": lost, "error": LOST_RUN}, self.run_id)])
        changes, self._snapshot, answered = self._snapshot.changes(self.projection, self.run_id)
        self._enqueue(changes)
        if answered:
            self._answered |= answered

    def _enqueue(self, facts: Sequence[Fact], event: AgentEvent | None = None) -> None:
        if not facts:
            return
        first = self._next
        self._queue.extend(facts)
        self._next += len(facts)
        if self._timer is None:
            self._arm()
        if self.feed is not None:
            items = [FeedItem(first + i, f) for i, f in enumerate(facts)]
            if event is not None:  # watchers in this process get the event itself, not JSON to parse
                items[-1].attach(event)
            self.feed.publish(items)

    def _arm(self) -> None:
        """Start the timer of the next background flush: one timer for everything queued until it fires
        (not one per fact), so the oldest fact waits at most ``flush_interval`` before others can read
        it; while watchers follow the session's feed (which gives out only what the log has), at most
        the feed's wake interval (10 ms), so they follow a streaming answer as closely as before."""
        if self.flush_interval is None or self._closed:
            return
        delay = self.flush_interval
        feed = self.feed
        if feed is not None and feed.watchers:
            delay = min(delay, feed.interval)
        self._timer = self.clock.call_later(delay, self._flush_due)

    def attach(self, feed: SessionFeed) -> None:
        """Publish to ``feed`` from now on, starting with what is queued and not yet in the log (a watcher
        that arrives mid-run gets the run's facts the log does not have yet)."""
        self.feed = feed
        durable = self.projection.seq  # the queue holds the facts after it, numbered in order
        feed.reset(durable)
        feed.publish([FeedItem(durable + 1 + i, f) for i, f in enumerate(self._queue)])

    async def flush(self, *facts: Fact) -> None:
        """Append what is queued, the state's changes since, then ``facts``: one atomic append.

        A failed append leaves its facts queued, so a later flush tries them again.

        Raises:
            LeaseLostError: the lease is no longer the session's (nothing was appended).
            Exception: whatever the store raised (nothing was recorded as appended).
        """
        async with self._flushing():
            await self._append_queued(facts)

    def _flushing(self) -> asyncio.Lock:
        """The lock that serialises flushes (made by the first one)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    @property
    def settled(self) -> bool:
        """Whether everything recorded so far is in the log: nothing queued, and no append whose outcome
        is unknown (a recorder that is not settled leaves a projection ahead of the log, or unsure of it)."""
        return not self._queue and not self._unsure

    async def _append_queued(self, facts: Sequence[Fact]) -> None:
        """:meth:`flush`'s work, under its lock (see the module's **Appends of unknown outcome**)."""
        self._capture()
        self._enqueue(facts)
        if self._unsure:
            await self._settle()
        while self._queue:
            batch = list(self._queue)
            sent = _Sent(Batch.new(self.projection.seq + 1), len(batch), self._answered)
            # Kept until the store answers: a failure or a cancel leaves it unsure.
            self._unsure = (*self._unsure, sent)
            try:
                seq = await self.store.append(self.lease, batch, batch=sent.batch)
            except HeadMovedError as moved:
                if await self._settle():  # an append of ours committed after all: send what follows it
                    continue
                raise LeaseLostError(
                    f"session {self.lease.key[1]!r}: the log's head is {moved.head}, but this run recorded "
                    f"it up to {self.projection.seq}: someone appended without the run's lease"
                ) from moved
            except Exception as error:
                # A failure may come after the commit (a connection lost while the reply was on its way):
                # ask at once, so that an append that committed is not reported as failed.
                try:
                    committed = await self._settle()
                except Exception as asking:
                    error.add_note(f"asking the store whether the append committed failed too: {asking!r}")
                    raise error from None
                if committed:
                    continue
                raise
            self._appended(sent, seq)

    async def _settle(self) -> bool:
        """Ask the store whether one of the appends of unknown outcome committed, and count it if one did
        (at most one can). Returns whether one did.

        Raises:
            Exception: whatever the store raised (nothing changes then).
        """
        for sent in self._unsure:
            seq = await self.store.appended(self.lease.key, sent.batch.id)
            if seq is not None:
                self._appended(sent, seq)
                return True
        return False

    def _appended(self, sent: _Sent, seq: int) -> None:
        """Count the append ``sent`` as committed, its last fact at ``seq``.

        Raises:
            RuntimeError: the store put it elsewhere than where its batch asked (it broke its contract).
        """
        projection = self.projection
        expected = projection.seq + sent.count
        if seq != expected:
            raise RuntimeError(
                f"session {self.lease.key[1]!r}: the store says the append ended at {seq}, but it was to "
                f"end at {expected}: the store does not honour the batch's first sequence number"
            )
        self._unsure = ()  # the head moved past where they were to start: none of them can commit now
        batch = self._queue[: sent.count]
        del self._queue[: sent.count]  # facts queued while the append was on its way stay queued
        if self.feed is not None:
            self.feed.durable(seq)
        self._answered = (self._answered - sent.answered) or _NOTHING
        projection.seq = seq
        projection.since_checkpoint += sent.count
        for written in batch:
            projection.track(written)
        for call_id in sent.answered:  # a result in the log settles a dispatched call
            projection.uncertain.pop(call_id, None)

    def discard_unrecorded(self) -> None:
        """Put the state back to what was last recorded: the changes since the recorder last looked at it
        (messages added or replaced, pending calls, partial results, extras, groups) are dropped, and the
        state is what the log has, with what is queued for it.

        What a run calls when it fails in a way that must keep nothing half-done (a request that cannot
        fit its context budget): the run's input, say, is not kept unless it was recorded already (a tool
        call's flush, or a background flush, records everything before it, and that stays).
        """
        self._snapshot.restore(self.projection.state)

    # ---- the executor's journal -----------------------------------------------------------------------

    async def dispatched(self, call: ToolUseBlock) -> None:
        """Record that ``call`` is about to run (with everything before it), before its body starts (in a
        store that outlives the process; elsewhere it is queued for the run's next flush)."""
        self.projection.dispatch(call)
        recorded = Fact.later("tool_dispatched", _call_payload, call, self.run_id)
        if self.store.durable:
            await self.flush(recorded)
        else:
            self._capture()
            self._enqueue([recorded])

    async def finished(self, result: ToolResultBlock) -> None:
        """Record ``result`` as soon as its call finished (appended at once in a store that outlives the
        process, queued elsewhere).

        The result joins the state's partial results at once, as the projection applies a
        ``tool_result``: the state the run writes later holds it, so no later write of the run (another
        call's result, the batch's end) can record a list without it. The call stays uncertain until the
        fact is in the log.
        """
        self._capture()
        self._enqueue([Fact.later("tool_result", _result_payload, result, self.run_id)])
        partial = self.projection.state.partial_results
        if all(r.tool_use_id != result.tool_use_id for r in partial):
            partial.append(result)
            snapshot = self._snapshot  # recorded by the fact above: not a change to write
            snapshot.partial = (*snapshot.partial, result)
        self._answered |= {result.tool_use_id}
        if self.store.durable:
            await self.flush()


@dataclass(slots=True)
class _Sent:
    """An append the recorder sent: its batch, how many queued facts it carried (the queue's first ones),
    and the calls those facts answered."""

    batch: Batch
    count: int
    answered: frozenset[str]


class _Snapshot:
    """What the recorder last wrote of the state: enough to find what changed since, cheaply.

    Tuples, not lists: one snapshot is alive per run in flight, an empty tuple is no object at all for the
    garbage collector, and an unchanged one is shared by the next snapshot instead of copied."""

    __slots__ = ("extras", "groups", "length", "partial", "pending", "tail")

    def __init__(
        self,
        length: int,
        tail: tuple[Msg, ...],
        pending: tuple[Any, ...],
        partial: tuple[ToolResultBlock, ...],
        extras: str,
        groups: list[str] | None,
    ) -> None:
        self.length = length
        self.tail = tail
        self.pending = pending
        self.partial = partial
        self.extras = extras
        self.groups = groups

    @classmethod
    def of(cls, projection: Projection) -> _Snapshot:
        state = projection.state
        messages = state.messages
        return cls(
            len(messages),
            tuple(messages[-_TAIL:]),
            tuple(state.pending),
            tuple(state.partial_results),
            _encode_extras(state.extras),
            None if state.active_groups is None else list(state.active_groups),
        )

    def restore(self, state: AgentState) -> None:
        """Make ``state`` what this snapshot recorded (its messages, ending with its tail, and the rest)."""
        kept = max(0, self.length - len(self.tail))
        state.messages[:] = [*state.messages[:kept], *self.tail]
        state.pending = list(self.pending)
        state.partial_results = list(self.partial)
        state.extras = json.loads(self.extras)
        state.active_groups = None if self.groups is None else list(self.groups)

    def changes(
        self, projection: Projection, run_id: str | None
    ) -> tuple[list[Fact], _Snapshot, frozenset[str]]:
        """The facts that bring the log from this snapshot to the state now, the next snapshot, and the
        ids of calls those facts give a result."""
        state = projection.state
        messages = state.messages
        if (  # nothing changed: the usual case between two facts, so it allocates nothing
            len(messages) == self.length
            and all(map(operator.is_, messages[self.length - len(self.tail) :], self.tail))
            and _same(state.pending, self.pending)
            and _same(state.partial_results, self.partial)
            and state.active_groups == self.groups
            and not state.extras
            and self.extras == "{}"
        ):
            return [], self, _NOTHING
        facts: list[Fact] = []
        answered: set[str] = set()
        start = max(0, self.length - len(self.tail))
        if not all(map(operator.is_, messages[start : self.length], self.tail)):  # one replaced (rare)
            for offset, recorded in enumerate(self.tail):
                index = start + offset
                if index < len(messages) and messages[index] is not recorded:
                    facts.append(message_fact("message_replaced", messages[index], run_id))
        for message in messages[self.length :]:
            facts.append(message_fact("message", message, run_id))
            results = message.tool_results
            if results:
                answered.update(r.tool_use_id for r in results)
        pending = self.pending
        if not _same(state.pending, pending):
            pending = tuple(state.pending)
            facts.append(Fact.later("pending", _pending_payload, pending, run_id))
        partial = self.partial
        if not _same(state.partial_results, partial):
            partial = tuple(state.partial_results)
            answered.update(r.tool_use_id for r in partial)
            facts.append(Fact.later("partial_results", _results_payload, partial, run_id))
        # Extras are plain JSON a step may change in place: only their text tells. Empty is the common
        # case, and costs nothing.
        extras = _encode_extras(state.extras) if state.extras or self.extras != "{}" else "{}"
        if extras != self.extras:
            facts.append(Fact("extras", f'{{"extras":{extras}}}', run_id))
        groups = state.active_groups
        if groups != self.groups:
            facts.append(
                fact("active_groups", {"groups": list(groups) if groups is not None else None}, run_id)
            )
        snapshot = _Snapshot(
            len(messages),
            tuple(messages[-_TAIL:]),
            pending,
            partial,
            extras,
            None if groups is None else list(groups),
        )
        return facts, snapshot, frozenset(answered) if answered else _NOTHING


def _same(now: list[Any], recorded: tuple[Any, ...]) -> bool:
    """Whether a list of frozen models is unchanged: by identity first (the usual case, and cheap)."""
    if len(now) != len(recorded):
        return False
    return not now or all(map(operator.is_, now, recorded)) or all(map(operator.eq, now, recorded))


def _encode_extras(extras: dict[str, JsonValue]) -> str:
    return json.dumps(extras, separators=(",", ":"), sort_keys=True)


async def seed_session(store: SessionStore, key: tuple[str | None, str], state: AgentState) -> int:
    """Start the empty session ``key`` from ``state``: append the facts that project to it (to import a
    conversation kept elsewhere). Returns the last sequence number.

    Raises:
        ValueError: the session already has facts.
        RuntimeError: the session's lease is held.
    """
    lease = await store.acquire(key, "rxagent:seed_session", 30.0)
    if lease is None:
        raise RuntimeError(f"session {key[1]!r} is held by a run")
    try:
        if await store.head(key):
            raise ValueError(f"session {key[1]!r} already has facts; seed only an empty session")
        projection = Projection()
        recorder = Recorder(store, lease, projection)
        projection.state = state.model_copy(deep=True)
        await recorder.flush()
        return projection.seq
    finally:
        await store.release(lease)
