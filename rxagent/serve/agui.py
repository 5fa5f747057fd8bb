"""AG-UI: ``POST /ag-ui`` runs the agent on a thread and answers with AG-UI events, as SSE.

The input is an AG-UI ``RunAgentInput``; its ``threadId`` is the session id. The session's log holds the
conversation, so of the input's ``messages`` only the **last user message** counts, and only when the
session does not have it yet (by message id: sending the same input twice runs once). ``resume`` entries
answer the interrupts of the run before (an entry naming no open interrupt is ignored, with a warning
event; interrupts left unanswered stay open, and the run ends interrupted again). An interrupt takes one
answer, the first: a resume entry for an interrupt that was answered already (another tab, another
client) is refused with 409, naming the call and the answer taken, and nothing runs. ``state``, ``tools``,
``context`` and ``forwardedProps`` are not used: the agent's own tools run on the server.

The answer is a stream of ``ag_ui.core`` events encoded by ``ag_ui.encoder.EventEncoder``, translated from
the run's events by :class:`AguiTranslator`:

=====================================  ============================================================
rxagent event                          AG-UI events
=====================================  ============================================================
``RunStarted``                         ``RUN_STARTED`` (``protocolVersion``; ``metadata.rxagent_run_id``),
                                       ``STATE_SNAPSHOT``
``StepStarted``                        ``STEP_FINISHED`` for the node before (if any), ``STEP_STARTED``
                                       named by the node (``Start``, ``Reason``, ``Act``, …): the loop's
                                       path; the model-call and tool steps below run inside these
``ModelCallStarted`` / ``…Finished``   ``STEP_STARTED`` / ``STEP_FINISHED`` (``model call N``), then a
                                       ``STATE_SNAPSHOT`` with the usage so far
``ThinkingDelta``                      ``REASONING_START``, ``REASONING_MESSAGE_START`` (first), then
                                       ``REASONING_MESSAGE_CONTENT``; closed by what follows the thinking
``TextDelta``                          ``TEXT_MESSAGE_START`` (first), ``TEXT_MESSAGE_CONTENT``
``ToolCallStarted`` / ``…ArgumentsDelta`` / ``ToolCallCompleted``
                                       ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` / ``TOOL_CALL_END``
``MessageCompleted`` (assistant)       ``TEXT_MESSAGE_END`` (and closes thinking and calls still open)
``ToolExecutionStarted``, ``ToolResult``  ``STEP_STARTED`` / ``STEP_FINISHED`` (``tool NAME ID``),
                                       ``TOOL_CALL_RESULT``
``MessageCompleted`` (tool results)    ``TOOL_CALL_RESULT`` for results no ``ToolResult`` told (denials,
                                       external results and rejections have their own ``ToolResult``:
                                       each result is told once)
``AgentResult``                        ``STATE_SNAPSHOT``, then ``RUN_FINISHED`` (outcome ``success``
                                       with the answer as ``result``; ``interrupt`` for calls waiting for
                                       an approval or an external result; ``cancelled`` for an interrupted
                                       or stopped run) or ``RUN_ERROR`` (reason ``ERROR``)
anything else                          ``CUSTOM`` named ``rxagent.<type>`` with the event's JSON
=====================================  ============================================================

Ordering holds per run: one ``RUN_STARTED`` first (or a lone ``RUN_ERROR`` for a run that never started),
every message, reasoning span, tool call and step opened is closed before the end, and exactly one
``RUN_FINISHED`` or ``RUN_ERROR`` comes last. The state is ``{"session_id", "run_id", "pending": [the
calls waiting, as the session API writes them], "usage": {"input_tokens", "output_tokens",
"model_calls"}}``.

**Interrupts.** A call waiting for approval is an interrupt with ``reason: "tool_approval"``; a call
waiting for an external result one with ``reason: "external_tool_result"``. The interrupt's id is the
call's id (``toolCallId`` too) and its ``responseSchema`` says what ``payload`` to resume with: for an
approval ``{"allow": bool, "reason"?: str, "arguments"?: object}`` (edited arguments), or a bare
``true``/``false``; for a result ``{"output": str, "status"?: "ok"|"error"}``, or a bare string. A
``cancelled`` entry denies the approval, or gives the external call an error result.

**Uncertain calls.** A call whose outcome a stopped server lost (dispatched, no result recorded; its tool
neither idempotent nor read-only) blocks the thread: an input that does not settle it is refused with 409,
whose body names the calls (``uncertain``, each the call's JSON). Settle them with ``resume`` entries (the
interrupt id is the call's id) whose ``payload`` is :data:`RECONCILE_SCHEMA`: ``{"outcome": "succeeded",
"output": str}`` (it was done; ``output`` is its result), ``{"outcome": "failed", "output"?: str}`` (it was
not done, and is not to be run) or ``{"outcome": "retry"}`` (not done: run it again); a ``cancelled``
entry counts as ``failed``. Every blocking call at once; then the run carries on from the outcomes (with
the new user message, if the input has one). ``GET /api/sessions/{threadId}`` names them too.

A client that disconnects stops only its stream: the run goes on, and its events stay in the session's
feed (``GET /api/sessions/{threadId}/feed``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from typing import Any, Literal, cast

from ag_ui.core import (
    PROTOCOL_VERSION,
    BaseEvent,
    CustomEvent,
    Interrupt,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from aiohttp import web
from pydantic import ValidationError

from rxagent.agent import (
    AnswerTakenError,
    ExternalResult,
    PendingToolCallsError,
    SessionHandle,
    ToolDecision,
)
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    MessageCompleted,
    ModelCallFinished,
    ModelCallStarted,
    RunStarted,
    StepStarted,
    TextDelta,
    ThinkingDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolPermissionAsked,
    ToolResult,
    ToolSuspended,
    UsageTotals,
    event_to_json,
)
from rxagent.messages import Msg, ToolResultBlock, ToolUseBlock
from rxagent.serve.http import ApiError, read_json
from rxagent.serve.hub import HUB, refusal
from rxagent.serve.run_stream import stream_run
from rxagent.serve.session_api import pending_json
from rxagent.session import Reconcile
from rxagent.state import PendingCall

__all__ = [
    "APPROVAL_SCHEMA",
    "RECONCILE_SCHEMA",
    "RESULT_SCHEMA",
    "AguiTranslator",
    "answers_from_resume",
    "routes",
]

APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "allow": {"type": "boolean", "description": "run the call (true) or refuse it (false)"},
        "reason": {"type": "string", "description": "why, shown to the model when refused"},
        "arguments": {"type": "object", "description": "run the call with these arguments instead"},
    },
    "required": ["allow"],
}
"""What an approval interrupt's resume ``payload`` looks like (a bare boolean is taken too)."""

