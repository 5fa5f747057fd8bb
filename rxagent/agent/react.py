"""The ReAct agent: reason, act, observe, as one composed observable.

A run is assembled from named steps, each an observable, chained with ``defer``/``concat``:

::

    lifecycle(using_resource: session lock + state load … state save + unlock)
      └─ agent cut point
           └─ RunStarted · entry routing · loop
                loop = reasoning step · then: answer → finish
                                            tool calls → acting step · loop
                                            no answer → re-prompt once · loop
                                            iteration limit → summarising step (no tools) · finish

Nothing runs until subscription; disposing the subscription cancels the model call or the tools in
flight and releases the session without saving (cancel is cleanup only). ``stream_events`` is the one
pipeline; ``call`` and ``call_observable`` are it filtered to the :class:`~rxagent.events.AgentResult`.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import reactivex
from pydantic import BaseModel, JsonValue
from reactivex import Observable, abc
from reactivex import operators as ops

from rxagent.agent.middleware import (
    ActingStep,
    Middleware,
    ReasoningStep,
    RunInput,
    StopRun,
    chain,
    has_hooks,
)
from rxagent.agent.structured import OUTPUT_TOOL, OutputSpec
from rxagent.agent.transcript import repair_transcript
from rxagent.context import RunContext, RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    Phase,
    PhaseChanged,
    RepeatGuardTriggered,
    RetryScheduled,
    RunReason,
    RunStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolProgress,
    ToolResult,
    ToolSuspended,
    UsageTotals,
)
from rxagent.messages import Msg, ToolResultBlock, ToolResultStatus, ToolUseBlock, new_id
from rxagent.model.errors import ModelHTTPError
from rxagent.model.types import ChatChunk, ChatModel, ChatRequest, ForceTool, ToolChoice, ToolSchema, Usage
from rxagent.operators._fold_message import MessageFold
from rxagent.operators._frame import frame
from rxagent.operators._from_async_iterable import from_async_iterable
from rxagent.operators._map_many import map_many
from rxagent.operators._outcome import Outcome
from rxagent.operators._run_steps import run_steps
from rxagent.operators._serialize_on_key import KeyedSerializer, Turn
from rxagent.operators._sync_of import sync_of
from rxagent.operators._using_resource import using_resource
from rxagent.retry import RetryAttempt, RetryBudget
from rxagent.state import AgentState, InMemoryStateStore, PendingCall, SessionKey, StateStore
from rxagent.tools._tool import ToolSystemError
from rxagent.tools.arguments import ToolArgumentError
from rxagent.tools.events import (
    ToolBatchFinished,
    ToolCallFinished,
    ToolCallProgress,
    ToolEvent,
    ToolPermissionRequired,
)
from rxagent.tools.events import ToolCallStarted as ToolBodyStarted
from rxagent.tools.executor import ToolExecutor, ToolInterceptor, result_of
from rxagent.tools.permissions import Permissions
from rxagent.tools.toolkit import Toolkit, Unavailable

__all__ = [
    "AgentInput",
    "AgentOptions",
    "ExternalResult",
    "PendingToolCallsError",
    "ReActAgent",
    "RunControl",
    "ToolDecision",
]

DEFAULT_SESSION = "default"


@dataclass(frozen=True, slots=True)
class ToolDecision:
    """A human's answer to a call that asked for permission.

    ``allow=True`` runs the *same* call; with ``arguments`` it runs the call with those arguments instead
    (an edit): they are checked against the tool's schema when the decision arrives and pass the
    permission gate again, and the edited call is what runs and what the history records. ``allow=False``
    refuses the call (``reason`` is shown to the model).
    """

    call_id: str
    allow: bool
    reason: str = ""
    arguments: Mapping[str, JsonValue] | None = None


@dataclass(frozen=True, slots=True)
class ExternalResult:
    """The caller's result for an external (suspended) tool call."""

    call_id: str
    output: str
    status: ToolResultStatus = "ok"


AgentInput: TypeAlias = (
    str | Msg | Sequence[Msg] | ToolDecision | ExternalResult | Sequence[ToolDecision | ExternalResult] | None
)
"""What a run starts from: user text, messages, or decisions/results for the session's pending calls."""


class PendingToolCallsError(RuntimeError):
    """The input does not fit the session's pending tool calls, and nothing was changed.

    Raised when new text arrives while calls wait for decisions or results (and recovery is off), and
    when decisions or results are refused: an unknown call id, two answers for one call, the wrong kind
    of answer for a call, or edited arguments the tool's schema rejects.
    """


class SessionBusyError(RuntimeError):
    """A run waited longer than ``AgentOptions.session_wait`` for its session, which other runs held."""

    def __init__(self, key: SessionKey, waited: float, ahead: int) -> None:
        user = f"user {key[0]!r}, " if key[0] is not None else ""
        super().__init__(
            f"session {key[1]!r} ({user}in this process) stayed busy for {waited:g} s; the run gave up "
            f"waiting with {ahead} run(s) still ahead of it"
        )
        self.key = key


@dataclass(frozen=True, slots=True)
class AgentOptions:
    """How the loop behaves.

    Attributes:
        max_iters: reasoning steps before the tool-less summarising turn (reason ``MAX_ITERATIONS``).
        parallel_tools: run consecutive concurrency-safe calls together.
        max_tool_concurrency: most calls running at once.
        tool_timeout: seconds for tools without their own timeout.
        repeat_guard: same call, same arguments, same result this many times in a row injects a hint to
            change strategy (0 disables).
        recover_pending: new user input while calls are pending gives those calls ``interrupted``
            results instead of failing (an asking call is never run by recovery).
        structured_mode: ``auto`` (native if the model supports it, else tool), ``native`` or ``tool``.
        structured_retries: attempts the model gets to fix invalid structured output.
        retry_budget: model-call retries allowed per run, shared by all its calls.
        temperature, max_tokens: request options.
        first_tool_choice: tool choice for the run's first reasoning step (``"required"`` makes the model
            use a tool before it answers); later steps use ``auto``.
        session_wait: seconds a run waits for its session while other runs hold it before failing with
            :class:`SessionBusyError` (``None``: as long as it takes). ``RunControl.position`` shows the
            queue moving meanwhile.
    """

    max_iters: int = 10
    parallel_tools: bool = True
    max_tool_concurrency: int = 8
    tool_timeout: float | None = None
    repeat_guard: int = 3
    recover_pending: bool = False
    structured_mode: Literal["auto", "native", "tool"] = "auto"
    structured_retries: int = 2
    retry_budget: int = 8
    temperature: float | None = None
    max_tokens: int | None = None
    first_tool_choice: ToolChoice | None = None
    session_wait: float | None = None

    def __post_init__(self) -> None:
        if self.max_iters < 1:
            raise ValueError("max_iters must be at least 1")
        if self.repeat_guard < 0 or self.structured_retries < 0 or self.retry_budget < 0:
            raise ValueError("repeat_guard, structured_retries and retry_budget must be >= 0")
        if self.session_wait is not None and not self.session_wait >= 0:
            raise ValueError("session_wait must be None or a number of seconds >= 0")


