"""The loop as values: nodes say where a run goes next, steps go there, :func:`run_loop` runs them.

A **node** (:mod:`rxagent.agent.nodes`) is a small frozen value naming the next thing to do:
:class:`~rxagent.agent.nodes.Start` (route the input), :class:`Reason` (one model turn), :class:`Act` (run a
batch of tool calls), :class:`Finish` (save and emit the result), and a few more the default assembly uses
(:class:`Reprompt`, :class:`~rxagent.agent.nodes.CheckOutput`, :class:`Interrupt`). A **step** is a function
``(node, run) -> Observable[AgentEvent | Next]``: it emits the run's events and ends with one
:class:`Next` naming the following node — a value, not a side effect.
**Decisions** between steps (``after_reasoning``, ``after_tools``, …, in :mod:`rxagent.agent.decisions`)
are plain functions that tests call without streams.

::

    run_loop(steps, Start(input), run):
        Start ── RunStarted ── Next(Reason)
          ─▶ Reason ── deltas … MessageCompleted ── Next(Act(calls))
          ─▶ Act ── ToolResult … ── Next(Reason)
          ─▶ Reason ── … ── Next(Finish(MODEL_STOP))
          ─▶ Finish ── AgentResult

A user's assembly is a :class:`~rxagent.agent.nodes.Steps` table, usually ``react_steps()`` with steps
added or replaced with ``on`` (a planning step, a reviewer before tools run, a critique after the answer —
see ``rxagent.agent.recipes``). Every assembly gets the same guarantees from :func:`run_loop` and the
agent's lifecycle around it (:mod:`rxagent.agent.lifecycle`):

- **interrupt**: before each step the loop checks ``run.deps.control``; an interrupt while a step runs lets
  the step end itself if it knows how (a model call keeps what streamed so far), else cuts it; either
  way the loop goes to :class:`Interrupt` (finished calls keep their results, the run ends
  ``INTERRUPTED``).
- **failure**: a step that fails ends the run with an ``ErrorEvent`` and an ``AgentResult`` with
  reason ``ERROR`` (saved first), then the error; a middleware's ``StopRun`` ends it ``STOPPED``.
- **cancel** and **save**: the agent's lifecycle (``Agent.stream_events``) saves the state on
  every ending and releases the session, whatever the steps are.
- **depth**: steps are subscribed one after another at constant stack depth (``run_steps``).
- **the path**: a ``StepStarted`` event tells each step as it begins (unless nobody watches the run's
  events), and a ``gate`` lets a driver see each node before its step runs and choose the node to run
  instead (``agent.iter``, :mod:`rxagent.agent.iteration`).
- **steering**: messages delivered into a running run (a session handle's ``steer``) join the history
  right before the next :class:`Reason` step, whatever the assembly.
- **middleware**: the ``agent`` cut point wraps the whole loop; the loop wraps the step of every node
  whose type says so (``Node.cut_point``) in the ``reasoning`` or ``acting`` cut point, whatever the
  step is (:class:`Reason` and :class:`Act` do; so can a custom model-turn node); the model calls of
  ``reason_step`` and :func:`~rxagent.agent.reasoning.model_turn` pass the ``request`` and
  ``model_call`` cut points, and the executor the ``tool_call`` one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import replace
from typing import TypeAlias, cast

import reactivex
from reactivex import Observable, abc
from typing_extensions import TypeVar

from rxagent.agent.decisions import after_tools, continue_reasoning
from rxagent.agent.middleware import ActingStep, ReasoningStep, StopRun, chain, has_hooks, rolls_back
from rxagent.agent.nodes import Act, Finish, Interrupt, Next, Node, Reason, Reprompt, Step, StepOutput, Steps
from rxagent.agent.run import RunState
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    Phase,
    RunReason,
    RunStarted,
    StepStarted,
)
from rxagent.messages import Msg
from rxagent.operators import (
    Frame,
    Slot,
    Source,
    StepLoop,
    frame,
    from_async_iterable,
    subscribe_to,
    sync_of,
)

__all__ = [
    "NO_ANSWER_PROMPT",
    "StepGate",
    "emit",
    "finish",
    "finish_step",
    "interrupt_step",
    "recover",
    "reprompt_step",
    "run_loop",
]

_To = TypeVar("_To", bound=Node)
_N = TypeVar("_N", bound=Node)


def emit(*events: AgentEvent, then: _To) -> Observable[StepOutput[_To]]:
    """A step's output made of ``events`` and then ``Next(then)``: what simple steps return.

    Example:
        >>> def note(node: Note, run: RunState) -> Observable[StepOutput[Reason]]:  # doctest: +SKIP
        ...     run.add_messages([Msg.system(node.text)])
        ...     return emit(then=Reason())
    """
    return sync_of(*events, Next(then))


# ---- the assembly ------------------------------------------------------------------------------------


StepGate: TypeAlias = Callable[[Node, RunState], "asyncio.Future[Node]"]
"""Asked by :func:`run_loop` before each step with the node the run reached: returns a future of the node
to run instead (the same one, or another the caller chose); the step waits for it. What
:class:`~rxagent.agent.iteration.AgentRun` drives a run with."""


def run_loop(
    steps: Steps[_N], first: _N, run: RunState, *, gate: StepGate | None = None
) -> Observable[AgentEvent]:
    """Run the steps of ``steps`` from node ``first`` until a step finishes the run.

    Each step is looked up by its node's type and subscribed when the one before it completes (constant
    stack depth however long the run); its :class:`Next` names the node after it. Unless the run is quiet,
    a :class:`~rxagent.events.StepStarted` tells each step as it begins (the first step's comes right
    after its ``RunStarted``, which opens a run's events). See the module for the interrupt, failure and
    middleware guarantees this adds to any assembly.

    Args:
        steps: the assembly (start from :func:`~rxagent.agent.loop.react_steps` and add with ``on``).
        first: the first node (``Start(run_input)`` for an agent run).
        run: the run's state (:func:`~rxagent.agent.run.new_run` makes one without an agent).
        gate: asked before each step (see :data:`StepGate`): the run goes on with the node it resolves
            to. Once the run is interrupted it goes to :class:`Interrupt` whatever the gate chose, and the
            gate is asked again with that node (only a closing node, an ``Interrupt`` or a ``Finish`` with
            reason ``INTERRUPTED``, is taken then).

    Returns:
        The run's events, ending with its :class:`~rxagent.events.AgentResult`.

    Raises:
        KeyError: (as the stream's error) a node whose type has no step.
        RuntimeError: (as the stream's error) a step that completed without naming the next node, or a
            gate whose future was cancelled.

    Lifecycle:
        complete: after the :class:`Finish` step's result. error: a failing step ends the run as the
        module says, then the error passes. cancel: disposes the current step (or stops waiting for the
        gate). re-subscribe: not supported — a ``RunState`` is one run; the agent builds one per
        subscription.
    """

    def subscribe(
        observer: abc.ObserverBase[AgentEvent], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        # Steps[_N] is a Steps[Node] the loop reads only by node type (the checker verified the table).
        loop = _Loop(observer, scheduler, cast("Steps[Node]", steps), first, run, gate)
        loop.advance()
        return loop

    return Source(subscribe)


class _Loop(StepLoop[AgentEvent]):
    """One run of :func:`run_loop`: a :class:`~rxagent.operators.StepLoop` that knows which node comes
    next and how each step starts.

    Its methods, not closures over the run: a run in flight keeps its loop alive, and the garbage collector
    walks every object a run keeps (see ``rxagent/operators/_source.py``).
    """

    __slots__ = ("_control", "_gate", "_opening", "_run", "_steps", "upcoming")

    def __init__(
        self,
        observer: abc.ObserverBase[AgentEvent],
        scheduler: abc.SchedulerBase | None,
        steps: Steps[Node],
        first: Node,
        run: RunState,
        gate: StepGate | None,
    ) -> None:
        super().__init__(observer, scheduler)
        self._steps = steps
        self._run = run
        self._gate = gate
        self._control = run.deps.control
        self._opening = True  # until the first step starts: its StepStarted goes after the run's RunStarted
        self.upcoming: Node | None = first
        """The node the step that ran last named (``None`` once taken, or when it named none)."""

    def take_next(self, item: StepOutput[Node]) -> Iterable[AgentEvent]:
        """A step's item: its ``Next`` names the node after it, anything else is an event of the run."""
        if type(item) is Next:  # the last one counts (a hook may run a step twice)
            self.upcoming = item.node
            return ()
        return (item,)  # type: ignore[return-value] - every other item is an event

    def reach(self, node: Node) -> Node:
        """The node the run goes to: once interrupted, ``Interrupt`` instead of any but a closing node."""
        if self._control.interrupted and not _closing(node):
            return Interrupt()
        return node

    def recover(self, error: Exception) -> Observable[AgentEvent] | None:
        """How a failing step ends the run (see :func:`recover`)."""
        return recover(self._run, error)

    def next_step(self) -> Observable[AgentEvent] | None:
        """The next step's events, or ``None`` once the run has ended."""
        run = self._run
        if run.ended:
            return None
        upcoming, self.upcoming = self.upcoming, None
        if upcoming is None:
            if not self._control.interrupted:
                raise RuntimeError("a step completed without naming the next node (emit Next(node) last)")
            upcoming = Interrupt()  # the interrupt cut the step short
        node = self.reach(upcoming)
        if self._gate is not None:
            return _gated(self._gate, node, run, self.reach, self.start)
        return self.start(node)

    def start(self, node: Node) -> Observable[AgentEvent]:
        """The step of ``node``: told, hooked in its cut point, framed by the loop's guarantees."""
        run, control = self._run, self._control
        step = self._steps.get(type(node))
        if step is None:
            known = ", ".join(sorted(t.__name__ for t in self._steps))
            raise KeyError(f"no step for node {type(node).__name__} (steps: {known})")
        # Told before the step is built: a step may build events (and count its turn) as it is built.
        told: tuple[AgentEvent, ...] = ()
        if not run.quiet:
            kind = type(node).__name__
            told = (StepStarted(**run.head, node=kind, detail=node.describe(), iteration=run.iteration),)
        closing = _closing(node) or isinstance(node, Finish)  # the closing steps always run to their end
        if not closing and control.inbox and node.cut_point == "reasoning":
            told += tuple(take_inbox(run))
        hooked = None if closing else _hooked(step, node, run, self)
        source: Observable[StepOutput[Node]] = step(node, run) if hooked is None else hooked
        first, self._opening = self._opening, False
        # The run's first step is told after its RunStarted (which opens a run's events), any other as it
        # is subscribed. `until`: an interrupt cuts a step that does not end itself on interrupt; the steps
        # that do (a model call keeps what streamed so far) act first: interrupt callbacks run innermost
        # first.
        before = told.__iter__ if told and not first else None
        opening = told if first else ()
        until = None if closing else control.on_interrupt
        loop = self if hooked is None else None  # a hooked step's Next was taken out already

        def subscribe(
            observer: abc.ObserverBase[AgentEvent], scheduler: abc.SchedulerBase | None = None
        ) -> abc.DisposableBase:
            return _StepFrame(observer, scheduler, loop, opening).attach(source, before=before, until=until)

        return Source(subscribe)


def _closing(node: Node) -> bool:
    """A node that ends an interrupted run: an ``Interrupt``, or a ``Finish`` with reason ``INTERRUPTED``."""
    return isinstance(node, Interrupt) or (isinstance(node, Finish) and node.reason == "INTERRUPTED")


class _StepFrame(Frame[StepOutput[Node], AgentEvent]):
    """One step as the loop runs it: its ``Next`` taken out (it names the node after it), its other items
    passed on as the run's events.

    The run's first step's ``StepStarted`` (and messages delivered before it) is told right after the
    step's ``RunStarted`` (a run's events begin with it), or before its first item if that is another.
    """

    __slots__ = ("_loop", "_told")

    def __init__(
        self,
        observer: abc.ObserverBase[AgentEvent],
        scheduler: abc.SchedulerBase | None,
        loop: _Loop | None,
        told: tuple[AgentEvent, ...],
    ) -> None:
        super().__init__(observer, scheduler)
        self._loop = loop
        """Takes the step's ``Next`` (``None``: a hooked step, whose ``Next`` was taken out already)."""
        self._told = told
        """The first step's events, until told."""

    def each(self, value: StepOutput[Node]) -> Iterable[AgentEvent]:
        loop = self._loop
        produced = (value,) if loop is None else loop.take_next(value)
        told = self._told
        if not told:
            return produced  # type: ignore[return-value] - every item but a Next is an event
        self._told = ()
        if type(value) is RunStarted:
            for event in told:  # built just before it: the step started as the run did
                event.time = value.time
            return (*produced, *told)  # type: ignore[return-value] - as above
        return (*told, *produced)  # type: ignore[return-value] - as above

    def on_next(self, value: StepOutput[Node]) -> None:
        # Frame.on_next without a container per item once the first events are told: a model call's
        # deltas pass here once per token.
        if self._told:
            super().on_next(value)
        elif not (self.stopped or self.is_disposed):
            loop = self._loop
            if loop is not None and type(value) is Next:  # the last one counts (a hook may run a step twice)
                loop.upcoming = value.node
            else:
                self._observer.on_next(value)  # type: ignore[arg-type] - every item but a Next is an event

    def after(self) -> tuple[AgentEvent, ...]:
        """What is still untold when the step ends (a first step that emitted nothing)."""
        told, self._told = self._told, ()
        return told


def _gated(
    gate: StepGate,
    node: Node,
    run: RunState,
    reach: Callable[[Node], Node],
    start: Callable[[Node], Observable[AgentEvent]],
) -> Observable[AgentEvent]:
    """The step of the node ``gate`` resolves to, once it has (asked with ``node``, the node the run reached).

    A node the run may not go to any more (it was interrupted meanwhile) is replaced by the one it goes to
    instead, and the gate is asked again with that one: whoever drives the run sees every node that runs.
    """

    def subscribe(observer: abc.ObserverBase[AgentEvent], scheduler: abc.SchedulerBase | None = None) -> Slot:
        slot = Slot()

        def ask(proposed: Node) -> None:
            chosen = gate(proposed, run)

            def resolved(_: object) -> None:
                if slot.is_disposed:
                    return
                try:
                    if chosen.cancelled():
                        raise RuntimeError(
                            f"the step gate was cancelled before it chose a node for {proposed!r}"
                        )
                    picked = chosen.result()
                    due = reach(picked)
                    if due is not picked:
                        ask(due)
                        return
                    step = start(picked)
                except Exception as error:  # a node with no step: the run's usual failure
                    observer.on_error(error)
                    return
                slot.current = subscribe_to(
                    step, observer.on_next, observer.on_error, observer.on_completed, scheduler
                )

            def forget() -> None:  # disposed while waiting: the run ends, the gate is not heard any more
                chosen.remove_done_callback(resolved)

            chosen.add_done_callback(resolved)
            slot.current = Slot(forget)  # a loop-bound disposable that forgets the gate

        ask(node)
        return slot

    return Source(subscribe)


def _hooked(step: Step[Node, Node], node: Node, run: RunState, loop: _Loop) -> Observable[AgentEvent] | None:
    """``step`` on ``node``, its ``Next`` taken out, wrapped in the node's cut point; ``None`` when the
    node has no cut point or no middleware hooks it.

    A ``reasoning`` hook may rewrite ``summarising`` (of a :class:`Reason`), an ``acting`` hook the calls;
    the hook sees the step's events only, and the run goes where the step's ``Next`` says. A hook that
    never calls the step (it answers from a cache, say) leaves no ``Next``: the run goes on as for a turn
    that produced no message (``Finish(NO_ANSWER)``), or a batch that ran nothing (the next turn).
    """

    middleware = run.deps.middleware
    kind = node.cut_point
    if kind is None or not has_hooks(middleware, kind):
        return None
    take_next = loop.take_next

    def then_default() -> Observable[AgentEvent]:
        if loop.upcoming is None and not run.ended:
            loop.upcoming = (
                after_tools(run)
                if isinstance(node, Act)
                else Finish("NO_ANSWER", None, detail="the reasoning step produced no message")
            )
        return reactivex.empty()

    if kind == "reasoning":
        summarising = isinstance(node, Reason) and node.summarising

        def reason(turn: ReasoningStep) -> Observable[AgentEvent]:
            hooked = replace(node, summarising=turn.summarising) if isinstance(node, Reason) else node
            return step(hooked, run).pipe(frame(take_next))

        hooked = chain(middleware, "reasoning", run.ctx, reason)(
            ReasoningStep(run.iteration + 1, summarising)
        )
        return reactivex.concat(hooked, reactivex.defer(lambda _: then_default()))
    if not isinstance(node, Act):
        raise TypeError(f"the acting cut point wraps Act nodes, not {type(node).__name__}")
    act = node

    def acting(turn: ActingStep) -> Observable[AgentEvent]:
        return step(replace(act, calls=turn.calls), run).pipe(frame(take_next))

    hooked = chain(middleware, "acting", run.ctx, acting)(ActingStep(run.iteration, act.calls))
    return reactivex.concat(hooked, reactivex.defer(lambda _: then_default()))


def take_inbox(run: RunState) -> list[AgentEvent]:
    """Add the messages delivered into the run to its history (recorded as ``steer`` facts where they
    took effect); returns their events."""
    events: list[AgentEvent] = []
    inbox = run.deps.control.inbox
    while inbox:
        message, _ = inbox.popleft()
        run.add_messages([message])
        run.note("steer", {"message_id": message.id})
        if not run.quiet:
            events.append(MessageCompleted(**run.head, message=message))
    return events


def recover(run: RunState, error: Exception) -> Observable[AgentEvent] | None:
    """How a failing step ends the run: a middleware's ``StopRun`` with reason ``STOPPED``; any other error
    with an ``ErrorEvent`` and reason ``ERROR``, then the error itself (an error that ``rolls_back`` first
    drops what the run changed that the log does not have). ``None`` once the result is out."""
    if run.ended:
        return None
    if isinstance(error, StopRun):
        return finish(run, Finish("STOPPED", run.last_message, detail=error.reason))
    if rolls_back(error):
        run.roll_back()
    run.settle("The run failed before this call finished.", "error", answer_waiting=False)
    kind = type(error).__name__
    report = ErrorEvent(**run.head, error_type=kind, message=str(error))
    ending = finish(run, Finish("ERROR", None, detail=f"{kind}: {error}"), failure=error)
    return reactivex.concat(sync_of(report), ending, reactivex.throw(error))


# ---- the steps every assembly shares ---------------------------------------------------------------------

_FINAL_PHASE: dict[RunReason, Phase] = {"ERROR": "ERROR"}


def _nothing(_: object) -> tuple[AgentEvent, ...]:
    return ()


def finish(run: RunState, node: Finish, *, failure: Exception | None = None) -> Observable[AgentEvent]:
    """The closing events: the final phase, then the one AgentResult (built last, so it is the newest).

    The state is saved first, so a consumer may stop at the result; a run ending in ``failure`` keeps
    that error whatever the save does (a failing save becomes a note on it).
    """
    closing = run.phase_to(_FINAL_PHASE.get(node.reason, "FINISHED"))

    def result() -> tuple[AgentEvent]:
        run.ended = True
        return (
            AgentResult(
                **run.head,
                message=node.message,
                reason=node.reason,
                structured=node.structured,
                structured_error=node.structured_error,
                usage=run.usage,
                iterations=run.iteration,
                pending=[p.call for p in run.state.pending],
                detail=node.detail,
            ),
        )

    async def save() -> AsyncIterator[AgentEvent]:
        await run.deps.save(node.reason, failure)  # before the result, so a consumer may stop at the result
        return
        yield  # an async generator that yields nothing

    return from_async_iterable(save).pipe(frame(_nothing, before=lambda: closing, after=result))


def finish_step(node: Finish, run: RunState) -> Observable[AgentEvent]:
    """The :class:`Finish` step: save, the final phase, the result; the run ends (no :class:`Next`)."""
    return finish(run, node)


def interrupt_step(node: Interrupt, run: RunState) -> Observable[StepOutput[Finish]]:
    """The :class:`Interrupt` step: calls that finished keep their results, the rest are marked
    interrupted, and the run finishes ``INTERRUPTED`` with whatever answer text streamed."""
    closing = run.settle("Interrupted by the user before it finished.", "interrupted", answer_waiting=True)
    last = run.last_message
    message = last if last is not None and last.has_answer_text else None
    return emit(*closing, then=Finish("INTERRUPTED", message))


NO_ANSWER_PROMPT = "Your last reply contained no answer text. Answer the question directly, in plain text."


def reprompt_step(node: Reprompt, run: RunState) -> Observable[StepOutput[Reason]]:
    """The :class:`Reprompt` step: tell the model its reply held no answer, then reason again (once)."""
    run.add_messages([Msg.user(NO_ANSWER_PROMPT, metadata={"rxagent": "no_answer_reprompt"})])
    return emit(then=continue_reasoning(run, reprompted=True))
