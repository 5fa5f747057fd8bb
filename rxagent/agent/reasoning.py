"""The reasoning step: prepare the request, stream the model through the middleware, fold the answer.

:func:`reason_step` builds the step for :class:`~rxagent.agent.nodes.Reason` nodes (and for any node of
a custom assembly that is a model turn, such as a planning step): it builds the request (system prompt,
the repaired history, the run's tool schemas, structured-output wiring), passes it through the
``reasoning``, ``request`` and ``model_call`` cut points, publishes deltas as events, folds the chunks
into the assistant message (appended to the history), and names the next node with its ``decide``
function (:func:`~rxagent.agent.decisions.after_reasoning` by default).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from functools import partial
from typing import Literal, Never, overload

import reactivex
from reactivex import Observable, abc
from typing_extensions import TypeVar

from rxagent.agent.decisions import after_reasoning
from rxagent.agent.middleware import chain, has_hooks
from rxagent.agent.nodes import Act, CheckOutput, Finish, Next, Node, Reason, Reprompt, StepOutput
from rxagent.agent.run import EventHead, RunState
from rxagent.agent.structured import OUTPUT_TOOL, prompted_instructions
from rxagent.events import (
    AgentEvent,
    ErrorEvent,
    EventHeader,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    RetryScheduled,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
)
from rxagent.messages import Msg
from rxagent.model.errors import ModelHTTPError
from rxagent.model.types import ChatChunk, ChatModel, ChatRequest, ForceTool, ToolChoice, ToolSchema, Usage
from rxagent.operators import Frame, MessageFold, Source, map_many, sync_of
from rxagent.retry import RetryAttempt

__all__ = ["ReasoningDecision", "build_request", "model_turn", "reason_step", "structured_path"]

_N = TypeVar("_N", bound=Node)
_To = TypeVar("_To", bound=Node)
_E = TypeVar("_E", bound=EventHeader)

ReasoningDecision = Callable[[_N, Msg | None, RunState], _To]
"""``(node, message, run) -> next node``: what follows a model turn (see ``after_reasoning``)."""

_SUMMARY_PROMPT = (
    "You have used all {n} reasoning steps you are allowed. Do not call any tool. Summarise what you found "
    "so far and give the best answer you can."
)
_STRUCTURED_AUTO_PROMPT = f"When you have the final answer, call the `{OUTPUT_TOOL}` tool with it."


@overload
def reason_step(
    *, instructions: str | None = None, tools: bool = True
) -> Callable[[Node, RunState], Observable[StepOutput[Finish | CheckOutput | Act | Reprompt]]]: ...
@overload
def reason_step(
    decide: ReasoningDecision[_N, _To], *, instructions: str | None = None, tools: bool = True
) -> Callable[[_N, RunState], Observable[StepOutput[_To]]]: ...
def reason_step(
    decide: Callable[..., Node] = after_reasoning,
    *,
    instructions: str | None = None,
    tools: bool = True,
) -> Callable[[Never, RunState], Observable[StepOutput[Node]]]:
    """The step of one model turn (an iteration, saved in the history), ending with
    ``Next(decide(node, message, run))``.

    Args:
        decide: picks the node after the turn from the folded message.
        instructions: a system message added at the end of this turn's request only (never saved in
            the history): how a planning or reviewing turn tells the model what to do.
        tools: ``False`` makes a plain text turn: no tool schemas and no structured-output wiring.

    Returns:
        A step for :class:`~rxagent.agent.nodes.Reason` nodes, or for any node ``decide`` takes (only
        ``Reason.summarising`` is read).

    Example:
        A planning turn in a custom assembly (``Plan`` is the assembly's own node type)::

            plan = reason_step(decide=read_plan, instructions="Write a numbered plan.", tools=False)
            agent = Agent(model, toolkit, steps=react_steps().on(Plan, plan))
    """

    def step(node: Node, run: RunState) -> Observable[StepOutput[Node]]:
        run.iteration += 1
        run.last_message = None
        return _reason_turn(run, node, decide, instructions, tools)

    return step


def _reason_turn(
    run: RunState, node: Node, decide: Callable[..., Node], instructions: str | None, tools: bool
) -> Observable[StepOutput[Node]]:
    # Module-level with partials, not a closure naming itself: a self-referencing closure is a reference
    # cycle per turn that only the garbage collector would free.
    summarising = isinstance(node, Reason) and node.summarising
    request = build_request(run, summarising, instructions=instructions, tools=tools)
    again = partial(_reason_turn, run, node, decide, instructions, tools)
    return _model_turn(run, request, True, partial(_decided, decide, node, run), again)


def _decided(decide: Callable[..., Node], node: Node, run: RunState, message: Msg) -> Node:
    return decide(node, message, run)


@overload
def model_turn(
    run: RunState, request: ChatRequest, *, record: bool = False, model: ChatModel | None = None
) -> Observable[AgentEvent]: ...
@overload
def model_turn(
    run: RunState,
    request: ChatRequest,
    *,
    record: bool = False,
    model: ChatModel | None = None,
    then: Callable[[Msg], _To],
) -> Observable[StepOutput[_To]]: ...
def model_turn(
    run: RunState,
    request: ChatRequest,
    *,
    record: bool = False,
    model: ChatModel | None = None,
    then: Callable[[Msg], Node] | None = None,
) -> Observable[StepOutput[Node]]:
    """One model call of the run: ``request`` through the ``request`` and ``model_call`` cut points (so
    it is traced), its usage counted in the run's, the answer folded into a message.

    ``record=False`` is a side turn (a critique, a plan check, a reviewer's verdict): the message is not
    added to the history, the iteration count does not move, and no text deltas are emitted (watchers
    would take them for the answer); ``ModelCallStarted``/``ModelCallFinished`` still are.
    ``record=True`` is a turn of the conversation, as :func:`reason_step` takes it: an iteration, the
    message saved in the history, every event.

    Args:
        run: the run's state.
        request: the request to send (its messages from ``run.request_messages(...)``).
        record: save the turn in the history (see above).
        model: the model to ask (default: the run's), e.g. a cheaper critic.
        then: the node to go to, from the folded message: the stream then ends with ``Next(then(msg))``,
            ready to be a step's output.

    Returns:
        The turn's events (and ``Next`` with ``then``).

    Example:
        A critique turn ending a step::

            critique = ChatRequest(run.request_messages(Msg.user(CRITIQUE)))
            return model_turn(run, critique, then=lambda m: Revise(m.text))
    """
    if record:
        run.iteration += 1
        run.last_message = None
    return _model_turn(run, request, record, then, None, model)


def _model_turn(
    run: RunState,
    request: ChatRequest,
    record: bool,
    then: Callable[[Msg], Node] | None,
    again: Callable[[], Observable[StepOutput[Node]]] | None,
    model: ChatModel | None = None,
) -> Observable[StepOutput[Node]]:
    middleware = run.deps.middleware
    if not has_hooks(middleware, "request"):
        return _model_call(run, request, record, then, again, model)
    prepare = chain(middleware, "request", run.ctx, reactivex.just)
    prepared: list[ChatRequest] = []

    def split(item: ChatRequest | AgentEvent) -> list[AgentEvent]:
        # A request hook may publish events (what a context window evicted, say) before the request.
        if isinstance(item, ChatRequest):
            prepared.append(item)
            return []
        return [item]

    def call_model(_: abc.SchedulerBase | None) -> Observable[StepOutput[Node]]:
        if not prepared:
            raise RuntimeError("the request middleware produced no ChatRequest")
        return _model_call(run, prepared[-1], record, then, again, model)

    hooked: Observable[ChatRequest | AgentEvent] = prepare(request)
    return reactivex.concat(hooked.pipe(map_many(split)), reactivex.defer(call_model))


def structured_path(run: RunState) -> Literal["native", "tool", "prompted"]:
    """How this run asks for structured output: the option, or under ``auto`` the first of native, tool,
    prompted that the model's capabilities allow."""
    mode = run.deps.options.structured_mode
    if mode != "auto":
        return mode
    capabilities = run.deps.model.capabilities
    if capabilities.json_schema_output:
        return "native"
    return "tool" if capabilities.tools else "prompted"


def build_request(
    run: RunState, summarising: bool, *, instructions: str | None = None, tools: bool = True
) -> ChatRequest:
    """The request of one model turn (before the ``request`` cut point).

    The system prompt, the repaired history, then for a tool-using turn the run's tool schemas (and the
    structured-output wiring), for the summarising turn a closing instruction and no tools. The history is
    repaired where it is new and copied once, into the request (see :meth:`RunState.request_messages`).
    """
    deps = run.deps
    options = deps.options
    closing: list[Msg] = []  # system messages of this turn only, after the history
    schemas: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format = None
    if summarising:
        closing.append(Msg.system(_SUMMARY_PROMPT.format(n=options.max_iters)))
    elif tools:
        schemas = deps.view.schemas()
        if schemas and run.iteration == 1:
            tool_choice = options.first_tool_choice
        output = deps.output
        if output is not None:
            path = structured_path(run)
            if path == "native":
                response_format = output.response_format()
            elif path == "prompted":
                closing.append(Msg.system(prompted_instructions(output)))
            else:
                schemas = (*schemas, output.tool_schema())
                tool_choice = _output_tool_choice(run, len(schemas))
                if tool_choice == "auto":
                    closing.append(Msg.system(_STRUCTURED_AUTO_PROMPT))
    if instructions is not None:
        closing.append(Msg.system(instructions))
    return ChatRequest(
        messages=run.request_messages(*closing),
        tools=schemas,
        tool_choice=tool_choice,
        response_format=response_format,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        retry_budget=deps.budget,
    )


def _output_tool_choice(run: RunState, tool_count: int) -> ToolChoice:
    capabilities = run.deps.model.capabilities
    ladder: list[ToolChoice] = []
    if tool_count == 1 and capabilities.forced_tool_choice:
        ladder.append(ForceTool(OUTPUT_TOOL))
    if capabilities.forced_tool_choice:
        ladder.append("required")
    ladder.append("auto")
    return ladder[min(run.tool_choice_rung, len(ladder) - 1)]


def _model_call(
    run: RunState,
    request: ChatRequest,
    record: bool,
    then: Callable[[Msg], Node] | None,
    again: Callable[[], Observable[StepOutput[Node]]] | None,
    asked: ChatModel | None,
) -> Observable[StepOutput[Node]]:
    deps = run.deps
    model = asked or deps.model
    call = chain(deps.middleware, "model_call", run.ctx, model.stream)
    opening: list[AgentEvent] = run.phase_to("THINKING") if record else []
    if not deps.quiet:
        opening.append(
            ModelCallStarted(
                **deps.head,
                iteration=run.iteration,
                model=model.model_name,
                messages=len(request.messages),
                tools=[t.name for t in request.tools],
            )
        )
    source: Observable[ChatChunk | RetryAttempt] = call(request)
    until = deps.control.on_interrupt
    # Retries happen inside the model's stream; the budget's listener feeds them through `each`, so they
    # surface as events in order, between the attempts, with no Subject in the hot path.
    retries = deps.budget.add_listener
    recovers = again if request.tool_choice is not None else None

    def subscribe(
        observer: abc.ObserverBase[StepOutput[Node]], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        turn = _ModelCall(observer, scheduler, run, request, record, then, recovers)
        return turn.attach(source, before=opening.__iter__, until=until, inject=retries)

    return Source(subscribe)


class _Produced(list[StepOutput[Node]]):
    """The events of one chunk, collected for ``Frame.each``: ``_take`` hands them to it as to an observer."""

    __slots__ = ()

    def on_next(self, value: StepOutput[Node]) -> None:
        """Collect ``value``."""
        self.append(value)


class _ModelCall(Frame[ChatChunk | RetryAttempt, StepOutput[Node]]):
    """One model call as it streams: its chunks folded and published as events, the message at the end.

    A :class:`~rxagent.operators.Frame` with methods, not ``frame`` with closures: a run waiting for its
    model keeps it alive, and the garbage collector walks every object a run keeps (see
    ``rxagent/operators/_source.py``).
    """

    __slots__ = (
        "_again",
        "_deltas",
        "_fold",
        "_iteration",
        "_make",
        "_record",
        "_request",
        "_run",
        "_started_at",
        "_then",
    )

    def __init__(
        self,
        observer: abc.ObserverBase[StepOutput[Node]],
        scheduler: abc.SchedulerBase | None,
        run: RunState,
        request: ChatRequest,
        record: bool,
        then: Callable[[Msg], Node] | None,
        again: Callable[[], Observable[StepOutput[Node]]] | None,
    ) -> None:
        super().__init__(observer, scheduler)
        self._run = run
        self._request = request
        self._record = record
        self._then = then
        self._again = again
        """This turn again (one rung lower on the tool-choice ladder), when the request forces a tool."""
        self._fold = MessageFold()
        self._started_at = time.perf_counter()
        self._deltas = record and run.deps.deltas
        self._iteration = run.iteration
        self._make = _DeltaEvents(run.deps.head)

    def each(self, value: ChatChunk | RetryAttempt) -> list[StepOutput[Node]]:
        """A chunk into the fold, and out as its delta events (a retry as its event)."""
        produced = _Produced()
        self._take(value, produced)
        return produced

    def on_next(self, value: ChatChunk | RetryAttempt) -> None:
        # Frame.on_next, each event handed on as it is made (no container per chunk: once per token).
        if self.stopped or self.is_disposed:
            return
        try:
            self._take(value, self._observer)  # not its bound `on_next`: an object per token
        except Exception as error:  # the mapper's failure is the stream's failure
            self.on_error(error)

    def _take(
        self, item: ChatChunk | RetryAttempt, out: abc.ObserverBase[StepOutput[Node]] | _Produced
    ) -> None:
        """``item`` into the fold, each delta out to ``out`` as one event."""
        fold, make = self._fold, self._make
        if isinstance(item, RetryAttempt):
            out.on_next(
                RetryScheduled(
                    **self._run.deps.head,
                    retry_number=item.retry_number,
                    delay_s=item.delay,
                    error=str(item.error),
                    budget_remaining=item.budget_remaining,
                )
            )
            return
        if not self._deltas:  # nobody sees deltas: fold only (the hot path of `call`)
            fold.add(item)
            return
        if not item.tool_calls:
            fold.add(item)
            if item.thinking:
                out.on_next(make.thinking(item.thinking))
            if item.text:
                out.on_next(make.text(item.text))
            return
        calls_before = fold.call_count
        fold.add(item)
        if item.thinking:
            out.on_next(make.thinking(item.thinking))
        if item.text:
            out.on_next(make.text(item.text))
        for delta in item.tool_calls:
            call_id = fold.call_id_of(delta)
            if fold.call_count > calls_before:
                calls_before += 1
                out.on_next(make.call_started(delta.index, call_id, delta.name))
            if delta.arguments:
                out.on_next(make.arguments(delta.index, call_id, delta.arguments))

    def after(self) -> list[StepOutput[Node]]:
        """The folded message (into the history for a recorded turn), its events, and the next node."""
        run, fold, record = self._run, self._fold, self._record
        head = run.deps.head
        message = fold.message()
        usage = fold.usage
        run.usage.add(usage)
        if record:
            run.last_message = message
            run.state.messages.append(message)
        closing: list[StepOutput[Node]] = []
        if not run.deps.quiet:
            closing.append(
                ModelCallFinished(
                    **head,
                    iteration=self._iteration,
                    usage=usage if usage is not None else Usage(),
                    latency_s=time.perf_counter() - self._started_at,
                    finish_reason=fold.finish_reason,
                )
            )
            if record:
                closing.extend(ToolCallCompleted(**head, call=c) for c in message.tool_calls)
                closing.append(MessageCompleted(**head, message=message))
        if self._then is not None:
            closing.append(Next(self._then(message)))
        return closing

    def recover(self, error: Exception) -> Observable[StepOutput[Node]] | None:
        """The model rejected the forced tool choice (400): retry this turn one rung lower on the ladder."""
        retry, run, request = self._again, self._run, self._request
        if retry is None or not isinstance(error, ModelHTTPError) or error.status != 400:
            return None
        run.tool_choice_rung += 1
        lower = _output_tool_choice(run, len(request.tools))
        if lower == request.tool_choice:
            return None
        note = ErrorEvent(
            **run.deps.head,
            error_type=type(error).__name__,
            message=f"{error}; retrying with tool_choice={lower!r}",
        )
        return reactivex.concat(sync_of(note), reactivex.defer(lambda _: retry()))


_new = object.__new__
_now = time.time


class _DeltaEvents:
    """Builds one model call's per-token events: text and thinking deltas, tool-call starts and argument
    fragments.

    A keyword call of an event class (``TextDelta(**head, text=…)``) builds a dictionary of its keywords
    and matches them to parameters by name: about as much again as the event itself, once per token.
    These methods make the event and set its slots directly, so a delta costs the event alone. They set
    every field the keyword constructor sets (``tests/agent/test_delta_events.py`` compares them field by
    field, so a field added to the events cannot be missed here).
    """

    __slots__ = ("_parent_run_id", "_run_id", "_seq", "_session_id", "_trace_id")

    def __init__(self, head: EventHead) -> None:
        self._run_id = head["run_id"]
        self._session_id = head["session_id"]
        self._trace_id = head["trace_id"]
        self._seq = head["seq"]
        self._parent_run_id = head.get("parent_run_id")

    def _event(self, cls: type[_E]) -> _E:
        event = _new(cls)
        event.run_id = self._run_id
        event.session_id = self._session_id
        event.trace_id = self._trace_id
        event.seq = self._seq
        event.time = _now()
        event.parent_run_id = self._parent_run_id
        return event

    def text(self, text: str) -> TextDelta:
        """A :class:`TextDelta` of ``text``."""
        event = self._event(TextDelta)
        event.type = "text_delta"
        event.text = text
        return event

    def thinking(self, text: str) -> ThinkingDelta:
        """A :class:`ThinkingDelta` of ``text``."""
        event = self._event(ThinkingDelta)
        event.type = "thinking_delta"
        event.text = text
        return event

    def call_started(self, index: int, call_id: str | None, name: str | None) -> ToolCallStarted:
        """A :class:`ToolCallStarted`."""
        event = self._event(ToolCallStarted)
        event.type = "tool_call_started"
        event.index = index
        event.call_id = call_id
        event.name = name
        return event

    def arguments(self, index: int, call_id: str | None, fragment: str) -> ToolCallArgumentsDelta:
        """A :class:`ToolCallArgumentsDelta` of ``fragment``."""
        event = self._event(ToolCallArgumentsDelta)
        event.type = "tool_call_arguments_delta"
        event.index = index
        event.call_id = call_id
        event.fragment = fragment
        return event