RunStatus: TypeAlias = Literal["idle", "queued", "running"]
"""Where the run a :class:`RunControl` watches stands: none bound, waiting for its session, or running."""


class RunControl:
    """The caller's handle on a run: interrupt it from any thread, and see where it waits for its session.

    An interrupt stops the model stream or the running tools; calls that already finished keep their real
    results, unfinished calls get ``interrupted`` results, and the run ends with reason ``INTERRUPTED``
    (unlike dispose, which only cleans up). A control is bound to one run at a time, from subscription
    until the run has released its session; it can be reused for the next run.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._interrupted = False
        self._callbacks: list[Callable[[], None]] = []
        self._turn: Turn | None = None

    def interrupt(self) -> bool:
        """Interrupt the bound run; safe from any thread (a UI thread, a signal handler, a widget callback).

        The interrupt is marshalled onto the run's event loop and takes effect on the loop's next turn, so
        an event being delivered when ``interrupt`` is called from its handler still reaches every
        subscriber before the run's closing events. An interrupt while the run waits for its session ends
        it as soon as it gets the session, before any model call.

        Returns:
            ``True`` when a run was bound to receive it; ``False`` (a no-op) before the run is subscribed,
            after it has ended, or when it was already interrupted.
        """
        with self._guard:
            loop = self._loop
            if loop is None or self._interrupted:
                return False
            self._interrupted = True
        try:
            loop.call_soon_threadsafe(self._fire)
        except RuntimeError:  # the loop closed: the run is over
            return False
        return True

    def _fire(self) -> None:
        for callback in tuple(self._callbacks):
            callback()

    @property
    def interrupted(self) -> bool:
        """True once the bound run was interrupted."""
        return self._interrupted

    @property
    def status(self) -> RunStatus:
        """``idle`` (no run bound), ``queued`` (waiting for its session) or ``running``."""
        turn = self._turn
        if self._loop is None:
            return "idle"
        return "running" if turn is None or turn.position == 0 else "queued"

    @property
    def position(self) -> int | None:
        """``0`` while the run holds its session, ``n`` while it waits ``n``-th in line, else ``None``."""
        turn = self._turn
        return turn.position if turn is not None else None

    def on_interrupt(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on interrupt (at once if already interrupted); returns an unregister function.

        For the run's own steps: register and call on the run's loop.
        """
        if self._interrupted:
            callback()
            return lambda: None
        self._callbacks.append(callback)

        def unregister() -> None:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

        return unregister

    def bind(self, loop: asyncio.AbstractEventLoop, turn: Turn | None = None) -> None:
        """Attach the control to a run starting on ``loop`` (the agent does this at subscription).

        Raises:
            RuntimeError: the control is bound to another run that has not ended.
        """
        with self._guard:
            if self._loop is not None:
                raise RuntimeError("this RunControl is already bound to a run that has not ended")
            self._loop, self._turn, self._interrupted = loop, turn, False
            self._callbacks.clear()

    def unbind(self) -> None:
        """Detach from the ended run: later interrupts are no-ops until the next :meth:`bind`."""
        with self._guard:
            self._loop, self._turn = None, None
            self._callbacks.clear()


_NO_ANSWER_PROMPT = Msg.user(
    "Your last reply contained no answer text. Answer the question directly, in plain text.",
    metadata={"rxagent": "no_answer_reprompt"},
)
_SUMMARY_PROMPT = (
    "You have used all {n} reasoning steps you are allowed. Do not call any tool. Summarise what you found "
    "so far and give the best answer you can."
)
_STRUCTURED_AUTO_PROMPT = f"When you have the final answer, call the `{OUTPUT_TOOL}` tool with it."


