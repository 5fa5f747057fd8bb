"""The ReAct agent: the lifecycle (session, save, serialisation) around the default assembly of steps.

::

    stream_events(input, ctx)
      using_resource: take the session's turn (bounded by session_wait) · load its state
        └─ agent cut point
             └─ run_loop(steps, Start(input), run)          (see rxagent.agent.steps)
                  Start → Reason → Act → Reason → … → Finish
      release: save on every ending (complete, failure, cancel) · hand the session to the next run

Nothing runs until subscription; disposing the subscription cancels the model call or the tools in
flight and saves what happened (cancel emits nothing more). ``stream_events`` is the one pipeline;
``call`` and ``call_observable`` are it filtered to the :class:`~rxagent.events.AgentResult`. Replace or
add steps with ``steps=`` (merged over :func:`default_steps`) to build another agent from the same parts.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Generic, Never, TypeAlias, cast

import reactivex
from pydantic import BaseModel, JsonValue
from reactivex import Observable
from reactivex import operators as ops
from typing_extensions import TypeVar

from rxagent.agent.compose import ChildSessions, RunContextFactory, RunOutcome, agent_tool, map_runs
from rxagent.agent.control import RunControl
from rxagent.agent.inputs import (
    AgentInput,
    AnswerTakenError,
    ExternalResult,
    RunInput,
    SessionBusyError,
    ToolDecision,
    check_message,
    normalise_input,
)
from rxagent.agent.iteration import AgentRun
from rxagent.agent.live import SessionHandle
from rxagent.agent.loop import react_steps
from rxagent.agent.middleware import AnyMiddleware, chain, has_hooks, watches_events
from rxagent.agent.nodes import Node, Start, Steps
from rxagent.agent.options import AgentOptions
from rxagent.agent.run import RunState, new_run
from rxagent.agent.steps import StepGate, recover, run_loop
from rxagent.agent.structured import OutputSpec
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult, RunReason
from rxagent.logs import with_current_run
from rxagent.messages import Msg, ToolUseBlock, new_id
from rxagent.model.types import ChatModel
from rxagent.operators import Operator, Outcome, ProgressOption, last_value, using_resource
from rxagent.session import (
    Claim,
    MemoryStore,
    Place,
    SessionBusy,
    SessionInfo,
    SessionKeeper,
    SessionStore,
    StoredFact,
    TurnRecord,
    answers_of,
    open_store,
    turns_of,
)
from rxagent.session.reconcile import Reconcile, UncertainToolCallsError, never_started, settle_uncertain
from rxagent.state import DEFAULT_SESSION, AgentState, PendingCall, SessionKey
from rxagent.tools import Permissions, Tool, Toolkit

__all__ = ["DEFAULT_SESSION", "Agent", "ReActAgent"]

_log = logging.getLogger("rxagent")


DepsT = TypeVar("DepsT", default=None, contravariant=True)
OutputT = TypeVar("OutputT", default=None, covariant=True)
_N = TypeVar("_N", bound=Node)


class Agent(Generic[DepsT, OutputT]):
    """An agent: a loop of steps (ReAct by default) that reasons with a model and acts with tools, as a
    composition of observables, with the session lifecycle around it.

    ``Agent[Deps, Output]``: ``Deps`` is the type of the dependencies a caller passes each run
    (``call(..., deps=...)``), which tools and steps read as ``RunContext[Deps].deps``; ``Output`` the type
    of the structured output (``output_type=City`` makes ``AgentResult[City]``).

    Args:
        model: any :class:`~rxagent.model.ChatModel`.
        toolkit: the tools it may use (``None``: none).
        system_prompt: instructions sent first in every request.
        name: shown in events.
        options: loop behaviour.
        middleware: hooks at the cut points (first = outermost).
        permissions: the gate every tool call passes.
        output_type: a pydantic model (or JSON schema) for structured output.
        deps_type: the type of the runs' ``deps`` (for the type checker; nothing is checked at run time).
        store: where sessions live between runs: a :class:`~rxagent.session.SessionStore`, or a path or URL
            for :func:`~rxagent.session.open_store` (a SQLite file, ``postgresql://…``); default: this
            process's memory.
        steps: the loop's assembly (default: :func:`~rxagent.agent.loop.react_steps`; see
            :mod:`rxagent.agent.loop`).
        clock: what the agent's own waits run on (tool timeouts, the session wait, leases); give the
            same :class:`~rxagent.clock.VirtualClock` to the model to test timing without waiting.

    Example:
        >>> from rxagent import ScriptedModel
        >>> agent = ReActAgent(ScriptedModel(["Hello!"]), system_prompt="Be brief.")
        >>> # result = await agent.call("Hi")   ->   result.text == "Hello!"
    """

    def __init__(
        self,
        model: ChatModel,
        toolkit: Toolkit | None = None,
        *,
        system_prompt: str | None = None,
        name: str = "agent",
        options: AgentOptions | None = None,
        middleware: Sequence[AnyMiddleware] = (),
        permissions: Permissions | None = None,
        output_type: type[OutputT] | Mapping[str, JsonValue] | None = None,
        deps_type: type[DepsT] | None = None,
        store: SessionStore | str | None = None,
        steps: Steps[_N] | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.model = model
        self.toolkit = toolkit or Toolkit()
        self.name = name
        self.options = options or AgentOptions()
        self.middleware = tuple(middleware)
        self.permissions = permissions or Permissions()
        self.output = _output_spec(output_type)
        self.store: SessionStore = open_store(store) if isinstance(store, str) else store or MemoryStore()
        self._owns_store = not isinstance(store, SessionStore)
        self._active: dict[SessionKey, RunState] = {}
        """The run holding each session in this process (where steering goes)."""
        self._handles: dict[SessionKey, SessionHandle] = {}
        self.clock = clock
        self.keeper = SessionKeeper(self.store, lease_ttl=self.options.lease_ttl, clock=clock)
        self.steps = cast("Steps[Node]", steps if steps is not None else react_steps())
        self.system_prompt = system_prompt

    # ---- public entry points ---------------------------------------------------------------------

    def stream_events(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None = None,
        *,
        control: RunControl | None = None,
        deltas: bool = True,
        record: bool = False,
        run_id: str | None = None,
        deps: DepsT | None = None,
    ) -> Observable[AgentEvent]:
        """Run the agent and emit every event; the last is the :class:`AgentResult`.

        Runs on the same ``(user_id, session_id)`` wait for each other; other sessions run in parallel.
        ``ctx=None`` (or no ``session_id``) uses the session ``"default"``. The events of agents this run
        uses as tools (:meth:`as_tool`) come too, each with its own ``run_id`` and ``seq`` and this run's
        id as ``parent_run_id`` (see :mod:`rxagent.events`); this run's own result is still the last event.

        Lifecycle:
            value: the session state is saved *before* the ``AgentResult`` is emitted, so a consumer may
            stop at the result (``break`` out of ``async for``) without losing the run.
            complete: after the ``AgentResult``; the session is released.
            error: a run that fails once started still ends with exactly one ``AgentResult``: an
            :class:`~rxagent.events.ErrorEvent` (the error's type and message), the ``ERROR`` phase and an
            ``AgentResult`` with reason ``ERROR`` come last, the state saved before them, and then the
            stream errors with the original error (a failing save is attached to it as a note; ``call``
            raises it). Calls that finished keep their results; calls cut short get ``error`` results;
            calls waiting for a decision stay pending. A run that never started — its session stayed
            busy past ``AgentOptions.session_wait`` (:class:`SessionBusyError`), or the store failed to
            load it — errors with no events.
            cancel: the model call or tools in flight are cancelled and nothing more is emitted; the
            session is saved with what happened (finished calls keep their results, calls cut short get
            ``interrupted`` results, the half-streamed answer is dropped), then released.
            re-subscribe: a new run.

        ``control`` interrupts the run from any thread and shows its place in the session's queue.
        ``deltas=False`` leaves out the per-token events (text, thinking and tool-argument deltas) for
        consumers that only want the folded results. ``record=True`` writes every event to the session's
        log as well (as ``AgentOptions.record_events`` does for every run), so the session's feed replays
        them; ``run_id`` names the run (default: a fresh id). ``deps`` reach tools and steps as
        ``RunContext[Deps].deps`` (default: those of ``ctx`` when it is a ``RunContext``, else ``None``).
        """
        return self._events(
            input, ctx, control, deltas=deltas, quiet=False, record=record, run_id=run_id, deps=deps
        )

    def _events(
        self,
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
        record = record or self.options.record_events
        context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
        key = session_key(context)
        run_input = normalise_input(input)
        keeper = self.keeper

        async def acquire() -> _Held:
            run_control = control or RunControl()
            place = keeper.place(key)
            run_control.bind(asyncio.get_running_loop(), place)
            try:
                claim = await self._claim(place, key, run_input.decisions)
            except BaseException:
                run_control.unbind()
                raise
            return _Held(claim, run_control)

        def use(held: _Held) -> Observable[AgentEvent]:
            claim = held.claim
            recorder = claim.recorder

            async def save(reason: RunReason, failure: Exception | None) -> None:
                turn_id = held.turn_id
                run_id = recorder.run_id  # not `run`: the run holds this closure
                if failure is not None:
                    recorder.note("run_failed", {"run_id": run_id, "error": _describe(failure)})
                else:
                    recorder.note("run_finished", {"run_id": run_id, "reason": reason})
                if turn_id is not None and not claim.projection.state.pending:  # nothing left to answer
                    recorder.note("turn_finished", {"turn_id": turn_id, "reason": reason})
                try:
                    await claim.flush()
                except Exception as save_error:
                    if failure is None:
                        raise
                    failure.add_note(f"recording the session after this error failed too: {save_error!r}")
                held.saved = True

            run = new_run(
                self.model,
                self.toolkit,
                name=self.name,
                system_prompt=self.system_prompt,
                options=self.options,
                middleware=self.middleware,
                output_type=self.output,
                ctx=context,
                deps=deps,
                state=claim.projection.state,
                control=held.control,
                save=save,
                recorder=recorder,
                permissions=self.permissions,
                clock=self.clock,
                run_id=run_id,
                quiet=quiet,
                deltas=deltas,
            )
            recorder.run_id = run.run_id
            run.repaired = claim.projection.memo.get("repair", run.repaired)
            held.run = run
            held.turn_id = _record_start(run, claim, run_input)
            self._active[key] = run

            def loop(first: RunInput) -> Observable[AgentEvent]:
                return run_loop(self.steps, Start(first), run, gate=gate)

            counter = itertools.count()
            own_id = run.run_id

            def stamp(event: AgentEvent) -> AgentEvent:
                # In the order subscribers see events, after any middleware; events of nested runs (an
                # agent used as a tool) pass through with their own run's numbering.
                if event.run_id == own_id:
                    event.seq = next(counter)
                if record:
                    recorder.event(event)
                return event

            events = chain(self.middleware, "agent", run.ctx, loop)(run_input)
            if has_hooks(self.middleware, "agent"):  # an agent hook's own StopRun or failure
                events = events.pipe(
                    ops.catch(lambda error, _: recover(run, error) or reactivex.throw(error))
                )
            # The run's context is the current run while it subscribes: log lines its tasks write carry
            # its ids (rxagent.logs).
            return events.pipe(ops.map(stamp), with_current_run(run.ctx))

        async def release(held: _Held, outcome: Outcome) -> None:
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
                    ids = {"trace_id": context.trace_id, "session_id": key[1]}
                    if run is not None:
                        ids["run_id"] = run.run_id
                    _log.warning(
                        "rxagent: recording the end of a run of %r failed", key[1], exc_info=True, extra=ids
                    )
            finally:
                if run is not None:
                    claim.projection.memo["repair"] = run.repaired
                    if self._active.get(key) is run:
                        del self._active[key]
                    inbox = run.deps.control.inbox
                    if inbox:  # delivered too late for the run: the session handle takes them
                        self._left_over(key, list(inbox))
                        inbox.clear()
                held.run = None  # the run's save closure holds the holder: cut the cycle
                try:
                    await keeper.release(claim)
                finally:
                    held.control.unbind()

        return using_resource(acquire, use, release)

    async def _claim(
        self, place: Place, key: SessionKey, answers: Sequence[ToolDecision | ExternalResult] = ()
    ) -> Claim:
        """Take the session for a run; refuse while calls of it have no known outcome, and refuse answers
        for calls the log records an answer for already (checked under the lease the run then records its
        own answers under: one answer per call, whoever sends them)."""
        wait = self.options.session_wait
        try:
            claim = await self.keeper.claim(place, key, wait=wait)
        except SessionBusy as busy:
            raise SessionBusyError(key, busy.waited, busy.ahead, busy.holder) from None
        try:
            await self._refuse_taken(claim, answers)  # first: refusing it leaves the projection as it was
            _retry_what_is_safe(self, claim)
        except UncertainToolCallsError:
            try:  # what the claim noted stays recorded (the end of a run a crash left open)
                await claim.flush()
            except Exception:
                _log.warning("rxagent: recording session %r failed", key[1], exc_info=True)
            finally:
                await self.keeper.release(claim)
            raise
        except BaseException:
            await self.keeper.release(claim)
            raise
        return claim

    async def _refuse_taken(self, claim: Claim, answers: Sequence[ToolDecision | ExternalResult]) -> None:
        waiting = {p.call.id for p in claim.projection.state.pending}
        gone = [a.call_id for a in answers if a.call_id not in waiting]
        if not gone:  # the usual case: the log is read only for answers to calls that wait no more
            return
        taken = answers_of(await self.store.read(claim.key), gone)
        for call_id in gone:
            if call_id in taken:
                raise AnswerTakenError(taken[call_id])

    def call_observable(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None = None,
        *,
        control: RunControl | None = None,
        deps: DepsT | None = None,
    ) -> Observable[AgentResult[OutputT]]:
        """The same pipeline as :meth:`stream_events`, filtered to the final :class:`AgentResult`.

        Nobody sees the other events of a filtered run unless a middleware hook does, so when none is
        installed at ``agent``, ``reasoning`` or ``acting`` (or none that watches them, see
        :func:`~rxagent.agent.middleware.watches_events`) the per-step ones are not even built (the
        result's ``seq`` then counts fewer events: it counts what the run emitted).
        """
        watched = watches_events(self.middleware)
        parent = ctx.parent_run_id if ctx is not None else None

        def own_result(event: AgentEvent) -> bool:
            # Results of nested runs (agents used as tools) carry this run's id as their parent.
            return isinstance(event, AgentResult) and event.parent_run_id == parent

        events = self._events(input, ctx, control, deltas=watched, quiet=not watched, deps=deps)
        # The result's structured value is this agent's output spec's, validated: of type OutputT.
        return cast("Observable[AgentResult[OutputT]]", events.pipe(ops.filter(own_result)))

    async def call(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None = None,
        *,
        control: RunControl | None = None,
        deps: DepsT | None = None,
    ) -> AgentResult[OutputT]:
        """Run the agent and return its :class:`AgentResult` (cancelling the await cancels the run)."""
        return await last_value(self.call_observable(input, ctx, control=control, deps=deps))

    def iter(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None = None,
        *,
        control: RunControl | None = None,
        deltas: bool = True,
        deps: DepsT | None = None,
    ) -> AgentRun[OutputT]:
        """The run step by step: ``async with agent.iter(input) as run`` takes the session and stops before
        the first step; ``async for node in run`` then yields each node as the loop reaches it (before its
        step runs), and ``await run.next(node)`` runs a node of the caller's choice instead. The same
        pipeline as :meth:`stream_events` (``run.events`` holds its events), with the same guarantees:
        see :class:`~rxagent.agent.iteration.AgentRun`.

        Example:
            >>> async with agent.iter("What is 2 + 3?") as run:  # doctest: +SKIP
            ...     async for node in run:
            ...         print(type(node).__name__)  # Start, Reason, Act, Reason, Finish
            >>> run.result.text  # doctest: +SKIP
        """
        parent = ctx.parent_run_id if ctx is not None else None
        run_control = control or RunControl()

        def events(gate: StepGate) -> Observable[AgentEvent]:
            return self._events(input, ctx, run_control, deltas=deltas, quiet=False, deps=deps, gate=gate)

        return AgentRun(events, run_control, parent)

    def as_tool(
        self,
        name: str | None = None,
        description: str | None = None,
        *,
        sessions: ChildSessions = "per_call",
        max_task_chars: int = 8000,
        timeout: float | None = None,
        groups: Iterable[str] = (),
    ) -> Tool:
        """This agent as a tool of another agent: the task in, this agent's answer out.

        Each call runs this agent (in a child session, with the calling run's user and trace id) and
        its events appear in the caller's stream with ``parent_run_id`` set; its usage counts in the
        caller's result; cancelling or interrupting the caller cancels it. See
        :func:`rxagent.agent.compose.agent_tool` for the arguments and the whole contract.

        Example:
            >>> researcher = ReActAgent(model, search_tools, name="researcher")  # doctest: +SKIP
            >>> lead = ReActAgent(model, Toolkit([researcher.as_tool(description="Finds facts.")]))
        """
        return agent_tool(
            self,
            name,
            description,
            sessions=sessions,
            max_task_chars=max_task_chars,
            timeout=timeout,
            groups=groups,
        )

    def map_runs(
        self,
        *,
        max_concurrent: int = 4,
        ordered: bool = True,
        context: RunContextFactory | None = None,
        events: bool = False,
        deltas: bool = False,
        progress: ProgressOption = False,
    ) -> Operator[AgentInput, RunOutcome]:
        """An operator running this agent once per input, at most ``max_concurrent`` at once: a
        :class:`~rxagent.agent.compose.RunOutcome` per input, in input order or as the runs finish.
        ``progress=True`` shows a progress bar with the counts of runs done, failed and running.

        See :func:`rxagent.agent.compose.map_runs` for the arguments and the lifecycle.

        Example:
            >>> fan_out = agent.map_runs(progress=True)  # doctest: +SKIP
            >>> answers = await to_list(reactivex.from_iterable(questions).pipe(fan_out))
        """
        return map_runs(
            self,
            max_concurrent=max_concurrent,
            ordered=ordered,
            context=context,
            events=events,
            deltas=deltas,
            progress=progress,
        )

    async def state(self, ctx: RuntimeContext | None = None) -> AgentState:
        """The session's state as its log has it now (a copy; a fresh state for a new session)."""
        return (await self.keeper.peek(session_key(ctx))).state

    async def uncertain(self, ctx: RuntimeContext | None = None) -> list[ToolUseBlock]:
        """The session's calls that were dispatched with no recorded outcome (see :meth:`reconcile`)."""
        return list((await self.keeper.peek(session_key(ctx))).uncertain.values())

    def unsafe_to_repeat(self, calls: Iterable[ToolUseBlock]) -> list[ToolUseBlock]:
        """Of uncertain ``calls``, those a run refuses to run again by itself: calls of tools that are
        neither idempotent nor read-only (or that this agent does not have). Each must be reconciled
        (:meth:`reconcile`) before the session runs again; the others are run again without asking."""
        unsafe: list[ToolUseBlock] = []
        for call in calls:
            tool = self.toolkit.get(call.name)
            if tool is None or not tool.traits.repeatable:
                unsafe.append(call)
        return unsafe

    async def reconcile(self, ctx: RuntimeContext | None, outcomes: Sequence[Reconcile]) -> None:
        """Settle the session's uncertain calls: each succeeded (with its output), failed, or is to be run
        again by the next run. Once nothing of the batch is open the session can run again.

        Raises:
            ReconcileError: an id that is not an uncertain call of the session, or one given twice
                (nothing is recorded then).
            SessionBusyError: as for a run.
        """
        key = session_key(ctx)
        claim = await self._take(key)
        try:
            settle_uncertain(claim, outcomes)
            await claim.flush()
        finally:
            await self.keeper.release(claim)

    def session(self, ctx: RuntimeContext | None = None) -> SessionHandle:
        """The handle that drives and watches the session ``ctx`` names: submit, steer, inject, respond,
        interrupt, wait, status, and its feed (see :class:`~rxagent.agent.live.SessionHandle`).

        One handle per session and agent: asking again returns the same one. Create it on the agent's
        event loop; its methods may then be called from any thread.
        """
        key = session_key(ctx)
        handle = self._handles.get(key)
        if handle is None:
            handle = self._handles[key] = SessionHandle(
                self, ctx or RuntimeContext(session_id=DEFAULT_SESSION)
            )
        return handle

    def active_run(self, ctx: RuntimeContext | None = None) -> RunState | None:
        """The run holding the session in this process now, if any (where steered messages go)."""
        return self._active.get(session_key(ctx))

    async def add_messages(self, ctx: RuntimeContext | None, messages: Sequence[Msg]) -> None:
        """Add ``messages`` to the session's history without a model call (waiting, as a run would, for a
        run that holds the session): context the next run will see.

        Raises:
            InvalidInputError: text a log cannot keep (see :mod:`rxagent.agent.inputs`); nothing is added.
        """
        for index, message in enumerate(messages):
            check_message(message, f"messages[{index}]")
        key = session_key(ctx)
        claim = await self._take(key)
        try:
            claim.projection.state.messages.extend(messages)
            await claim.flush()
        finally:
            await self.keeper.release(claim)

    def _left_over(self, key: SessionKey, entries: list[tuple[Msg, bool]]) -> None:
        handle = self._handles.get(key)
        if handle is not None:
            handle.take_left_over(entries)

    async def aclose(self) -> None:
        """Finish background work (checkpoints being written) and close the session store if the agent
        opened it (from a path or URL, or the default); a store passed in stays open for its owner."""
        await self.keeper.aclose()
        if self._owns_store:
            await self.store.aclose()

    async def sessions(self) -> list[SessionInfo]:
        """Every session in the agent's store (its key, last sequence number, last update, lease holder)."""
        return await self.store.sessions()

    async def facts(
        self, ctx: RuntimeContext | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[StoredFact]:
        """The session's facts after sequence number ``after``, in order (:mod:`rxagent.session.facts`)."""
        return await self.store.read(session_key(ctx), after=after, limit=limit)

    async def turns(self, ctx: RuntimeContext | None = None) -> list[TurnRecord]:
        """The session's turns, each with its input and its runs (see :mod:`rxagent.session.history`)."""
        return turns_of(await self.store.read(session_key(ctx)))

    async def fork(self, ctx: RuntimeContext | None, at: int, into: RuntimeContext) -> None:
        """Start the new session ``into`` as a copy of this one up to sequence number ``at``.

        Raises:
            SessionExistsError: ``into`` already has facts.
        """
        target = session_key(into)
        await self.store.fork(session_key(ctx), at, target)
        self.keeper.forget(target)

    async def delete_session(self, ctx: RuntimeContext | None) -> None:
        """Delete the session (waiting, as a run would, for a run that holds it)."""
        key = session_key(ctx)
        claim = await self._take(key)
        try:
            await self.store.delete(key)
        finally:
            claim.broken = True  # nothing of it is kept in memory
            await self.keeper.release(claim)
            self.keeper.forget(key)

    async def _take(self, key: SessionKey) -> Claim:
        try:
            return await self.keeper.claim(self.keeper.place(key), key, wait=self.options.session_wait)
        except SessionBusy as busy:
            raise SessionBusyError(key, busy.waited, busy.ahead, busy.holder) from None


ReActAgent = Agent
"""The ReAct preset's name: an :class:`Agent` with the default steps (kept for existing code)."""

AnyAgent: TypeAlias = "Agent[Never, object]"
"""Any agent, whatever its deps and output types (what code that only runs it takes)."""


@dataclass(slots=True)
class _Held:
    claim: Claim
    control: RunControl
    run: RunState | None = None
    turn_id: str | None = None
    saved: bool = False
    """The run recorded (or tried to, for a failure) its ending: the release records no more."""


def _output_spec(output_type: type[object] | Mapping[str, JsonValue] | None) -> OutputSpec | None:
    if output_type is None:
        return None
    if isinstance(output_type, Mapping):
        return OutputSpec(output_type)
    if issubclass(output_type, BaseModel):
        return OutputSpec(output_type)
    raise TypeError(f"output_type must be a pydantic model class or a JSON schema, got {output_type!r}")


def session_key(ctx: RuntimeContext | None) -> SessionKey:
    """The session a context names: ``(user_id, session_id)``, the session ``"default"`` when unnamed."""
    context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
    return (context.user_id, context.session_id or DEFAULT_SESSION)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _record_start(run: RunState, claim: Claim, run_input: RunInput) -> str:
    """Note the run's start (and a new turn's) for the log (the keeper noted a run the log left open).

    New input opens a turn, unless calls wait for answers (then the input will be refused, or, with
    ``recover_pending``, it ends the waiting turn); returns the run's turn.
    """
    projection, recorder = claim.projection, claim.recorder
    turn_id = projection.turn_id
    waiting = bool(projection.state.pending) and not run.deps.options.recover_pending
    if (run_input.messages and not waiting) or turn_id is None:
        if turn_id is not None:
            recorder.note("turn_finished", {"turn_id": turn_id, "reason": "SUPERSEDED"})
        turn_id = new_id("turn")
        recorder.note("turn_started", {"turn_id": turn_id})
    messages: list[JsonValue] = [m.model_dump(mode="json") for m in run_input.messages]
    decisions: list[JsonValue] = [_decision_json(d) for d in run_input.decisions]
    recorder.note(
        "run_started",
        {
            "run_id": run.run_id,
            "turn_id": turn_id,
            "agent": run.deps.name,
            "input": messages,
            "decisions": decisions,
        },
    )
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
    refused = agent.unsafe_to_repeat(projection.uncertain.values())
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
