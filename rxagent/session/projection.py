"""The session's log replayed into the state a run works on.

:class:`Projection` applies facts in sequence order to an :class:`~rxagent.state.AgentState` and keeps what
the log says besides the conversation: the calls dispatched with no recorded outcome (*uncertain*: a
side effect may have happened), the calls of the open batch that were dispatched at all (so a call that
ran is never taken for one that never started), the turn and the run in progress, the last sequence number
and where the last checkpoint is.

**The log's facts decide, not a batch's bookkeeping.** A ``tool_result`` fact is the call's outcome: a
later ``partial_results`` fact of the same open batch that lacks it (as a run written before this rule
could record) does not erase it, and a call with ``tool_dispatched`` and no result stays uncertain
whatever its batch recorded after.

Loading a session is ``Projection.replay(facts)`` from its last checkpoint; a process that holds a
session's lease keeps its projection in memory and only appends.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, cast

from pydantic import ConfigDict, TypeAdapter
from pydantic_core import PydanticSerializationError

from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock
from rxagent.session.facts import Checkpoint, Fact, StoredFact, UnreadableFactError
from rxagent.state import AgentState, PendingCall

__all__ = ["Projection"]

# Built on first use (defer_build): a process that never replays a log does not pay for the validators.
_PENDING = TypeAdapter(list[PendingCall], config=ConfigDict(defer_build=True))
_RUN_KINDS = frozenset(
    {"turn_started", "turn_finished", "run_started", "run_finished", "run_cancelled", "run_failed"}
)
_RESULTS = TypeAdapter(list[ToolResultBlock], config=ConfigDict(defer_build=True))


class Projection:
    """A session's state as its log says it is.

    Attributes:
        state: the conversation, pending calls, partial results, extras and groups.
        seq: the sequence number of the last fact applied (0: none).
        uncertain: calls dispatched with no recorded outcome, by call id, in dispatch order.
        dispatched: ids of the open batch's calls (the newest assistant message's) recorded as dispatched,
            whatever became of them.
        turn_id: the turn in progress (``None`` between turns).
        open_run: a run that started and has no end recorded (it crashed, or it is running now).
        checkpoint_seq: where the last checkpoint is (0: none).
        since_checkpoint: facts applied after it.
        memo: derived data kept with the projection in memory.
    """

    __slots__ = (
        "_recorded",
        "checkpoint_seq",
        "dispatched",
        "memo",
        "open_run",
        "seq",
        "since_checkpoint",
        "state",
        "turn_id",
        "uncertain",
    )

    def __init__(self, state: AgentState | None = None) -> None:
        self.state = state or AgentState()
        self.seq = 0
        self.uncertain: dict[str, ToolUseBlock] = {}
        self.dispatched: set[str] = set()
        self._recorded: dict[str, ToolResultBlock] = {}
        """Results of the open batch's calls as ``tool_result`` facts recorded them (replay only)."""
        self.turn_id: str | None = None
        self.open_run: str | None = None
        self.checkpoint_seq = 0
        self.since_checkpoint = 0
        self.memo: dict[str, Any] = {}
        """What layers above derive from the state and keep while the projection stays in memory (the
        agent keeps its repaired transcript here); never written to the log."""

    @classmethod
    def replay(cls, checkpoint: Checkpoint | None, facts: Iterable[StoredFact]) -> Projection:
        """The projection of a checkpoint (``None``: the start of the log) and the facts after it."""
        projection = cls()
        if checkpoint is not None:
            projection.restore(checkpoint)
        for fact in facts:
            projection.apply(fact)
        return projection

    def apply(self, fact: StoredFact) -> None:
        """Apply one fact (facts must come in sequence order, each once).

        Raises:
            UnreadableFactError: the fact's payload cannot be read (the projection is then unusable).
        """
        if fact.seq <= self.seq:
            raise ValueError(f"fact {fact.seq} is not after {self.seq}: facts must be applied in order, once")
        self.seq = fact.seq
        self.since_checkpoint += 1
        kind = fact.kind
        try:
            if kind in ("tool_dispatched", "tool_result", "message", "message_replaced"):
                self._apply_call_fact(kind, json.loads(fact.payload))
            elif kind in ("pending", "partial_results", "extras", "active_groups"):
                self._apply_state_fact(kind, json.loads(fact.payload))
            else:
                self.track(fact)
        except (ValueError, KeyError, TypeError) as error:  # a ValidationError and bad JSON are ValueErrors
            raise UnreadableFactError.of(fact, error) from error

    def track(self, fact: Fact | StoredFact) -> None:
        """Keep the bookkeeping beside the state (the open turn and run, the uncertain calls) in step with
        ``fact``: what :meth:`apply` does for the facts that do not change the state (a writer whose state
        is the live one calls it for what it wrote; other facts' payloads are not read)."""
        kind = fact.kind
        if kind in _RUN_KINDS:
            # The writer's own facts (a Fact) are read only for what the bookkeeping needs: an ending
            # names nothing it needs, and a run_started fact is written by the run it starts (its run_id),
            # so the run's input is not parsed back here. A stored fact is read whole, so that replay
            # finds a damaged one.
            written = isinstance(fact, Fact)
            data = None if written and kind != "turn_started" else json.loads(fact.payload)
            if kind == "turn_started":
                assert data is not None
                self.turn_id = str(data["turn_id"])
            elif kind == "turn_finished":
                self.turn_id = None
            elif kind == "run_started":
                if data is None and fact.run_id is None:  # a written fact that names no run: read it
                    data = json.loads(fact.payload)
                self.open_run = str(fact.run_id if data is None else data["run_id"])
            else:
                self.open_run = None
        elif kind == "reconciled":
            self.uncertain.pop(str(json.loads(fact.payload)["call_id"]), None)

    def dispatch(self, call: ToolUseBlock) -> None:
        """``call`` was recorded as dispatched: it is uncertain until its result is, and it counts as
        started for good (what the writer calls for its own ``tool_dispatched`` facts)."""
        self.uncertain[call.id] = call
        batch = self._open_batch()
        # Only the open batch's calls are kept: a batch closes long before the next is dispatched.
        self.dispatched = {i for i in self.dispatched if i in batch}
        self.dispatched.add(call.id)

    def _open_batch(self) -> set[str]:
        """The ids of the calls of the newest assistant message, if no message came after it."""
        messages = self.state.messages
        if not messages or messages[-1].role != "assistant":
            return set()
        return {c.id for c in messages[-1].tool_calls}

    def _apply_call_fact(self, kind: str, data: dict[str, Any]) -> None:
        state = self.state
        if kind == "tool_dispatched":
            self.dispatch(ToolUseBlock.model_validate(data["call"]))
        elif kind == "tool_result":
            result = ToolResultBlock.model_validate(data["result"])
            self.uncertain.pop(result.tool_use_id, None)
            self._recorded[result.tool_use_id] = result
            if all(r.tool_use_id != result.tool_use_id for r in state.partial_results):
                state.partial_results.append(result)
        elif kind == "message":
            message = Msg.model_validate(data["message"])
            state.messages.append(message)
            self._recorded.clear()  # a new batch, or the open one sent on: its results are in the history
            self._answered(message.tool_results)
        else:  # message_replaced
            message = Msg.model_validate(data["message"])
            for index in range(len(state.messages) - 1, -1, -1):
                if state.messages[index].id == message.id:
                    state.messages[index] = message
                    break

    def _apply_state_fact(self, kind: str, data: dict[str, Any]) -> None:
        state = self.state
        if kind == "pending":
            state.pending = _PENDING.validate_python(data["pending"])
        elif kind == "partial_results":
            results = _RESULTS.validate_python(data["results"])
            given = {r.tool_use_id for r in results}
            batch = self._open_batch()
            # A recorded result stays the call's outcome: a list written without it does not erase it.
            kept = self._recorded.items()
            results.extend(r for i, r in kept if i not in given and i in batch and i not in self.uncertain)
            state.partial_results = results
            self._answered(state.partial_results)
        elif kind == "extras":
            state.extras = cast("dict[str, Any]", data["extras"])
        else:
            groups = data["groups"]
            state.active_groups = None if groups is None else [str(g) for g in groups]

    def _answered(self, results: Iterable[ToolResultBlock]) -> None:
        for result in results:
            self.uncertain.pop(result.tool_use_id, None)

    # ---- checkpoints ---------------------------------------------------------------------------------

    def snapshot(self) -> Projection:
        """A copy that later changes to this projection leave alone (it shares the frozen messages)."""
        state = self.state
        copied = AgentState.model_construct(
            messages=list(state.messages),
            pending=list(state.pending),
            partial_results=list(state.partial_results),
            active_groups=None if state.active_groups is None else list(state.active_groups),
            extras=json.loads(json.dumps(state.extras)),
        )
        twin = Projection(copied)
        twin.seq, twin.turn_id, twin.open_run = self.seq, self.turn_id, self.open_run
        twin.uncertain = dict(self.uncertain)
        twin.dispatched = set(self.dispatched)
        twin._recorded = dict(self._recorded)
        twin.checkpoint_seq, twin.since_checkpoint = self.checkpoint_seq, self.since_checkpoint
        return twin

    def checkpoint(self) -> Checkpoint:
        """The projection as a :class:`~rxagent.session.facts.Checkpoint` of its sequence number."""
        uncertain = [call.model_dump(mode="json") for call in self.uncertain.values()]
        rest = json.dumps(
            {
                "uncertain": uncertain,
                "dispatched": sorted(self.dispatched),
                "turn_id": self.turn_id,
                "open_run": self.open_run,  # a run that crashed stays known, to be recorded as ended
            }
        )
        # The state, the bulk of it, written by pydantic-core at once (a third of the cost of a dump to
        # Python objects then `json`); text with a lone surrogate is written the slow way, with `\u`
        # escapes, which read back as the same text.
        try:
            state = self.state.model_dump_json()
        except PydanticSerializationError:
            state = json.dumps(self.state.model_dump(mode="json"))
        return Checkpoint(self.seq, f'{{"state":{state},{rest[1:]}')

    def restore(self, checkpoint: Checkpoint) -> None:
        """Become the projection ``checkpoint`` holds (facts after it are applied next)."""
        data = json.loads(checkpoint.payload)
        self.seq = self.checkpoint_seq = checkpoint.seq
        self.since_checkpoint = 0
        self.state = AgentState.model_validate(data["state"])
        self.uncertain = {}
        for raw in data.get("uncertain") or ():
            call = ToolUseBlock.model_validate(raw)
            self.uncertain[call.id] = call
        self.dispatched = {str(i) for i in data.get("dispatched") or ()}
        partial = self.state.partial_results
        self._recorded = {r.tool_use_id: r for r in partial if r.tool_use_id in self.dispatched}
        turn = data.get("turn_id")
        self.turn_id = str(turn) if turn is not None else None
        run = data.get("open_run")
        self.open_run = str(run) if run is not None else None