class ReActAgent:
    """An agent that reasons with a model and acts with tools, as a composition of observables.

    Args:
        model: any :class:`~rxagent.model.ChatModel`.
        toolkit: the tools it may use (``None``: none).
        system_prompt: instructions sent first in every request.
        name: shown in events.
        options: loop behaviour.
        middleware: hooks at the cut points (first = outermost).
        permissions: the gate every tool call passes.
        output_type: a pydantic model (or JSON schema) for structured output.
        store: where session state lives between runs (default: in memory).

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
        middleware: Sequence[Middleware] = (),
        permissions: Permissions | None = None,
        output_type: type[BaseModel] | Mapping[str, JsonValue] | None = None,
        store: StateStore | None = None,
    ) -> None:
        self.model = model
        self.toolkit = toolkit or Toolkit()
        self.name = name
        self.options = options or AgentOptions()
        self.middleware = tuple(middleware)
        self.permissions = permissions or Permissions()
        self.output = OutputSpec(output_type) if output_type is not None else None
        self.store: StateStore = store or InMemoryStateStore()
        self._system = Msg.system(system_prompt) if system_prompt else None
        self._sessions = KeyedSerializer()

    # ---- public entry points ---------------------------------------------------------------------

    def stream_events(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None = None,
        *,
        control: RunControl | None = None,
        deltas: bool = True,
    ) -> Observable[AgentEvent]:
        """Run the agent and emit every event; the last is the :class:`AgentResult`.

        Runs on the same ``(user_id, session_id)`` wait for each other; other sessions run in parallel.
        ``ctx=None`` (or no ``session_id``) uses the session ``"default"``.

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
        consumers that only want the folded results.
        """
        return self._events(input, ctx, control, deltas=deltas, quiet=False)

    def _events(
        self,
        input: AgentInput,
        ctx: RuntimeContext | None,
        control: RunControl | None,
        *,
        deltas: bool,
        quiet: bool,
    ) -> Observable[AgentEvent]:
        context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
        key: SessionKey = (context.user_id, context.session_id or DEFAULT_SESSION)
        run_input = _normalise(input)
        wait = self.options.session_wait

        async def acquire() -> _Lease:
            run_control = control or RunControl()
            turn = self._sessions.turn(key)
            run_control.bind(asyncio.get_running_loop(), turn)
            try:
                try:
                    async with asyncio.timeout(wait):
                        await turn.acquire()
                except TimeoutError:
                    raise SessionBusyError(key, wait or 0.0, turn.left_at or 0) from None
                state = await self.store.load(key) or AgentState()
            except BaseException:
                turn.release()
                run_control.unbind()
                raise
            return _Lease(turn, run_control, state)

        def use(lease: _Lease) -> Observable[AgentEvent]:
            async def save(failure: Exception | None = None) -> None:
                try:
                    await self.store.save(key, lease.state)
                except Exception as save_error:
                    if failure is None:
                        raise
                    failure.add_note(f"saving the session after this error failed too: {save_error!r}")
                lease.saved = True

            run = _Run(self, context, key, lease.state, lease.control, save, deltas=deltas, quiet=quiet)
            lease.run = run
            counter = itertools.count()

            def stamp(event: AgentEvent) -> AgentEvent:
                event.seq = next(counter)  # in the order subscribers see events, after any middleware
                return event

            events = chain(self.middleware, "agent", run.ctx, run.execute)(run_input)
            if has_hooks(self.middleware, "agent"):  # an agent hook's own StopRun or failure
                events = events.pipe(ops.catch(lambda error, _: run.recover(error) or reactivex.throw(error)))
            return events.pipe(ops.map(stamp))

        async def release(lease: _Lease, outcome: Outcome) -> None:
            try:
                if not lease.saved:
                    if outcome.kind == "cancelled" and lease.run is not None:
                        # What happened stays recorded: finished calls keep their results.
                        cancelled = "The run was cancelled before this call finished."
                        lease.run.settle(cancelled, "interrupted", answer_waiting=False)
                    await self.store.save(key, lease.state)
            finally:
                lease.run = None  # the run's save closure holds the lease: cut the cycle
                lease.turn.release()
                lease.control.unbind()

        return using_resource(acquire, use, release)

    def call_observable(
        self, input: AgentInput, ctx: RuntimeContext | None = None, *, control: RunControl | None = None
    ) -> Observable[AgentResult]:
        """The same pipeline as :meth:`stream_events`, filtered to the final :class:`AgentResult`.

        Nobody sees the other events of a filtered run unless a middleware hook does, so when none is
        installed at ``agent``, ``reasoning`` or ``acting`` the per-step ones are not even built (the
        result's ``seq`` then counts fewer events: it counts what the run emitted).
        """
        watched = any(has_hooks(self.middleware, cut) for cut in ("agent", "reasoning", "acting"))
        results: Observable[AgentResult] = self._events(
            input, ctx, control, deltas=watched, quiet=not watched
        ).pipe(
            ops.filter(lambda event: isinstance(event, AgentResult))  # type: ignore[arg-type]
        )
        return results

    async def call(
        self, input: AgentInput, ctx: RuntimeContext | None = None, *, control: RunControl | None = None
    ) -> AgentResult:
        """Run the agent and return its :class:`AgentResult` (cancelling the await cancels the run)."""
        from rxagent.operators._awaitables import last_value

        return await last_value(self.call_observable(input, ctx, control=control))

    async def state(self, ctx: RuntimeContext | None = None) -> AgentState:
        """The stored state of a session (a fresh one if it has none)."""
        context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
        return await self.store.load((context.user_id, context.session_id or DEFAULT_SESSION)) or AgentState()

    def tool_interceptors(self) -> list[ToolInterceptor]:
        """The ``tool_call`` hooks of the middleware, as executor interceptors (outermost first)."""
        return [m.tool_call for m in self.middleware if type(m).tool_call is not Middleware.tool_call]

    def request_base(self) -> tuple[Msg, ...]:
        """The fixed head of every request: the system message (if any)."""
        return (self._system,) if self._system is not None else ()


@dataclass(slots=True)
class _Lease:
    turn: Turn
    control: RunControl
    state: AgentState
    run: _Run | None = None
    saved: bool = False
    """The run saved (or tried to, for a failure) the state for its ending: the release saves no more."""


def _normalise(value: AgentInput) -> RunInput:
    if value is None:
        return RunInput(())
    if isinstance(value, str):
        return RunInput((Msg.user(value),))
    if isinstance(value, Msg):
        return RunInput((value,))
    if isinstance(value, ToolDecision | ExternalResult):
        return RunInput((), (value,))
    if not isinstance(value, Sequence):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
        raise TypeError(
            f"agent input must be text, messages, ToolDecision or ExternalResult values, got {value!r}"
        )
    items = list(value)
    messages = tuple(item for item in items if isinstance(item, Msg))
    decisions = tuple(item for item in items if isinstance(item, ToolDecision | ExternalResult))
    if len(messages) + len(decisions) != len(items):
        raise TypeError("agent input must be text, messages, ToolDecision or ExternalResult values")
    return RunInput(messages, decisions)


def _edits_of(message: Msg) -> dict[str, JsonValue]:
    """The original argument texts of a message's calls that a human edited before approving them."""
    recorded = message.metadata.get("rxagent_edited_calls")
    return dict(recorded) if isinstance(recorded, dict) else {}


def _just(*events: AgentEvent) -> Observable[AgentEvent]:
    return sync_of(*events)


def _nothing(_: object) -> tuple[AgentEvent, ...]:
    return ()


_FINAL_PHASE: dict[RunReason, Phase] = {"ERROR": "ERROR"}


@dataclass(eq=False)
class _Run:
    """Everything one run knows; created per subscription, so runs never share it."""

    agent: ReActAgent
    caller: RuntimeContext
    key: SessionKey
    state: AgentState
    control: RunControl
    save: Callable[[Exception | None], Awaitable[None]]
    run_id: str = field(default_factory=lambda: new_id("run"))
    iteration: int = 0
    usage: UsageTotals = field(default_factory=UsageTotals)
    last_message: Msg | None = None
    reprompted: bool = False
    structured_attempts: int = 0
    tool_choice_rung: int = 0
    ending: AgentResult | None = None
    repeat_key: tuple[str, str, str] | None = None
    repeat_count: int = 0
    phase: Phase | None = None
    deferred_input: list[Msg] = field(default_factory=lambda: [])
    finished_calls: dict[str, ToolResultBlock] = field(default_factory=lambda: {})
    """Results of the batch in flight, as its calls finish: an interrupt or cancel keeps them."""
    ended: bool = False
    """The AgentResult was emitted: nothing that fails later may produce another."""
    deltas: bool = True
    quiet: bool = False
    """``call`` with no hook watching events: the per-step events are not built (rare ones, such as a
    retry notice, still are; ``call_observable`` filters everything but the result out)."""
    repair_cache: tuple[int, list[Msg]] = field(default_factory=lambda: (0, []))
    upcoming: Callable[[], Observable[AgentEvent]] | None = None
    budget: RetryBudget = field(init=False)
    head: dict[str, Any] = field(init=False)
    ctx: RunContext = field(init=False)

    def __post_init__(self) -> None:
        caller = self.caller
        self.ctx = RunContext(
            user_id=caller.user_id,
            session_id=self.key[1],
            trace_id=caller.trace_id,
            attributes=caller.attributes,
            run_id=self.run_id,
            state=self.state,
        )
        self.budget = RetryBudget(max_retries=self.agent.options.retry_budget)
        self.head = {
            "run_id": self.run_id,
            "session_id": self.key[1],
            "trace_id": self.ctx.trace_id,
            "seq": 0,
        }
        scope = self.caller.tools
        groups = self.state.active_groups
        if groups is None and scope is not None:
            groups = scope.groups
        self.view = self.agent.toolkit.view(
            allow=scope.allow if scope is not None else None,
            active_groups=groups,
            presets=scope.presets if scope is not None else None,
            shared_presets=scope.shared_presets if scope is not None else None,
        )
        self.executor = ToolExecutor(
            parallel=self.agent.options.parallel_tools,
            max_concurrency=self.agent.options.max_tool_concurrency,
            permissions=self.agent.permissions,
            interceptors=self.agent.tool_interceptors(),
            default_timeout=self.agent.options.tool_timeout,
        )

    # ---- events ------------------------------------------------------------------------------------

    def phase_to(self, phase: Phase) -> list[AgentEvent]:
        if phase == self.phase:
            return []
        self.phase = phase
        if self.quiet:
            return []
        return [PhaseChanged(**self.head, phase=phase, iteration=self.iteration)]

    def finish(
        self, reason: RunReason, message: Msg | None, *, failure: Exception | None = None, **extra: Any
    ) -> Observable[AgentEvent]:
        """The closing events: the final phase, then the one AgentResult (built last, so it is the newest).

        The state is saved first, so a consumer may stop at the result; a run ending in ``failure`` keeps
        that error whatever the save does (a failing save becomes a note on it).
        """
        closing = self.phase_to(_FINAL_PHASE.get(reason, "FINISHED"))

        def result() -> tuple[AgentEvent]:
            self.ended = True
            return (
                AgentResult(
                    **self.head,
                    message=message,
                    reason=reason,
                    usage=self.usage,
                    iterations=self.iteration,
                    pending=[p.call for p in self.state.pending],
                    **extra,
                ),
            )

        async def save() -> AsyncIterator[AgentEvent]:
            await self.save(failure)  # before the result, so a consumer may stop at the result
            return
            yield  # an async generator that yields nothing

        return from_async_iterable(save).pipe(frame(_nothing, before=lambda: closing, after=result))

    def recover(self, error: Exception) -> Observable[AgentEvent] | None:
        """How a failing step ends the run: a middleware's StopRun with reason STOPPED; any other error
        with an ErrorEvent and reason ERROR, then the error itself. ``None`` once the result is out."""
        if self.ended:
            return None
        if isinstance(error, StopRun):
            return self.finish("STOPPED", self.last_message, detail=error.reason)
        self.settle("The run failed before this call finished.", "error", answer_waiting=False)
        kind = type(error).__name__
        report = ErrorEvent(**self.head, error_type=kind, message=str(error))
        ending = self.finish("ERROR", None, failure=error, detail=f"{kind}: {error}")
        return reactivex.concat(_just(report), ending, reactivex.throw(error))

    # ---- the run -----------------------------------------------------------------------------------

    def execute(self, run_input: RunInput) -> Observable[AgentEvent]:
        """The run's steps, each subscribed at the top by ``run_steps`` (constant depth however long)."""

        def first() -> Observable[AgentEvent]:
            self.then(lambda: self.route(run_input))
            return _just(RunStarted(**self.head, agent=self.agent.name, input=list(run_input.messages)))

        self.then((lambda: self.route(run_input)) if self.quiet else first)
        return run_steps(self.next_step, self.recover)

    def then(self, step: Callable[[], Observable[AgentEvent]]) -> None:
        """Make ``step`` the next step, run when the current one completes."""
        self.upcoming = step

    def next_step(self) -> Observable[AgentEvent] | None:
        step, self.upcoming = self.upcoming, None
        return step() if step is not None else None

    def route(self, run_input: RunInput) -> Observable[AgentEvent]:
        """Entry routing: pending calls decide the path."""
        if self.state.pending:
            if run_input.decisions:
                return self.resume(run_input.decisions, run_input.messages)
            if not self.agent.options.recover_pending:
                waiting = ", ".join(f"{p.call.name} ({p.call.id}, {p.kind})" for p in self.state.pending)
                raise PendingToolCallsError(
                    f"this session has tool calls waiting for a decision or a result: {waiting}. Send "
                    "ToolDecision / ExternalResult values, or enable AgentOptions.recover_pending"
                )
            for pending in self.state.pending:
                text = "The user moved on without deciding on this call; it was not run."
                self.state.partial_results.append(result_of(pending.call, text, "interrupted"))
            self.state.pending.clear()
            closing = self.close_tool_batch()
            self.state.messages.extend(run_input.messages)
            return reactivex.concat(_just(*closing), self.loop())
        if run_input.decisions:
            raise PendingToolCallsError("this session has no tool calls waiting; there is nothing to decide")
        self.state.messages.extend(run_input.messages)
        return self.loop()

    def resume(self, decisions: Sequence[Any], messages: Sequence[Msg]) -> Observable[AgentEvent]:
        """Apply decisions and external results to the pending calls; run the approved ones.

        The whole input is checked before anything changes, so a refused input leaves no trace.
        """
        by_id = {p.call.id: p for p in self.state.pending}
        edits = self.check_decisions(decisions, by_id)
        approved: list[ToolUseBlock] = []
        for decision in decisions:
            call = by_id.pop(decision.call_id).call
            if isinstance(decision, ExternalResult):
                self.state.partial_results.append(result_of(call, decision.output, decision.status))
            elif decision.allow:
                edited = edits.get(call.id)
                approved.append(self.record_edit(call, edited) if edited is not None else call)
            else:
                why = f": {decision.reason}" if decision.reason else ""
                self.state.partial_results.append(
                    result_of(call, f"The user denied this call{why}.", "denied")
                )
        self.state.pending = list(by_id.values())
        self.deferred_input = list(messages)  # joins the history after the tool results it follows
        if approved:
            step = ActingStep(self.iteration, tuple(approved))
            self.then(self.after_acting)
            return self.acting(step, approved_ids={c.id for c in approved})
        closing = [] if self.state.pending else self.close_tool_batch()
        return reactivex.concat(_just(*closing), self.after_acting())

    def check_decisions(
        self, decisions: Sequence[Any], pending: Mapping[str, PendingCall]
    ) -> dict[str, dict[str, JsonValue]]:
        """Refuse (with :class:`PendingToolCallsError`) any input that does not fit the pending calls.

        Returns the edited arguments of approvals that carry them, checked against their tools' schemas.
        """
        seen: set[str] = set()
        edits: dict[str, dict[str, JsonValue]] = {}
        for decision in decisions:
            call_id = decision.call_id
            waiting = pending.get(call_id)
            if waiting is None:
                known = ", ".join(repr(i) for i in pending) or "none"
                raise PendingToolCallsError(f"no pending tool call with id {call_id!r} (pending: {known})")
            if call_id in seen:
                raise PendingToolCallsError(f"two answers for tool call {call_id!r}: send one per call")
            seen.add(call_id)
            if isinstance(decision, ExternalResult) and waiting.kind != "external":
                raise PendingToolCallsError(f"call {call_id!r} asks for permission, not a result")
            if isinstance(decision, ToolDecision) and waiting.kind != "ask":
                raise PendingToolCallsError(f"call {call_id!r} is external: send an ExternalResult")
            if isinstance(decision, ToolDecision) and decision.arguments is not None:
                if not decision.allow:
                    raise PendingToolCallsError(
                        f"call {call_id!r}: edited arguments come with an approval, not a denial"
                    )
                edits[call_id] = self.checked_edit(waiting.call, decision.arguments)
        return edits

    def checked_edit(self, call: ToolUseBlock, arguments: Mapping[str, JsonValue]) -> dict[str, JsonValue]:
        resolved = self.view.resolve(call.name)
        if isinstance(resolved, Unavailable):
            raise PendingToolCallsError(f"call {call.id!r}: {resolved.message}")
        edited = dict(arguments)
        try:
            resolved.tool.prepare(edited, resolved.presets)
        except ToolArgumentError as error:
            refused = f"call {call.id!r}: the edited arguments were refused: {error}"
            raise PendingToolCallsError(refused) from None
        return edited

    def record_edit(self, call: ToolUseBlock, arguments: dict[str, JsonValue]) -> ToolUseBlock:
        """The history keeps the edited call (same id) in place of the model's, noting the original."""
        text = json.dumps(arguments)
        edited = call.model_copy(
            update={"input": arguments, "raw_arguments": text, "state": "complete", "error": None}
        )
        messages = self.state.messages
        for index in range(len(messages) - 1, -1, -1):
            message = messages[index]
            if message.role == "assistant" and any(c.id == call.id for c in message.tool_calls):
                content = tuple(
                    edited if isinstance(b, ToolUseBlock) and b.id == call.id else b for b in message.content
                )
                originals = dict(_edits_of(message))
                originals[call.id] = call.raw_arguments
                metadata = {**message.metadata, "rxagent_edited_calls": originals}
                messages[index] = message.model_copy(update={"content": content, "metadata": metadata})
                break
        return edited

    def loop(self) -> Observable[AgentEvent]:
        """The next reasoning step (or the summarising one past the limit); schedules what follows it."""
        if self.control.interrupted:
            return self.interrupted_end()
        if self.iteration >= self.agent.options.max_iters:
            self.then(lambda: self.finish("MAX_ITERATIONS", self.last_message))
            return self.reasoning(summarising=True)
        self.then(self.after_reasoning)
        return self.reasoning(summarising=False)

    # ---- reasoning -----------------------------------------------------------------------------------

    def reasoning(self, *, summarising: bool) -> Observable[AgentEvent]:
        # Steps are built when run_steps starts them, so no defer is needed here.
        step = ReasoningStep(self.iteration + 1, summarising)
        return chain(self.agent.middleware, "reasoning", self.ctx, self.reasoning_inner)(step)

    def reasoning_inner(self, step: ReasoningStep) -> Observable[AgentEvent]:
        self.iteration = step.iteration
        self.last_message = None
        request = self.build_request(step.summarising)
        if not has_hooks(self.agent.middleware, "request"):
            return self.model_call(request, step)
        prepare = chain(self.agent.middleware, "request", self.ctx, reactivex.just)
        prepared: list[ChatRequest] = []

        def split(item: ChatRequest | AgentEvent) -> list[AgentEvent]:
            # A request hook may publish events (what a context window evicted, say) before the request.
            if isinstance(item, ChatRequest):
                prepared.append(item)
                return []
            return [item]

        def call_model(_: abc.SchedulerBase | None) -> Observable[AgentEvent]:
            if not prepared:
                raise RuntimeError("the request middleware produced no ChatRequest")
            return self.model_call(prepared[-1], step)

        hooked: Observable[ChatRequest | AgentEvent] = prepare(request)
        return reactivex.concat(hooked.pipe(map_many(split)), reactivex.defer(call_model))

    def build_request(self, summarising: bool) -> ChatRequest:
        options = self.agent.options
        messages = [*self.agent.request_base(), *self.repaired_history()]
        tools: tuple[ToolSchema, ...] = ()
        tool_choice: ToolChoice | None = None
        response_format = None
        if summarising:
            messages.append(Msg.system(_SUMMARY_PROMPT.format(n=options.max_iters)))
        else:
            tools = self.view.schemas()
            if tools and self.iteration == 1:
                tool_choice = options.first_tool_choice
            output = self.agent.output
            if output is not None:
                if self.structured_path() == "native":
                    response_format = output.response_format()
                else:
                    tools = (*tools, output.tool_schema())
                    tool_choice = self.output_tool_choice(len(tools))
                    if tool_choice == "auto":
                        messages.append(Msg.system(_STRUCTURED_AUTO_PROMPT))
        return ChatRequest(
            messages=tuple(messages),
            tools=tools,
            tool_choice=tool_choice,
            response_format=response_format,
            temperature=options.temperature,
            max_tokens=options.max_tokens,
            retry_budget=self.budget,
        )

    def repaired_history(self) -> list[Msg]:
        """The history as sent: repaired (see :mod:`rxagent.agent.transcript`), incrementally.

        Repair carries state only across an assistant message with tool calls, so the repaired form of
        a prefix that does not end in one is final; within a run the history only grows, so each step
        repairs just what was appended since the last stable point instead of the whole conversation.
        """
        history = self.state.messages
        stable, done = self.repair_cache
        if stable > len(history):  # the history was replaced: start over
            stable, done = 0, []
        end = len(history)
        while end > stable and history[end - 1].role == "assistant" and history[end - 1].tool_calls:
            end -= 1
        if end > stable:
            done = done + repair_transcript(history[stable:end])
            stable = end
        self.repair_cache = (stable, done)
        return done + repair_transcript(history[stable:])

    def structured_path(self) -> Literal["native", "tool"]:
        mode = self.agent.options.structured_mode
        if mode == "auto":
            return "native" if self.agent.model.capabilities.json_schema_output else "tool"
        return mode

    def output_tool_choice(self, tool_count: int) -> ToolChoice:
        ladder: list[ToolChoice] = []
        if tool_count == 1 and self.agent.model.capabilities.forced_tool_choice:
            ladder.append(ForceTool(OUTPUT_TOOL))
        if self.agent.model.capabilities.forced_tool_choice:
            ladder.append("required")
        ladder.append("auto")
        return ladder[min(self.tool_choice_rung, len(ladder) - 1)]

    def model_call(self, request: ChatRequest, step: ReasoningStep) -> Observable[AgentEvent]:
        model = self.agent.model
        call = chain(self.agent.middleware, "model_call", self.ctx, model.stream)
        fold = MessageFold()
        started_at = time.perf_counter()
        head = self.head

        def on_item(item: ChatChunk | RetryAttempt) -> Sequence[AgentEvent]:
            if isinstance(item, RetryAttempt):
                return [
                    RetryScheduled(
                        **head,
                        retry_number=item.retry_number,
                        delay_s=item.delay,
                        error=str(item.error),
                        budget_remaining=item.budget_remaining,
                    )
                ]
            if not self.deltas:  # nobody sees deltas: fold only (the hot path of `call`)
                fold.add(item)
                return ()
            calls_before = fold.call_count
            fold.add(item)
            events: list[AgentEvent] = []
            if item.thinking:
                events.append(ThinkingDelta(**head, text=item.thinking))
            if item.text:
                events.append(TextDelta(**head, text=item.text))
            for delta in item.tool_calls:
                call_id = fold.call_id_of(delta)
                if fold.call_count > calls_before:
                    calls_before += 1
                    events.append(
                        ToolCallStarted(**head, index=delta.index, call_id=call_id, name=delta.name)
                    )
                if delta.arguments:
                    events.append(
                        ToolCallArgumentsDelta(
                            **head, index=delta.index, call_id=call_id, fragment=delta.arguments
                        )
                    )
            return events

        def on_done() -> list[AgentEvent]:
            message = fold.message()
            usage = fold.usage
            self.usage.add(usage)
            self.last_message = message
            self.state.messages.append(message)
            if self.quiet:
                return []
            finished = ModelCallFinished(
                **head,
                iteration=step.iteration,
                usage=usage if usage is not None else Usage(),
                latency_s=time.perf_counter() - started_at,
                finish_reason=fold.finish_reason,
            )
            completed = [ToolCallCompleted(**head, call=c) for c in message.tool_calls]
            return [finished, *completed, MessageCompleted(**head, message=message)]

        opening = self.phase_to("THINKING")
        if not self.quiet:
            opening.append(
                ModelCallStarted(
                    **head,
                    iteration=step.iteration,
                    model=model.model_name,
                    messages=len(request.messages),
                    tools=[t.name for t in request.tools],
                )
            )

        def step_down(error: Exception) -> Observable[AgentEvent] | None:
            return self.step_down_tool_choice(error, request, step)

        recover = step_down if request.tool_choice is not None else None

        # Retries happen inside the model's stream; the budget's listener feeds them through on_item, so
        # they surface as events in order, between the attempts, with no Subject in the hot path.
        def retries(push: Callable[[ChatChunk | RetryAttempt], None]) -> Callable[[], None]:
            return self.budget.add_listener(push)

        source: Observable[ChatChunk | RetryAttempt] = call(request)
        return source.pipe(
            frame(
                on_item,
                before=lambda: opening,
                after=on_done,
                recover=recover,
                until=self.control.on_interrupt,
                inject=retries,
            )
        )

    def step_down_tool_choice(
        self, error: Exception, request: ChatRequest, step: ReasoningStep
    ) -> Observable[AgentEvent] | None:
        """The model rejected the forced tool choice (400): retry this step one rung lower on the ladder.

        Returns ``None`` (the error stands) for any other error, or when there is no lower rung.
        """
        if not isinstance(error, ModelHTTPError) or error.status != 400:
            return None
        self.tool_choice_rung += 1
        lower = self.output_tool_choice(len(request.tools))
        if lower == request.tool_choice:
            return None
        note = ErrorEvent(
            **self.head,
            error_type=type(error).__name__,
            message=f"{error}; retrying with tool_choice={lower!r}",
        )
        return reactivex.concat(_just(note), reactivex.defer(lambda _: self.reasoning_inner(step)))

    # ---- after a reasoning step ---------------------------------------------------------------------

    def after_reasoning(self) -> Observable[AgentEvent]:
        message = self.last_message
        if self.control.interrupted:
            return self.interrupted_end()
        if message is None:
            return self.finish("NO_ANSWER", None, detail="the reasoning step produced no message")
        output = self.agent.output
        calls = message.tool_calls
        if output is not None and any(c.name == OUTPUT_TOOL for c in calls):
            return self.structured_from_tool(message)
        if calls:
            self.then(self.after_acting)
            return self.acting(ActingStep(self.iteration, calls))
        if not message.has_answer_text:
            if self.reprompted:
                return self.finish("NO_ANSWER", message, detail="the model gave no answer text twice")
            self.reprompted = True
            self.state.messages.append(_NO_ANSWER_PROMPT)
            return self.loop()
        if output is None:
            return self.finish("MODEL_STOP", message)
        if self.structured_path() == "native":
            try:
                value = output.validate_text(message.text)
            except ValueError as error:
                return self.structured_retry(str(error), None)
            return self.finish("STRUCTURED_OUTPUT", message, structured=value)
        return self.structured_retry(
            f"you answered in text; call the `{OUTPUT_TOOL}` tool with the answer", None
        )

    def structured_from_tool(self, message: Msg) -> Observable[AgentEvent]:
        output = self.agent.output
        assert output is not None
        results: list[ToolResultBlock] = []
        accepted: Any = None
        problem: str | None = None
        for call in message.tool_calls:
            if call.name != OUTPUT_TOOL:
                results.append(
                    result_of(call, "Not run: the final answer was given in the same message.", "error")
                )
                continue
            if accepted is not None:
                results.append(result_of(call, "Ignored: an answer was already accepted.", "error"))
                continue
            try:
                if call.state != "complete" or call.input is None:
                    raise ValueError(call.error or "the arguments could not be read")
                accepted = output.validate(call.input)
                results.append(result_of(call, "Answer accepted.", "ok"))
            except ValueError as error:
                problem = str(error)
                results.append(
                    result_of(
                        call,
                        f"Invalid answer: {problem}. Call `{OUTPUT_TOOL}` again with corrected arguments.",
                        "error",
                    )
                )
        tool_message = Msg.from_tool_results(*results)
        self.state.messages.append(tool_message)
        closing: list[AgentEvent] = [MessageCompleted(**self.head, message=tool_message)]
        if accepted is not None:
            return reactivex.concat(
                _just(*closing), self.finish("STRUCTURED_OUTPUT", message, structured=accepted)
            )
        return reactivex.concat(
            _just(*closing), self.structured_retry(problem or "invalid answer", tool_message)
        )

    def structured_retry(self, problem: str, tool_message: Msg | None) -> Observable[AgentEvent]:
        self.structured_attempts += 1
        if self.structured_attempts > self.agent.options.structured_retries:
            why = f"no valid structured output in {self.structured_attempts} attempts: {problem}"
            return self.finish("STRUCTURED_OUTPUT", self.last_message, structured_error=why)
        if tool_message is None:
            feedback = Msg.user(f"Your answer did not match the required output: {problem}. Try again.")
            self.state.messages.append(feedback)
        return self.loop()

    # ---- acting ------------------------------------------------------------------------------------

    def acting(self, step: ActingStep, approved_ids: set[str] | None = None) -> Observable[AgentEvent]:
        approved = approved_ids or set()

        def inner(acting_step: ActingStep) -> Observable[AgentEvent]:
            return self.acting_inner(acting_step, approved)

        return chain(self.agent.middleware, "acting", self.ctx, inner)(step)

    def acting_inner(self, step: ActingStep, approved: set[str]) -> Observable[AgentEvent]:
        head = self.head
        batch: list[ToolBatchFinished] = []
        durations: dict[str, float] = {}

        def on_tool_event(event: ToolEvent) -> list[AgentEvent]:
            if isinstance(event, ToolCallFinished):
                durations[event.call.id] = event.duration_s
                self.finished_calls[event.call.id] = event.result
                return []
            if isinstance(event, ToolBatchFinished):
                batch.append(event)
                return []
            if self.quiet:
                return []
            if isinstance(event, ToolBodyStarted):
                return [ToolExecutionStarted(**head, call=event.call)]
            if isinstance(event, ToolCallProgress):
                update = event.update
                return [
                    ToolProgress(
                        **head,
                        call_id=event.call.id,
                        name=event.call.name,
                        message=update.message,
                        fraction=update.fraction,
                        data=update.data,
                    )
                ]
            if isinstance(event, ToolPermissionRequired):
                return [ToolPermissionAsked(**head, call=event.call, reason=event.decision.reason)]
            return [ToolSuspended(**head, call=event.call)]

        def done() -> list[AgentEvent]:
            return self.batch_done(step, batch[0] if batch else None, durations)

        def system_error(error: Exception) -> Observable[AgentEvent] | None:
            if not isinstance(error, ToolSystemError):
                return None
            event = ErrorEvent(**head, error_type=type(error).__name__, message=str(error))
            self.ending = AgentResult(
                **head, message=None, reason="ERROR", detail=f"tool system error: {error}"
            )
            return _just(event)

        opening = [*self.phase_to("TOOL_PENDING"), *self.phase_to("TOOL_EXECUTING")]
        return self.executor.execute(step.calls, self.view, self.ctx, approved=approved).pipe(
            frame(
                on_tool_event,
                before=lambda: opening,
                after=done,
                recover=system_error,
                until=self.control.on_interrupt,
            )
        )

    def batch_done(
        self, step: ActingStep, batch: ToolBatchFinished | None, durations: Mapping[str, float]
    ) -> list[AgentEvent]:
        head = self.head
        if batch is None:  # interrupted before the batch finished: settled by `interrupted_end`
            return []
        self.finished_calls.clear()
        events: list[AgentEvent] = (
            []
            if self.quiet
            else [
                ToolResult(**head, result=r, duration_s=durations.get(r.tool_use_id, 0.0))
                for r in batch.results
            ]
        )
        self.state.partial_results.extend(batch.results)
        for waiting in batch.waiting:
            if isinstance(waiting, ToolPermissionRequired):
                self.state.pending.append(
                    PendingCall(call=waiting.call, kind="ask", reason=waiting.decision.reason)
                )
            else:
                self.state.pending.append(PendingCall(call=waiting.call, kind="external"))
        if self.state.pending:
            return events
        events.extend(self.close_tool_batch())
        events.extend(self.repeat_guard(step.calls, batch.results))
        if batch.return_direct:
            answer = Msg.assistant(
                "\n".join(r.text for r in batch.results), metadata={"rxagent": "return_direct"}
            )
            self.ending = AgentResult(**head, message=answer, reason="TOOL_RETURN_DIRECT")
        return events

    def close_tool_batch(self) -> list[AgentEvent]:
        """Send the finished batch's results as one tool message, in the order of the calls."""
        results = self.state.partial_results
        if not results:
            return []
        order = {c.id: i for i, c in enumerate(self.calls_of_last_assistant())}
        ordered = sorted(results, key=lambda r: order.get(r.tool_use_id, len(order)))
        message = Msg.from_tool_results(*ordered)
        self.state.messages.append(message)
        self.state.partial_results = []
        closing = self.phase_to("OBSERVING")
        if not self.quiet:
            closing.append(MessageCompleted(**self.head, message=message))
        return closing

    def calls_of_last_assistant(self) -> tuple[ToolUseBlock, ...]:
        for message in reversed(self.state.messages):
            if message.role == "assistant":
                return message.tool_calls
        return ()

    def repeat_guard(
        self, calls: Sequence[ToolUseBlock], results: Sequence[ToolResultBlock]
    ) -> list[AgentEvent]:
        threshold = self.agent.options.repeat_guard
        if threshold == 0:
            return []
        by_id = {r.tool_use_id: r for r in results}
        events: list[AgentEvent] = []
        for call in calls:
            result = by_id.get(call.id)
            if result is None:
                continue
            key = (call.name, call.raw_arguments, result.text)  # the same text: no need to re-encode
            self.repeat_count = self.repeat_count + 1 if key == self.repeat_key else 1
            self.repeat_key = key
            if self.repeat_count >= threshold:
                hint = (
                    f"You have called `{call.name}` with the same arguments {self.repeat_count} times in a "
                    "row and got the same result each time. Repeating it will not help: change your "
                    "approach, use another tool, or answer with what you know."
                )
                self.state.messages.append(Msg.system(hint, metadata={"rxagent": "repeat_guard"}))
                arguments: JsonValue = call.input
                events.append(
                    RepeatGuardTriggered(
                        **self.head, tool=call.name, arguments=arguments, count=self.repeat_count
                    )
                )
                self.repeat_count = 0
                self.repeat_key = None
        return events

    def after_acting(self) -> Observable[AgentEvent]:
        if self.control.interrupted:
            return self.interrupted_end()
        ending = self.ending
        if ending is not None:
            return self.finish(ending.reason, ending.message, detail=ending.detail)
        if self.state.pending:
            asking = any(p.kind == "ask" for p in self.state.pending)
            return self.finish("PERMISSION_ASKING" if asking else "TOOL_SUSPENDED", None)
        self.state.messages.extend(self.deferred_input)
        self.deferred_input = []
        return self.loop()

    def interrupted_end(self) -> Observable[AgentEvent]:
        """The run ends with reason INTERRUPTED, its dangling calls settled (see :meth:`settle`)."""
        closing = self.settle(
            "Interrupted by the user before it finished.", "interrupted", answer_waiting=True
        )
        message = (
            self.last_message if self.last_message is not None and self.last_message.has_answer_text else None
        )
        return reactivex.concat(_just(*closing), self.finish("INTERRUPTED", message))

    def settle(self, unfinished: str, status: ToolResultStatus, *, answer_waiting: bool) -> list[AgentEvent]:
        """Answer the calls of the last assistant message that ran or were running; close the batch if done.

        Calls that finished keep their real results (a charge that went through stays recorded as done,
        so the model does not charge again); calls still running get ``unfinished`` with ``status``.
        Calls waiting for a decision or a result are answered as interrupted when ``answer_waiting``
        (an interrupt: the user moved on), else they stay pending (a cancel or a failure changes no
        decision the caller still has to make).
        """
        answered = {r.tool_use_id for r in self.state.partial_results}
        waiting = {p.call.id for p in self.state.pending}
        last = self.state.messages[-1] if self.state.messages else None
        dangling = last.tool_calls if last is not None and last.role == "assistant" else ()
        for call in dangling:
            if call.id in answered or (call.id in waiting and not answer_waiting):
                continue
            finished = self.finished_calls.get(call.id)
            if finished is not None:
                self.state.partial_results.append(finished)
            elif call.id in waiting:
                self.state.partial_results.append(result_of(call, "Interrupted by the user.", "interrupted"))
            else:
                self.state.partial_results.append(result_of(call, unfinished, status))
        self.finished_calls.clear()
        if answer_waiting:
            for pending in self.state.pending:  # waiting calls outside that message (a damaged state)
                if pending.call.id not in answered and all(c.id != pending.call.id for c in dangling):
                    self.state.partial_results.append(
                        result_of(pending.call, "Interrupted by the user.", "interrupted")
                    )
            self.state.pending = []
        return [] if self.state.pending else self.close_tool_batch()
