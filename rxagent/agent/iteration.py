"""A run step by step: :class:`AgentRun`, what ``agent.iter(input)`` gives.

::

    async with agent.iter("What is 2 + 3?") as run:     # the session taken; the run stops at Start
        async for node in run:                         # Start, Reason, Act, Reason, Finish
            ...                                        # each node before its step runs
    run.result                                         # the AgentResult, as call() returns it

    async with agent.iter("What is 2 + 3?") as run:     # or by hand, as pydantic-ai's run.next(node):
        node = run.next_node
        while not run.done:
            if isinstance(node, Reason) and enough(run.run_state):
                node = Finish("STOPPED", detail="enough")     # run another node instead
            node = await run.next(node)

It is the agent's one pipeline (:meth:`~rxagent.agent.Agent.stream_events`: the session lifecycle around
:func:`~rxagent.agent.steps.run_loop`), run with a gate: before each step the loop asks the
:class:`AgentRun` which node to run and waits until its driver says. Nothing else changes, so a run driven
step by step has the guarantees of ``call``: it ends with one result and its state saved, it gives its
session back, and an interrupt ends it ``INTERRUPTED`` at the next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from types import TracebackType
from typing import Generic, Self, cast

from reactivex import Observable, abc
from reactivex.scheduler.eventloop import AsyncIOScheduler
from typing_extensions import TypeVar

from rxagent.agent.control import RunControl
from rxagent.agent.nodes import Node, Start
from rxagent.agent.run import RunState
from rxagent.agent.steps import StepGate
from rxagent.events import AgentEvent, AgentResult
from rxagent.operators import running_loop

__all__ = ["AgentRun"]

OutputT = TypeVar("OutputT", default=None, covariant=True)


class AgentRun(Generic[OutputT]):
    """One run of an agent, driven node by node (``agent.iter(input)``; see the module).

    ``async with`` takes the session (waiting, as a run does, for a run that holds it) and stops the run
    before its first step: :attr:`next_node` is then its :class:`~rxagent.agent.nodes.Start`. Each
    ``async for`` turn runs the node yielded before and yields the next node the loop reaches, before its
    step runs, until the run has ended. :meth:`next` runs the step of the node it is given instead (the one
    the loop reached, or another: a ``Finish`` to stop, a ``Reason`` to think again) and returns the next
    node. Every node the loop reaches passes the driver, an ``Interrupt`` included.

    Attributes:
        events: every event of the run so far (what ``stream_events`` emits: ``StepStarted`` before each
            step, the result last), nested runs' included.

    Lifecycle:
        complete: the ``Finish`` step saves the state and emits the result (:attr:`result`); the session
        is given back; :attr:`done` is true, ``async for`` stops, :meth:`next` returns the node that ran.
        error: a step that fails ends the run as ``call`` does (an ``ERROR`` result after the state is
        saved, in :attr:`result`), then the awaited :meth:`next` (or ``async for``) raises the error; a
        run that never started (its session stayed busy, the store failed) raises from ``async with``.
        cancel: leaving the ``async with`` before the run ended, or cancelling a task awaiting
        :meth:`next`, cancels the run as disposing ``stream_events`` does (finished calls keep their
        results, the state is saved) and returns once it has given its session back.
        interrupt: :meth:`interrupt` (or the ``RunControl`` given to ``iter``) ends the run
        ``INTERRUPTED``: a step running is cut short (a model call keeps what streamed), and the loop
        goes to ``Interrupt`` whatever node the driver chooses next.
        re-subscribe: an ``AgentRun`` runs once; ``agent.iter`` makes another.
    """

    def __init__(
        self,
        events: Callable[[StepGate], Observable[AgentEvent]],
        control: RunControl,
        parent_run_id: str | None = None,
    ) -> None:
        """Made by ``agent.iter``: ``events(gate)`` is the agent's pipeline run with ``gate``."""
        self._source = events
        self._control = control
        self._parent = parent_run_id
        self.events: list[AgentEvent] = []
        self._result: AgentResult[OutputT] | None = None
        self._run: RunState | None = None
        self._node: Node | None = None
        self._chosen: asyncio.Future[Node] | None = None
        """What the loop waits for (``None``: it waits for nothing, a step runs or the run ended)."""
        self._last: Node | None = None
        self._proposals = 0
        self._yielded = -1
        """The number of the proposal ``async for`` yielded last (its step runs on the next turn)."""
        self._entered = False
        self._subscription: abc.DisposableBase | None = None
        self._ended = False
        """The run's stream ended (its terminal signal came, or the run was cancelled)."""
        self._cancelled = False
        self._error: Exception | None = None
        self._wakeup: asyncio.Future[None] | None = None

    # ---- what a driver reads ---------------------------------------------------------------------------

    @property
    def next_node(self) -> Node | None:
        """The node the run waits at, its step not run yet (``None`` while a step runs or once ended)."""
        return self._node if self._chosen is not None else None

    @property
    def result(self) -> AgentResult[OutputT] | None:
        """The run's :class:`~rxagent.events.AgentResult` once it has one (as ``call`` returns it)."""
        return self._result

    @property
    def run_state(self) -> RunState | None:
        """The run's :class:`~rxagent.agent.run.RunState` (its messages, iteration, usage; ``run_state.deps``
        what it depends on), once the run has its session."""
        return self._run

    @property
    def done(self) -> bool:
        """The run has ended (with its result, an error, or cancelled)."""
        return self._ended

    def interrupt(self) -> bool:
        """Interrupt the run (from any thread): it ends ``INTERRUPTED`` at the next step (see the class).

        Returns:
            ``True`` when the run was running to receive it (as :meth:`RunControl.interrupt`).
        """
        return self._control.interrupt()

    # ---- driving -------------------------------------------------------------------------------------

    async def next(self, node: Node) -> Node:
        """Run the step of ``node`` (the node the run waits at, or another of the caller's choice) and
        return the next node the loop reaches; once that step ended the run, ``node`` itself (then
        :attr:`done` is true and :attr:`result` holds the result).

        A node type the assembly has no step for ends the run as any run's does (an ``ERROR`` result,
        then ``KeyError`` raised here). Once interrupted, the run goes to ``Interrupt`` whatever ``node``
        is (unless it ends the run ``INTERRUPTED`` itself): that is the node returned.

        Raises:
            TypeError: ``node`` is not a :class:`~rxagent.agent.nodes.Node` (the run still waits).
            ValueError: the run's first step given another node than a ``Start`` (the run still waits).
            RuntimeError: the run is not entered yet, has ended, or is running a step already (an
                earlier ``next`` not awaited to its end).
            Exception: the error a step failed with (the run has ended with an ``ERROR`` result).
        """
        if not isinstance(node, Node):  # pyright: ignore[reportUnnecessaryIsInstance] - untyped callers
            raise TypeError(f"next() takes a Node to run, got {type(node).__name__}")
        if not self._entered:
            raise RuntimeError("enter the run first: async with agent.iter(...) as run")
        if self._ended:
            how = (
                f"ended (reason {self._result.reason})"
                if self._result is not None
                else "was cancelled"
                if self._cancelled
                else "failed"
            )
            raise RuntimeError(f"the run {how}: next() has no step left to run")
        chosen = self._chosen
        if chosen is None:
            raise RuntimeError("a step is running: await the next() that started it before calling next()")
        if self._proposals == 1 and not isinstance(node, Start):
            raise ValueError(
                f"a run's first step is its Start (it applies the input and tells RunStarted), not "
                f"{type(node).__name__}: run it, then choose the node after it"
            )
        self._chosen, self._node, self._last = None, None, node
        chosen.set_result(node)
        return await self._wait()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Node:
        if not self._entered:
            raise RuntimeError("enter the run first: async with agent.iter(...) as run")
        waiting = self.next_node
        if waiting is not None and self._yielded == self._proposals:  # yielded last turn: run it now
            await self.next(waiting)
        waiting = self.next_node
        if waiting is None:
            raise StopAsyncIteration
        self._yielded = self._proposals
        return waiting

    # ---- the context -----------------------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("an AgentRun runs once: call agent.iter(...) again for another run")
        self._entered = True
        loop = running_loop("agent.iter")
        source = self._source(self._gate)
        self._subscription = source.subscribe(
            self._on_next, self._on_error, self._on_completed, scheduler=AsyncIOScheduler(loop)
        )
        try:
            await self._wait()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self._close()

    # ---- plumbing -------------------------------------------------------------------------------------

    def _gate(self, node: Node, run: RunState) -> asyncio.Future[Node]:
        """The loop reached ``node``: wait for the driver's choice."""
        self._run = run
        chosen: asyncio.Future[Node] = asyncio.get_running_loop().create_future()
        self._chosen, self._node = chosen, node
        self._proposals += 1
        self._wake()
        return chosen

    def _on_next(self, event: AgentEvent) -> None:
        self.events.append(event)
        # Results of nested runs (agents used as tools) carry this run's id as their parent.
        if isinstance(event, AgentResult) and event.parent_run_id == self._parent:
            self._result = cast("AgentResult[OutputT]", event)

    def _on_error(self, error: Exception) -> None:
        self._ended, self._error = True, error
        self._wake()

    def _on_completed(self) -> None:
        self._ended = True
        self._wake()

    def _wake(self) -> None:
        wakeup = self._wakeup
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    async def _wait(self) -> Node:
        """The next node the run waits at; the node that ran last once the run has ended; the run's
        error if it failed. Cancelled: cancels the run (see the class)."""
        while True:
            node = self.next_node
            if node is not None:
                return node
            if self._ended:
                error, self._error = self._error, None
                if error is not None:
                    raise error
                if self._last is None:
                    raise RuntimeError("the run ended before its first step")
                return self._last
            wakeup = self._wakeup = asyncio.get_running_loop().create_future()
            try:
                await wakeup
            except asyncio.CancelledError:
                await self._close()
                raise

    async def _close(self) -> None:
        """Cancel the run unless it has ended, and wait until it has given its session back."""
        subscription, self._subscription = self._subscription, None
        self._chosen = None
        if subscription is None:
            return
        if self._ended:  # its end came after its release: nothing to wait for
            subscription.dispose()
            return
        self._ended = self._cancelled = True
        subscription.dispose()  # as disposing stream_events: the run records its cancel and lets go
        await self._control.wait_idle()
