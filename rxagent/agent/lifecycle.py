"""The lifecycle of one run: take the session, build the run, run the loop, save and release on every ending.

::

    run_events(agent, input, ctx)
      using_resource: take the session's turn (bounded by session_wait) · load its state
        └─ agent cut point
             └─ run_loop(agent.steps, Start(input), run)          (see rxagent.agent.steps)
                  Start → Reason → Act → Reason → … → Finish
      release: save on every ending (complete, failure, cancel) · hand the session to the next run

Runs on the same ``(user_id, session_id)`` wait for each other; other sessions run in parallel. The
events of agents a run uses as tools come too, each with its own ``run_id`` and ``seq`` and the run's id
as ``parent_run_id``; the run's own result is still the last event.

Lifecycle (of ``Agent.stream_events``, and so of ``call``):
    value: the session state is saved *before* the ``AgentResult`` is emitted, so a consumer may stop at
    the result (``break`` out of ``async for``) without losing the run.
    complete: after the ``AgentResult``; the session is released.
    error: a run that fails once started still ends with exactly one ``AgentResult``: an ``ErrorEvent``
    (the error's type and message), the ``ERROR`` phase and an ``AgentResult`` with reason ``ERROR`` come
    last, the state saved before them, and then the stream errors with the original error (a failing save
    is attached to it as a note; ``call`` raises it). Calls that finished keep their results; calls cut
    short get ``error`` results; calls waiting for a decision stay pending. A run that never started — its
    session stayed busy past ``AgentOptions.session_wait`` (``SessionBusyError``), or the store failed to
    load it — errors with no events.
    cancel: the model call or tools in flight are cancelled and nothing more is emitted; the session is
    saved with what happened (finished calls keep their results, calls cut short get ``interrupted``
    results, the half-streamed answer is dropped), then released.
    re-subscribe: a new run. The run's changes are noted for the session's
log as they happen (the start of the run and of a new turn, decisions, tool results) and written when
the run ends; a run that finds calls a crash left without an outcome runs again the ones that are safe to
repeat and refuses to start while any other waits to be reconciled.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import reactivex
from pydantic import JsonValue
from reactivex import Observable, abc
from reactivex import operators as ops

from rxagent.agent.control import RunControl
from rxagent.agent.inputs import (
    AgentInput,
    AnswerTakenError,
    ExternalResult,
    RunInput,
    SessionBusyError,
    ToolDecision,
    normalise_input,
)
from rxagent.agent.middleware import chain, has_hooks, watches_events
from rxagent.agent.nodes import Start
from rxagent.agent.run import RunState, new_run
from rxagent.agent.sessions import session_key
from rxagent.agent.steps import StepGate, recover, run_loop
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, RunReason
from rxagent.logs import with_current_run
from rxagent.messages import new_id
from rxagent.operators import Outcome, Relay, Source, using_resource
from rxagent.session import Claim, Place, SessionBusy, answers_of
from rxagent.session.facts import Fact
from rxagent.session.reconcile import UncertainToolCallsError, never_started
from rxagent.session.recorder import fact, run_started_fact
from rxagent.state import DEFAULT_SESSION, PendingCall, SessionKey

if TYPE_CHECKING:
    from rxagent.agent.react import AnyAgent

__all__ = ["run_events", "run_result"]

_log = logging.getLogger("rxagent")


def run_events(
    agent: AnyAgent,
    input: AgentInput,
    ctx: RuntimeContext | None,
    control: RunControl | None,
    *,
    deltas: bool,
    quiet: bool,
    record: bool = False,
    run_id: str | None = None,
    deps: object = None,
    gate: StepGate | None = None,
) -> Observable[AgentEvent]:
    """The events of one run of ``agent`` (what ``Agent.stream_events`` returns; see the module).

    Args:
        agent: the host (its model, tools, options, middleware, store and steps).
        input, ctx, control, record, run_id, deps: as ``Agent.stream_events`` takes them.
        gate: paces the loop step by step (``Agent.iter``; see :func:`~rxagent.agent.steps.run_loop`).
        deltas: per-token events are wanted. quiet: nobody watches the per-step events (``call``).
    """
    life = _Lifecycle(
        agent,
        normalise_input(input, agent.options.max_inline_media_bytes, agent.model),
        ctx or RuntimeContext(session_id=DEFAULT_SESSION),
        control,
        deltas=deltas,
        quiet=quiet,
        record=record or agent.options.record_events,
        run_id=run_id,
        deps=deps,
        gate=gate,
    )
    return using_resource(life.acquire, life.use, _release)


class _Lifecycle:
    """What :func:`run_events` was asked for, and how a run of it takes its session and starts
    (``using_resource``'s acquire and use; the release is :func:`_release`).

    One object with slots, not closures (the garbage collector walks every object a run keeps: see
    ``rxagent/operators/_source.py``); a run lets go of it once started. Per subscription, the state is in
    :class:`_Held`.
    """

    __slots__ = (
        "agent",
        "context",
        "control",
        "deltas",
        "deps",
        "gate",
        "input",
        "key",
        "quiet",
        "record",
        "run_id",
    )

    def __init__(
        self,
        agent: AnyAgent,
        run_input: RunInput,
        context: RuntimeContext,
        control: RunControl | None,
        *,
        deltas: bool,
        quiet: bool,
        record: bool,
        run_id: str | None,
        deps: object,
        gate: StepGate | None,
    ) -> None:
        self.agent = agent
        self.input = run_input
        self.context = context
        self.key = session_key(context)
        self.control = control
        self.deltas = deltas
        self.quiet = quiet
        self.record = record
        self.run_id = run_id
        self.deps = deps
        self.gate = gate

    async def acquire(self) -> _Held:
        """Take the session's turn (bounded by ``session_wait``) and load its state."""
        run_control = self.control or RunControl()
        place = self.agent.keeper.place(self.key)
        run_control.bind(asyncio.get_running_loop(), place)
        try:
            claim = await _claim(self.agent, place, self.key, self.input.decisions)
        except BaseException:
            run_control.unbind()
            raise
        return _Held(self.agent, self.key, self.context.trace_id, self.record, claim, run_control)

    def use(self, held: _Held) -> Observable[AgentEvent]:
        """Build the run on the session's state and run its loop."""
        agent, claim, run_input = self.agent, held.claim, self.input
        recorder = claim.recorder
        run = new_run(
            agent.model,
            agent.toolkit,
            name=agent.name,
            system_prompt=agent.system_prompt,
            options=agent.options,
            middleware=agent.middleware,
            output_type=agent.output,
            ctx=self.context,
            deps=self.deps,
            state=claim.projection.state,
            control=held.control,
            save=held.save,
            recorder=recorder,
            permissions=agent.permissions,
            clock=agent.clock,
            run_id=self.run_id,
            quiet=self.quiet,
            deltas=self.deltas,
        )
        recorder.run_id = run.run_id
        run.repaired = claim.projection.memo.get("repair", run.repaired)
        held.run = run
        held.turn_id = _record_start(run, claim, run_input)
        agent.sessions.run_started(self.key, run)
        gate = self.gate
        steps = agent.steps

        def loop(first: RunInput) -> Observable[AgentEvent]:
            return run_loop(steps, Start(first), run, gate=gate)

        events = chain(agent.middleware, "agent", run.ctx, loop)(run_input)
        if has_hooks(agent.middleware, "agent"):  # an agent hook's own StopRun or failure
            events = events.pipe(ops.catch(lambda error, _: recover(run, error) or reactivex.throw(error)))
        # The run's context is the current run while it subscribes: log lines its tasks write carry
        # its ids (rxagent.logs).
        return _stamped(events, held).pipe(with_current_run(run.ctx))


async def _release(held: _Held, outcome: Outcome) -> None:
    """Save on every ending (complete, failure, cancel), then hand the session to the next run.

    A function of the holder, not a method of the lifecycle: the resource's subscription keeps it for the
    whole run, and a module's function is no object of the run's.
    """
    agent, key = held.agent, held.key
    claim, run = held.claim, held.run
    try:
        if not held.saved and run is not None:
            if outcome.kind == "cancelled":
                # What happened stays recorded: finished calls keep their results.
                cancelled = "The run was cancelled before this call finished."
                run.settle(cancelled, "interrupted", answer_waiting=False)
                claim.recorder.note("run_cancelled", {"run_id": run.run_id})
            else:
                error = outcome.error
                why = _describe(error) if error is not None else "it ended before its result"
                claim.recorder.note("run_failed", {"run_id": run.run_id, "error": why})
        try:  # what came after the run's ending was recorded (its result event, if recorded)
            await claim.flush()
        except Exception:
            if not held.saved:
                raise
            ids = {"trace_id": held.trace_id, "session_id": key[1]}
            if run is not None:
                ids["run_id"] = run.run_id
            _log.warning("rxagent: recording the end of a run of %r failed", key[1], exc_info=True, extra=ids)
    finally:
        if run is not None:
            claim.projection.memo["repair"] = run.repaired
            agent.sessions.run_ended(key, run)  # what was steered too late goes back to the handle
        held.run = None  # the run's save (a method of the holder) holds the holder: cut the cycle
        try:
            await agent.keeper.release(claim)
        finally:
            held.control.unbind()


def _stamped(events: Observable[AgentEvent], held: _Held) -> Observable[AgentEvent]:
    """``events`` numbered (``seq``) in the order subscribers see them, after any middleware, and written to
    the session's log when the run records its events."""

    def subscribe(
        observer: abc.ObserverBase[AgentEvent], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return _Stamp(observer, held).attach(events, scheduler)

    return Source(subscribe)


class _Stamp(Relay[AgentEvent]):
    """One subscription of :func:`_stamped` (one object with slots: see ``rxagent/operators/_source.py``)."""

    __slots__ = ("_count", "_own_id", "_recorder")

    def __init__(self, observer: abc.ObserverBase[AgentEvent], held: _Held) -> None:
        super().__init__(observer)
        run = held.run
        assert run is not None  # stamped once the run is built
        self._own_id = run.run_id
        self._recorder = held.claim.recorder if held.record else None
        self._count = 0

    def on_next(self, value: AgentEvent) -> None:
        if self.stopped or self.is_disposed:
            return
        # Events of nested runs (an agent used as a tool) pass with their own run's numbering.
        if value.run_id == self._own_id:
            value.seq = self._count
            self._count += 1
        if self._recorder is not None:
            self._recorder.event(value)
        self._observer.on_next(value)


def run_result(
    agent: AnyAgent, input: AgentInput, ctx: RuntimeContext | None, control: RunControl | None, deps: object
) -> Observable[AgentResult]:
    """The events of one run filtered to its own :class:`~rxagent.events.AgentResult` (what
    ``Agent.call_observable`` returns; the results of nested runs carry this run's id as their parent).

    Nobody sees the other events unless a middleware hook does: when none watches them (see
    :func:`~rxagent.agent.middleware.watches_events`), the run is quiet and builds no per-step events.
    """
    watched = watches_events(agent.middleware)
    parent = ctx.parent_run_id if ctx is not None else None
    events = run_events(agent, input, ctx, control, deltas=watched, quiet=not watched, deps=deps)

    def subscribe(
        observer: abc.ObserverBase[AgentResult], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        return _OwnResult(observer, parent).attach(events, scheduler)

    return Source(subscribe)


class _OwnResult(Relay[AgentEvent]):
    """One subscription of :func:`run_result`: passes the run's own result only."""

    __slots__ = ("_parent",)

    def __init__(self, observer: abc.ObserverBase[AgentResult], parent: str | None) -> None:
        super().__init__(cast("abc.ObserverBase[AgentEvent]", observer))  # it is given AgentResults only
        self._parent = parent

    def on_next(self, value: AgentEvent) -> None:
        if isinstance(value, AgentResult) and value.parent_run_id == self._parent:
            super().on_next(value)


async def _claim(
    agent: AnyAgent, place: Place, key: SessionKey, answers: Sequence[ToolDecision | ExternalResult] = ()
) -> Claim:
    """Take the session for a run; refuse while calls of it have no known outcome, and refuse answers
    for calls the log records an answer for already (checked under the lease the run then records its
    own answers under: one answer per call, whoever sends them)."""
    wait = agent.options.session_wait
    try:
        claim = await agent.keeper.claim(place, key, wait=wait)
    except SessionBusy as busy:
        raise SessionBusyError(key, busy.waited, busy.ahead, busy.holder) from None
    try:
        await _refuse_taken(agent, claim, answers)  # first: refusing it leaves the projection as it was
        _retry_what_is_safe(agent, claim)
    except UncertainToolCallsError:
        try:  # what the claim noted stays recorded (the end of a run a crash left open)
            await claim.flush()
        except Exception:
            _log.warning("rxagent: recording session %r failed", key[1], exc_info=True)
        finally:
            await agent.keeper.release(claim)
        raise
    except BaseException:
        await agent.keeper.release(claim)
        raise
    return claim


async def _refuse_taken(
    agent: AnyAgent, claim: Claim, answers: Sequence[ToolDecision | ExternalResult]
) -> None:
    waiting = {p.call.id for p in claim.projection.state.pending}
    gone = [a.call_id for a in answers if a.call_id not in waiting]
    if not gone:  # the usual case: the log is read only for answers to calls that wait no more
        return
    taken = answers_of(await agent.store.read(claim.key), gone)
    for call_id in gone:
        if call_id in taken:
            raise AnswerTakenError(taken[call_id])


@dataclass(slots=True)
class _Held:
    """One run's hold on its session (what ``acquire`` returns): the claim, and what the run did with it.

    It keeps what the release needs of the run's :class:`_Lifecycle`, not the lifecycle (and its input),
    which the run no longer needs once it has started."""

    agent: AnyAgent
    key: SessionKey
    trace_id: str
    record: bool
    """Every event of the run goes to the session's log too."""
    claim: Claim
    control: RunControl
    run: RunState | None = None
    turn_id: str | None = None
    saved: bool = False
    """The run recorded (or tried to, for a failure) its ending: the release records no more."""

    async def save(self, reason: RunReason, failure: Exception | None) -> None:
        """The run's :data:`~rxagent.agent.run.SaveRun`: record how it ended, then write the log."""
        claim, turn_id = self.claim, self.turn_id
        recorder = claim.recorder
        run_id = recorder.run_id
        if failure is not None:
            ending = fact("run_failed", {"run_id": run_id, "error": _describe(failure)}, run_id)
        else:
            ending = fact("run_finished", {"run_id": run_id, "reason": reason}, run_id)
        if turn_id is not None and not claim.projection.state.pending:  # nothing left to answer
            recorder.note_facts(ending, fact("turn_finished", {"turn_id": turn_id, "reason": reason}, run_id))
        else:
            recorder.note_facts(ending)
        try:
            await claim.flush()
        except Exception as save_error:
            if failure is None:
                raise
            failure.add_note(f"recording the session after this error failed too: {save_error!r}")
        self.saved = True


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _record_start(run: RunState, claim: Claim, run_input: RunInput) -> str:
    """Note the run's start (and a new turn's) for the log (the keeper noted a run the log left open).

    New input opens a turn, unless calls wait for answers (then the input will be refused, or, with
    ``recover_pending``, it ends the waiting turn); returns the run's turn.
    """
    projection, recorder = claim.projection, claim.recorder
    run_id = run.run_id
    turn_id = projection.turn_id
    waiting = bool(projection.state.pending) and not run.deps.options.recover_pending
    noted: list[Fact] = []
    if (run_input.messages and not waiting) or turn_id is None:
        if turn_id is not None:
            noted.append(fact("turn_finished", {"turn_id": turn_id, "reason": "SUPERSEDED"}, run_id))
        turn_id = new_id("turn")
        noted.append(fact("turn_started", {"turn_id": turn_id}, run_id))
    decisions: list[JsonValue] = [_decision_json(d) for d in run_input.decisions]
    noted.append(run_started_fact(run_id, turn_id, run.deps.name, run_input.messages, decisions))
    recorder.note_facts(*noted)  # nothing changes the state in between: its changes are looked for once
    return turn_id


def _decision_json(decision: ToolDecision | ExternalResult) -> JsonValue:
    if isinstance(decision, ExternalResult):
        return {"call_id": decision.call_id, "result": decision.output, "status": decision.status}
    arguments: JsonValue = dict(decision.arguments) if decision.arguments is not None else None
    return {
        "call_id": decision.call_id,
        "allow": decision.allow,
        "reason": decision.reason,
        "arguments": arguments,
    }


def _retry_what_is_safe(agent: AnyAgent, claim: Claim) -> None:
    """Calls whose outcome a crash lost: the repeatable ones (idempotent or read-only tools) are queued to
    run again, and calls of the open batch that never started are queued too; any other refuses the run.
    A batch whose results were all recorded but not yet sent on (the process stopped in between, in the
    next model call say) is closed, so the new input follows its results."""
    projection = claim.projection
    state = projection.state
    refused = agent.sessions.unsafe_to_repeat(projection.uncertain.values())
    if refused:
        raise UncertainToolCallsError(refused)
    retried = list(projection.uncertain.values())
    unstarted = never_started(state, projection)
    for call in retried:
        projection.uncertain.pop(call.id, None)
        claim.recorder.note("reconciled", {"call_id": call.id, "outcome": "retry", "automatic": True})
    for call in [*retried, *unstarted]:
        why = "its outcome was lost; it is safe to run again"
        state.pending.append(PendingCall(call=call, kind="retry", reason=why))
    if not state.pending:
        state.close_batch()
