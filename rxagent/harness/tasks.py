"""Background subagent tasks: work a parent agent hands to a named subagent, which runs on while it goes on.

:class:`BackgroundTasks` is the host of one parent agent's tasks. Its :attr:`~BackgroundTasks.part` gives
the parent five tools and a section of its system prompt listing the subagents:

==============================  ==========================================================================
tool                            what it does
==============================  ==========================================================================
``start_task(agent, instr.)``   accepts a task and returns its id at once: the id says only that it was
                                accepted (and recorded); how it goes and its answer are read later
``task_status(task_id)``        ``queued`` (with its place in line), ``running``, ``finished``, ``failed``,
                                ``cancelled`` or ``interrupted``
``task_result(task_id, wait)``  the answer of a finished task; waits up to ``wait`` seconds (on the parent
                                agent's clock) for one still running, then says it still runs
``cancel_task(task_id)``        cancels it (its run stops, its session is saved and given back)
``resume_task(task_id)``        continues an interrupted, failed or cancelled task on its own session
==============================  ==========================================================================

The same operations are methods for the application (:meth:`~BackgroundTasks.start`,
:meth:`~BackgroundTasks.get`, :meth:`~BackgroundTasks.result`, :meth:`~BackgroundTasks.cancel`,
:meth:`~BackgroundTasks.resume`, :meth:`~BackgroundTasks.list`), each naming the parent session by a
context as ``agent.sessions`` does.

**A task is a session of its own**: ``"{parent session}/tasks/{task id}"``, of the parent's user, in the
parent agent's store. Its run is the subagent's run there, with the parent's trace id and attributes, and
the run that started it as ``parent_run_id`` in every event (:attr:`~BackgroundTasks.events` gives them
all, live). A caller's :class:`~rxagent.context.ToolScope` narrows the subagent as it narrows the parent.

**The parent's log records it** (:mod:`rxagent.session.facts`): ``task_started`` (appended before the task
runs at all), ``task_resumed``, then how it ended, ``task_finished`` (answer, usage),
``task_failed`` or ``task_cancelled``, and ``task_collected`` once a run counted its usage. Starts,
resumes and collections are written by the run that asks for them. An end is written as soon as the parent
session is free: at once when no run holds it, else right after the run that does (meanwhile the task's
status and answer are told from memory, and a run never waits for the record). Facts carry the task's
attempt (0, then one more per resume), so an attempt's end never ends the next one.

**Interrupted.** A task whose process stopped while it ran (or waited in line) has ``task_started`` (or
``task_resumed``) in its parent's log and no end; its own session's lease is not held by a live process
and its log's last run has no end (or none at all). It is reported ``interrupted``, and
:meth:`~BackgroundTasks.resume` (``resume_task``) continues its session: a run with no new input, which
goes on from what its log kept (a call whose outcome was lost is run again if its tool is idempotent or
read-only, as for any session). A task that ended after its parent's log was last written is read from its
own session's log.

**Usage rolls up into the run that collects it.** A task's token usage (its run's, nested agents
included) counts once, in the :class:`~rxagent.events.AgentResult` usage of the parent run whose
``task_result`` first returns the task's outcome (finished, or failed after it ran): the run that started
it when it reads it, otherwise a later one, whenever the task finished. ``task_collected`` keeps it from
being counted twice, restarts included. A cancelled task reports no usage (as a cancelled nested run);
every task's usage stays in its own session and in its ``task_finished``/``task_failed`` fact.

**Cancelling.** Cancelling the parent run (disposing its stream, cancelling the task awaiting ``call``)
cancels the tasks that run started or resumed and that are still queued or running;
:meth:`~BackgroundTasks.aclose` cancels every task of the host. A run that ends any other way (answered,
interrupted, failed) leaves its tasks running, for later runs of its session to read. A cancelled task's
run is disposed (its model call and tools cancelled, its session saved and its lease released) before the
task reports ``cancelled``; ``task_cancelled`` records why.

**Limits.** At most ``max_tasks`` tasks of the host run at once; the others wait in one line, first come
first served (``task_status`` gives the place).

**Subagents and their tools** are the user's (:class:`Subagent`): each names the parent's tools it may use,
and gets no tool its parent lacks unless the user grants it (``grant=``); :meth:`~BackgroundTasks.attach`
refuses a subagent that names a tool its parent does not have, naming it. No subagent gets the task tools
(a task does not start tasks). Subagents pass the parent's permission gate: a call that asks a person ends
its task ``failed``, the call waiting in the task's session (answer it there, through
``tasks.agents[name].session(info.context)``).

Example:
    >>> tasks = BackgroundTasks([Subagent("researcher", "Finds facts.", tools=["search"])])  # doctest: +SKIP
    >>> merged = compose_parts([tasks.part], "You are careful.")
    >>> agent = Agent(model, Toolkit([search, *merged.tools]), system_prompt=merged.instructions,
    ...               middleware=merged.middleware, store="sessions.db")
    >>> tasks.attach(agent)  # checks every subagent's tools against the agent's
    >>> result = await agent.call("Find out who built the Eiffel tower, in the background.")
    >>> await tasks.aclose()  # cancels what still runs, before the agent closes its store
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Literal, TypeAlias

from pydantic import Field, JsonValue
from reactivex import Observable
from reactivex import operators as ops
from reactivex.subject import Subject

from rxagent.agent import Agent, AgentInput, AgentOptions, Middleware
from rxagent.agent.inputs import RunInput
from rxagent.agent.loop import RunState
from rxagent.agent.middleware import AnyMiddleware
from rxagent.agent.react import AnyAgent
from rxagent.agent.sessions import session_key
from rxagent.clock import Clock
from rxagent.context import RunContext, RuntimeContext, ToolScope, run_context_of
from rxagent.events import AgentEvent, AgentResult, UsageTotals
from rxagent.harness._ids import task_session_id
from rxagent.harness._part import HarnessPart
from rxagent.messages import new_id
from rxagent.model.types import ChatModel
from rxagent.operators import Outcome, do_finally, last_value, start_task
from rxagent.session import Projection, StoredFact, UnreadableFactError, turns_of
from rxagent.session.owner import owner_gone
from rxagent.session.recorder import LOST_RUN
from rxagent.state import SessionKey
from rxagent.tools import SchemaTool, Tool, ToolContext, ToolTraits, tool

__all__ = [
    "MAX_WAIT",
    "TASK_TOOLS",
    "BackgroundTasks",
    "Subagent",
    "TaskError",
    "TaskInfo",
    "TaskStatus",
]

_log = logging.getLogger("rxagent")

TaskStatus: TypeAlias = Literal["queued", "running", "finished", "failed", "cancelled", "interrupted"]
"""Where a task is: waiting for a slot, running, answered, failed, cancelled, or stopped with its process
(resumable)."""

TASK_TOOLS = ("start_task", "task_status", "task_result", "cancel_task", "resume_task")
"""The names of the tools :attr:`BackgroundTasks.part` gives the parent (no subagent gets them)."""

MAX_WAIT = 600.0
"""The longest ``wait`` ``task_result`` takes, in seconds."""

_Ending: TypeAlias = Literal["finished", "failed", "cancelled"]
_TaskFact: TypeAlias = Literal[
    "task_started", "task_resumed", "task_finished", "task_failed", "task_cancelled", "task_collected"
]
_ENDS: dict[str, _Ending] = {
    "task_finished": "finished",
    "task_failed": "failed",
    "task_cancelled": "cancelled",
}
_ANSWERED = frozenset({"MODEL_STOP", "MAX_ITERATIONS", "STRUCTURED_OUTPUT", "TOOL_RETURN_DIRECT"})
"""The reasons of a run that gave its answer; any other ends a task as failed."""


class TaskError(ValueError):
    """A task operation that does not fit: an unknown subagent or task id (of this session), bad
    instructions or ``wait``, a task in a state the operation does not apply to, a closed or unattached
    host. Nothing was started, recorded or changed. The tools give the model this message."""


@dataclass(frozen=True, slots=True)
class Subagent:
    """A named subagent the parent can hand background tasks to.

    Attributes:
        name: what ``start_task`` calls it (letters, digits, ``_`` or ``-``; its runs' agent name).
        description: what the parent's model reads about it: what it is good at.
        system_prompt: its own instructions.
        tools: the parent's tools it may use, by name (a tool object or function counts by its name);
            ``None``: every tool of the parent but the task tools. A name the parent has no tool of is
            refused when the host is attached.
        grant: tools the parent does not have, given to this subagent all the same: the user's explicit
            grant (their names must not clash with the inherited ones).
        model: its model (``None``: the parent's).
        options: its loop options (``None``: the parent's).
        middleware: its middleware (the parent's is not inherited).

    Raises:
        ValueError: an invalid name, an empty description.
    """

    name: str
    description: str
    system_prompt: str | None = None
    tools: Sequence[str | Tool | Callable[..., object]] | None = None
    grant: Sequence[Tool | Callable[..., object]] = ()
    model: ChatModel | None = None
    options: AgentOptions | None = None
    middleware: Sequence[AnyMiddleware] = ()

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "a").replace("-", "a").isalnum():
            raise ValueError(f"a subagent's name must be letters, digits, '_' or '-', got {self.name!r}")
        if not self.description.strip():
            raise ValueError(f"subagent {self.name!r} needs a description: the parent's model chooses by it")
        if self.tools is not None:
            object.__setattr__(self, "tools", tuple(self.tools))
        object.__setattr__(self, "grant", tuple(self.grant))
        object.__setattr__(self, "middleware", tuple(self.middleware))


@dataclass(frozen=True, slots=True)
class TaskInfo:
    """One task as its host reports it.

    Attributes:
        task_id: its id (what ``start_task`` returned).
        agent: the subagent that runs it.
        instructions: what it was asked.
        status: see :data:`TaskStatus`.
        user_id: the parent session's user (the task's session is that user's too).
        session_id: the task's own session (``"{parent session}/tasks/{task id}"``).
        attempt: 0, then one more for each resume.
        parent_run_id: the run that started (or last resumed) it (``None``: the application did).
        call_id: the ``start_task`` call that started it (``None``: the application did).
        run_id: its current attempt's run (``None``: none yet, or not known).
        answer: a finished task's answer.
        error: why it failed, was cancelled or was interrupted.
        usage: its attempt's token usage, when it ended having run (``None`` otherwise).
        collected: a parent run counted that usage already.
        position: a queued task's place in line (1: next to run).
    """

    task_id: str
    agent: str
    instructions: str
    status: TaskStatus
    user_id: str | None
    session_id: str
    attempt: int = 0
    parent_run_id: str | None = None
    call_id: str | None = None
    run_id: str | None = None
    answer: str | None = None
    error: str | None = None
    usage: UsageTotals | None = None
    collected: bool = False
    position: int | None = None

    @property
    def context(self) -> RuntimeContext:
        """The task's own session, as ``agent.sessions`` takes it (``tasks.agents[name].sessions``)."""
        return RuntimeContext(user_id=self.user_id, session_id=self.session_id)


# ---- the record of a task: its facts folded, or a live task's data -------------------------------------


@dataclass(slots=True, eq=False)
class _Record:
    task_id: str
    agent: str
    instructions: str
    key: SessionKey
    session_id: str
    call_id: str | None
    parent_run_id: str | None
    attempt: int = 0
    run_id: str | None = None
    ended: _Ending | None = None
    answer: str | None = None
    error: str | None = None
    usage: UsageTotals | None = None
    collected: bool = False

    @property
    def child_key(self) -> SessionKey:
        return (self.key[0], self.session_id)

    def info(
        self,
        status: TaskStatus,
        *,
        error: str | None = None,
        position: int | None = None,
        collected: bool = False,
    ) -> TaskInfo:
        return TaskInfo(
            task_id=self.task_id,
            agent=self.agent,
            instructions=self.instructions,
            status=status,
            user_id=self.key[0],
            session_id=self.session_id,
            attempt=self.attempt,
            parent_run_id=self.parent_run_id,
            call_id=self.call_id,
            run_id=self.run_id,
            answer=self.answer,
            error=error if error is not None else self.error,
            usage=dataclasses.replace(self.usage) if self.usage is not None else None,
            collected=self.collected or collected,
            position=position,
        )

    def started_fact(self) -> dict[str, JsonValue]:
        return {
            "task_id": self.task_id,
            "attempt": self.attempt,
            "agent": self.agent,
            "instructions": self.instructions,
            "session_id": self.session_id,
            "call_id": self.call_id,
        }

    def end_fact(self) -> tuple[_TaskFact, dict[str, JsonValue]]:
        data: dict[str, JsonValue] = {"task_id": self.task_id, "attempt": self.attempt, "run_id": self.run_id}
        usage: JsonValue = dataclasses.asdict(self.usage) if self.usage is not None else None
        if self.ended == "finished":
            return "task_finished", {**data, "answer": self.answer, "usage": usage}
        if self.ended == "failed":
            return "task_failed", {**data, "error": self.error, "usage": usage}
        return "task_cancelled", {**data, "why": self.error}


def _fold(facts: Iterable[StoredFact], key: SessionKey) -> dict[str, _Record]:
    """The tasks a parent session's log records, by id, in the order they started.

    Raises:
        UnreadableFactError: a task fact that cannot be read.
    """
    records: dict[str, _Record] = {}
    for fact in facts:
        if not fact.kind.startswith("task_"):
            continue
        try:
            _apply(records, fact, key)
        except (ValueError, KeyError, TypeError) as error:
            raise UnreadableFactError.of(fact, error) from error
    return records


def _apply(records: dict[str, _Record], fact: StoredFact, key: SessionKey) -> None:
    data = json.loads(fact.payload)
    task_id = str(data["task_id"])
    if fact.kind == "task_started":
        call_id = data.get("call_id")
        records[task_id] = _Record(
            task_id,
            str(data["agent"]),
            str(data["instructions"]),
            key,
            str(data["session_id"]),
            None if call_id is None else str(call_id),
            fact.run_id,
        )
        return
    record = records.get(task_id)
    attempt = int(data["attempt"])
    if record is None or attempt < record.attempt:  # no start recorded, or an earlier attempt's late end
        return
    if fact.kind == "task_resumed":
        if attempt > record.attempt:
            record.attempt, record.parent_run_id, record.run_id = attempt, fact.run_id, None
            record.ended = record.answer = record.error = record.usage = None
            record.collected = False
    elif fact.kind == "task_collected":
        record.collected = True
    elif record.ended is None and attempt == record.attempt:  # an end; the first one counts
        record.ended = _ENDS[fact.kind]
        run_id = data.get("run_id")
        record.run_id = None if run_id is None else str(run_id)
        usage = data.get("usage")
        record.usage = UsageTotals(**usage) if usage is not None else None
        record.answer = data.get("answer")
        record.error = data.get("error") if fact.kind == "task_failed" else data.get("why")


# ---- a live task --------------------------------------------------------------------------------------


class _Task:
    """A task this host runs: its record, its job, its place in line or slot, and how it ended."""

    __slots__ = ("cancel_why", "done", "job", "outcome", "record", "slot", "started")

    def __init__(self, record: _Record) -> None:
        self.record = record
        self.job: asyncio.Task[None] | None = None
        self.slot: asyncio.Future[None] | None = None
        """Resolved when a running task's end hands this queued task its slot."""
        self.started = False
        """It holds one of the host's slots (it runs)."""
        self.outcome: _Ending | None = None
        """How it ended; told (status, log) once ``done`` is set: after its session was given back."""
        self.cancel_why: str | None = None
        self.done = asyncio.Event()

    @property
    def ended(self) -> bool:
        return self.done.is_set()

    def cancel(self, why: str) -> None:
        job = self.job
        if job is not None and not job.done() and not self.ended:
            if self.cancel_why is None:
                self.cancel_why = why
            job.cancel()

    def end(self, outcome: _Ending, error: str | None = None, usage: UsageTotals | None = None) -> None:
        if self.outcome is None:
            self.outcome = outcome
            self.record.error, self.record.usage = error, usage


class _CancelWithRun(Middleware):
    """Cancels the tasks a parent run started or resumed when that run is cancelled."""

    watches_events = False

    def __init__(self, host: BackgroundTasks) -> None:
        self._host = host

    def agent(
        self, run: RunInput, ctx: RunContext, next: Callable[[RunInput], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        run_id = ctx.run_id
        return next(run).pipe(do_finally(lambda outcome: self._host._run_ended(run_id, outcome)))  # pyright: ignore[reportPrivateUsage]


# ---- the host -----------------------------------------------------------------------------------------


class BackgroundTasks:
    """The background tasks of one parent agent (see the module for the whole contract).

    Args:
        subagents: the named subagents tasks may go to (at least one; distinct names).
        max_tasks: most tasks running at once; the others wait in line (at least 1).
        max_instructions_chars: longest instructions a task takes.
        close_timeout: seconds :meth:`aclose` waits at most for the ends of cancelled tasks to be recorded
            in their parents' logs (a parent session held by a run that long keeps them out; the tasks'
            own sessions still say how they ended).

    Raises:
        ValueError: no subagent, two with one name, ``max_tasks`` below 1, a limit that is not positive.
    """

    def __init__(
        self,
        subagents: Iterable[Subagent],
        *,
        max_tasks: int = 2,
        max_instructions_chars: int = 20_000,
        close_timeout: float = 10.0,
    ) -> None:
        listed = tuple(subagents)
        if not listed:
            raise ValueError("give at least one Subagent: tasks go to a named subagent")
        names = [sub.name for sub in listed]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"subagents must have distinct names; given twice: {', '.join(twice)}")
        if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"max_tasks must be a whole number, at least 1, got {max_tasks!r}")
        if max_instructions_chars < 1:
            raise ValueError(f"max_instructions_chars must be at least 1, got {max_instructions_chars}")
        if not close_timeout >= 0:
            raise ValueError(f"close_timeout must be a number of seconds, 0 or more, got {close_timeout!r}")
        self.subagents: tuple[Subagent, ...] = listed
        """The subagents, as declared."""
        self.max_tasks = max_tasks
        self.max_instructions_chars = max_instructions_chars
        self.close_timeout = close_timeout
        self._parent: AnyAgent | None = None
        self._agents: dict[str, AnyAgent] = {}
        self._scopes: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        """Per subagent: the names of the tools it inherits from the parent, and of those it was granted."""
        self._tasks: dict[str, _Task] = {}
        """The tasks this host runs or ran, until the parent's log has their end."""
        self._collected: set[str] = set()
        """``"task id#attempt"`` of the usage counted by runs of this process (the log may lag behind)."""
        self._line: deque[_Task] = deque()
        self._running = 0
        self._recordings: set[asyncio.Task[None]] = set()
        self._events: Subject[AgentEvent] = Subject()
        self._closed = False
        self.part: HarnessPart = HarnessPart(
            "tasks",
            tools=(self._start_tool(), *_TaskTools(self).tools()),
            middleware=(_CancelWithRun(self),),
            instructions=self._instructions(),
        )
        """What the parent agent gets: the five task tools, the middleware that cancels a cancelled run's
        tasks, and the system prompt's section on tasks and subagents."""

    # ---- wiring ---------------------------------------------------------------------------------------

    def attach(self, agent: AnyAgent) -> None:
        """Bind the host to its parent ``agent`` (whose toolkit should hold :attr:`part`'s tools): check each
        subagent's tools against the agent's and build the subagents' agents, over the parent's store and
        clock, with the parent's permissions.

        Raises:
            ValueError: a subagent names a tool the parent does not have (named, with how to grant it), a task
                tool, or grants a tool whose name it also inherits.
            RuntimeError: the host is attached already, or closed.
        """
        if self._parent is not None:
            raise RuntimeError(f"these tasks are attached to agent {self._parent.name!r} already")
        if self._closed:
            raise RuntimeError("these tasks are closed")
        toolkit = agent.toolkit
        theirs = [name for name in toolkit.names if name not in TASK_TOOLS]
        agents: dict[str, AnyAgent] = {}
        scopes: dict[str, tuple[frozenset[str], frozenset[str]]] = {}
        for sub in self.subagents:
            wanted = theirs if sub.tools is None else [_tool_name(t) for t in sub.tools]
            for name in wanted:
                if name in TASK_TOOLS:
                    raise ValueError(f"subagent {sub.name!r} names {name!r}: a task does not start tasks")
                if name not in theirs:
                    raise ValueError(
                        f"subagent {sub.name!r} names the tool {name!r}, which its parent agent "
                        f"{agent.name!r} does not have (it has: {', '.join(theirs) or 'none'}); a subagent "
                        f"gets no tool its parent lacks unless you grant it: Subagent(..., grant=[{name}])"
                    )
            kit = toolkit.select(dict.fromkeys(wanted))
            granted: list[str] = []
            for extra in sub.grant:
                name = _tool_name(extra)
                if name in TASK_TOOLS or name in kit.names:
                    raise ValueError(
                        f"subagent {sub.name!r} is granted a tool named {name!r}, which it "
                        + ("may not have" if name in TASK_TOOLS else "inherits from its parent already")
                    )
                granted.append(kit.register(extra).name)
            scopes[sub.name] = (frozenset(wanted), frozenset(granted))
            agents[sub.name] = Agent(
                sub.model or agent.model,
                kit,
                system_prompt=sub.system_prompt,
                name=sub.name,
                options=sub.options or agent.options,
                middleware=sub.middleware,
                permissions=agent.permissions,
                store=agent.store,
                clock=agent.clock,
            )
        self._parent, self._agents, self._scopes = agent, agents, scopes

    @property
    def agents(self) -> Mapping[str, AnyAgent]:
        """The subagents' agents by name, once attached: their ``sessions`` read and reconcile the tasks'
        sessions (``tasks.agents["researcher"].sessions.state(info.context)``)."""
        return dict(self._agents)

    @property
    def events(self) -> Observable[AgentEvent]:
        """Every event of every task's run, live (hot: an observer sees what happens after it subscribes;
        per-token deltas are left out). Each carries its task's session id, the parent's trace id and the
        run that started the task as ``parent_run_id``; completes when the host closes."""
        return self._events

    # ---- the application's operations ----------------------------------------------------------------

    async def start(self, ctx: RuntimeContext | None, agent: str, instructions: str) -> TaskInfo:
        """Start a task for the parent session ``ctx`` names: ``agent`` works on ``instructions`` in its own
        session. Returns once ``task_started`` is in the parent's log (written by the run ``ctx`` is,
        when it is one of the parent's runs; else in the session's turn, after a run holding it).

        Raises:
            TaskError: an unknown subagent, empty or too long instructions, a closed or unattached host.
        """
        return await self._start(ctx, agent, instructions, None)

    async def get(self, ctx: RuntimeContext | None, task_id: str) -> TaskInfo:
        """The task ``task_id`` of the parent session ``ctx`` names, as it is now.

        Raises:
            TaskError: no such task in that session.
            UnreadableFactError: the parent's log (or the task's) cannot be read.
        """
        found = await self._find(session_key(ctx), task_id)
        return self._live_info(found) if isinstance(found, _Task) else await self._logged_info(found)

    async def list(self, ctx: RuntimeContext | None) -> list[TaskInfo]:
        """Every task of the parent session ``ctx`` names, in the order they started.

        Raises:
            UnreadableFactError: the parent's log (or a task's) cannot be read.
        """
        key = session_key(ctx)
        records = await self._records(key)
        live = {t.record.task_id: t for t in self._tasks.values() if t.record.key == key}
        listed: list[TaskInfo] = []
        for task_id in [*records, *(i for i in live if i not in records)]:
            task = live.get(task_id)
            listed.append(
                self._live_info(task) if task is not None else await self._logged_info(records[task_id])
            )
        return listed

    async def result(self, ctx: RuntimeContext | None, task_id: str, *, wait: float = 0.0) -> TaskInfo:
        """The task, once it ended or ``wait`` seconds passed on the parent agent's clock (whichever comes
        first): a finished task's :attr:`TaskInfo.answer`, or its status.

        Raises:
            TaskError: no such task; ``wait`` not a number of seconds from 0 to :data:`MAX_WAIT`.
        """
        _check_wait(wait)
        found = await self._find(session_key(ctx), task_id)
        if not isinstance(found, _Task):
            return await self._logged_info(found)
        if not found.ended and wait > 0:
            try:
                async with self._clock.timeout(wait):
                    await found.done.wait()
            except TimeoutError:
                pass
        return self._live_info(found)

    async def cancel(self, ctx: RuntimeContext | None, task_id: str) -> TaskInfo:
        """Cancel the task: returns once its run stopped and its session was given back (an interrupted
        task is recorded cancelled; an ended one is left as it is).

        Raises:
            TaskError: no such task; it runs in another process (cancel it there).
        """
        key = session_key(ctx)
        found = await self._find(key, task_id)
        if isinstance(found, _Task):
            found.cancel("cancelled on request")
            await found.done.wait()
            return self._live_info(found)
        info = await self._logged_info(found)
        if info.status == "running":
            raise TaskError(f"task {task_id} runs in another process: cancel it there")
        if info.status != "interrupted":
            return info
        found.ended, found.error = "cancelled", "cancelled on request, after it was interrupted"
        await self._write(key, self._run_of(ctx), *found.end_fact())
        return found.info("cancelled")

    async def resume(self, ctx: RuntimeContext | None, task_id: str) -> TaskInfo:
        """Continue an interrupted, failed or cancelled task on its own session (a new attempt, queued
        under the limit): a run with no new input goes on from what its log kept, or starts from the
        instructions when it kept nothing.

        Raises:
            TaskError: no such task; it is queued or running, or finished; its subagent is not declared
                any more; a closed or unattached host.
        """
        self._attached()
        key = session_key(ctx)
        found = await self._find(key, task_id)
        info = self._live_info(found) if isinstance(found, _Task) else await self._logged_info(found)
        if info.status in ("queued", "running"):
            where = " in another process" if not isinstance(found, _Task) else ""
            raise TaskError(f"task {task_id} is {info.status}{where}: there is nothing to resume")
        if info.status == "finished":
            raise TaskError(f"task {task_id} finished: its answer is its result, there is nothing to resume")
        old = found.record if isinstance(found, _Task) else found
        agent = self._agents.get(old.agent)
        if agent is None:
            raise TaskError(
                f"task {task_id} was for the subagent {old.agent!r}, which is not declared any more"
            )
        run = self._run_of(ctx)
        record = dataclasses.replace(
            old,
            attempt=info.attempt + 1,
            parent_run_id=run.run_id if run is not None else old.parent_run_id,
            run_id=None,
            ended=None,
            answer=None,
            error=None,
            usage=None,
            collected=False,
        )
        kept = await agent.keeper.peek(record.child_key)
        child_input: AgentInput = None if kept.state.messages else record.instructions
        resumed: dict[str, JsonValue] = {"task_id": task_id, "attempt": record.attempt}
        return await self._launch(_Task(record), ctx, run, ("task_resumed", resumed), child_input)

    async def aclose(self) -> None:
        """Cancel every task still queued or running (each recorded ``cancelled``: resumable later), wait
        until their sessions are given back and their ends recorded (at most ``close_timeout`` for the
        records), then close the subagents' agents and complete :attr:`events`. Call it before the parent
        agent closes its store."""
        self._closed = True
        for task in list(self._tasks.values()):
            task.cancel("its host closed")
        jobs = [t.job for t in self._tasks.values() if t.job is not None and not t.job.done()]
        if jobs:
            await asyncio.wait(jobs)  # each ends once its run is disposed and its session given back
        if self._recordings and self._parent is not None:
            try:
                async with self._clock.timeout(self.close_timeout):
                    await asyncio.gather(*self._recordings, return_exceptions=True)
            except TimeoutError:
                _log.warning(
                    "rxagent: the ends of %d background task(s) were not recorded in their parents' logs "
                    "within %g s (their own sessions say how they ended)",
                    len(self._recordings),
                    self.close_timeout,
                )
        for agent in self._agents.values():
            await agent.aclose()
        self._events.on_completed()

    # ---- what the tools and the methods share ------------------------------------------------------------

    @property
    def _clock(self) -> Clock:
        return self._attached().clock

    def _attached(self) -> AnyAgent:
        if self._parent is None:
            raise TaskError("these tasks are not attached to an agent yet (BackgroundTasks.attach(agent))")
        return self._parent

    def _run_of(self, ctx: RuntimeContext | None) -> RunState | None:
        """The parent's run ``ctx`` is, while it holds its session here (what records for it), else None."""
        run_ctx = run_context_of(ctx) if ctx is not None else None
        if run_ctx is None or self._parent is None:
            return None
        run = self._parent.sessions.active_run(run_ctx)
        return run if run is not None and run.run_id == run_ctx.run_id else None

    async def _start(
        self, ctx: RuntimeContext | None, agent: str, instructions: str, call_id: str | None
    ) -> TaskInfo:
        self._attached()
        if agent not in self._agents:
            known = ", ".join(self._agents)
            raise TaskError(f"there is no subagent named {agent!r}; the subagents are: {known}")
        if not isinstance(instructions, str) or not instructions.strip():  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TaskError("the instructions are empty: say what the subagent is to do")
        if len(instructions) > self.max_instructions_chars:
            raise TaskError(
                f"the instructions are {len(instructions)} characters long; at most "
                f"{self.max_instructions_chars} are taken"
            )
        key = session_key(ctx)
        run = self._run_of(ctx)
        task_id = new_id("task")
        record = _Record(
            task_id,
            agent,
            instructions,
            key,
            task_session_id(key[1], task_id),
            call_id,
            run.run_id if run is not None else None,
        )
        return await self._launch(
            _Task(record), ctx, run, ("task_started", record.started_fact()), instructions
        )

    async def _launch(
        self,
        task: _Task,
        ctx: RuntimeContext | None,
        run: RunState | None,
        fact: tuple[_TaskFact, dict[str, JsonValue]],
        child_input: AgentInput,
    ) -> TaskInfo:
        """Record ``fact`` (the start or the resume), then run ``task``: a task runs only once its parent's
        log says it was accepted."""
        if self._closed:
            raise TaskError("these tasks are closed: no task starts any more")
        record = task.record
        self._tasks[record.task_id] = task  # first: a cancel of the run meanwhile finds it
        try:
            await self._write(record.key, run, *fact)
            if self._closed:  # closed meanwhile: the log says accepted and nothing ran, so interrupted
                raise TaskError("these tasks closed while it was being accepted: resume it later")
        except BaseException:
            if self._tasks.get(record.task_id) is task:
                del self._tasks[record.task_id]
            raise
        loop = asyncio.get_running_loop()
        if self._running < self.max_tasks and not self._line:
            self._running += 1
            task.started = True
        else:
            task.slot = loop.create_future()
            self._line.append(task)
        job = start_task(
            loop, self._work(task, child_input, ctx or RuntimeContext()), f"rxagent.task:{record.task_id}"
        )
        job.add_done_callback(lambda _: self._ended(task))
        task.job = job
        return self._live_info(task)

    async def _find(self, key: SessionKey, task_id: str) -> _Task | _Record:
        if not isinstance(task_id, str) or not task_id:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise TaskError(f"a task id is the text start_task returned, not {task_id!r}")
        task = self._tasks.get(task_id)
        if task is not None and task.record.key == key:
            return task
        records = await self._records(key)
        record = records.get(task_id)
        if record is None:
            ids = list(records)
            known = f"its tasks: {', '.join(ids[-10:])}" if ids else "it has no tasks"
            raise TaskError(f"there is no task {task_id!r} in this session ({known})")
        return record

    async def _records(self, key: SessionKey) -> dict[str, _Record]:
        return _fold(await self._attached().store.read(key), key)

    def _live_info(self, task: _Task) -> TaskInfo:
        record = task.record
        collected = self._was_collected(record)
        if task.ended:
            return record.info(task.outcome or "failed", collected=collected)
        if task.started:
            return record.info("running", collected=collected)
        position = next((i for i, t in enumerate(self._line, 1) if t is task), None)
        return record.info("queued", position=position, collected=collected)

    async def _logged_info(self, record: _Record) -> TaskInfo:
        """A task this host does not run, as the logs say: the parent's end, else its own session's."""
        if record.ended is not None:
            return record.info(record.ended, collected=self._was_collected(record))
        store = self._attached().store
        lease = await store.lease(record.child_key)
        if lease is not None and not owner_gone(lease.owner):
            return record.info("running")  # by a live process elsewhere (or one whose lease has not expired)
        facts = await store.read(record.child_key)
        turns = turns_of(facts)
        last = turns[-1].runs[-1] if turns and turns[-1].runs else None
        if last is None or last.outcome is None or (last.outcome == "failed" and last.error == LOST_RUN):
            return record.info("interrupted", error="the process running it stopped before it finished")
        # It ended after its parent's log was last written: its own log says how.
        ended = dataclasses.replace(record, run_id=last.run_id)
        if last.outcome == "cancelled":
            return ended.info("cancelled", error="its run was cancelled")
        if last.outcome == "failed":
            return ended.info("failed", error=last.error or "its run failed")
        if last.reason not in _ANSWERED:
            return ended.info("failed", error=f"it ended with {last.reason}")
        messages = Projection.replay(None, facts).state.messages
        answer = next((m.text for m in reversed(messages) if m.role == "assistant"), "")
        return dataclasses.replace(ended.info("finished"), answer=answer)

    def _was_collected(self, record: _Record) -> bool:
        return record.collected or f"{record.task_id}#{record.attempt}" in self._collected

    def _collect(self, info: TaskInfo, run: RunState | None) -> None:
        """Count an ended task's usage in ``run``'s, once (see the module's **Usage**)."""
        mark = f"{info.task_id}#{info.attempt}"
        if run is None or info.usage is None or info.collected or mark in self._collected:
            return
        self._collected.add(mark)
        run.usage.include(info.usage)
        run.note("task_collected", {"task_id": info.task_id, "attempt": info.attempt, "run_id": info.run_id})

    async def _write(
        self, key: SessionKey, run: RunState | None, kind: _TaskFact, data: dict[str, JsonValue]
    ) -> None:
        """Append one task fact to the parent session ``key``'s log: through ``run`` when a run of it asks
        (it holds the session), else in the session's turn (after the run holding it, if one does)."""
        if run is not None:
            run.note(kind, data)
            recorder = run.deps.recorder
            if recorder is not None:
                await recorder.flush()
            return
        keeper = self._attached().keeper
        claim = await keeper.claim(keeper.place(key), key, wait=None)
        try:
            claim.recorder.note(kind, data)
            await claim.flush()
        finally:
            await keeper.release(claim)

    # ---- a task's life ---------------------------------------------------------------------------------

    async def _work(self, task: _Task, child_input: AgentInput, ctx: RuntimeContext) -> None:
        agent = self._agents[task.record.agent]
        try:
            if task.slot is not None and not task.started:
                await task.slot  # in line until a running task's end hands its slot on
            await self._run(agent, task, child_input, ctx)
        except asyncio.CancelledError:
            task.end("cancelled", task.cancel_why or "cancelled")
        except Exception as error:  # it could not start (its session busy, calls to reconcile, …)
            task.end("failed", _describe(error))
        finally:
            # Its run's release (the session saved, the lease given back) comes before its end is told.
            await agent.keeper.settled(task.record.child_key)

    def _ended(self, task: _Task) -> None:
        """The task's job is done, however (even cancelled before it began): free its slot or its place in
        line, tell its end, record it."""
        task.end("cancelled", task.cancel_why or "cancelled")  # unless it ended otherwise
        if task.started:
            self._give_slot()
        elif task in self._line:
            self._line.remove(task)
        task.record.ended = task.outcome
        task.done.set()
        self._remember(task)

    async def _run(
        self, agent: AnyAgent, task: _Task, child_input: AgentInput, parent: RuntimeContext
    ) -> None:
        record = task.record
        inherited, granted = self._scopes[record.agent]
        ctx = RuntimeContext(
            user_id=record.key[0],
            session_id=record.session_id,
            trace_id=parent.trace_id,
            attributes=parent.attributes,
            tools=_narrowed(parent.tools, inherited, granted),
            parent_run_id=record.parent_run_id,
        )
        run_id = record.run_id = new_id("run")
        results: list[AgentResult] = []

        def seen(event: AgentEvent) -> None:
            if type(event) is AgentResult and event.run_id == run_id:  # not a nested agent's
                results.append(event)
            try:
                self._events.on_next(event)
            except Exception:  # a watcher's failure is the watcher's, not the task's
                _log.warning("rxagent: a watcher of background tasks' events failed", exc_info=True)

        events = agent.stream_events(child_input, ctx, deltas=False, run_id=run_id)
        try:
            await last_value(events.pipe(ops.do_action(seen)))
        except Exception as error:
            task.end("failed", _describe(error), results[-1].usage if results else None)
            return
        if not results:
            task.end("failed", "its run ended without a result")
            return
        result = results[-1]
        if result.reason in _ANSWERED:
            record.answer = result.text
            task.end("finished", None, result.usage)
        else:
            task.end("failed", _unanswered(result), result.usage)

    def _remember(self, task: _Task) -> None:
        """Record the task's end in its parent's log, in the background; the log answers for it after."""
        record = task.record
        kind, data = record.end_fact()

        async def record_end() -> None:
            try:
                await self._write(record.key, None, kind, data)
            except Exception:
                _log.warning(
                    "rxagent: recording the end of task %s in session %r failed (its own session says how "
                    "it ended)",
                    record.task_id,
                    record.key[1],
                    exc_info=True,
                )
                return
            if self._tasks.get(record.task_id) is task:
                del self._tasks[record.task_id]

        work = start_task(asyncio.get_running_loop(), record_end(), f"rxagent.task-end:{record.task_id}")
        self._recordings.add(work)
        work.add_done_callback(self._recordings.discard)

    def _give_slot(self) -> None:
        while self._line:
            waiting = self._line.popleft()
            if waiting.slot is not None and not waiting.slot.done():
                waiting.started = True  # the slot passes on: the count of running tasks stays
                waiting.slot.set_result(None)
                return
        self._running -= 1

    def _run_ended(self, run_id: str, outcome: Outcome) -> None:
        """A parent run ended: when it was cancelled, so are the tasks it started or resumed."""
        if outcome.kind != "cancelled":
            return
        for task in list(self._tasks.values()):
            if task.record.parent_run_id == run_id:
                task.cancel("its parent run was cancelled")

    # ---- the parent's tools and prompt -------------------------------------------------------------------

    def _start_tool(self) -> Tool:
        # A schema of its own, not @tool: the subagents' names are an enum the model sees and keeps to.
        names: list[JsonValue] = [sub.name for sub in self.subagents]
        parameters: dict[str, JsonValue] = {
            "type": "object",
            "properties": {
                "agent": {"type": "string", "enum": names, "description": "The subagent to hand it to."},
                "instructions": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": self.max_instructions_chars,
                    "description": (
                        "What to do, with everything needed to do it: the subagent does not see this "
                        "conversation."
                    ),
                },
            },
            "required": ["agent", "instructions"],
            "additionalProperties": False,
        }

        async def start(arguments: dict[str, JsonValue], context: ToolContext[object]) -> str:
            info = await self._start(
                context.runtime, str(arguments["agent"]), str(arguments["instructions"]), context.call_id
            )
            return (
                f"Task {info.task_id} accepted: the subagent '{info.agent}' works on it in the background "
                f"({info.status}). Read how it goes with task_status and its answer with task_result."
            )

        return SchemaTool(
            "start_task",
            "Start a background task: a subagent works on the instructions while you go on. Returns the "
            "task's id at once (it says only that the task was accepted).",
            parameters,
            start,
            traits=ToolTraits(concurrency_safe=True),
        )

    def _instructions(self) -> str:
        listed = "\n".join(f"- {sub.name}: {sub.description}" for sub in self.subagents)
        return (
            "## Background tasks\n"
            "You can hand work to a subagent, which does it in the background while you go on. "
            "start_task(agent, instructions) starts a task and returns its id at once; task_status(task_id) "
            "says how it goes; task_result(task_id, wait) gives its answer, waiting up to `wait` seconds; "
            "cancel_task(task_id) stops it; resume_task(task_id) continues one that was interrupted, failed "
            "or cancelled. A subagent does not see this conversation: give it everything it needs. "
            f"At most {self.max_tasks} task(s) run at once; more wait in line.\n"
            f"Subagents:\n{listed}"
        )


class _TaskTools:
    """The task tools other than ``start_task``, bound to their host."""

    def __init__(self, host: BackgroundTasks) -> None:
        self._host = host

    def tools(self) -> tuple[Tool, ...]:
        return (self.task_status, self.task_result, self.cancel_task, self.resume_task)

    @tool(concurrency_safe=True, read_only=True)
    async def task_status(self, task_id: str, context: ToolContext[object]) -> str:
        """Say how a background task goes: queued, running, finished, failed, cancelled or interrupted.

        Args:
            task_id: the id start_task returned.
        """
        return _told(await self._host.get(context.runtime, task_id))

    @tool(concurrency_safe=True, idempotent=True)
    async def task_result(
        self,
        task_id: str,
        context: ToolContext[object],
        wait: Annotated[float, Field(ge=0, le=MAX_WAIT)] = 0.0,
    ) -> str:
        """Give a background task's answer; if it is still running, wait for it up to `wait` seconds first.

        Args:
            task_id: the id start_task returned.
            wait: seconds to wait for a task still running (0: do not wait).
        """
        host = self._host
        info = await host.result(context.runtime, task_id, wait=wait)
        if info.status in ("finished", "failed"):
            host._collect(info, host._run_of(context.runtime))  # pyright: ignore[reportPrivateUsage]
        if info.status == "finished":
            return info.answer or ""
        if info.status in ("queued", "running"):
            return f"{_told(info)} It has no answer yet: ask again later (with a wait, to wait for it)."
        raise TaskError(_told(info))

    @tool(concurrency_safe=True, idempotent=True)
    async def cancel_task(self, task_id: str, context: ToolContext[object]) -> str:
        """Cancel a background task that is queued or running.

        Args:
            task_id: the id start_task returned.
        """
        before = await self._host.get(context.runtime, task_id)
        info = await self._host.cancel(context.runtime, task_id)
        if before.status in ("finished", "failed", "cancelled"):
            return f"Task {task_id} had ended already ({before.status}): nothing was cancelled."
        return _told(info)

    @tool(concurrency_safe=True, idempotent=True)
    async def resume_task(self, task_id: str, context: ToolContext[object]) -> str:
        """Continue a background task that was interrupted, failed or was cancelled, on its own session.

        Args:
            task_id: the id start_task returned.
        """
        info = await self._host.resume(context.runtime, task_id)
        return f"Task {task_id} resumed (attempt {info.attempt}): {_told(info)}"


def _told(info: TaskInfo) -> str:
    """The task's status as a sentence for the model."""
    who = f"Task {info.task_id} ({info.agent})"
    if info.status == "queued":
        place = f", number {info.position} in line" if info.position is not None else ""
        return f"{who} is queued{place}: it starts when a running task ends."
    if info.status == "running":
        return f"{who} is running."
    if info.status == "finished":
        return f"{who} finished: task_result gives its answer."
    again = f" resume_task('{info.task_id}') continues it."
    if info.status == "failed":
        return f"{who} failed: {info.error}.{again}"
    if info.status == "cancelled":
        return f"{who} was cancelled ({info.error}).{again}"
    return f"{who} was interrupted: {info.error}.{again}"


def _unanswered(result: AgentResult) -> str:
    """Why a run that ended without an answer gave none."""
    names = ", ".join(call.name for call in result.pending)
    if result.reason == "PERMISSION_ASKING":
        return f"it stopped waiting for a person to approve its call(s) to {names}"
    if result.reason == "TOOL_SUSPENDED":
        return f"it stopped waiting for the result of external tool(s) {names}"
    return f"it ended with {result.reason}" + (f": {result.detail}" if result.detail else "")


def _narrowed(
    scope: ToolScope | None, inherited: frozenset[str], granted: frozenset[str]
) -> ToolScope | None:
    """The parent caller's tool scope as it applies to a subagent: what the caller allowed of the tools it
    inherits (and every tool it was granted), the presets of those tools, the shared presets, the groups."""
    if scope is None:
        return None
    allow = None if scope.allow is None else (frozenset(scope.allow) & inherited) | granted
    presets = {name: values for name, values in scope.presets.items() if name in inherited}
    return ToolScope(allow=allow, groups=scope.groups, presets=presets, shared_presets=scope.shared_presets)


def _tool_name(item: str | Tool | Callable[..., object]) -> str:
    if isinstance(item, str):
        return item
    if isinstance(item, Tool):
        return item.name
    return getattr(item, "__name__", repr(item))


def _check_wait(wait: object) -> None:
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not math.isfinite(wait):
        raise TaskError(f"wait is a number of seconds, not {wait!r}")
    if not 0 <= wait <= MAX_WAIT:
        raise TaskError(f"wait is from 0 to {MAX_WAIT:g} seconds, not {wait:g}")


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"
