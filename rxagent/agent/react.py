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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import reactivex
from pydantic import BaseModel, JsonValue
from reactivex import Observable
from reactivex import operators as ops

from rxagent.agent.acting import act_step
from rxagent.agent.compose import ChildSessions, RunContextFactory, RunOutcome, agent_tool, map_runs
from rxagent.agent.control import RunControl
from rxagent.agent.inputs import AgentInput, RunInput, SessionBusyError, normalise_input
from rxagent.agent.middleware import AnyMiddleware, Middleware, chain, has_hooks
from rxagent.agent.nodes import Act, CheckOutput, Finish, Interrupt, Reason, Reprompt, Start, Step
from rxagent.agent.options import AgentOptions
from rxagent.agent.output import check_output_step
from rxagent.agent.reasoning import reason_step
from rxagent.agent.routing import start_step
from rxagent.agent.run import RunState
from rxagent.agent.steps import finish_step, interrupt_step, recover, reprompt_step, run_loop
from rxagent.agent.structured import OutputSpec
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult
from rxagent.messages import Msg
from rxagent.model.types import ChatModel
from rxagent.operators import KeyedSerializer, Operator, Outcome, Turn, last_value, using_resource
from rxagent.state import AgentState, InMemoryStateStore, SessionKey, StateStore
from rxagent.tools import Permissions, Tool, ToolInterceptor, Toolkit

__all__ = ["DEFAULT_SESSION", "ReActAgent", "default_steps"]

DEFAULT_SESSION = "default"


def default_steps() -> dict[type, Step]:
    """The ReAct assembly: a fresh mapping from node types to the built-in steps, ready to extend.

    Example:
        >>> steps = {**default_steps(), Act: reviewed(act_step(), reviewer)}  # doctest: +SKIP
    """
    return {
        Start: start_step(),
        Reason: reason_step(),
        Act: act_step(),
        Reprompt: reprompt_step,
        CheckOutput: check_output_step,
        Interrupt: interrupt_step,
        Finish: finish_step,
    }


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
        steps: steps to use instead of (or besides) the built-in ones, by node type; merged over
            :func:`default_steps` (see :mod:`rxagent.agent.steps`).

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
        output_type: type[BaseModel] | Mapping[str, JsonValue] | None = None,
        store: StateStore | None = None,
        steps: Mapping[type, Step] | None = None,
    ) -> None:
        self.model = model
        self.toolkit = toolkit or Toolkit()
        self.name = name
        self.options = options or AgentOptions()
        self.middleware = tuple(middleware)
        self.permissions = permissions or Permissions()
        self.output = OutputSpec(output_type) if output_type is not None else None
        self.store: StateStore = store or InMemoryStateStore()
        self.steps: Mapping[type, Step] = {**default_steps(), **(steps or {})}
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
        run_input = normalise_input(input)
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

            run = RunState(self, context, key, lease.state, lease.control, save, deltas=deltas, quiet=quiet)
            lease.run = run

            def loop(first: RunInput) -> Observable[AgentEvent]:
                return run_loop(self.steps, Start(first), run)

            counter = itertools.count()
            run_id = run.run_id

            def stamp(event: AgentEvent) -> AgentEvent:
                # In the order subscribers see events, after any middleware; events of nested runs (an
                # agent used as a tool) pass through with their own run's numbering.
                if event.run_id == run_id:
                    event.seq = next(counter)
                return event

            events = chain(self.middleware, "agent", run.ctx, loop)(run_input)
            if has_hooks(self.middleware, "agent"):  # an agent hook's own StopRun or failure
                events = events.pipe(
                    ops.catch(lambda error, _: recover(run, error) or reactivex.throw(error))
                )
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
        parent = ctx.parent_run_id if ctx is not None else None

        def own_result(event: AgentEvent) -> bool:
            # Results of nested runs (agents used as tools) carry this run's id as their parent.
            return isinstance(event, AgentResult) and event.parent_run_id == parent

        results: Observable[AgentResult] = self._events(
            input, ctx, control, deltas=watched, quiet=not watched
        ).pipe(
            ops.filter(own_result)  # type: ignore[arg-type]
        )
        return results

    async def call(
        self, input: AgentInput, ctx: RuntimeContext | None = None, *, control: RunControl | None = None
    ) -> AgentResult:
        """Run the agent and return its :class:`AgentResult` (cancelling the await cancels the run)."""
        return await last_value(self.call_observable(input, ctx, control=control))

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
    ) -> Operator[AgentInput, RunOutcome]:
        """An operator running this agent once per input, at most ``max_concurrent`` at once: a
        :class:`~rxagent.agent.compose.RunOutcome` per input, in input order or as the runs finish.

        See :func:`rxagent.agent.compose.map_runs` for the arguments and the lifecycle.

        Example:
            >>> answers = reactivex.from_iterable(questions).pipe(agent.map_runs())  # doctest: +SKIP
        """
        return map_runs(
            self,
            max_concurrent=max_concurrent,
            ordered=ordered,
            context=context,
            events=events,
            deltas=deltas,
        )

    async def state(self, ctx: RuntimeContext | None = None) -> AgentState:
        """The stored state of a session (a fresh one if it has none)."""
        context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
        return await self.store.load((context.user_id, context.session_id or DEFAULT_SESSION)) or AgentState()

    def tool_interceptors(self) -> list[ToolInterceptor]:
        """The ``tool_call`` hooks of the middleware, as executor interceptors (outermost first)."""
        return [
            m.tool_call for m in self.middleware if isinstance(m, Middleware) and has_hooks([m], "tool_call")
        ]

    def request_base(self) -> tuple[Msg, ...]:
        """The fixed head of every request: the system message (if any)."""
        return (self._system,) if self._system is not None else ()


@dataclass(slots=True)
class _Lease:
    turn: Turn
    control: RunControl
    state: AgentState
    run: RunState | None = None
    saved: bool = False
    """The run saved (or tried to, for a failure) the state for its ending: the release saves no more."""
