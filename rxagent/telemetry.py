"""OpenTelemetry spans for agent runs, following the GenAI semantic conventions (extra ``rxagent[otel]``).

:class:`Telemetry` is a middleware. Installed on an agent, it gives every run three kinds of span:

========================  ==============  ====================================================================
span                      cut point       parent
========================  ==============  ====================================================================
``invoke_agent {agent}``  ``agent``       for a run nested in a tool call (``as_tool``), that call's span;
                                          else the caller's span (``ctx.parent_span_id``, from a
                                          ``traceparent``); else none: the root of the run's trace
``chat {model}``          ``model_call``  the run's ``invoke_agent`` span
``execute_tool {tool}``   ``tool_call``   the run's ``invoke_agent`` span
========================  ==============  ====================================================================

Parents are looked up by run id, not taken from whatever span is current: a run's steps, model calls
and tools run in different asyncio tasks. While a span's stream subscribes it is also the current span,
so what that subscription starts (an instrumented HTTP client in the model call, the body of a tool,
the agent a tool runs) nests under it.

**Trace ids.** The run's :attr:`~rxagent.context.RuntimeContext.trace_id` is the trace id of all its
spans, so the trace id in its events and log lines (:mod:`rxagent.logs`) finds its trace. With a
``traceparent`` read into the context (:meth:`~rxagent.context.RuntimeContext.with_traceparent`) the
run's spans join the caller's trace under the caller's span; without one the run's span is a root whose
trace id is the context's. (A root span's trace id comes from the tracer's id generator: an SDK tracer's
is made to hand out the run's trace id while a run's root span starts, and only then. A context whose
trace id is not a W3C id — a custom string — gets a fresh one from the tracer, and its own in the
``rxagent.trace_id`` attribute.)

**Attributes.** Every span: ``gen_ai.operation.name`` (``invoke_agent``, ``chat``, ``execute_tool``).
``invoke_agent``: ``gen_ai.agent.name``, ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.conversation.id`` (the session id), ``rxagent.run.id`` (and ``rxagent.parent_run.id`` for a
nested run); when the run ends, the run's usage totals (``gen_ai.usage.input_tokens`` and
``output_tokens``, and the cached and reasoning tokens when reported), ``rxagent.run.reason`` and
``rxagent.run.iterations``. ``chat``: ``gen_ai.provider.name``, ``gen_ai.request.model``,
``gen_ai.conversation.id``, the request's ``temperature``, ``top_p``, ``max_tokens``, ``seed`` and
``stop_sequences`` when set; when the call ends, its usage and ``gen_ai.response.finish_reasons``.
``execute_tool``: ``gen_ai.tool.name``, ``gen_ai.tool.call.id``, ``gen_ai.tool.type`` (``function``),
``gen_ai.tool.description``.

**Errors.** A span whose stream fails gets ``error.type`` (the exception's class name) and an ``ERROR``
status with the error's message. A run that ends with reason ``ERROR`` without failing (its tools'
infrastructure failed) gets the reported error's type. A tool call whose result is not ``ok`` gets
``error.type``: the exception the tool raised (``TimeoutError`` for its deadline), ``_OTHER`` when
nothing says, or ``denied`` / ``interrupted``. A span whose subscription is disposed before its end (a
cancelled run, a call cut short by an interrupt) ends with ``error.type`` ``cancelled`` and an ``ERROR``
status: every span a run opened is ended, whatever way the run ends.

**Contents** (prompts, answers, tool arguments and results) are recorded only with
``capture_content=True``: ``gen_ai.input.messages`` and ``gen_ai.output.messages`` on ``invoke_agent``
(the run's input and final message) and ``chat`` (the request's messages and the answer), as JSON in the
conventions' shape (``[{"role": ..., "parts": [{"type": "text", "content": ...}, ...]}]``);
``gen_ai.tool.call.arguments`` (the model's arguments; preset values never) and
``gen_ai.tool.call.result`` on ``execute_tool``, and the result text as a failed tool span's status
message. Without it no span holds a message's text.

Costs nothing unless installed: ``import rxagent`` does not import this module or OpenTelemetry. With it,
``call`` stays on its quiet path (``watches_events = False``: the spans need only the run's result).

Example:
    >>> from opentelemetry.sdk.trace import TracerProvider  # doctest: +SKIP
    >>> provider = TracerProvider()  # with your exporter: provider.add_span_processor(...)
    >>> agent = ReActAgent(model, toolkit, middleware=[Telemetry(provider)])
    >>> ctx = RuntimeContext(session_id="alice").with_traceparent(request.headers["traceparent"])
    >>> result = await agent.call("Refund order 42", ctx)   # its spans: in the caller's trace

In a server (``rxagent serve``): install ``Telemetry()`` (the global tracer provider) on the agent when
the extra is installed, and join each request's run to its caller's trace::

    header = request.headers.get("traceparent")
    if header is not None:
        try:
            ctx = ctx.with_traceparent(header)  # or session.submit(input, traceparent=header)
        except ValueError:
            pass  # the W3C says: ignore an invalid traceparent; the run starts its own trace
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from contextvars import ContextVar
from typing import Any, Generic, TypeVar

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import Tracer as SdkTracer
    from opentelemetry.sdk.trace.id_generator import IdGenerator
    from opentelemetry.trace import (
        NonRecordingSpan,
        ProxyTracerProvider,
        Span,
        SpanContext,
        SpanKind,
        Status,
        StatusCode,
        TraceFlags,
        Tracer,
        TracerProvider,
    )
except ImportError as missing:
    raise ModuleNotFoundError(
        "rxagent.telemetry needs OpenTelemetry's API and SDK: pip install 'rxagent[otel]'"
    ) from missing
from reactivex import Observable, abc

from rxagent.agent.inputs import RunInput
from rxagent.agent.middleware import Middleware
from rxagent.chunks import ChatChunk, Usage
from rxagent.context import RunContext, RuntimeContext, TraceParent, is_trace_id, run_context_of
from rxagent.events import AgentEvent, AgentResult, ErrorEvent, UsageTotals
from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from rxagent.operators import NO_SUBSCRIPTION, MessageFold, Outcome, Slot, Source, subscribe_to
from rxagent.requests import ChatRequest
from rxagent.tools import ToolCallSettled, ToolEvent, ToolInvocation

__all__ = ["Telemetry", "traceparent"]

_T = TypeVar("_T")

_SCOPE = "rxagent"
_SPAN_ID = re.compile(r"[0-9a-f]{16}")

# Attribute names of the GenAI semantic conventions (and the general ``error.type``).
_OPERATION = "gen_ai.operation.name"
_PROVIDER = "gen_ai.provider.name"
_REQUEST_MODEL = "gen_ai.request.model"
_AGENT_NAME = "gen_ai.agent.name"
_CONVERSATION = "gen_ai.conversation.id"
_INPUT_TOKENS = "gen_ai.usage.input_tokens"
_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
_CACHE_READ_TOKENS = "gen_ai.usage.cache_read.input_tokens"
_CACHE_WRITE_TOKENS = "gen_ai.usage.cache_creation.input_tokens"
_REASONING_TOKENS = "gen_ai.usage.reasoning.output_tokens"
_FINISH_REASONS = "gen_ai.response.finish_reasons"
_RESPONSE_MODEL = "gen_ai.response.model"
_INPUT_MESSAGES = "gen_ai.input.messages"
_OUTPUT_MESSAGES = "gen_ai.output.messages"
_TOOL_NAME = "gen_ai.tool.name"
_TOOL_CALL_ID = "gen_ai.tool.call.id"
_TOOL_TYPE = "gen_ai.tool.type"
_TOOL_DESCRIPTION = "gen_ai.tool.description"
_TOOL_ARGUMENTS = "gen_ai.tool.call.arguments"
_TOOL_RESULT = "gen_ai.tool.call.result"
_ERROR_TYPE = "error.type"

_REQUEST_OPTIONS = (
    ("temperature", "gen_ai.request.temperature"),
    ("top_p", "gen_ai.request.top_p"),
    ("max_tokens", "gen_ai.request.max_tokens"),
    ("seed", "gen_ai.request.seed"),
)

# ---- the run's trace id as the root span's ---------------------------------------------------------------

_root_trace_id: ContextVar[int | None] = ContextVar("rxagent_root_trace_id", default=None)
"""The trace id the next root span must have, set only while Telemetry starts one."""


class _RunTraceIds(IdGenerator):
    """An SDK tracer's id generator that hands out the run's trace id while a run's root span starts."""

    def __init__(self, inner: IdGenerator) -> None:
        self.inner = inner

    def generate_span_id(self) -> int:
        return self.inner.generate_span_id()

    def generate_trace_id(self) -> int:
        wanted = _root_trace_id.get()
        return wanted if wanted is not None else self.inner.generate_trace_id()

    def is_trace_id_random(self) -> bool:
        # A run's trace id may be the caller's own choice: claim randomness only for the tracer's ids.
        return _root_trace_id.get() is None and self.inner.is_trace_id_random()


