"""Everything an agent run emits, as typed events.

Every event carries the run id, session id, trace id, a sequence number (0, 1, 2, … within the run) and
a wall-clock time, plus a literal ``type`` that discriminates the union :data:`AgentEvent`. Events are
slotted dataclasses, cheap enough to build one per streamed token; :func:`event_to_json` and
:func:`event_from_json` (a pydantic ``TypeAdapter`` over the union) give them a JSON form for
dashboards, logs and other processes.

A run's events always satisfy: :class:`RunStarted` first; a :class:`StepStarted` as each step of the
loop begins (the first step's right after ``RunStarted``; none in a quiet run, as ``call`` without
hooks runs); deltas of a message before the :class:`MessageCompleted` that holds it; tool results in the
order of the calls once a batch's tools started (a result decided before, such as a reviewer's rejection,
is told when it is decided); exactly one :class:`AgentResult`, last — failed runs included (reason
``ERROR``, after an :class:`ErrorEvent`), and built after every other event, so its ``time`` is when the
run ended.

**Nested runs.** An agent used as a tool of another (``ReActAgent.as_tool``) runs its own run, whose
events appear in the parent's stream between the call's :class:`ToolExecutionStarted` and its
:class:`ToolResult`. They keep their own ``run_id`` and ``seq`` and carry ``parent_run_id``, the id of
the run they are nested in (``None`` for a top-level run's own events); the parent's ``seq`` numbers
only its own events, so the invariants above hold for each ``run_id`` separately, and the parent's own
:class:`AgentResult` (the one whose ``run_id`` is the parent's) is still the last event of the stream.
A nested run that its parent cancels (a dispose or an interrupt of the parent) ends without a result.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Generic, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, JsonValue, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError
from typing_extensions import TypeVar

from rxagent.chunks import Usage
from rxagent.display import Displayable
from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock

__all__ = [
    "AgentEvent",
    "AgentResult",
    "ContextCompressed",
    "ContextOverflowRetry",
    "ErrorEvent",
    "EventHeader",
    "MemoriesRecalled",
    "MessageCompleted",
    "ModelCallFinished",
    "ModelCallStarted",
    "OutputT",
    "Phase",
    "PhaseChanged",
    "RepeatGuardTriggered",
    "RetryScheduled",
    "RunReason",
    "RunStarted",
    "StepNote",
    "StepStarted",
    "TextDelta",
    "ThinkingDelta",
    "TodoItem",
    "TodoStatus",
    "TodosUpdated",
    "ToolCallArgumentsDelta",
    "ToolCallCompleted",
    "ToolCallStarted",
    "ToolExecutionStarted",
    "ToolPermissionAsked",
    "ToolProgress",
    "ToolResult",
    "ToolResultsEvicted",
    "ToolSuspended",
    "UsageTotals",
    "event_from_json",
    "event_to_json",
]

Phase: TypeAlias = Literal["THINKING", "TOOL_PENDING", "TOOL_EXECUTING", "OBSERVING", "FINISHED", "ERROR"]
"""Where a run is: waiting for the model, holding tool calls, running them, feeding results back, done, or
failed."""

RunReason: TypeAlias = Literal[
    "MODEL_STOP",
    "MAX_ITERATIONS",
    "PERMISSION_ASKING",
    "TOOL_SUSPENDED",
    "TOOL_RETURN_DIRECT",
    "INTERRUPTED",
    "STRUCTURED_OUTPUT",
    "NO_ANSWER",
    "STOPPED",
    "ERROR",
]
"""Why a run ended.

