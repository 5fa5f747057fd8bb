"""Agents that compose: an agent as a tool of another agent, and an agent as an operator over inputs.

**An agent as a tool** (:func:`agent_tool`, ``ReActAgent.as_tool``). The parent's model calls the tool
with a task; the tool runs the child agent on it and answers with the child's answer. The child's run::

    parent run ── Act ── tool "research"(task) ─────────────────────────── ToolResult(child's answer)
                            └─ child run: RunStarted … MessageCompleted … AgentResult
                               (run_id its own, parent_run_id = the parent's run id, seq its own)

- **context**: the parent run's user, trace id and attributes; ``parent_run_id`` is the parent run's
  id; the session is ``"{parent session}/{tool}/{parent run id}/{call id}"`` per call (parallel calls
  run in parallel; model call ids may repeat across runs, the run id keeps the sessions apart), or
  ``"{parent session}/{tool}"`` with ``sessions="shared"`` (the child remembers the earlier tasks of
  that parent session; its calls take turns). Each child session is saved in the child agent's store.
- **events**: the child runs with as much detail as the parent's caller watches
  (:attr:`~rxagent.context.RunContext.event_detail`): its events reach the parent's ``stream_events``
  through :meth:`~rxagent.tools.ToolContext.publish`, in the stream between the call's
  ``ToolExecutionStarted`` and its ``ToolResult``; a quiet parent (``call`` with no middleware
  watching) runs the child quietly too and sees only its result.
- **usage**: the child's :class:`~rxagent.events.AgentResult` usage (its model calls included) counts
  in the parent's, also for a quiet parent.
- **result**: the child's answer text; with an ``output_type``, the structured answer as JSON. A child
  that fails, ends waiting for approval or an external tool, gives no (valid) answer, or is stopped
  gives an ``error`` result saying so (the model can adapt, as with any tool error).
- **cancel and interrupt**: disposing or interrupting the parent cancels the call, which disposes the
  child's run: its model call and tools are cancelled, its session saved and released (the lifecycle of
  ``stream_events``). A cancelled child reports no result, so its usage is not in the parent's.

**An agent as an operator** (:func:`map_runs`, ``ReActAgent.map_runs``): ``inputs.pipe(agent.map_runs(
max_concurrent=4))`` runs the agent once per input, at most ``max_concurrent`` runs at once, and emits a
:class:`RunOutcome` per input — in input order or as the runs finish. A run that fails is an outcome with
its error, not the end of the batch; disposing the stream cancels every run in flight. ``progress=True``
shows a bar of the runs finished, with the counts of done, failed and running (tqdm, in a notebook or a
terminal).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeAlias, TypedDict

import pydantic_core
from pydantic import BaseModel, JsonValue
from reactivex import Observable

from rxagent.agent.inputs import AgentInput
from rxagent.context import RuntimeContext, run_context_of
from rxagent.events import AgentEvent, AgentResult
from rxagent.messages import TextBlock, ToolResultBlock, new_id
from rxagent.operators import (
    Operator,
    ProgressOption,
    deferred,
    frame,
    last_value,
    map_concurrent,
    map_many,
    sync_of,
)
from rxagent.state import DEFAULT_SESSION
from rxagent.tools import SchemaTool, Tool, ToolContext, ToolTraits

if TYPE_CHECKING:
    from rxagent.agent.react import AnyAgent

__all__ = [
    "AgentToolOptions",
    "ChildSessions",
    "MapRunsOptions",
    "RunContextFactory",
    "RunOutcome",
    "agent_tool",
    "map_runs",
]

ChildSessions: TypeAlias = Literal["per_call", "shared"]
"""Where an agent used as a tool keeps its runs: a fresh session per call, or one per parent session."""

RunContextFactory: TypeAlias = Callable[[int, AgentInput], RuntimeContext]
"""``(index, input) -> context`` of one run of :func:`map_runs`."""


class AgentToolOptions(TypedDict, total=False):
    """The options of :func:`agent_tool` (and ``Agent.as_tool``) after the name and description."""

    sessions: ChildSessions
    max_task_chars: int
    timeout: float | None
    groups: Iterable[str]


class MapRunsOptions(TypedDict, total=False):
    """The options of :func:`map_runs` (and ``Agent.map_runs``)."""

    max_concurrent: int
    ordered: bool
    context: RunContextFactory | None
    events: bool
    deltas: bool
    progress: ProgressOption


# ---- an agent as a tool ----------------------------------------------------------------------------------


def agent_tool(
    agent: AnyAgent,
    name: str | None = None,
    description: str | None = None,
    *,
    sessions: ChildSessions = "per_call",
    max_task_chars: int = 8000,
    timeout: float | None = None,
    groups: Iterable[str] = (),
) -> Tool:
    """``agent`` as a tool another agent's toolkit can register (see the module for the whole contract).

    Args:
        agent: the child agent.
        name: the tool's name (default: the agent's name).
        description: what the parent's model reads about it (default: a generic delegation note; say
            what the child is good at).
        sessions: ``"per_call"`` (a fresh session per call; calls may run in parallel) or ``"shared"``
            (one session per parent session: the child remembers earlier tasks; calls take turns).
        max_task_chars: longest task text the model may send (the schema's ``maxLength``).
        timeout: seconds before the call is cancelled with an error result (``None``: no limit).
        groups: tool groups the tool belongs to.

    Returns:
        A :class:`~rxagent.tools.Tool` with one argument, ``task`` (text).

    Raises:
        ValueError: an invalid tool name, ``max_task_chars`` below 1, or an unknown ``sessions``.
    """
    if max_task_chars < 1:
        raise ValueError(f"max_task_chars must be at least 1, got {max_task_chars}")
    if sessions not in ("per_call", "shared"):
        raise ValueError(f"sessions must be 'per_call' or 'shared', got {sessions!r}")
    tool_name = name if name is not None else agent.name
    parameters: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": (
                    "The task, with everything needed to do it: the agent does not see this conversation."
                ),
                "minLength": 1,
                "maxLength": max_task_chars,
            }
        },
        "required": ["task"],
        "additionalProperties": False,
    }

    async def delegate(arguments: dict[str, JsonValue], context: ToolContext) -> ToolResultBlock | str:
        child = _child_context(context, tool_name, shared=sessions == "shared")
        task = str(arguments["task"])  # the schema made it a string
        try:
            result = await last_value(_child_events(agent, task, child, context))
        except Exception as error:
            return _error(context, f"the agent '{agent.name}' failed: {type(error).__name__}: {error}")
        return _answer(agent, result, context, child)

    return SchemaTool(
        tool_name,
        description or f"Ask the '{agent.name}' agent to do a task; it answers with its result.",
        parameters,
        delegate,
        traits=ToolTraits(concurrency_safe=sessions == "per_call", timeout=timeout, groups=frozenset(groups)),
    )


def _child_context(context: ToolContext, tool_name: str, *, shared: bool) -> RuntimeContext:
    runtime = context.runtime
    run = run_context_of(runtime)
    parent_run = run.run_id if run is not None else None
    session = f"{runtime.session_id or DEFAULT_SESSION}/{tool_name}"
    if not shared:
        session += f"/{parent_run}/{context.call_id}" if parent_run else f"/{context.call_id}"
    return RuntimeContext(
        user_id=runtime.user_id,
        session_id=session,
        trace_id=runtime.trace_id,
        attributes=runtime.attributes,
        parent_run_id=parent_run,
    )


def _child_events(
    agent: AnyAgent, task: str, child: RuntimeContext, context: ToolContext
) -> Observable[AgentEvent]:
    """The child's run, each event published into the parent's batch; as detailed as the parent's."""
    runtime = context.runtime
    run = run_context_of(runtime)
    detail = run.event_detail if run is not None else "result"
    events: Observable[AgentEvent] = (
        agent.call_observable(task, child)
        if detail == "result"
        else agent.stream_events(task, child, deltas=detail == "all")
    )

    def publish(event: AgentEvent) -> tuple[AgentEvent]:
        context.publish(event)
        return (event,)

    return events.pipe(frame(publish))


def _answer(
    agent: AnyAgent, result: AgentEvent, context: ToolContext, child: RuntimeContext
) -> ToolResultBlock | str:
    if not isinstance(result, AgentResult):  # the stream's last event is its result, whatever happened
        return _error(context, f"the agent '{agent.name}' ended without a result")
    who = f"the agent '{agent.name}' (session {child.session_id!r})"
    reason = result.reason
    if reason == "PERMISSION_ASKING":
        names = ", ".join(call.name for call in result.pending)
        return _error(context, f"{who} stopped waiting for a human to approve its call(s) to {names}")
    if reason == "TOOL_SUSPENDED":
        names = ", ".join(call.name for call in result.pending)
        return _error(context, f"{who} stopped waiting for the result of external tool(s) {names}")
    if reason in ("ERROR", "STOPPED", "INTERRUPTED", "NO_ANSWER"):
        return _error(context, f"{who} ended with {reason}" + (f": {result.detail}" if result.detail else ""))
    if agent.output is not None:
        if result.structured is None:
            why = result.structured_error or "no structured answer"
            return _error(context, f"{who} gave no valid structured answer: {why}")
        value = result.structured
        if isinstance(value, BaseModel):
            return value.model_dump_json()
        return pydantic_core.to_json(value).decode()
    return result.text


def _error(context: ToolContext, text: str) -> ToolResultBlock:
    return ToolResultBlock(
        tool_use_id=context.call_id,
        name=context.tool_name,
        output=(TextBlock(text=f"Error: {text}"),),
        status="error",
    )


# ---- an agent as an operator -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunOutcome:
    """What one run of :func:`map_runs` came to.

    Attributes:
        index: the input's position in the stream (0, 1, 2, …).
        input: the input.
        result: the run's :class:`~rxagent.events.AgentResult` (``None`` when the run failed before it
            had one: bad input, a busy session, a store that failed to load).
        error: why the run failed (``None``: it did not). A run that failed once started has both: the
            result with reason ``ERROR`` and the error.
        events: every event of the run, result included, when ``map_runs(events=True)``; else empty.
    """

    index: int
    input: AgentInput
    result: AgentResult | None
    error: Exception | None = None
    events: tuple[AgentEvent, ...] = ()

    @property
    def ok(self) -> bool:
        """The run ended without an error (whatever its reason)."""
        return self.error is None and self.result is not None

    @property
    def text(self) -> str:
        """The answer text ("" when there is none)."""
        return self.result.text if self.result is not None else ""


def map_runs(
    agent: AnyAgent,
    *,
    max_concurrent: int = 4,
    ordered: bool = True,
    context: RunContextFactory | None = None,
    events: bool = False,
    deltas: bool = False,
    progress: ProgressOption = False,
) -> Operator[AgentInput, RunOutcome]:
    """An operator running ``agent`` once per input, at most ``max_concurrent`` runs at once.

    ::

        inputs:    ─ q0 ─ q1 ─ q2 ─ q3 ─|                      (max_concurrent=2)
        runs:        [q0 ──────]  [q2 ──]
                          [q1 ─]         [q3 ────]
        ordered:   ──────────── o0 o1 ── o2 ───── o3 ─|
        unordered: ──────── o1 ─ o0 ──── o2 ───── o3 ─|

    Each input runs in its own session by default (``"{batch id}/{index}"``, a fresh batch id per
    subscription), so runs never wait for each other's sessions; ``context`` gives each run its own
    context instead (a user, a session, attributes). Ordered outcomes are held until those before them
    are out, and a run starts only while it is within ``max_concurrent`` of the oldest unfinished one, so
    at most ``max_concurrent`` outcomes are ever held (see :func:`~rxagent.operators.map_concurrent`).

    Args:
        agent: the agent to run.
        max_concurrent: most runs at once (at least 1).
        ordered: outcomes in input order (``True``) or as the runs finish (``False``).
        context: ``(index, input) -> RuntimeContext`` for each run (default: a session per input).
        events: keep every event of each run in its outcome (``False``: runs are quiet, as ``call``).
        deltas: with ``events``, keep the per-token deltas too.
        progress: ``True`` shows a progress bar (``tqdm.auto``: a widget in a notebook, a text bar in a
            terminal) of the runs finished out of the inputs, with the counts of runs done, failed (an
            outcome that is not :attr:`~RunOutcome.ok`) and running; a text is the bar's label; a factory
            of :class:`~rxagent.operators.ProgressDisplay` draws it your way (see
            :func:`~rxagent.operators.map_concurrent`).

    Returns:
        An operator from inputs (anything :meth:`Agent.call <rxagent.agent.Agent.call>` takes) to one
        :class:`RunOutcome` each.

    Raises:
        ValueError: ``max_concurrent`` is below 1 (when the operator is built).
        ImportError: ``progress`` asks for a tqdm bar and tqdm is not installed (``rxagent[notebook]``).
        TypeError: ``progress`` is not a bool, a label or a factory.

    Lifecycle:
        complete: after every input's outcome. error: only the inputs' own stream's error fails it
        (every run in flight is cancelled); a run's failure — bad input, a failing model, a failing
        ``context`` — is that input's outcome. cancel: every run in flight is cancelled (its model call
        and tools stop, its session is saved and released); inputs not started never run.
        re-subscribe: runs every input again, in a new batch of sessions. The progress bar is made per
        subscription and closed on complete, error and cancel alike.

    Example:
        >>> fan_out = map_runs(agent, max_concurrent=4, ordered=False)  # doctest: +SKIP
        >>> outcomes = await to_list(reactivex.from_iterable(questions).pipe(fan_out))
    """
    if max_concurrent < 1:
        raise ValueError(f"max_concurrent must be at least 1, got {max_concurrent}")

    def one(numbered: _Numbered) -> Observable[RunOutcome]:
        index, item, batch = numbered

        def own_session(index: int, _: AgentInput) -> RuntimeContext:
            return RuntimeContext(session_id=f"{batch}/{index}")

        return _one_run(agent, index, item, context or own_session, events, deltas)

    # Built once, so that bad settings (no tqdm for the bar) fail here and not when the batch starts.
    fan_out = map_concurrent(
        one, max_concurrent, ordered=ordered, progress=progress, is_failure=_failed, unit="run"
    )

    def operator(inputs: Observable[AgentInput]) -> Observable[RunOutcome]:
        def per_subscription() -> Observable[RunOutcome]:
            batch = new_id("batch")
            numbering = itertools.count()

            def number(item: AgentInput) -> tuple[_Numbered]:
                return ((next(numbering), item, batch),)

            return inputs.pipe(map_many(number), fan_out)

        return deferred(per_subscription)

    return operator


_Numbered: TypeAlias = tuple[int, AgentInput, str]
"""An input of a fan-out with its index and the subscription's batch id."""


def _failed(outcome: RunOutcome) -> bool:
    return not outcome.ok


def _one_run(
    agent: AnyAgent,
    index: int,
    item: AgentInput,
    contexts: RunContextFactory,
    events: bool,
    deltas: bool,
) -> Observable[RunOutcome]:
    try:
        ctx = contexts(index, item)
        stream: Observable[AgentEvent] = (
            agent.stream_events(item, ctx, deltas=deltas) if events else agent.call_observable(item, ctx)
        )
    except Exception as error:  # bad input (normalise_input) or a failing context factory: this input's
        return sync_of(RunOutcome(index, item, None, error))
    parent = ctx.parent_run_id
    seen: list[AgentEvent] = []
    results: list[AgentResult] = []

    def each(event: AgentEvent) -> tuple[()]:
        if events:
            seen.append(event)
        if type(event) is AgentResult and event.parent_run_id == parent:  # not a nested run's
            results.append(event)
        return ()

    def outcome(error: Exception | None) -> RunOutcome:
        return RunOutcome(index, item, results[-1] if results else None, error, tuple(seen))

    return stream.pipe(
        frame(each, after=lambda: (outcome(None),), recover=lambda error: sync_of(outcome(error)))
    )
