"""The host: :class:`Agent` holds a model, tools, options, middleware, a session store and a loop of steps
(:mod:`rxagent.agent.loop`; ReAct by default), and runs it per input with the session lifecycle of
:mod:`rxagent.agent.lifecycle`. ``stream_events`` is the one pipeline; ``call`` and ``call_observable``
are it filtered to the :class:`~rxagent.events.AgentResult`; ``agent.sessions`` reads and changes its
sessions.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Generic, Never, TypeAlias, Unpack, cast

from pydantic import JsonValue
from reactivex import Observable
from typing_extensions import TypeVar

from rxagent.agent.compose import AgentToolOptions, MapRunsOptions, RunOutcome, agent_tool, map_runs
from rxagent.agent.control import RunControl
from rxagent.agent.inputs import (
    AgentInput,
)
from rxagent.agent.iteration import AgentRun
from rxagent.agent.lifecycle import run_events, run_result
from rxagent.agent.live import SessionHandle
from rxagent.agent.loop import react_steps
from rxagent.agent.middleware import AnyMiddleware
from rxagent.agent.nodes import Node, Steps
from rxagent.agent.options import AgentOptions
from rxagent.agent.sessions import Sessions
from rxagent.agent.steps import StepGate
from rxagent.agent.structured import OutputSpec
from rxagent.agent.sync import SyncLoop
from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult
from rxagent.model.types import ChatModel
from rxagent.operators import Operator, last_value
from rxagent.session import (
    MemoryStore,
    SessionKeeper,
    SessionStore,
    open_store,
)
from rxagent.state import DEFAULT_SESSION
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
        self.output = OutputSpec.of(output_type)
        self.store: SessionStore = open_store(store) if isinstance(store, str) else store or MemoryStore()
        self._owns_store = not isinstance(store, SessionStore)
        self.clock = clock
        self.keeper = SessionKeeper(self.store, lease_ttl=self.options.lease_ttl, clock=clock)
        self.sessions = Sessions(self)
        """Its sessions: read, change, fork, delete and drive them (see :mod:`rxagent.agent.sessions`)."""
        self.steps = cast("Steps[Node]", steps if steps is not None else react_steps())
        self.system_prompt = system_prompt
        self._sync = SyncLoop()  # the event loop of run_sync and close

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

        Lifecycle: as :mod:`rxagent.agent.lifecycle` says. The state is saved *before* the result, so a
        consumer may stop there; a failure ends with an ``ErrorEvent`` and an ``ERROR`` result, then the
        error; a cancel saves what happened and emits nothing more; a run whose session stayed busy past
        ``AgentOptions.session_wait`` errors with :class:`SessionBusyError` and no events.

        ``control`` interrupts the run from any thread and shows its place in the session's queue.
        ``deltas=False`` leaves out the per-token events (text, thinking and tool-argument deltas) for
        consumers that only want the folded results. ``record=True`` writes every event to the session's
        log as well (as ``AgentOptions.record_events`` does for every run), so the session's feed replays
        them; ``run_id`` names the run (default: a fresh id). ``deps`` reach tools and steps as
        ``RunContext[Deps].deps`` (default: those of ``ctx`` when it is a ``RunContext``, else ``None``).
        """
        return run_events(
            self, input, ctx, control, deltas=deltas, quiet=False, record=record, run_id=run_id, deps=deps
        )

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
        # The result's structured value is this agent's output spec's, validated: of type OutputT.
        return cast("Observable[AgentResult[OutputT]]", run_result(self, input, ctx, control, deps))

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

    def run_sync(
        self, input: AgentInput, ctx: RuntimeContext | None = None, *, control: RunControl | None = None
    ) -> AgentResult[OutputT]:
        """:meth:`call` for synchronous code (a script): run the agent and return its :class:`AgentResult`.

        The runs go on the agent's own event loop, made by the first ``run_sync`` and kept, so the store's
        connections (which belong to the loop that opened them) serve every later ``run_sync`` too. Each
        returns once the session is given back and its checkpoint written: nothing is left half-done
        between two calls. The store stays open for the next call; :meth:`close` closes it (if the agent
        opened it) and that loop when the script is done. Call it from one thread at a time.

        Raises:
            RuntimeError: called where an event loop runs (a notebook cell, a coroutine, a tool): waiting
                there would block the loop the run needs; use ``await agent.call(...)`` instead. Nothing ran.
            Exception: what :meth:`call` raises.
        """

        async def settled() -> AgentResult[OutputT]:
            try:
                return await self.call(input, ctx, control=control)
            finally:
                await self.keeper.aclose()  # the lease given back, the checkpoint written

        return self._sync.run(settled, instead="await agent.call(...)")

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
        the first step; ``async for node in run`` yields each node as the loop reaches it (before its step
        runs), and ``await run.next(node)`` runs a node of the caller's choice instead. The same pipeline
        and guarantees as :meth:`stream_events` (see :class:`~rxagent.agent.iteration.AgentRun`).

        Example:
            >>> async with agent.iter("What is 2 + 3?") as run:  # doctest: +SKIP
            ...     async for node in run:
            ...         print(type(node).__name__)  # Start, Reason, Act, Reason, Finish
        """
        parent = ctx.parent_run_id if ctx is not None else None
        run_control = control or RunControl()

        def events(gate: StepGate) -> Observable[AgentEvent]:
            return run_events(self, input, ctx, run_control, deltas=deltas, quiet=False, deps=deps, gate=gate)

        return AgentRun(events, run_control, parent)

    def as_tool(
        self, name: str | None = None, description: str | None = None, **options: Unpack[AgentToolOptions]
    ) -> Tool:
        """This agent as a tool of another agent: the task in, this agent's answer out (each call a run in
        a child session, its events in the caller's stream; see :func:`rxagent.agent.compose.agent_tool`
        for the options: ``sessions``, ``max_task_chars``, ``timeout``, ``groups``).

        Example:
            >>> researcher = Agent(model, search_tools, name="researcher")  # doctest: +SKIP
            >>> lead = Agent(model, Toolkit([researcher.as_tool(description="Finds facts.")]))
        """
        return agent_tool(self, name, description, **options)

    def map_runs(self, **options: Unpack[MapRunsOptions]) -> Operator[AgentInput, RunOutcome]:
        """An operator running this agent once per input, at most ``max_concurrent`` at once: a
        :class:`~rxagent.agent.compose.RunOutcome` per input (see :func:`rxagent.agent.compose.map_runs`
        for the options: ``max_concurrent``, ``ordered``, ``context``, ``events``, ``deltas``, ``progress``).

        Example:
            >>> fan_out = agent.map_runs(progress=True)  # doctest: +SKIP
            >>> answers = await to_list(reactivex.from_iterable(questions).pipe(fan_out))
        """
        return map_runs(self, **options)

    def session(self, ctx: RuntimeContext | None = None) -> SessionHandle:
        """The live handle of the session ``ctx`` names: ``agent.sessions.handle(ctx)`` (see
        :class:`~rxagent.agent.live.SessionHandle`)."""
        return self.sessions.handle(ctx)

    async def aclose(self) -> None:
        """Finish background work (checkpoints being written) and close the session store if the agent
        opened it (from a path or URL, or the default); a store passed in stays open for its owner."""
        await self.keeper.aclose()
        if self._owns_store:
            await self.store.aclose()

    def close(self) -> None:
        """:meth:`aclose` for synchronous code (after :meth:`run_sync`): on the loop the runs used, which it
        then closes.

        Raises:
            RuntimeError: called where an event loop runs: use ``await agent.aclose()`` there.
        """
        self._sync.close(self.aclose, instead="await agent.aclose()")


ReActAgent = Agent
"""The ReAct preset's name: an :class:`Agent` with the default steps (kept for existing code)."""

AnyAgent: TypeAlias = "Agent[Never, object]"
"""Any agent, whatever its deps and output types (what code that only runs it takes)."""