``MODEL_STOP``: the model answered. ``MAX_ITERATIONS``: the iteration limit was reached and a summarising
turn answered. ``PERMISSION_ASKING``: a call waits for a human decision. ``TOOL_SUSPENDED``: an external
tool waits for the caller. ``TOOL_RETURN_DIRECT``: return-direct tools produced the answer.
``INTERRUPTED``: the user interrupted the run. ``STRUCTURED_OUTPUT``: structured output was produced (or
its retries ran out: see ``AgentResult.structured_error``). ``NO_ANSWER``: the model produced no answer
text even after a re-prompt. ``STOPPED``: a middleware stopped the run. ``ERROR``: the run failed — a
tool's infrastructure failed (``ToolSystemError``: the stream then completes), or the model, the store or
the input failed (an :class:`ErrorEvent` precedes the result and the stream then errors with the
original error)."""


@dataclass(slots=True, kw_only=True)
class EventHeader(Displayable):
    """The fields every event carries.

    Attributes:
        run_id: the run the event belongs to.
        session_id: that run's session.
        trace_id: correlates the run with everything it caused (nested runs share their parent's).
        seq: the event's number within its run (0, 1, 2, …).
        time: when the event was built (seconds since the epoch).
        parent_run_id: the run this event's run is nested in (``None``: a top-level run).
    """

    run_id: str
    session_id: str | None
    trace_id: str
    seq: int
    time: float = field(default_factory=time.time)
    parent_run_id: str | None = None


@dataclass(slots=True, kw_only=True)
class RunStarted(EventHeader):
    """The run began; ``input`` is what the caller passed in (as messages)."""

    type: Literal["run_started"] = "run_started"
    agent: str
    input: list[Msg]


@dataclass(slots=True, kw_only=True)
class PhaseChanged(EventHeader):
    """The run moved to another phase."""

    type: Literal["phase_changed"] = "phase_changed"
    phase: Phase
    iteration: int


@dataclass(slots=True, kw_only=True)
class ModelCallStarted(EventHeader):
    """A model request was sent."""

    type: Literal["model_call_started"] = "model_call_started"
    iteration: int
    model: str
    messages: int
    tools: list[str]


@dataclass(slots=True, kw_only=True)
class ModelCallFinished(EventHeader):
    """A model request completed: its usage, latency and finish reason."""

    type: Literal["model_call_finished"] = "model_call_finished"
    iteration: int
    usage: Usage | None
    latency_s: float
    finish_reason: str | None


@dataclass(slots=True, kw_only=True)
class TextDelta(EventHeader):
    """A piece of answer text, as it streams."""

    type: Literal["text_delta"] = "text_delta"
    text: str


@dataclass(slots=True, kw_only=True)
class ThinkingDelta(EventHeader):
    """A piece of visible reasoning, as it streams."""

    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


@dataclass(slots=True, kw_only=True)
class ToolCallStarted(EventHeader):
    """The model began writing a tool call."""

    type: Literal["tool_call_started"] = "tool_call_started"
    index: int
    call_id: str | None
    name: str | None


@dataclass(slots=True, kw_only=True)
class ToolCallArgumentsDelta(EventHeader):
    """A fragment of a tool call's argument text."""

    type: Literal["tool_call_arguments_delta"] = "tool_call_arguments_delta"
    index: int
    call_id: str | None
    fragment: str


@dataclass(slots=True, kw_only=True)
class ToolCallCompleted(EventHeader):
    """The model finished writing a tool call; ``call`` is parsed (or marked invalid).

    Nothing has run yet: the call's outcome comes later as a :class:`ToolResult` (the tool executor's
    :class:`~rxagent.tools.ToolCallSettled`), or it waits (:class:`ToolPermissionAsked`,
    :class:`ToolSuspended`).
    """

    type: Literal["tool_call_completed"] = "tool_call_completed"
    call: ToolUseBlock


@dataclass(slots=True, kw_only=True)
class MessageCompleted(EventHeader):
    """A message was added to the conversation (the model's folded answer, or tool results)."""

    type: Literal["message_completed"] = "message_completed"
    message: Msg


@dataclass(slots=True, kw_only=True)
class ToolExecutionStarted(EventHeader):
    """A tool body started, with its final arguments (presets excluded: they may be secrets)."""

    type: Literal["tool_execution_started"] = "tool_execution_started"
    call: ToolUseBlock


@dataclass(slots=True, kw_only=True)
class ToolProgress(EventHeader):
    """A running tool reported progress."""

    type: Literal["tool_progress"] = "tool_progress"
    call_id: str
    name: str
    message: str
    fraction: float | None
    data: JsonValue = None


@dataclass(slots=True, kw_only=True)
class ToolResult(EventHeader):
    """A tool call's result (in the order the calls were made, among those of a batch that ran)."""

    type: Literal["tool_result"] = "tool_result"
    result: ToolResultBlock
    duration_s: float


@dataclass(slots=True, kw_only=True)
class ToolPermissionAsked(EventHeader):
    """A call needs a human decision before it can run."""

    type: Literal["tool_permission_asked"] = "tool_permission_asked"
    call: ToolUseBlock
    reason: str


@dataclass(slots=True, kw_only=True)
class ToolSuspended(EventHeader):
    """An external tool call waits for the caller to execute it."""

    type: Literal["tool_suspended"] = "tool_suspended"
    call: ToolUseBlock


@dataclass(slots=True, kw_only=True)
class RetryScheduled(EventHeader):
    """A model call failed with a retryable error and will be retried after ``delay_s``."""

    type: Literal["retry_scheduled"] = "retry_scheduled"
    retry_number: int
    delay_s: float
    error: str
    budget_remaining: int | None


@dataclass(slots=True, kw_only=True)
class RepeatGuardTriggered(EventHeader):
    """The same call gave the same result ``count`` times in a row; the model was told to change course."""

    type: Literal["repeat_guard_triggered"] = "repeat_guard_triggered"
    tool: str
    arguments: JsonValue
    count: int


@dataclass(slots=True, kw_only=True)
class ErrorEvent(EventHeader):
    """The run failed or hit a problem it reports (the run's result or error follows)."""

    type: Literal["error"] = "error"
    error_type: str
    message: str


@dataclass(slots=True, kw_only=True)
class StepNote(EventHeader):
    """Something a step reports that no other event says: a custom step's decision, a plan, a verdict.

    Attributes:
        source: who reports it (a step's or a recipe's name, e.g. ``"reviewer"``).
        text: a line for people.
        data: the same as JSON for programs.
    """

    type: Literal["step_note"] = "step_note"
    source: str
    text: str
    data: JsonValue = None


@dataclass(slots=True, kw_only=True)
class StepStarted(EventHeader):
    """The loop reached a node and starts its step: the run's path, node by node (what ``agent.iter``
    shows a driver, for stream consumers).

    One per step, in the order the steps run: ``Start``, ``Reason``, ``Act``, …, ``Finish`` for the ReAct
    assembly (an interrupt's ``Interrupt`` too), and the nodes of a custom assembly by their class names.

    Attributes:
        node: the node type's name (``"Reason"``, ``"Act"``, a custom node's class name).
        detail: a small JSON view of the node (``Node.describe``): for ``Act`` the calls' ids and names,
            for ``Finish`` the reason; a custom node's fields that are plain JSON values.
        iteration: reasoning steps taken before this step.
    """

    type: Literal["step_started"] = "step_started"
    node: str
    detail: dict[str, JsonValue] = field(default_factory=lambda: {})
    iteration: int = 0


@dataclass(slots=True, kw_only=True)
class ToolResultsEvicted(EventHeader):
    """The context window replaced large old tool results in the request by short notes.

    Only the request changes: the session's history keeps the full results. Each note names the tool and
    says to call it again to see the output.

    Attributes:
        message_ids: ids of the tool messages whose results were replaced.
        call_ids: ids of the calls whose results were replaced.
        tools: the names of those tools, in the same order as ``call_ids``.
        tokens_removed: tokens the replacements saved.
        tokens_before: the request's tokens before this eviction.
        tokens_after: the request's tokens after it.
    """

    type: Literal["tool_results_evicted"] = "tool_results_evicted"
    message_ids: list[str]
    call_ids: list[str]
    tools: list[str]
    tokens_removed: int
    tokens_before: int
    tokens_after: int


@dataclass(slots=True, kw_only=True)
class ContextCompressed(EventHeader):
    """The context window folded the oldest messages of the request into a summary.

    The summary is kept in the session state and reused by later requests; the history keeps every
    message.

    Attributes:
        messages: messages newly compressed (a span that never splits a tool call from its result).
        first_message_id: id of the first newly compressed message.
        last_message_id: id of the last newly compressed message.
        compressed_total: messages the summary now covers, from the start of the history.
        summary_tokens: tokens of the summary message as sent.
        summariser: which summariser wrote it (``"truncate"``, ``"model:<name>"``, …).
        memories_indexed: long-term memory records written for the compressed span (0 without memory).
        tokens_before: the request's tokens before this compression.
        tokens_after: the request's tokens after it.
    """

    type: Literal["context_compressed"] = "context_compressed"
    messages: int
    first_message_id: str
    last_message_id: str
    compressed_total: int
    summary_tokens: int
    summariser: str
    memories_indexed: int
    tokens_before: int
    tokens_after: int


@dataclass(slots=True, kw_only=True)
class MemoriesRecalled(EventHeader):
    """Long-term memories relevant to the latest user input were added to the request.

    Attributes:
        query: the text the memories were retrieved for (the latest user message, shortened).
        memory_ids: ids of the recalled records, best first.
        scores: their cosine similarities to the query, in the same order.
        tokens: tokens of the "relevant earlier context" message as sent.
    """

    type: Literal["memories_recalled"] = "memories_recalled"
    query: str
    memory_ids: list[str]
    scores: list[float]
    tokens: int


TodoStatus: TypeAlias = Literal["pending", "in_progress", "completed"]
"""Where an item of an agent's todo list stands."""


class TodoItem(BaseModel):
    """An item of a todo list: what is to be done, and where it stands."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    content: str = Field(min_length=1, max_length=500, description="what is to be done, in a line")
    status: TodoStatus = Field(default="pending", description="pending, in_progress or completed")


@dataclass(slots=True, kw_only=True)
class TodosUpdated(EventHeader):
    """The agent rewrote its todo list (the harness's ``write_todos``); ``todos`` is the whole list now.

    The list is kept in the session (it survives a restart); open items are recalled to the model in each
    request, never stored in the conversation.
    """

    type: Literal["todos_updated"] = "todos_updated"
    todos: list[TodoItem]


@dataclass(slots=True, kw_only=True)
class ContextOverflowRetry(EventHeader):
    """A request overflowed the context budget, so the budget compresses it and tries once more.

    The harness's context budget emits it before the one retry it allows per model call: the request did
    not fit the budget by its own count (``cause="budget"``), or the model server refused it as too long
    (``cause="provider"``). A second overflow of the same call fails the run with
    :class:`~rxagent.memory.ContextBudgetExceeded`.

    Attributes:
        cause: ``budget`` or ``provider``.
        tokens: the overflowing request's tokens, as the budget counts them.
        allowed: the tokens the retried request may have.
        detail: what overflowed: the budget's breakdown, or the server's message.
    """

    type: Literal["context_overflow_retry"] = "context_overflow_retry"
    cause: Literal["budget", "provider"]
    tokens: int
    allowed: int
    detail: str


@dataclass(slots=True)
class UsageTotals:
    """Token usage of a whole run, added up over its model calls and those of the runs nested in it.

    An agent used as a tool runs a nested run; its totals, ``model_calls`` included, count in the
    parent's (so ``model_calls`` is every model call made for the run, while ``AgentResult.iterations``
    counts only the run's own reasoning steps). A nested run its parent cancelled reports no totals.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    reasoning_tokens: int = 0
    model_calls: int = 0
    cache_write_tokens: int = 0

    def add(self, usage: Usage | None) -> None:
        """Count one model call and its usage."""
        self.model_calls += 1
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.cache_read_tokens += usage.cache_read_tokens
            self.reasoning_tokens += usage.reasoning_tokens
            self.cache_write_tokens += usage.cache_write_tokens

    def include(self, other: UsageTotals) -> None:
        """Add a nested run's totals (its model calls included) to these."""
        self.input_tokens += other.input_tokens
        self.output_tokens += other.output_tokens
        self.cache_read_tokens += other.cache_read_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.model_calls += other.model_calls

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


OutputT = TypeVar("OutputT", default=object, covariant=True)
"""The type of a run's structured output (an agent's ``output_type``)."""


@dataclass(slots=True, kw_only=True)
class AgentResult(EventHeader, Generic[OutputT]):
    """How a run ended: its final message, the reason, structured data, usage and iterations.

    ``Agent[Deps, Output]`` runs give ``AgentResult[Output]``: ``structured`` has the output type.

    Attributes:
        message: the final assistant message (``None`` when the run ended waiting for tools).
        reason: see :data:`RunReason`.
        structured: the validated structured output (of the agent's output type), or ``None``.
        structured_error: why ``structured`` is ``None`` although an output type was asked for.
        usage: token totals over the run.
        iterations: reasoning steps taken.
        pending: tool calls waiting for a decision or an external result.
        detail: a human-readable note on the reason (which middleware stopped the run, which error).
    """

    type: Literal["agent_result"] = "agent_result"
    message: Msg | None
    reason: RunReason
    structured: OutputT | None = None
    structured_error: str | None = None
    usage: UsageTotals = field(default_factory=UsageTotals)
    iterations: int = 0
    pending: list[ToolUseBlock] = field(default_factory=lambda: [])
    detail: str | None = None

    @property
    def text(self) -> str:
        """The final message's text ("" when there is none)."""
        return self.message.text if self.message is not None else ""


# Python 3.11's dataclass(slots=True) rebuilds the class without the generic parameters it had, so
# ``AgentResult[City]`` would fail at run time (annotations are never evaluated; pydantic and users may).
AgentResult.__parameters__ = (OutputT,)  # pyright: ignore[reportAttributeAccessIssue]


AgentEvent: TypeAlias = Annotated[
    RunStarted
    | PhaseChanged
    | ModelCallStarted
    | ModelCallFinished
    | TextDelta
    | ThinkingDelta
    | ToolCallStarted
    | ToolCallArgumentsDelta
    | ToolCallCompleted
    | MessageCompleted
    | ToolExecutionStarted
    | ToolProgress
    | ToolResult
    | ToolPermissionAsked
    | ToolSuspended
    | RetryScheduled
    | RepeatGuardTriggered
    | ErrorEvent
    | StepNote
    | StepStarted
    | ToolResultsEvicted
    | ContextCompressed
    | MemoriesRecalled
    | AgentResult
    | TodosUpdated
    | ContextOverflowRetry,
    Field(discriminator="type"),
]
"""Any agent event, discriminated by ``type``."""


@cache
def _adapter() -> TypeAdapter[AgentEvent]:
    return TypeAdapter(AgentEvent)


def event_to_json(event: AgentEvent) -> str:
    """The event as a JSON object string (``type`` included).

    Text holding a lone surrogate (a delta that cut an emoji's pair in two, as some servers send) cannot
    be UTF-8; it is written with ``\\u`` escapes instead, which read back as the same text.
    """
    adapter = _adapter()
    try:
        return adapter.dump_json(event).decode()
    except PydanticSerializationError:
        return json.dumps(adapter.dump_python(event, mode="json"))


def event_from_json(data: str | bytes) -> AgentEvent:
    """Rebuild an event from :func:`event_to_json`'s output.

    Raises:
        pydantic.ValidationError: ``data`` is not the JSON of an event.
    """
    adapter = _adapter()
    try:
        event: AgentEvent = adapter.validate_json(data)
    except ValidationError as error:
        # pydantic's parser refuses a lone surrogate's escape, which event_to_json may write: read the
        # JSON with the standard library, then validate (a real validation error is raised again).
        try:
            decoded = json.loads(data)
        except ValueError:
            raise error from None
        event = adapter.validate_python(decoded)
    return event