RESULT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "output": {"type": "string", "description": "the call's result"},
        "status": {"enum": ["ok", "error"], "description": "whether the call succeeded"},
    },
    "required": ["output"],
}
"""What an external call's resume ``payload`` looks like (a bare string is taken too)."""

RECONCILE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "outcome": {
            "enum": ["succeeded", "failed", "retry"],
            "description": "it was done (succeeded), not done and not to be run (failed), or to run again",
        },
        "output": {"type": "string", "description": "its result (succeeded) or why it failed"},
    },
    "required": ["outcome"],
}
"""What a resume ``payload`` settling an uncertain call looks like."""

RECONCILE_HOW = "send resume entries {interruptId: <call id>, payload: {outcome, output?}} for each"
"""How an AG-UI client reconciles uncertain calls (what a 409 says)."""

_REASONS: dict[str, str] = {"ask": "tool_approval", "external": "external_tool_result"}

_ENCODER = EventEncoder()


def routes() -> list[web.RouteDef]:
    """The AG-UI route."""
    return [web.post("/ag-ui", run_agui)]


# ---- the input ---------------------------------------------------------------------------------------------


def parse_input(body: dict[str, Any]) -> RunAgentInput:
    """The body as a ``RunAgentInput``.

    Raises:
        ApiError: 400, with the first problems found (where and what, never the values).
    """
    try:
        return RunAgentInput.model_validate(body)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}" for e in error.errors()[:5]
        )
        raise ApiError(400, f"the body is not an AG-UI RunAgentInput: {problems}") from None