def _steer_trace_ids(tracer: Tracer) -> None:
    if isinstance(tracer, SdkTracer) and not isinstance(tracer.id_generator, _RunTraceIds):
        tracer.id_generator = _RunTraceIds(tracer.id_generator)


# ---- spans open now, so that children find their parents ---------------------------------------------

# Shared by every Telemetry: a nested run's agent may carry its own instance.
_run_spans: dict[str, Span] = {}
"""The ``invoke_agent`` span of each run in progress, by run id."""
_tool_spans: dict[int, str] = {}
"""The run id of each ``execute_tool`` span in progress, by span id."""


class Telemetry(Middleware):
    """A middleware that records a run as OpenTelemetry spans (see the module for what it records).

    Args:
        tracer_provider: where spans go (``None``: the global provider, looked up at each run until one
            is set).
        capture_content: record message contents, tool arguments and results (off by default: they may
            hold personal data).
        provider_name: ``gen_ai.provider.name`` for every span (``None``: the run's
            ``ctx.provider_name``, from the model; see :func:`rxagent.model.provider_of`).

    Example:
        >>> agent = ReActAgent(model, toolkit, middleware=[Telemetry(capture_content=True)])  # doctest: +SKIP
    """

    watches_events = False

    def __init__(
        self,
        tracer_provider: TracerProvider | None = None,
        *,
        capture_content: bool = False,
        provider_name: str | None = None,
    ) -> None:
        self.capture_content = capture_content
        self.provider_name = provider_name
        self._provider = tracer_provider
        self._tracer: Tracer | None = None

    def __repr__(self) -> str:
        return f"Telemetry(capture_content={self.capture_content}, provider_name={self.provider_name!r})"

    # ---- the hooks ------------------------------------------------------------------------------------

    def agent(
        self, run: RunInput, ctx: RunContext, next: Callable[[RunInput], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        """The run inside an ``invoke_agent`` span (its events pass unchanged)."""
        return _traced(lambda: _RunSpan(self, run, ctx), lambda: next(run))

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        """The model call inside a ``chat`` span (its chunks pass unchanged)."""
        return _traced(lambda: _ChatSpan(self, request, ctx), lambda: next(request))

    def tool_call(
        self,
        invocation: ToolInvocation,
        ctx: RuntimeContext,
        next: Callable[[ToolInvocation], Observable[ToolEvent]],
    ) -> Observable[ToolEvent]:
        """The tool call inside an ``execute_tool`` span (its events pass unchanged)."""
        return _traced(lambda: _ToolSpan(self, invocation, ctx), lambda: next(invocation))

    # ---- spans -----------------------------------------------------------------------------------------

    def tracer(self) -> Tracer:
        """The tracer spans are made with (``rxagent``'s, from the provider)."""
        tracer = self._tracer
        if tracer is not None:
            return tracer
        provider = self._provider if self._provider is not None else trace.get_tracer_provider()
        tracer = provider.get_tracer(_SCOPE)
        _steer_trace_ids(tracer)
        if not isinstance(provider, ProxyTracerProvider):  # no global provider yet: look again next run
            self._tracer = tracer
        return tracer

    def provider_of(self, ctx: RuntimeContext) -> str:
        """``gen_ai.provider.name`` for spans of the run ``ctx`` belongs to."""
        if self.provider_name is not None:
            return self.provider_name
        run = run_context_of(ctx)
        return run.provider_name if run is not None and run.provider_name else "_OTHER"

    def start_span(
        self,
        name: str,
        kind: SpanKind,
        attributes: dict[str, Any],
        parent: Context | None,
        trace_id: str,
    ) -> Span:
        """Start a span under ``parent``, or as a root whose trace id is ``trace_id`` (if a W3C id)."""
        tracer = self.tracer()
        if parent is not None:
            return tracer.start_span(name, context=parent, kind=kind, attributes=attributes)
        token = _root_trace_id.set(int(trace_id, 16)) if is_trace_id(trace_id) else None
        try:
            # An empty context, not the current one: a root is a root whatever span a task inherited.
            return tracer.start_span(name, context=Context(), kind=kind, attributes=attributes)
        finally:
            if token is not None:
                _root_trace_id.reset(token)

    def parent_of_step(self, ctx: RuntimeContext) -> Context | None:
        """Where a ``chat`` or ``execute_tool`` span of the run ``ctx`` belongs: its run's span."""
        run = run_context_of(ctx)
        span = _run_spans.get(run.run_id) if run is not None else None
        return trace.set_span_in_context(span, Context()) if span is not None else None


def _parent_of_run(ctx: RunContext) -> Context | None:
    """Where a run's ``invoke_agent`` span belongs (see the module's table)."""
    if ctx.parent_run_id is not None:
        # A nested run subscribes inside the body of the tool call that runs it, whose span is current
        # there; only a call of the parent run counts (a task may have inherited any other span).
        current = trace.get_current_span()
        if _tool_spans.get(current.get_span_context().span_id) == ctx.parent_run_id:
            return trace.set_span_in_context(current, Context())
        parent_run = _run_spans.get(ctx.parent_run_id)
        if parent_run is not None:
            return trace.set_span_in_context(parent_run, Context())
    span_id = ctx.parent_span_id
    if span_id is not None and is_trace_id(ctx.trace_id) and _SPAN_ID.fullmatch(span_id) and int(span_id, 16):
        flags = TraceFlags(TraceFlags.SAMPLED if ctx.trace_sampled else TraceFlags.DEFAULT)
        remote = SpanContext(int(ctx.trace_id, 16), int(span_id, 16), is_remote=True, trace_flags=flags)
        return trace.set_span_in_context(NonRecordingSpan(remote), Context())
    return None


def traceparent(span: Span | None = None) -> str | None:
    """The W3C ``traceparent`` of ``span`` (default: the current span); ``None`` when it is not valid.

    ``ctx.with_traceparent(traceparent())`` runs an agent under a span of your own.
    """
    span_context = (span if span is not None else trace.get_current_span()).get_span_context()
    if not span_context.is_valid:
        return None
    sampled = bool(span_context.trace_flags & TraceFlags.SAMPLED)
    return TraceParent(f"{span_context.trace_id:032x}", f"{span_context.span_id:016x}", sampled).header()


# ---- one span per subscription ---------------------------------------------------------------------------


class _Watch(Generic[_T]):
    """A span and what it learns from the stream it wraps; ends once."""

    span: Span
    closed: bool = False

    def see(self, item: _T) -> None:
        """Look at an item passing by."""

    def finish(self, outcome: Outcome) -> None:
        """Set what the end says (the span ends right after)."""

    def close(self, outcome: Outcome) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.finish(outcome)
        finally:
            self.span.end()


def _traced(open_span: Callable[[], _Watch[_T]], source: Callable[[], Observable[_T]]) -> Observable[_T]:
    """``source()`` inside a span: started on subscription, current while the source subscribes, ended on
    the terminal signal (before it is passed on) or on dispose (after the source is disposed, so spans
    of what it started end first)."""

    def subscribe(
        observer: abc.ObserverBase[_T], scheduler: abc.SchedulerBase | None = None
    ) -> abc.DisposableBase:
        watch = open_span()

        def on_next(item: _T) -> None:
            watch.see(item)
            observer.on_next(item)

        def on_error(error: Exception) -> None:
            watch.close(Outcome.failed(error))
            observer.on_error(error)

        def on_completed() -> None:
            watch.close(Outcome.completed())
            observer.on_completed()

        token = otel_context.attach(trace.set_span_in_context(watch.span))
        try:
            upstream = source()
        except Exception as error:
            otel_context.detach(token)
            on_error(error)
            return NO_SUBSCRIPTION
        try:
            inner = subscribe_to(upstream, on_next, on_error, on_completed, scheduler)
        finally:
            otel_context.detach(token)

        def dispose() -> None:
            try:
                inner.dispose()
            finally:
                watch.close(Outcome.cancelled())

        return Slot(dispose)  # loop-bound: no RLock per traced call

    return Source(subscribe)


def _fail(span: Span, error_type: str, message: str | None) -> None:
    span.set_attribute(_ERROR_TYPE, error_type)
    span.set_status(Status(StatusCode.ERROR, message))


def _end_of(span: Span, outcome: Outcome) -> None:
    """A failed or cancelled stream's error type and status."""
    if outcome.kind == "cancelled":
        _fail(span, "cancelled", "cancelled before it ended")
    elif outcome.error is not None:
        _fail(span, type(outcome.error).__name__, f"{type(outcome.error).__name__}: {outcome.error}")


def _set_usage(span: Span, usage: Usage | UsageTotals) -> None:
    span.set_attribute(_INPUT_TOKENS, usage.input_tokens)
    span.set_attribute(_OUTPUT_TOKENS, usage.output_tokens)
    if usage.cache_read_tokens:
        span.set_attribute(_CACHE_READ_TOKENS, usage.cache_read_tokens)
    if usage.cache_write_tokens:
        span.set_attribute(_CACHE_WRITE_TOKENS, usage.cache_write_tokens)
    if usage.reasoning_tokens:
        span.set_attribute(_REASONING_TOKENS, usage.reasoning_tokens)


class _RunSpan(_Watch[AgentEvent]):
    def __init__(self, telemetry: Telemetry, run: RunInput, ctx: RunContext) -> None:
        self.telemetry = telemetry
        self.run_id = ctx.run_id
        self.result: AgentResult | None = None
        self.reported: str | None = None
        attributes: dict[str, Any] = {
            _OPERATION: "invoke_agent",
            _PROVIDER: telemetry.provider_of(ctx),
            _AGENT_NAME: ctx.agent_name,
            "rxagent.run.id": ctx.run_id,
        }
        if ctx.model_name:
            attributes[_REQUEST_MODEL] = ctx.model_name
        if ctx.session_id is not None:
            attributes[_CONVERSATION] = ctx.session_id
        if ctx.parent_run_id is not None:
            attributes["rxagent.parent_run.id"] = ctx.parent_run_id
        if not is_trace_id(ctx.trace_id):
            attributes["rxagent.trace_id"] = ctx.trace_id
        if telemetry.capture_content:
            attributes[_INPUT_MESSAGES] = _messages_json(run.messages)
        name = f"invoke_agent {ctx.agent_name}" if ctx.agent_name else "invoke_agent"
        self.span = telemetry.start_span(
            name, SpanKind.INTERNAL, attributes, _parent_of_run(ctx), ctx.trace_id
        )
        _run_spans[ctx.run_id] = self.span

    def see(self, item: AgentEvent) -> None:
        if item.run_id != self.run_id:  # an event of a run nested in a tool call: its own span sees it
            return
        if isinstance(item, AgentResult):
            self.result = item
        elif isinstance(item, ErrorEvent):
            self.reported = item.error_type

    def finish(self, outcome: Outcome) -> None:
        _run_spans.pop(self.run_id, None)
        span, result = self.span, self.result
        if result is not None:
            _set_usage(span, result.usage)
            span.set_attribute("rxagent.run.reason", result.reason)
            span.set_attribute("rxagent.run.iterations", result.iterations)
            if self.telemetry.capture_content and result.message is not None:
                reason = result.message.metadata.get("finish_reason")
                finish_reason = reason if isinstance(reason, str) else None
                span.set_attribute(_OUTPUT_MESSAGES, _messages_json([result.message], finish_reason))
            if result.reason == "ERROR" and outcome.kind == "completed":
                _fail(span, self.reported or "_OTHER", result.detail)
        _end_of(span, outcome)


class _ChatSpan(_Watch[ChatChunk]):
    def __init__(self, telemetry: Telemetry, request: ChatRequest, ctx: RuntimeContext) -> None:
        self.telemetry = telemetry
        self.fold = MessageFold()
        run = run_context_of(ctx)
        model = run.model_name if run is not None else ""
        attributes: dict[str, Any] = {_OPERATION: "chat", _PROVIDER: telemetry.provider_of(ctx)}
        if model:
            attributes[_REQUEST_MODEL] = model
        if ctx.session_id is not None:
            attributes[_CONVERSATION] = ctx.session_id
        for option, key in _REQUEST_OPTIONS:
            value = getattr(request, option)
            if value is not None:
                attributes[key] = value
        if request.stop:
            attributes["gen_ai.request.stop_sequences"] = list(request.stop)
        if telemetry.capture_content:
            attributes[_INPUT_MESSAGES] = _messages_json(request.messages)
        name = f"chat {model}" if model else "chat"
        parent = telemetry.parent_of_step(ctx)
        self.span = telemetry.start_span(name, SpanKind.CLIENT, attributes, parent, ctx.trace_id)

    def see(self, item: ChatChunk) -> None:
        # Without contents only the usage, the finish reason and the answering model matter: the fold sees
        # just the chunks that carry them (a handful per call) instead of every delta.
        if (
            self.telemetry.capture_content
            or item.usage is not None
            or item.finish_reason is not None
            or item.model is not None
        ):
            self.fold.add(item)

    def finish(self, outcome: Outcome) -> None:
        span, fold = self.span, self.fold
        if fold.model is not None:  # the model that answered (a FallbackModel's, say)
            span.set_attribute(_RESPONSE_MODEL, fold.model)
        if fold.usage is not None:
            _set_usage(span, fold.usage)
        if fold.finish_reason is not None:
            span.set_attribute(_FINISH_REASONS, [fold.finish_reason])
        if self.telemetry.capture_content and outcome.kind == "completed":
            span.set_attribute(_OUTPUT_MESSAGES, _messages_json([fold.message()], fold.finish_reason))
        _end_of(span, outcome)


class _ToolSpan(_Watch[ToolEvent]):
    def __init__(self, telemetry: Telemetry, invocation: ToolInvocation, ctx: RuntimeContext) -> None:
        self.telemetry = telemetry
        self.finished: ToolCallSettled | None = None
        call, tool = invocation.call, invocation.tool
        attributes: dict[str, Any] = {
            _OPERATION: "execute_tool",
            _TOOL_NAME: tool.name,
            _TOOL_CALL_ID: call.id,
            _TOOL_TYPE: "function",
        }
        if tool.description:
            attributes[_TOOL_DESCRIPTION] = tool.description
        if telemetry.capture_content:  # the model's arguments: preset values may be secrets
            attributes[_TOOL_ARGUMENTS] = json.dumps(
                dict(invocation.arguments), default=str, ensure_ascii=False
            )
        parent = telemetry.parent_of_step(ctx)
        self.span = telemetry.start_span(
            f"execute_tool {tool.name}", SpanKind.INTERNAL, attributes, parent, ctx.trace_id
        )
        self.span_id = self.span.get_span_context().span_id
        run = run_context_of(ctx)
        if run is not None:
            _tool_spans[self.span_id] = run.run_id

    def see(self, item: ToolEvent) -> None:
        # The call's result ends it: the executor stops listening right after.
        if isinstance(item, ToolCallSettled) and self.finished is None:
            self.finished = item
            self.close(Outcome.completed())

    def finish(self, outcome: Outcome) -> None:
        _tool_spans.pop(self.span_id, None)
        span, finished = self.span, self.finished
        if finished is None:
            _end_of(span, outcome)
            return
        result = finished.result
        if self.telemetry.capture_content:
            span.set_attribute(_TOOL_RESULT, result.text)
        if result.status != "ok":
            kind = finished.error_type or ("_OTHER" if result.status == "error" else result.status)
            _fail(span, kind, result.text if self.telemetry.capture_content else None)


# ---- message contents in the conventions' shape --------------------------------------------------------


def _parts(message: Msg) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for block in message.content:
        if isinstance(block, TextBlock):
            parts.append({"type": "text", "content": block.text})
        elif isinstance(block, ThinkingBlock):
            parts.append({"type": "reasoning", "content": block.thinking})
        elif isinstance(block, ToolUseBlock):
            arguments = block.input if block.input is not None else block.raw_arguments
            parts.append({"type": "tool_call", "id": block.id, "name": block.name, "arguments": arguments})
        elif isinstance(block, ToolResultBlock):
            parts.append({"type": "tool_call_response", "id": block.tool_use_id, "response": block.text})
        elif block.url is not None:  # an image or a document by URL: the conventions' `uri` part
            from rxagent.redaction import mask_url  # a signed URL's secrets stay out of the span

            uri = mask_url(block.url)
            parts.append({"type": "uri", "modality": block.type, "mime_type": block.media_type, "uri": uri})
        else:
            # Inline bytes are not copied into a span attribute (megabytes of base64 per call): a generic
            # part names the type and the size instead.
            parts.append({"type": block.type, "mime_type": block.media_type, "size": block.size})
    return parts


def _messages_json(messages: Iterable[Msg], finish_reason: str | None = None) -> str:
    """Messages as the conventions' ``gen_ai.input.messages`` / ``gen_ai.output.messages`` JSON."""
    entries: list[Mapping[str, Any]] = []
    for message in messages:
        entry: dict[str, Any] = {"role": message.role, "parts": _parts(message)}
        if finish_reason is not None:
            entry["finish_reason"] = finish_reason
        entries.append(entry)
    return json.dumps(entries, ensure_ascii=False)
