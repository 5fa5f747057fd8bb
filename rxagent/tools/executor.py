"""Run a batch of tool calls as an observable of :mod:`~rxagent.tools.events`.

For each call, in this order: refuse argument text over the toolkit's size limit; reject unparseable
arguments and calls of tools this run cannot see (error results, nothing runs); ask the permission gate
(deny → ``denied`` result, ask → :class:`ToolPermissionRequired`, nothing runs); suspend external tools
once their arguments pass the tool's schema (the caller runs them on what it is given; arguments that do
not fit get an error result, for the model to fix, as a local tool's do); then pass the call through the
interceptor chain (the ``tool_call`` cut point), whose innermost step coerces, validates and converts the
arguments, adds presets, asks the gate again if an interceptor changed the arguments, and runs the body
with the tool's timeout.

Scheduling: with ``parallel=False`` calls run one after another. With ``parallel=True`` consecutive
concurrency-safe calls run together (at most ``max_concurrency`` at once) and every other call is a
barrier that runs alone. Finished events come as calls finish; :class:`ToolBatchFinished` comes last with
the results in the order of the calls.

Failures: an ordinary exception from a tool becomes an ``error`` result with its message, so the model
can adapt; a timeout (on the executor's ``clock``) becomes an ``error`` result;
:class:`~rxagent.tools.ToolSystemError` fails the whole batch (``on_error``), disposing the calls still
running.

Cancellation: disposing the batch cancels running async tools (their ``finally`` blocks run). A sync tool
already running in a worker thread cannot be stopped by Python: it runs to the end in its thread, its
result is discarded, and its :attr:`ToolContext.cancelled` turns true so a cooperative tool can return
early. Nothing is emitted after dispose.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeAlias, runtime_checkable

import pydantic_core
import reactivex
from pydantic import BaseModel
from reactivex import Observable, abc
from reactivex import operators as ops

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent
from rxagent.messages import TextBlock, ToolResultBlock, ToolResultStatus, ToolUseBlock
from rxagent.operators import Frame, Source, run_steps, running_loop, start_task, sync_of
from rxagent.tools._tool import ProgressUpdate, Tool, ToolContext, ToolSystemError
from rxagent.tools.arguments import ArgumentProblem, ToolArgumentError, parse_arguments
from rxagent.tools.events import (
    ToolBatchFinished,
    ToolBodyStarted,
    ToolCallNested,
    ToolCallProgress,
    ToolCallSettled,
    ToolCallSuspended,
    ToolEvent,
    ToolPermissionRequired,
)
from rxagent.tools.permissions import Permissions
from rxagent.tools.toolkit import ToolView, Unavailable

__all__ = [
    "ToolCallNext",
    "ToolExecutor",
    "ToolInterceptor",
    "ToolInvocation",
    "ToolJournal",
    "ToolRecordingError",
    "result_of",
]


@dataclass(frozen=True, slots=True)
class ToolInvocation:
    """One call on its way through the interceptor chain.

    Attributes:
        call: the model's call.
        tool: the tool it resolved to.
        arguments: the JSON arguments to use (an interceptor may replace them with :meth:`with_arguments`).
        presets: values injected at execution; they always win and are never shown to the model.
    """

    call: ToolUseBlock
    tool: Tool
    arguments: Mapping[str, Any]
    presets: Mapping[str, Any] = field(default_factory=lambda: {})

    def with_arguments(self, arguments: Mapping[str, Any]) -> ToolInvocation:
        """The same invocation with other arguments (the gate checks them again before running)."""
        return replace(self, arguments=dict(arguments))

    def finished(self, output: str, status: ToolResultStatus = "ok") -> Observable[ToolEvent]:
        """A stream holding just a result for this call: what a short-circuiting interceptor returns."""
        return sync_of(ToolCallSettled(self.call, result_of(self.call, output, status), 0.0))


@runtime_checkable
class ToolJournal(Protocol):
    """Where the executor records calls: before a body runs, and its result as soon as it finished."""

    async def dispatched(self, call: ToolUseBlock) -> None:
        """``call`` is about to run; return once that is recorded."""
        ...

    async def finished(self, result: ToolResultBlock) -> None:
        """A call finished with ``result``; return once that is recorded."""
        ...


ToolCallNext: TypeAlias = Callable[[ToolInvocation], Observable[ToolEvent]]
"""The rest of the chain: call it with an invocation to run the call (or let inner interceptors see it)."""

ToolInterceptor: TypeAlias = Callable[[ToolInvocation, RuntimeContext, ToolCallNext], Observable[ToolEvent]]
"""A ``tool_call`` hook: ``(invocation, context, next) -> events``. Rewrite the arguments and call
``next``, return :meth:`ToolInvocation.finished` to short-circuit, or pipe operators onto ``next(...)``.
Only the first :class:`ToolCallSettled` it emits counts."""


def result_of(call: ToolUseBlock, output: str, status: ToolResultStatus) -> ToolResultBlock:
    """A result block for ``call`` holding ``output`` as text."""
    # Validated, from plain data in one call: pydantic-core checks these fields (a string is taken as it
    # is, whatever its length) in less time than model_construct takes to skip checking them, in Python,
    # and than building the text block first (4.4 µs; this: 3.2 µs).
    return ToolResultBlock.model_validate(
        {
            "tool_use_id": call.id,
            "name": call.name,
            "output": ({"type": "text", "text": output},),
            "status": status,
        }
    )


def _output_text(value: Any) -> tuple[str, ToolResultStatus]:
    if isinstance(value, ToolResultBlock):
        return value.text, value.status
    if isinstance(value, str):
        return value, "ok"
    if value is None:
        return "(no output)", "ok"
    if isinstance(value, TextBlock):
        return value.text, "ok"
    if isinstance(value, BaseModel):
        return value.model_dump_json(), "ok"
    return pydantic_core.to_json(value, fallback=str).decode(), "ok"


@dataclass(frozen=True, slots=True)
class _Runnable:
    index: int
    invocation: ToolInvocation


@dataclass(eq=False)
class ToolExecutor:
    """Runs batches of tool calls for agents (or for you, directly).

    Attributes:
        parallel: run consecutive concurrency-safe calls together.
        max_concurrency: most calls running at once within a parallel stretch.
        permissions: the gate every call passes.
        interceptors: the ``tool_call`` chain, outermost first.
        default_timeout: seconds for tools without their own ``timeout`` (``None``: no limit).
        thread_pool: where sync tools run (``None``: the loop's default executor).
        journal: records each call before its body runs and its result right after (a session's log);
            a call that cannot be recorded does not run, and fails the batch with ``ToolSystemError``.
        clock: where tool timeouts run and call durations are measured: the loop's by default, a
            :class:`~rxagent.clock.VirtualClock` in tests (an agent passes its own).

    Example:
        >>> executor = ToolExecutor(parallel=True, permissions=Permissions().ask("refund"))
    """

    parallel: bool = True
    max_concurrency: int = 8
    permissions: Permissions = field(default_factory=Permissions)
    interceptors: Sequence[ToolInterceptor] = ()
    default_timeout: float | None = None
    thread_pool: Executor | None = None
    journal: ToolJournal | None = None
    clock: Clock = SYSTEM_CLOCK

    def __post_init__(self) -> None:
        if self.max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")

    def execute(
        self,
        calls: Sequence[ToolUseBlock],
        view: ToolView,
        context: RuntimeContext | None = None,
        *,
        approved: Collection[str] = (),
    ) -> Observable[ToolEvent]:
        """Run ``calls`` (see the module docstring); cold: each subscription runs the batch again.

        ``approved`` names calls a human already allowed: for them an *ask* decision counts as allow (a
        *deny* still refuses). This is how a run resumes after ``PERMISSION_ASKING``.

        Lifecycle:
            complete: after :class:`ToolBatchFinished`. error: a :class:`ToolSystemError` (or a bug in an
            interceptor) disposes the running calls and fails the stream. cancel: running async tools are
            cancelled; sync tools finish in their threads with their results discarded.
        """
        runtime = context or RuntimeContext()
        batch = tuple(calls)
        approved_ids = frozenset(approved)

        def subscribe(
            observer: abc.ObserverBase[ToolEvent], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            stages, direct = self._stages(batch, view, runtime, approved_ids)
            running = _Batch(observer, scheduler, batch, direct)
            if len(stages) == 1:  # the usual batch: no loop of stages to run it
                source = stages[0]()
            else:
                stages.reverse()  # last first: each stage is let go of as it starts
                running.stages = stages
                source = run_steps(running.next_stage)
            return running.attach(source)

        return Source(subscribe)

    def _stages(
        self,
        batch: tuple[ToolUseBlock, ...],
        view: ToolView,
        runtime: RuntimeContext,
        approved: frozenset[str],
    ) -> tuple[list[Callable[[], Observable[ToolEvent]]], bool]:
        """The batch's stages in order, each started lazily (by run_steps: a call starts, and its arguments
        are prepared, only once the calls before its stage have finished); and whether every call's tool
        returns its result directly."""
        stages: list[Callable[[], Observable[ToolEvent]]] = []
        group: list[Callable[[], Observable[ToolEvent]]] = []

        def flush() -> None:
            if len(group) == 1:  # a stretch of one call (the usual batch): the call is the stage
                stages.append(group.pop())
            elif group:
                members = tuple(group)
                stages.append(lambda: self._together([start() for start in members]))
                group.clear()

        direct = bool(batch)
        for index, call in enumerate(batch):
            planned = self._plan(index, call, view, runtime, call.id in approved)
            if isinstance(planned, _Runnable):
                tool = planned.invocation.tool
                direct = direct and tool.traits.return_direct
                start = functools.partial(self._run, planned.invocation, runtime)
                if self.parallel and tool.traits.concurrency_safe:
                    group.append(start)
                    continue
                flush()
                stages.append(start)
            else:
                direct = False
                group.append(functools.partial(sync_of, planned))
        flush()
        return stages, direct

    def _together(self, streams: list[Observable[ToolEvent]]) -> Observable[ToolEvent]:
        return reactivex.from_iterable(streams).pipe(ops.merge(max_concurrent=self.max_concurrency))

    # ---- before anything runs ----------------------------------------------------------------------

    def _plan(
        self, index: int, call: ToolUseBlock, view: ToolView, runtime: RuntimeContext, approved: bool
    ) -> _Runnable | ToolEvent:
        def reject(text: str, status: ToolResultStatus = "error") -> ToolCallSettled:
            return ToolCallSettled(call, result_of(call, text, status), 0.0)

        limit = view.toolkit.max_argument_chars
        if len(call.raw_arguments) > limit:
            return reject(
                f"Invalid arguments for tool '{call.name}': the argument text is {len(call.raw_arguments):,} "
                f"characters, over the limit of {limit:,}. Send shorter arguments."
            )
        resolved = view.resolve(call.name)
        if isinstance(resolved, Unavailable):
            return reject(resolved.message)
        try:
            arguments = self._arguments_of(call)
        except ToolArgumentError as error:
            return reject(str(error))
        tool = resolved.tool
        decision = self.permissions.decide(tool, {**arguments, **resolved.presets}, runtime)
        if decision.decision == "deny":
            return reject(f"Permission denied for tool '{tool.name}': {decision.reason}", "denied")
        if decision.decision == "ask" and not approved:
            return ToolPermissionRequired(call, decision)
        if tool.traits.external:
            try:  # the caller runs it: what it gets must fit the schema, as a local body's arguments do
                tool.prepare(arguments, resolved.presets)
            except ToolArgumentError as error:
                return reject(str(error))
            return ToolCallSuspended(call)
        return _Runnable(index, ToolInvocation(call, tool, arguments, resolved.presets))

    @staticmethod
    def _arguments_of(call: ToolUseBlock) -> dict[str, Any]:
        if call.state == "invalid":
            detail = call.error or "the arguments could not be read"
            raise ToolArgumentError(call.name, [ArgumentProblem("(arguments)", "json", detail)])
        if call.input is not None:
            return dict(call.input)
        return parse_arguments(call.name, call.raw_arguments)

    # ---- the chain -----------------------------------------------------------------------------------

    def _run(self, invocation: ToolInvocation, runtime: RuntimeContext) -> Observable[ToolEvent]:
        checked = invocation.arguments
        if not self.interceptors:
            return self._invoke(invocation, runtime, checked)  # already lazy: stages start when due

        def innermost(current: ToolInvocation) -> Observable[ToolEvent]:
            return self._invoke(current, runtime, checked)

        chain: ToolCallNext = innermost
        for interceptor in reversed(self.interceptors):
            chain = functools.partial(_call_interceptor, interceptor, runtime, chain)

        def guarded(_: abc.SchedulerBase | None) -> Observable[ToolEvent]:
            # Exactly one result per call: the first one an interceptor emits ends the call, and a chain
            # that completes without one gets an error result instead of leaving the call unanswered.
            answered = False

            def mark(event: ToolEvent) -> None:
                nonlocal answered
                answered = answered or isinstance(event, ToolCallSettled)

            def missing_result(_: abc.SchedulerBase | None) -> Observable[ToolEvent]:
                if answered:
                    return reactivex.empty()
                text = "the tool_call interceptor chain ended without a result for this call"
                return invocation.finished(text, "error")

            return chain(invocation).pipe(
                ops.take_while(lambda event: not isinstance(event, ToolCallSettled), inclusive=True),
                ops.do_action(mark),
                ops.concat(reactivex.defer(missing_result)),
            )

        return reactivex.defer(guarded)

    def _invoke(
        self, invocation: ToolInvocation, runtime: RuntimeContext, checked: Mapping[str, Any]
    ) -> Observable[ToolEvent]:
        call, tool = invocation.call, invocation.tool
        if invocation.arguments is not checked:
            final = {**invocation.arguments, **invocation.presets}
            decision = self.permissions.decide(tool, final, runtime)
            if decision.decision != "allow":
                text = (
                    f"Permission {decision.decision} for tool '{tool.name}' after its arguments were "
                    f"rewritten: {decision.reason}"
                )
                return sync_of(_settled(call, text, "denied", 0.0))
        try:
            values = tool.prepare(invocation.arguments, invocation.presets)
        except ToolArgumentError as error:
            return sync_of(_settled(call, str(error), "error", 0.0, error=type(error).__name__))
        except Exception as error:
            # e.g. a schema whose $ref cannot be resolved: this call fails, not the whole batch
            kind = type(error).__name__
            text = f"Error: the arguments of tool '{tool.name}' could not be checked: {kind}: {error}"
            return sync_of(_settled(call, text, "error", 0.0, error=kind))
        timeout = tool.traits.timeout if tool.traits.timeout is not None else self.default_timeout

        def subscribe(
            observer: abc.ObserverBase[ToolEvent], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            running = _ToolCall(self, observer, call, tool, runtime)
            observer.on_next(ToolBodyStarted(call, values))
            body = running.body(values, timeout, self.clock.now())
            running.task = start_task(running.loop, body, f"rxagent.tool:{tool.name}")
            return running

        return Source(subscribe)


class _Batch(Frame[ToolEvent, ToolEvent]):
    """One subscription of :meth:`ToolExecutor.execute`: its stages' events as they pass, and the batch's
    end with the results in the order of the calls.

    A :class:`~rxagent.operators.Frame` with methods, not ``frame`` with closures: a run waiting for its
    tools keeps it alive, and the garbage collector walks every object a run keeps (see
    ``rxagent/operators/_source.py``).
    """

    __slots__ = ("_batch", "_direct", "_results", "_waiting", "stages")

    def __init__(
        self,
        observer: abc.ObserverBase[ToolEvent],
        scheduler: abc.SchedulerBase | None,
        batch: tuple[ToolUseBlock, ...],
        direct: bool,
    ) -> None:
        super().__init__(observer, scheduler)
        self._batch = batch
        self._results: dict[int, ToolResultBlock] | None = None
        self._waiting: dict[int, ToolPermissionRequired | ToolCallSuspended] | None = None
        self._direct = direct
        """Every call's tool returns its result directly (unless a result says otherwise)."""
        self.stages: list[Callable[[], Observable[ToolEvent]]] | None = None
        """The stages not started yet, last first (a batch of several stages)."""

    def next_stage(self) -> Observable[ToolEvent] | None:
        """The next stage's events, or ``None`` after the last."""
        stages = self.stages
        return stages.pop()() if stages else None

    def _index_of(self, call: ToolUseBlock) -> int:
        for index, planned in enumerate(self._batch):
            if planned is call:
                return index
        return len(self._batch)

    def each(self, value: ToolEvent) -> tuple[ToolEvent]:
        """Note each call's result, or that it waits, as it passes."""
        if isinstance(value, ToolCallSettled):
            if self._results is None:
                self._results = {}
            self._results[self._index_of(value.call)] = value.result
        elif isinstance(value, ToolPermissionRequired | ToolCallSuspended):
            if self._waiting is None:
                self._waiting = {}
            self._waiting[self._index_of(value.call)] = value
        return (value,)

    def after(self) -> tuple[ToolBatchFinished]:
        """The batch's end: the results in the order of the calls, and the calls that wait."""
        results, waiting = self._results or {}, self._waiting or {}
        ordered = tuple(results[i] for i in sorted(results))
        all_direct = self._direct and not waiting and all(r.status == "ok" for r in ordered)
        return (ToolBatchFinished(ordered, tuple(waiting[i] for i in sorted(waiting)), all_direct),)


def _settled(
    call: ToolUseBlock,
    text: str,
    status: ToolResultStatus,
    duration: float,
    value: Any = None,
    error: str | None = None,
) -> ToolCallSettled:
    return ToolCallSettled(call, result_of(call, text, status), duration, value, error)


class _ToolCall(abc.DisposableBase):
    """One subscription of a tool call: the task that runs the body, and the disposable its subscriber
    holds (one object with slots, not closures: see ``rxagent/operators/_source.py``)."""

    __slots__ = ("_call", "_context", "_executor", "_observer", "_tool", "disposed", "done", "loop", "task")

    def __init__(
        self,
        executor: ToolExecutor,
        observer: abc.ObserverBase[ToolEvent],
        call: ToolUseBlock,
        tool: Tool,
        runtime: RuntimeContext,
    ) -> None:
        self.loop = running_loop("a tool call")
        self._executor = executor
        self._observer = observer
        self._call = call
        self._tool = tool
        self.done = False
        """The call has sent its result (or failed): progress and nested events are not heard any more."""
        self.disposed = False
        self.task: asyncio.Task[None] | None = None
        self._context: ToolContext | None = ToolContext(
            call.id, tool.name, runtime, self.emit_progress, self.emit_nested
        )

    def emit_progress(self, update: ProgressUpdate) -> None:
        """A progress update of the running tool, as an event of the call."""
        if not self.done:
            self._observer.on_next(ToolCallProgress(self._call, update))

    def emit_nested(self, event: AgentEvent) -> None:
        """An event of a run nested in the call (an agent used as a tool), as an event of the call."""
        if not self.done:
            self._observer.on_next(ToolCallNested(self._call, event))

    async def body(self, values: Mapping[str, Any], limit: float | None, started: float) -> None:
        """Record the call, run the tool (at most ``limit`` seconds), record its result, emit it (the task's
        body)."""
        try:
            call, tool, observer = self._call, self._tool, self._observer
            clock, journal = self._executor.clock, self._executor.journal
            tool_context = self._context
            assert tool_context is not None  # until the body ends
            if journal is not None:
                try:
                    await journal.dispatched(call)
                except Exception as error:  # unrecorded, it must not run: a crash would forget it
                    self.done = True
                    why = f"the call of '{tool.name}' could not be recorded before it ran: {error}"
                    observer.on_error(_unrecorded(why, error))
                    return
            try:
                if limit is None:  # no deadline to keep: the body runs as it is
                    try:
                        value = await self._invoke(values, tool_context)
                    except TimeoutError:
                        raise _ToolRaisedTimeout() from None
                else:
                    async with clock.timeout(limit) as deadline:
                        try:
                            value = await self._invoke(values, tool_context)
                        except TimeoutError:
                            if deadline.expired():
                                raise
                            raise _ToolRaisedTimeout() from None
            except ToolSystemError as error:
                self.done = True
                observer.on_error(error)
                return
            except TimeoutError:
                tool_context.cancel()
                text = f"Tool '{tool.name}' timed out after {limit:g} s."
                event = _settled(call, text, "error", clock.now() - started, error="TimeoutError")
            except _ToolRaisedTimeout:
                text = f"Error: tool '{tool.name}' raised TimeoutError"
                event = _settled(call, text, "error", clock.now() - started, error="TimeoutError")
            except asyncio.CancelledError:
                raise
            except Exception as error:
                kind = type(error).__name__
                event = _settled(call, f"Error: {kind}: {error}", "error", clock.now() - started, error=kind)
            else:
                kind = None
                try:
                    text, status = _output_text(value)
                except Exception as error:  # a result that cannot be turned into text is the tool's error
                    text, status = f"Error: the tool's result could not be encoded: {error}", "error"
                    kind = type(error).__name__
                event = _settled(call, text, status, clock.now() - started, value, kind)
            if journal is not None:
                try:
                    await journal.finished(event.result)
                except Exception as error:
                    self.done = True
                    why = f"the result of '{tool.name}' could not be recorded: {error}"
                    observer.on_error(_unrecorded(why, error))
                    return
            self.done = True
            observer.on_next(event)
            if not self.disposed:  # a downstream `take` may have ended the call at its result
                observer.on_completed()
        finally:
            # The tool's context calls back into this object: cut that cycle once the call has ended, so
            # reference counting frees the call.
            self._context = None

    def _invoke(self, values: Mapping[str, Any], tool_context: ToolContext) -> Awaitable[Any]:
        # A plain function returning what to await (not a coroutine of its own, kept while the tool runs).
        tool = self._tool
        if tool.is_async:
            running: Awaitable[Any] = tool.invoke(values, tool_context)
            return running
        # The worker thread runs in a copy of this task's context (as asyncio.to_thread does), so the
        # run's log ids and span reach the tool.
        context = contextvars.copy_context()
        work = functools.partial(tool.invoke, values, tool_context)
        return self.loop.run_in_executor(self._executor.thread_pool, context.run, work)

    def dispose(self) -> None:
        """Cancel the call: its task is cancelled (an async tool's ``finally`` runs; a sync tool's result
        is discarded), and its context says so. Idempotent."""
        if self.disposed:
            return
        self.done = self.disposed = True
        if self._context is not None:
            self._context.cancel()
        if self.task is not None:
            self.task.cancel()
        self._context = None  # the cycle the body's end cuts, cut here for a body that never started


class ToolRecordingError(ToolSystemError):
    """The journal could not record a call (before it ran) or its result (after): the batch fails, and what
    the log knows of the call is left as it is (a call whose result is missing stays uncertain)."""


def _unrecorded(why: str, error: Exception) -> ToolRecordingError:
    failure = ToolRecordingError(why)
    failure.__cause__ = error
    return failure


class _ToolRaisedTimeout(Exception):
    """The tool itself raised TimeoutError (not our deadline): an ordinary tool error."""


def _call_interceptor(
    interceptor: ToolInterceptor, runtime: RuntimeContext, inner: ToolCallNext, invocation: ToolInvocation
) -> Observable[ToolEvent]:
    return interceptor(invocation, runtime, inner)