def answers_from_resume(
    entries: Iterable[ResumeEntry], waiting: Mapping[str, PendingCall]
) -> tuple[list[ToolDecision | ExternalResult], list[str]]:
    """The answers ``resume`` entries give to the calls waiting (interrupt id = call id), and a warning
    for each entry that names no open interrupt (it is ignored, as AG-UI asks).

    Raises:
        ApiError: 400, a payload that does not fit its interrupt's ``responseSchema``.
    """
    answers: list[ToolDecision | ExternalResult] = []
    warnings: list[str] = []
    for entry in entries:
        pending = waiting.get(entry.interrupt_id)
        if pending is None or pending.kind not in _REASONS:
            warnings.append(f"resume entry {entry.interrupt_id!r} names no open interrupt: it was ignored")
        elif pending.kind == "ask":
            answers.append(_approval(entry))
        else:
            answers.append(_external_result(entry))
    return answers, warnings


def outcomes_from_resume(entries: Iterable[ResumeEntry], uncertain: Iterable[str]) -> list[Reconcile]:
    """The outcomes ``resume`` entries give to the uncertain calls (interrupt id = call id); entries
    naming other calls are left to :func:`answers_from_resume`.

    Raises:
        ApiError: 400, a payload that does not fit :data:`RECONCILE_SCHEMA`.
    """
    ids = set(uncertain)
    outcomes: list[Reconcile] = []
    for entry in entries:
        call_id = entry.interrupt_id
        if call_id not in ids:
            continue
        if entry.status == "cancelled":
            outcomes.append(Reconcile(call_id, "failed", "the user abandoned this call"))
            continue
        fields = _object(entry.payload)
        outcome, output = fields.get("outcome"), fields.get("output", "")
        if outcome not in ("succeeded", "failed", "retry") or not isinstance(output, str):
            raise ApiError(
                400,
                f"resume entry {call_id!r}: the payload must be "
                '{"outcome": "succeeded"|"failed"|"retry", "output"?: str}',
            )
        outcomes.append(Reconcile(call_id, outcome, "" if outcome == "retry" else output))
    return outcomes


def _approval(entry: ResumeEntry) -> ToolDecision:
    call_id, payload = entry.interrupt_id, entry.payload
    if entry.status == "cancelled":
        return ToolDecision(call_id, False, "the user abandoned the approval")
    if isinstance(payload, bool):
        return ToolDecision(call_id, payload)
    fields = _object(payload)
    allow, reason, arguments = fields.get("allow"), fields.get("reason", ""), fields.get("arguments")
    if not isinstance(allow, bool):
        raise ApiError(
            400, f'resume entry {call_id!r}: the payload must be true, false or {{"allow": bool, …}}'
        )
    if not isinstance(reason, str) or not (arguments is None or isinstance(arguments, dict)):
        raise ApiError(400, f"resume entry {call_id!r}: 'reason' must be a string and 'arguments' an object")
    return ToolDecision(call_id, allow, reason, cast("dict[str, Any] | None", arguments))


def _external_result(entry: ResumeEntry) -> ExternalResult:
    call_id, payload = entry.interrupt_id, entry.payload
    if entry.status == "cancelled":
        return ExternalResult(call_id, "The caller abandoned this call.", "error")
    if isinstance(payload, str):
        return ExternalResult(call_id, payload)
    fields = _object(payload)
    output, status = fields.get("output"), fields.get("status", "ok")
    if not isinstance(output, str) or status not in ("ok", "error"):
        raise ApiError(
            400, f'resume entry {call_id!r}: the payload must be a string or {{"output": str, "status"?: …}}'
        )
    return ExternalResult(call_id, output, "ok" if status == "ok" else "error")


def _object(value: Any) -> dict[str, Any]:
    return cast("dict[str, Any]", value) if isinstance(value, dict) else {}


def _new_message(run_input: RunAgentInput, known: set[str]) -> Msg | None:
    """The input's last user message, unless the session has it already."""
    last = next((m for m in reversed(run_input.messages) if isinstance(m, UserMessage)), None)
    if last is None or last.id in known:
        return None
    if isinstance(last.content, str):
        text = last.content
    else:
        texts: list[str] = []
        for part in last.content:
            if part.type != "text":
                raise ApiError(
                    400, f"user message {last.id!r}: only text parts are supported, not {part.type!r}"
                )
            texts.append(part.text)
        text = "".join(texts)
    if not text.strip():
        raise ApiError(400, f"user message {last.id!r} has no text")
    return Msg.user(text, id=last.id)


