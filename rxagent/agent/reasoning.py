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
from collections.abc import Callable, Sequence
from typing import Any, Literal

import reactivex
from reactivex import Observable, abc

from rxagent.agent.decisions import after_reasoning
from rxagent.agent.middleware import ReasoningStep, chain, has_hooks
from rxagent.agent.nodes import Next, Reason, StepOutput
from rxagent.agent.run import RunState
from rxagent.agent.structured import OUTPUT_TOOL, prompted_instructions
from rxagent.events import (
    AgentEvent,
    ErrorEvent,
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
from rxagent.model.types import ChatChunk, ChatRequest, ForceTool, ToolChoice, ToolSchema, Usage
from rxagent.operators import MessageFold, frame, map_many, sync_of
from rxagent.retry import RetryAttempt

__all__ = ["ReasoningDecision", "build_request", "reason_step", "structured_path"]

ReasoningDecision = Callable[[Any, Msg | None, RunState], Any]
"""``(node, message, run) -> next node``: what follows a model turn (see ``after_reasoning``)."""

_SUMMARY_PROMPT = (
    "You have used all {n} reasoning steps you are allowed. Do not call any tool. Summarise what you found "
    "so far and give the best answer you can."
)
_STRUCTURED_AUTO_PROMPT = f"When you have the final answer, call the `{OUTPUT_TOOL}` tool with it."


def reason_step(
    decide: ReasoningDecision = after_reasoning, *, instructions: str | None = None, tools: bool = True
) -> Callable[[Any, RunState], Observable[StepOutput]]:
    """The step of one model turn, ending with ``Next(decide(node, message, run))``.

    Args:
        decide: picks the node after the turn from the folded message.
        instructions: a system message added at the end of this turn's request only (never saved in
            the history): how a planning or reviewing turn tells the model what to do.
        tools: ``False`` makes a plain text turn: no tool schemas and no structured-output wiring.

    Returns:
        A step for :class:`~rxagent.agent.nodes.Reason` nodes (or any node: only ``Reason.summarising``
        is read).

    Example:
        A planning turn in a custom assembly (``Plan`` is the assembly's own node type)::

            plan = reason_step(decide=read_plan, instructions="Write a numbered plan.", tools=False)
            agent = ReActAgent(model, toolkit, steps={Plan: plan})
    """

    def step(node: Any, run: RunState) -> Observable[StepOutput]:
        summarising = isinstance(node, Reason) and node.summarising
        turn = ReasoningStep(run.iteration + 1, summarising)

        def then() -> Next:
            return Next(decide(node, run.last_message, run))

        middleware = run.agent.middleware
        if not has_hooks(middleware, "reasoning"):
            return _reasoning(run, turn, instructions, tools, then)

        # A reasoning hook sees only the turn's events; the Next follows what it returns.
        def inner(hooked_turn: ReasoningStep) -> Observable[Any]:
            return _reasoning(run, hooked_turn, instructions, tools, None)

        events: Observable[StepOutput] = chain(middleware, "reasoning", run.ctx, inner)(turn)
        return reactivex.concat(events, reactivex.defer(lambda _: sync_of(then())))

    return step


def _reasoning(
    run: RunState,
    turn: ReasoningStep,
    instructions: str | None,
    tools: bool,
    then: Callable[[], Next] | None,
) -> Observable[Any]:
    run.iteration = turn.iteration
    run.last_message = None
    request = build_request(run, turn.summarising, instructions=instructions, tools=tools)
    middleware = run.agent.middleware
    if not has_hooks(middleware, "request"):
        return _model_call(run, request, turn, instructions, tools, then)
    prepare = chain(middleware, "request", run.ctx, reactivex.just)
    prepared: list[ChatRequest] = []

    def split(item: ChatRequest | AgentEvent) -> list[AgentEvent]:
        # A request hook may publish events (what a context window evicted, say) before the request.
        if isinstance(item, ChatRequest):
            prepared.append(item)
            return []
        return [item]

    def call_model(_: abc.SchedulerBase | None) -> Observable[Any]:
        if not prepared:
            raise RuntimeError("the request middleware produced no ChatRequest")
        return _model_call(run, prepared[-1], turn, instructions, tools, then)

    hooked: Observable[ChatRequest | AgentEvent] = prepare(request)
    return reactivex.concat(hooked.pipe(map_many(split)), reactivex.defer(call_model))


def structured_path(run: RunState) -> Literal["native", "tool", "prompted"]:
    """How this run asks for structured output: the option, or under ``auto`` the first of native, tool,
    prompted that the model's capabilities allow."""
    mode = run.agent.options.structured_mode
    if mode != "auto":
        return mode
    capabilities = run.agent.model.capabilities
    if capabilities.json_schema_output:
        return "native"
    return "tool" if capabilities.tools else "prompted"


def build_request(
    run: RunState, summarising: bool, *, instructions: str | None = None, tools: bool = True
) -> ChatRequest:
    """The request of one model turn (before the ``request`` cut point).

    The system prompt, the repaired history, then for a tool-using turn the run's tool schemas (and the
    structured-output wiring), for the summarising turn a closing instruction and no tools.
    """
    agent = run.agent
    options = agent.options
    messages = [*agent.request_base(), *run.history()]
    schemas: tuple[ToolSchema, ...] = ()
    tool_choice: ToolChoice | None = None
    response_format = None
    if summarising:
        messages.append(Msg.system(_SUMMARY_PROMPT.format(n=options.max_iters)))
    elif tools:
        schemas = run.view.schemas()
        if schemas and run.iteration == 1:
            tool_choice = options.first_tool_choice
        output = agent.output
        if output is not None:
            path = structured_path(run)
            if path == "native":
                response_format = output.response_format()
            elif path == "prompted":
                messages.append(Msg.system(prompted_instructions(output)))
            else:
                schemas = (*schemas, output.tool_schema())
                tool_choice = _output_tool_choice(run, len(schemas))
                if tool_choice == "auto":
                    messages.append(Msg.system(_STRUCTURED_AUTO_PROMPT))
    if instructions is not None:
        messages.append(Msg.system(instructions))
    return ChatRequest(
        messages=tuple(messages),
        tools=schemas,
        tool_choice=tool_choice,
        response_format=response_format,
        temperature=options.temperature,
        max_tokens=options.max_tokens,
        retry_budget=run.budget,
    )


def _output_tool_choice(run: RunState, tool_count: int) -> ToolChoice:
    capabilities = run.agent.model.capabilities
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
    turn: ReasoningStep,
    instructions: str | None,
    tools: bool,
    then: Callable[[], Next] | None,
) -> Observable[Any]:
    model = run.agent.model
    call = chain(run.agent.middleware, "model_call", run.ctx, model.stream)
    fold = MessageFold()
    started_at = time.perf_counter()
    head = run.head

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
        if not run.deltas:  # nobody sees deltas: fold only (the hot path of `call`)
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
                events.append(ToolCallStarted(**head, index=delta.index, call_id=call_id, name=delta.name))
            if delta.arguments:
                events.append(
                    ToolCallArgumentsDelta(
                        **head, index=delta.index, call_id=call_id, fragment=delta.arguments
                    )
                )
        return events

    def on_done() -> list[Any]:
        message = fold.message()
        usage = fold.usage
        run.usage.add(usage)
        run.last_message = message
        run.state.messages.append(message)
        closing: list[Any] = []
        if not run.quiet:
            closing.append(
                ModelCallFinished(
                    **head,
                    iteration=turn.iteration,
                    usage=usage if usage is not None else Usage(),
                    latency_s=time.perf_counter() - started_at,
                    finish_reason=fold.finish_reason,
                )
            )
            closing.extend(ToolCallCompleted(**head, call=c) for c in message.tool_calls)
            closing.append(MessageCompleted(**head, message=message))
        if then is not None:
            closing.append(then())
        return closing

    opening = run.phase_to("THINKING")
    if not run.quiet:
        opening.append(
            ModelCallStarted(
                **head,
                iteration=turn.iteration,
                model=model.model_name,
                messages=len(request.messages),
                tools=[t.name for t in request.tools],
            )
        )

    def step_down(error: Exception) -> Observable[Any] | None:
        """The model rejected the forced tool choice (400): retry this turn one rung lower on the ladder."""
        if not isinstance(error, ModelHTTPError) or error.status != 400:
            return None
        run.tool_choice_rung += 1
        lower = _output_tool_choice(run, len(request.tools))
        if lower == request.tool_choice:
            return None
        note = ErrorEvent(
            **head, error_type=type(error).__name__, message=f"{error}; retrying with tool_choice={lower!r}"
        )
        again = reactivex.defer(lambda _: _reasoning(run, turn, instructions, tools, then))
        return reactivex.concat(sync_of(note), again)

    recover = step_down if request.tool_choice is not None else None

    # Retries happen inside the model's stream; the budget's listener feeds them through on_item, so
    # they surface as events in order, between the attempts, with no Subject in the hot path.
    def retries(push: Callable[[ChatChunk | RetryAttempt], None]) -> Callable[[], None]:
        return run.budget.add_listener(push)

    source: Observable[ChatChunk | RetryAttempt] = call(request)
    return source.pipe(
        frame(
            on_item,
            before=lambda: opening,
            after=on_done,
            recover=recover,
            until=run.control.on_interrupt,
            inject=retries,
        )
    )