# ---- the endpoint ----------------------------------------------------------------------------------------


async def run_agui(request: web.Request) -> web.StreamResponse:
    """``POST /ag-ui``: run the agent on the thread and stream the run as AG-UI events (see the module)."""
    hub = request.app[HUB]
    run_input = parse_input(await read_json(request, hub.settings.max_body))
    session_id = hub.session_id(run_input.thread_id)
    hub.refuse_while_stopping()
    handle = hub.handle(session_id)
    feed = await handle.open_feed()
    after = feed.head  # the run's facts come after it
    status = await handle.read_status()
    entries = run_input.resume or ()
    settled = [c.id for c in status.uncertain]
    if settled:  # the thread's uncertain calls first: nothing runs before they are reconciled
        outcomes = outcomes_from_resume(entries, settled)
        if not outcomes:
            hub.refuse_while_waiting(status, "this input", RECONCILE_HOW)
        await hub.reconcile(handle, outcomes, status, RECONCILE_HOW, every=True)
        entries = [e for e in entries if e.interrupt_id not in settled]
        status = await handle.read_status()
    waiting = {p.call.id: p for p in status.pending}
    await _refuse_taken(handle, [e.interrupt_id for e in entries if e.interrupt_id not in waiting])
    answers, warnings = answers_from_resume(entries, waiting)
    state = await hub.agent.sessions.state(handle.ctx)
    message = _new_message(run_input, {m.id for m in state.messages})
    if answers:
        try:
            await handle.check(answers)
            handle.refuse_taken(a.call_id for a in answers)  # again: nothing is awaited from here on
        except PendingToolCallsError as refused:
            raise refusal(refused) from None
        if handle.status().state in ("running", "queued"):
            raise ApiError(409, "a run of this thread is going or queued: resume once it has ended")
    elif message is None and not settled:
        raise ApiError(
            409,
            "nothing to run: the last user message is already in the thread, and no resume entry "
            "answers an interrupt",
        )
    elif message is not None:
        hub.refuse_while_waiting(status, "new input (send resume entries for its interrupts)")
    feed = await handle.open_feed()
    after = feed.durable_head  # the run's facts come after it (what a failed writer published never does)
    carried = [*answers, *([message] if message is not None else [])]
    if answers:
        run = await hub.submit_answers(handle, carried, request)  # 409 when another answer came first
    else:
        run = hub.submit(handle, carried, request)
    still_waiting = {i: p for i, p in waiting.items() if i not in {a.call_id for a in answers}}
    translator = AguiTranslator(
        run_input.thread_id,
        run_input.run_id,
        run.id,
        model=hub.agent.model.model_name,
        waiting=still_waiting,
        warnings=warnings,
    )
    return await stream_run(request, run, feed, after, translator, _encode)


async def _refuse_taken(handle: SessionHandle, interrupt_ids: list[str]) -> None:
    """Refuse (409) resume entries for interrupts that were open and took an answer already (another tab,
    another client); entries naming no interrupt at all are ignored later, as AG-UI asks."""
    if not interrupt_ids:
        return
    taken = await handle.taken_answers(interrupt_ids)
    for interrupt_id in interrupt_ids:
        if interrupt_id in taken:
            raise refusal(AnswerTakenError(taken[interrupt_id]))


def _encode(events: Iterable[BaseEvent]) -> bytes:
    return "".join(_ENCODER.encode(e) for e in events).encode()


# ---- the translation -------------------------------------------------------------------------------------


class AguiTranslator:
    """Turns one run's rxagent events into AG-UI events, in an order AG-UI accepts (see the module).

    Args:
        thread_id: the AG-UI thread (the session id).
        run_id: the AG-UI run id (the input's).
        rx_run_id: the rxagent run's id (its events carry it; ids of messages made here start with it).
        model: the model's name, for ``usage``.
        waiting: calls that wait for answers from before this run and are not answered by its input.
        warnings: sent as ``CUSTOM`` events named ``rxagent.warning`` right after ``RUN_STARTED``.
    """

    def __init__(
        self,
        thread_id: str,
        run_id: str,
        rx_run_id: str,
        *,
        model: str | None = None,
        waiting: Mapping[str, PendingCall] | None = None,
        warnings: Iterable[str] = (),
    ) -> None:
        self.thread_id = thread_id
        self.run_id = run_id
        self.rx_run_id = rx_run_id
        self.model = model
        self.started = False
        self.closed = False
        """The run's last event (``RUN_FINISHED`` or ``RUN_ERROR``) has been made: nothing follows."""
        self.pending: dict[str, PendingCall] = dict(waiting or {})
        self.usage = UsageTotals()
        self._warnings = list(warnings)
        self._count = 0
        self._text: str | None = None
        self._reasoning: tuple[str, str] | None = None
        self._calls: set[str] = set()
        self._unnamed: dict[int, tuple[str | None, str | None, list[str]]] = {}
        self._steps: set[str] = set()
        self._node: str | None = None
        """The STEP_STARTED of the node whose step runs: finished when the next node's starts."""
        self._results: set[str] = set()
        self._last_error: ErrorEvent | None = None

    def translate(self, event: AgentEvent) -> list[BaseEvent]:
        """The AG-UI events for one event of the run (none after the run's end)."""
        if self.closed:
            return []
        match event:
            case TextDelta():
                return self._text_delta(event)
            case ToolCallArgumentsDelta():
                return self._call_arguments(event)
            case ThinkingDelta():
                return self._thinking(event)
            case RunStarted():
                return self._run_started(event)
            case ModelCallStarted():
                return self._model_call_started(event)
            case ModelCallFinished():
                return self._model_call_finished(event)
            case ToolCallStarted():
                return self._call_started(event)
            case ToolCallCompleted():
                return self._call_completed(event)
            case MessageCompleted():
                return self._message_completed(event)
            case ToolExecutionStarted():
                return self._execution_started(event)
            case ToolResult():
                return self._tool_result(event)
            case ToolPermissionAsked():
                return self._asked(event)
            case ToolSuspended():
                return self._suspended(event)
            case ErrorEvent():
                return self._error(event)
            case StepStarted():
                return self._node_started(event)
            case AgentResult():
                return self._result(event)
            case _:
                return self._custom(event)

    def fail(self, message: str, code: str | None = None) -> list[BaseEvent]:
        """``RUN_ERROR`` for a run whose own end will not come (it failed before it started, was
        cancelled, or the server stops); AG-UI lets it end whatever is open."""
        if self.closed:
            return []
        self.closed = True
        return [RunErrorEvent(message=message, code=code, timestamp=_now_ms())]

    # ---- helpers ----------------------------------------------------------------------------------------

    def _id(self, what: str) -> str:
        self._count += 1
        return f"{self.rx_run_id}.{what}.{self._count}"

    def _state(self) -> StateSnapshotEvent:
        usage = self.usage
        return StateSnapshotEvent(
            snapshot={
                "session_id": self.thread_id,
                "run_id": self.rx_run_id,
                "pending": [pending_json(p) for p in self.pending.values()],
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "model_calls": usage.model_calls,
                },
            }
        )

    def _custom(self, event: AgentEvent) -> list[BaseEvent]:
        return [CustomEvent(name=f"rxagent.{event.type}", value=json.loads(event_to_json(event)))]

    def _end_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        span, message = self._reasoning
        self._reasoning = None
        return [ReasoningMessageEndEvent(message_id=message), ReasoningEndEvent(message_id=span)]

    def _end_text(self) -> list[BaseEvent]:
        if self._text is None:
            return []
        message, self._text = self._text, None
        return [TextMessageEndEvent(message_id=message)]

    def _end_calls(self) -> list[BaseEvent]:
        ended: list[BaseEvent] = [ToolCallEndEvent(tool_call_id=c) for c in sorted(self._calls)]
        self._calls.clear()
        for call_id, name, fragments in self._unnamed.values():
            if call_id and name:
                ended.extend(self._whole_call(call_id, name, "".join(fragments)))
        self._unnamed.clear()
        return ended

    def _whole_call(self, call_id: str, name: str, arguments: str) -> list[BaseEvent]:
        events: list[BaseEvent] = [
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=self._text)
        ]
        if arguments:
            events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        events.append(ToolCallEndEvent(tool_call_id=call_id))
        return events

    def _end_steps(self) -> list[BaseEvent]:
        ended: list[BaseEvent] = [StepFinishedEvent(step_name=s) for s in sorted(self._steps)]
        self._steps.clear()
        return ended + self._end_node()

    def _end_node(self) -> list[BaseEvent]:
        if self._node is None:
            return []
        node, self._node = self._node, None
        return [StepFinishedEvent(step_name=node)]

    # ---- one handler per event type ------------------------------------------------------------------

    def _run_started(self, event: RunStarted) -> list[BaseEvent]:
        self.started = True
        events: list[BaseEvent] = [
            RunStartedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                protocol_version=PROTOCOL_VERSION,
                metadata={"rxagent_run_id": self.rx_run_id},
                timestamp=_ms(event.time),
            )
        ]
        events.extend(CustomEvent(name="rxagent.warning", value=w) for w in self._warnings)
        events.append(self._state())
        return events

    def _node_started(self, event: StepStarted) -> list[BaseEvent]:
        # The node before is finished first, so a node's name is never open twice; a class name has no
        # space, so no model-call ("model call N") or tool ("tool NAME ID") step shares it (unless a class
        # was made with such a name: that node is then not told, rather than reopening the step).
        events = self._end_node()
        if event.node not in self._steps:
            self._node = event.node
            events.append(StepStartedEvent(step_name=event.node))
        return events

    def _model_call_started(self, event: ModelCallStarted) -> list[BaseEvent]:
        step = f"model call {event.iteration}"
        if step in self._steps:  # the same turn asked again (a forced tool choice stepped down)
            return []
        self._steps.add(step)
        return [StepStartedEvent(step_name=step)]

    def _model_call_finished(self, event: ModelCallFinished) -> list[BaseEvent]:
        self.usage.add(event.usage)
        step = f"model call {event.iteration}"
        events: list[BaseEvent] = []
        if step in self._steps:
            self._steps.discard(step)
            events.append(StepFinishedEvent(step_name=step))
        events.append(self._state())
        return events

    def _thinking(self, event: ThinkingDelta) -> list[BaseEvent]:
        if not event.text:
            return []
        events: list[BaseEvent] = []
        if self._reasoning is None:
            self._reasoning = (self._id("thinking"), self._id("reasoning"))
            span, message = self._reasoning
            events += [ReasoningStartEvent(message_id=span), ReasoningMessageStartEvent(message_id=message)]
        events.append(ReasoningMessageContentEvent(message_id=self._reasoning[1], delta=event.text))
        return events

    def _text_delta(self, event: TextDelta) -> list[BaseEvent]:
        if not event.text:
            return []
        events = self._end_reasoning()
        if self._text is None:
            self._text = self._id("text")
            events.append(TextMessageStartEvent(message_id=self._text, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._text, delta=event.text))
        return events

    def _call_started(self, event: ToolCallStarted) -> list[BaseEvent]:
        events = self._end_reasoning()
        if event.call_id and event.name and event.call_id not in self._calls:
            self._calls.add(event.call_id)
            events.append(
                ToolCallStartEvent(
                    tool_call_id=event.call_id, tool_call_name=event.name, parent_message_id=self._text
                )
            )
        else:  # no id or name yet: the call is told whole when it completes
            self._unnamed[event.index] = (event.call_id, event.name, [])
        return events

    def _call_arguments(self, event: ToolCallArgumentsDelta) -> list[BaseEvent]:
        if event.call_id and event.call_id in self._calls:
            return [ToolCallArgsEvent(tool_call_id=event.call_id, delta=event.fragment)]
        unnamed = self._unnamed.get(event.index)
        if unnamed is not None:
            unnamed[2].append(event.fragment)
        return []

    def _call_completed(self, event: ToolCallCompleted) -> list[BaseEvent]:
        call = event.call
        if call.id in self._calls:
            self._calls.discard(call.id)
            return [ToolCallEndEvent(tool_call_id=call.id)]
        for index, (call_id, _, _) in list(self._unnamed.items()):
            if call_id in (None, "", call.id):
                del self._unnamed[index]
                break
        return self._end_reasoning() + self._whole_call(call.id, call.name, call.raw_arguments)

    def _message_completed(self, event: MessageCompleted) -> list[BaseEvent]:
        message = event.message
        if message.role == "assistant":
            return self._end_reasoning() + self._end_text() + self._end_calls()
        # Results no ToolResult told (a custom step's that added one without its event) are told here.
        return [self._told(r) for r in message.tool_results if r.tool_use_id not in self._results]

    def _execution_started(self, event: ToolExecutionStarted) -> list[BaseEvent]:
        step = _tool_step(event.call)
        if step in self._steps:
            return []
        self._steps.add(step)
        return [StepStartedEvent(step_name=step)]

    def _tool_result(self, event: ToolResult) -> list[BaseEvent]:
        result = event.result
        events: list[BaseEvent] = []
        step = f"tool {result.name} {result.tool_use_id}"
        if step in self._steps:
            self._steps.discard(step)
            events.append(StepFinishedEvent(step_name=step))
        events.append(self._told(result))
        return events

    def _told(self, result: ToolResultBlock) -> ToolCallResultEvent:
        self.pending.pop(result.tool_use_id, None)
        self._results.add(result.tool_use_id)
        return ToolCallResultEvent(
            message_id=self._id("result"),
            tool_call_id=result.tool_use_id,
            content=result.text,
            role="tool",
            metadata={"status": result.status},
        )

    def _asked(self, event: ToolPermissionAsked) -> list[BaseEvent]:
        self.pending[event.call.id] = PendingCall(call=event.call, kind="ask", reason=event.reason)
        return self._custom(event)

    def _suspended(self, event: ToolSuspended) -> list[BaseEvent]:
        self.pending[event.call.id] = PendingCall(call=event.call, kind="external")
        return self._custom(event)

    def _error(self, event: ErrorEvent) -> list[BaseEvent]:
        self._last_error = event
        return self._custom(event)

    def _result(self, event: AgentResult) -> list[BaseEvent]:
        events = self._end_reasoning() + self._end_text() + self._end_calls() + self._end_steps()
        still = {c.id for c in event.pending}
        self.pending = {i: p for i, p in self.pending.items() if i in still}
        events.append(self._state())
        self.closed = True
        timestamp = _ms(event.time)
        usage = self._usage(event.usage)
        if event.reason == "ERROR":
            error = self._last_error
            message = event.detail or (error.message if error is not None else "the run failed")
            code = error.error_type if error is not None else "error"
            events.append(RunErrorEvent(message=message, code=code, usage=usage, timestamp=timestamp))
            return events
        interrupts = [
            _interrupt(p)
            for c in event.pending
            if (p := self.pending.get(c.id)) is not None and p.kind in _REASONS
        ]
        outcome: RunFinishedSuccessOutcome | RunFinishedInterruptOutcome | RunFinishedCancelledOutcome
        result: dict[str, Any] | None = None
        if interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        elif event.reason in ("INTERRUPTED", "STOPPED"):
            outcome = RunFinishedCancelledOutcome()
        else:
            outcome = RunFinishedSuccessOutcome()
            result = {"reason": event.reason, "text": event.text, "iterations": event.iterations}
            if event.structured is not None:
                result["structured"] = json.loads(event_to_json(event))["structured"]
        events.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self.run_id,
                outcome=outcome,
                result=result,
                usage=usage,
                timestamp=timestamp,
            )
        )
        return events

    def _usage(self, totals: UsageTotals) -> list[TokenUsage] | None:
        if not totals.model_calls:
            return None
        return [
            TokenUsage(
                model=self.model,
                input_tokens=totals.input_tokens,
                output_tokens=totals.output_tokens,
                total_tokens=totals.total_tokens,
                reasoning_tokens=totals.reasoning_tokens or None,
                cached_input_tokens=totals.cache_read_tokens or None,
            )
        ]


def _tool_step(call: ToolUseBlock) -> str:
    return f"tool {call.name} {call.id}"


def _interrupt(pending: PendingCall) -> Interrupt:
    call = pending.call
    kind: Literal["ask", "external"] = "ask" if pending.kind == "ask" else "external"
    if kind == "ask":
        why = f": {pending.reason}" if pending.reason else ""
        message = f"{call.name} needs your approval{why}"
    else:
        message = f"{call.name} waits for its result from outside"
    return Interrupt(
        id=call.id,
        reason=_REASONS[kind],
        message=message,
        tool_call_id=call.id,
        response_schema=APPROVAL_SCHEMA if kind == "ask" else RESULT_SCHEMA,
        metadata={
            "tool": call.name,
            "arguments": call.input if call.input is not None else call.raw_arguments,
        },
    )


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _now_ms() -> int:
    return _ms(time.time())
