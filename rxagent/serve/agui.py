"""AG-UI: ``POST /ag-ui`` runs the agent on a thread and answers with AG-UI events, as SSE.

The input is an AG-UI ``RunAgentInput``; its ``threadId`` is the session id. The session's log holds the
conversation, so of the input's ``messages`` only the **last user message** counts, and only when the
session does not have it yet (by message id: sending the same input twice runs once), and the ``tool``
messages that answer the front end's own tools. ``resume`` entries answer the interrupts of the run before
(an entry naming no open interrupt is ignored, with a warning event; interrupts left unanswered stay open,
and the run ends interrupted again). An interrupt takes one answer, the first: a resume entry for an
interrupt that was answered already (another tab, another client) is refused with 409, naming the call and
the answer taken, and nothing runs. ``tools`` (the front end's own tools), ``state`` (the thread's shared
state) and ``forwardedProps.cancelOnDisconnect`` are read as :mod:`rxagent.serve.agui_thread` says;
``context`` is not used.

The answer is a stream of ``ag_ui.core`` events encoded by ``ag_ui.encoder.EventEncoder``, translated from
the run's events by :class:`AguiTranslator`:

=====================================  ============================================================
rxagent event                          AG-UI events
=====================================  ============================================================
``RunStarted``                         ``RUN_STARTED`` (``protocolVersion``; ``metadata.rxagent_run_id``),
                                       ``MESSAGES_SNAPSHOT`` (when the client's messages differ from
                                       the thread's), ``STATE_SNAPSHOT`` (the shared state),
                                       ``CUSTOM`` ``rxagent.run_state``
``StepStarted``                        ``STEP_FINISHED`` for the node before (if any), ``STEP_STARTED``
                                       named by the node (``Start``, ``Reason``, ``Act``, …): the loop's
                                       path; the model-call and tool steps below run inside these
``ModelCallStarted`` / ``…Finished``   ``STEP_STARTED`` / ``STEP_FINISHED`` (``model call N``), then
                                       ``CUSTOM`` ``rxagent.run_state`` with the usage so far
``ThinkingDelta``                      ``REASONING_START``, ``REASONING_MESSAGE_START`` (first), then
                                       ``REASONING_MESSAGE_CONTENT``; closed by what follows the thinking
``TextDelta``                          ``TEXT_MESSAGE_START`` (first), ``TEXT_MESSAGE_CONTENT``
``ToolCallStarted`` / ``…ArgumentsDelta`` / ``ToolCallCompleted``
                                       ``TOOL_CALL_START`` / ``TOOL_CALL_ARGS`` / ``TOOL_CALL_END``;
                                       every call's ``parentMessageId`` is the id of the answer it is
                                       part of (its text's message, when it has text), so a client
                                       keeps one assistant message per answer
``MessageCompleted`` (assistant)       ``TEXT_MESSAGE_END`` (and closes thinking and calls still open)
``ToolExecutionStarted``, ``ToolResult``  ``STEP_STARTED`` / ``STEP_FINISHED`` (``tool NAME ID``),
                                       ``TOOL_CALL_RESULT``
``MessageCompleted`` (tool results)    ``TOOL_CALL_RESULT`` for results no ``ToolResult`` told (denials,
                                       external results and rejections have their own ``ToolResult``:
                                       each result is told once)
a change of the shared state           ``STATE_DELTA`` (a JSON Patch), as the session's log records it
``AgentResult``                        ``CUSTOM`` ``rxagent.run_state``, then ``RUN_FINISHED`` (outcome
                                       ``success`` with the answer as ``result``, and the front end's
                                       calls to run in ``pendingToolCallIds``; ``interrupt`` for calls
                                       waiting for an approval or an external result; ``cancelled`` for
                                       an interrupted or stopped run) or ``RUN_ERROR`` (reason ``ERROR``)
anything else                          ``CUSTOM`` named ``rxagent.<type>`` with the event's JSON
=====================================  ============================================================

Ordering holds per run: one ``RUN_STARTED`` first (or a lone ``RUN_ERROR`` for a run that never started),
every message, reasoning span, tool call and step opened is closed before the end, and exactly one
``RUN_FINISHED`` or ``RUN_ERROR`` comes last. The ``rxagent.run_state`` value is ``{"session_id",
"run_id", "pending": [the calls waiting, as the session API writes them], "usage": {"input_tokens",
"output_tokens", "model_calls"}}``: the run's own bookkeeping, kept out of the shared state, which is the
front end's.

**Interrupts.** A call waiting for approval is an interrupt with ``reason: "tool_approval"``; a call
of one of the agent's external tools waiting for its result one with ``reason: "external_tool_result"``.
The interrupt's id is the call's id (``toolCallId`` too), its ``message`` a sentence for the person who
answers (what the assistant wants to run, with which arguments; ``metadata`` has the tool, the arguments
and the permission rule's reason), and its ``responseSchema`` says what ``payload`` to resume with: for an
approval ``{"allow": bool, "reason"?: str, "arguments"?: object, "always"?: bool}`` (edited arguments;
``always`` with ``allow``: the tool runs without asking in this thread from then on, a rule the log
keeps, as the session API's ``always``), or a bare
``true``/``false``; for a result ``{"output": str, "status"?: "ok"|"error"}``, or a bare string. A
``cancelled`` entry denies the approval, or gives the external call an error result. The front end's own
tools are not interrupts: their calls are in ``pendingToolCallIds``, and their results come back as
``tool`` messages (see :mod:`rxagent.serve.agui_thread`).

**Uncertain calls.** A call whose outcome a stopped server lost (dispatched, no result recorded; its tool
neither idempotent nor read-only) blocks the thread: an input that does not settle it is refused with 409,
whose body names the calls (``uncertain``, each the call's JSON). Settle them with ``resume`` entries (the
interrupt id is the call's id) whose ``payload`` is :data:`RECONCILE_SCHEMA`: ``{"outcome": "succeeded",
"output": str}`` (it was done; ``output`` is its result), ``{"outcome": "failed", "output"?: str}`` (it was
not done, and is not to be run) or ``{"outcome": "retry"}`` (not done: run it again); a ``cancelled``
entry counts as ``failed``. Every blocking call at once; then the run carries on from the outcomes (with
the new user message, if the input has one). ``GET /api/sessions/{threadId}`` names them too.

**Retrying.** An input whose last user message is the thread's last user message (the same id) while the
thread holds no answer to it, nothing waits and no run goes (its run failed with ``RUN_ERROR``, or was
stopped before it answered) runs that turn again, from where it stopped: a client's retry. Sent again
while that run goes, it is refused with 409; once the turn is answered, it is "nothing to run" (409). The
AI SDK's chat route retries by the same rule (:mod:`rxagent.serve.retry`).

**A client that goes away.** By default it stops only its stream: the run goes on, and its events stay in
the session's feed (``GET /api/sessions/{threadId}/feed``). With ``ServeSettings.cancel_on_disconnect``
(``rxagent serve --cancel-on-disconnect``), or ``forwardedProps.cancelOnDisconnect: true`` in the input,
the run is interrupted as the client goes (one still waiting for its turn is cancelled): it ends
``INTERRUPTED``, what it finished kept, and lets the thread go, so the next input runs at once. An
``abortRun()`` of ``@ag-ui/client`` is such a going away.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection, Iterable, Mapping
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
    ToolMessage,
    UserMessage,
)
from ag_ui.encoder import EventEncoder
from aiohttp import web
from pydantic import ValidationError

from rxagent.agent import (
    AnswerTakenError,
    ExternalResult,
    PendingToolCallsError,
    RunHandle,
    SessionHandle,
    ToolDecision,
)
from rxagent.agent.inputs import SharedState
from rxagent.context import ToolScope
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
from rxagent.serve.agui_thread import ClientSync, front_end_of, message_id_of, tool_results
from rxagent.serve.http import ApiError, read_json
from rxagent.serve.hub import HUB, refusal
from rxagent.serve.retry import retries_turn
from rxagent.serve.run_stream import stream_run
from rxagent.serve.session_api import pending_json
from rxagent.session import FeedItem, Reconcile
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
        "always": {
            "type": "boolean",
            "description": "with allow: run this tool's calls in this thread without asking from now on",
        },
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
    always = fields.get("always", False)
    if not isinstance(allow, bool):
        raise ApiError(
            400, f'resume entry {call_id!r}: the payload must be true, false or {{"allow": bool, …}}'
        )
    if not isinstance(reason, str) or not (arguments is None or isinstance(arguments, dict)):
        raise ApiError(400, f"resume entry {call_id!r}: 'reason' must be a string and 'arguments' an object")
    if not isinstance(always, bool):
        raise ApiError(400, f"resume entry {call_id!r}: 'always' must be true or false")
    # The run records the rule, as for the session API's and the command line's 'always' (agent.grants).
    return ToolDecision(call_id, allow, reason, cast("dict[str, Any] | None", arguments), always)


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
    """The input's last user message, unless the session has it already (by its id in the thread, see
    :func:`~rxagent.serve.agui_thread.message_id_of`)."""
    last = next((m for m in reversed(run_input.messages) if isinstance(m, UserMessage)), None)
    if last is None or message_id_of(last) in known:
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
    return Msg.user(text, id=message_id_of(last))


# ---- the endpoint ----------------------------------------------------------------------------------------


async def run_agui(request: web.Request) -> web.StreamResponse:
    """``POST /ag-ui``: run the agent on the thread and stream the run as AG-UI events (see the module)."""
    hub = request.app[HUB]
    run_input = parse_input(await read_json(request, hub.settings.max_body))
    session_id = hub.session_id(run_input.thread_id)
    front = front_end_of(run_input, hub.agent.toolkit, hub.settings.cancel_on_disconnect)
    scope = ToolScope(caller_tools=front.tools) if front.tools else None
    hub.refuse_while_stopping()
    handle = hub.handle(session_id)
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
    projection = await hub.agent.keeper.peek(handle.key)  # what the run will start from, as of now
    feed = await handle.open_feed()
    history = projection.state.messages
    results = tool_results(run_input, waiting, history)
    answers += results
    message = _new_message(run_input, {m.id for m in history})
    if answers:
        try:
            await handle.check(answers, tools=scope)
            handle.refuse_taken(a.call_id for a in answers)  # again: nothing is awaited from here on
        except PendingToolCallsError as refused:
            raise refusal(refused) from None
        if handle.status().state in ("running", "queued"):
            raise ApiError(409, "a run of this thread is going or queued: resume once it has ended")
    elif (message is not None or not settled) and not retries_turn(
        handle, _last_user_id(run_input), history, status, noun="thread", hint=_RETRY_HINT
    ):  # new input (a retry of the thread's failed turn, or a 409, otherwise)
        hub.refuse_while_waiting(status, "new input (send resume entries for its interrupts)")
    # Nothing is awaited from the checks above to the submission: a retry sent twice at once runs once.
    carried: list[ToolDecision | ExternalResult | Msg | SharedState] = [*answers]
    if message is not None:
        carried.append(message)
    if front.state is not None:
        carried.append(SharedState(front.state))
    if answers:
        run = await hub.submit_answers(handle, carried, request, tools=scope)  # 409: another answer first
    else:
        run = hub.submit(handle, carried, request, tools=scope)
    answered = {a.call_id for a in answers}
    still_waiting = {i: p for i, p in waiting.items() if i not in answered}
    told = {r.call_id for r in results}
    incoming = [
        m
        for m in run_input.messages
        if (isinstance(m, ToolMessage) and m.tool_call_id in told)
        or (message is not None and isinstance(m, UserMessage) and message_id_of(m) == message.id)
    ]
    sync = ClientSync(projection, run.id, run_input.messages, incoming, front.state)
    translator = AguiTranslator(
        run_input.thread_id,
        run_input.run_id,
        run.id,
        model=hub.agent.model.model_name,
        waiting=still_waiting,
        warnings=warnings,
        front_end_tools={t.name for t in front.tools},
        client_results=told,
        opening=sync.opening,
    )
    # From what the run starts from: the facts after it are the run's, and any of other runs before them
    # (the history the client is told about follows them).
    return await stream_run(
        request,
        run,
        feed,
        projection.seq,
        translator,
        _encode,
        watcher=_Watch(sync, translator),
        on_gone=_stop if front.cancel_on_disconnect else None,
    )


def _last_user_id(run_input: RunAgentInput) -> str | None:
    """The id the thread keeps the input's last user message by (``None``: the input has none)."""
    last = next((m for m in reversed(run_input.messages) if isinstance(m, UserMessage)), None)
    return None if last is None else message_id_of(last)


_RETRY_HINT = " (send a new user message, or resume entries for the thread's interrupts)"


def _stop(run: RunHandle) -> None:
    """Stop a run whose client went away: interrupted (it ends ``INTERRUPTED``, what it finished kept), or
    cancelled while it still waits for its turn."""
    if run.done():
        return
    if run.status == "queued":
        run.cancel()
    else:
        run.interrupt()


async def _refuse_taken(handle: SessionHandle, interrupt_ids: list[str]) -> None:
    """Refuse (409) resume entries for interrupts that were open and took an answer already (another tab,
    another client); entries naming no interrupt at all are ignored later, as AG-UI asks."""
    if not interrupt_ids:
        return
    taken = await handle.taken_answers(interrupt_ids)
    for interrupt_id in interrupt_ids:
        if interrupt_id in taken:
            raise refusal(AnswerTakenError(taken[interrupt_id]))


class _Watch:
    """What the AG-UI stream does with the feed's facts besides the run's events: another run's facts move
    the history the client is told about (:class:`~rxagent.serve.agui_thread.ClientSync`), and the run's
    changes of the shared state become ``STATE_DELTA`` events once the run has started on the wire."""

    __slots__ = ("_sync", "_translator")

    def __init__(self, sync: ClientSync, translator: AguiTranslator) -> None:
        self._sync = sync
        self._translator = translator

    def see(self, item: FeedItem, own: bool) -> list[BaseEvent]:
        if not own:
            self._sync.follow(item)  # another run's, before this run's: the history this run starts from
            return []
        self._sync.begin()
        if item.kind != "extras":
            return []
        changed = self._sync.extras(item)
        translator = self._translator
        return changed if translator.started and not translator.closed else []


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
        front_end_tools: the names of the front end's own tools in this run: their waiting calls are in
            ``RUN_FINISHED``'s ``pendingToolCallIds``, not interrupts.
        client_results: the calls whose results the input's ``tool`` messages gave: the client has them,
            so they are not told again.
        opening: what follows ``RUN_STARTED`` (and the warnings): the messages and state snapshots of
            :class:`~rxagent.serve.agui_thread.ClientSync`.
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
        front_end_tools: Collection[str] = (),
        client_results: Collection[str] = (),
        opening: Callable[[], list[BaseEvent]] | None = None,
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
        self._front_end = frozenset(front_end_tools)
        self._client_results = frozenset(client_results)
        self._opening = opening
        self._count = 0
        self._answer: str | None = None
        """The id of the assistant message being told (its text's and its calls' parent), once it has
        begun."""
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

    def _run_state(self) -> CustomEvent:
        usage = self.usage
        return CustomEvent(
            name="rxagent.run_state",
            value={
                "session_id": self.thread_id,
                "run_id": self.rx_run_id,
                "pending": [pending_json(p) for p in self.pending.values()],
                "usage": {
                    "input_tokens": usage.input_tokens,
                    "output_tokens": usage.output_tokens,
                    "model_calls": usage.model_calls,
                },
            },
        )

    def _custom(self, event: AgentEvent) -> list[BaseEvent]:
        return [CustomEvent(name=f"rxagent.{event.type}", value=json.loads(event_to_json(event)))]

    def _end_reasoning(self) -> list[BaseEvent]:
        if self._reasoning is None:
            return []
        span, message = self._reasoning
        self._reasoning = None
        return [ReasoningMessageEndEvent(message_id=message), ReasoningEndEvent(message_id=span)]

    def _answer_id(self) -> str:
        """The id of the assistant message being told: made by its first text or call."""
        if self._answer is None:
            self._answer = self._id("answer")
        return self._answer

    def _end_text(self) -> list[BaseEvent]:
        self._answer = None  # what comes next is another answer
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
            ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name, parent_message_id=self._answer_id())
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
        if self._opening is not None:
            events.extend(self._opening())
        events.append(self._run_state())
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
        events.append(self._run_state())
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
            self._text = self._answer_id()
            events.append(TextMessageStartEvent(message_id=self._text, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._text, delta=event.text))
        return events

    def _call_started(self, event: ToolCallStarted) -> list[BaseEvent]:
        events = self._end_reasoning()
        if event.call_id and event.name and event.call_id not in self._calls:
            self._calls.add(event.call_id)
            events.append(
                ToolCallStartEvent(
                    tool_call_id=event.call_id,
                    tool_call_name=event.name,
                    parent_message_id=self._answer_id(),
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
        return [e for r in message.tool_results if r.tool_use_id not in self._results for e in self._told(r)]

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
        events.extend(self._told(result))
        return events

    def _told(self, result: ToolResultBlock) -> list[BaseEvent]:
        self.pending.pop(result.tool_use_id, None)
        self._results.add(result.tool_use_id)
        if result.tool_use_id in self._client_results:  # the client sent it: it has it already
            return []
        event = ToolCallResultEvent(
            message_id=self._id("result"),
            tool_call_id=result.tool_use_id,
            content=result.text,
            role="tool",
            metadata={"status": result.status},
        )
        return [event]

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
        events.append(self._run_state())
        self.closed = True
        timestamp = _ms(event.time)
        usage = self._usage(event.usage)
        if event.reason == "ERROR":
            error = self._last_error
            message = event.detail or (error.message if error is not None else "the run failed")
            code = error.error_type if error is not None else "error"
            events.append(RunErrorEvent(message=message, code=code, usage=usage, timestamp=timestamp))
            return events
        waiting = [
            p for c in event.pending if (p := self.pending.get(c.id)) is not None and p.kind in _REASONS
        ]
        front_end = [p.call.id for p in waiting if p.kind == "external" and p.call.name in self._front_end]
        interrupts = [_interrupt(p) for p in waiting if p.call.id not in front_end]
        outcome: RunFinishedSuccessOutcome | RunFinishedInterruptOutcome | RunFinishedCancelledOutcome
        result: dict[str, Any] | None = None
        if interrupts:
            outcome = RunFinishedInterruptOutcome(interrupts=interrupts)
        elif event.reason in ("INTERRUPTED", "STOPPED"):
            outcome = RunFinishedCancelledOutcome()
        else:  # the front end's calls, if any, are for the client to run (AG-UI's pending tool calls)
            outcome = RunFinishedSuccessOutcome(pending_tool_call_ids=front_end or None)
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
    # Written for the person who answers: what the assistant wants and with what, never how the operator
    # configured the server (a rule's reason, such as "--ask calc*", is in the metadata for front ends that
    # want it).
    if kind == "ask":
        message = f"The assistant wants to run {call.name}{_arguments_shown(call)}. Do you allow it?"
    else:
        message = f"The assistant asks for the result of {call.name}{_arguments_shown(call)}."
    return Interrupt(
        id=call.id,
        reason=_REASONS[kind],
        message=message,
        tool_call_id=call.id,
        response_schema=APPROVAL_SCHEMA if kind == "ask" else RESULT_SCHEMA,
        metadata={
            "tool": call.name,
            "arguments": call.input if call.input is not None else call.raw_arguments,
            "rule_reason": pending.reason,
        },
    )


_SHOWN_CHARS = 200
"""The most characters of a call's arguments an interrupt's message shows."""


def _arguments_shown(call: ToolUseBlock) -> str:
    """`` with city "Oslo", days 3`` (shortened past :data:`_SHOWN_CHARS`), or nothing for no arguments."""
    arguments = call.input
    if isinstance(arguments, dict) and not arguments:
        return ""
    if isinstance(arguments, dict):
        shown = ", ".join(
            f"{name} {json.dumps(value, ensure_ascii=False)}" for name, value in arguments.items()
        )
    else:  # arguments the model got wrong: shown as it wrote them
        shown = call.raw_arguments.strip()
        if not shown:
            return ""
    if len(shown) > _SHOWN_CHARS:
        shown = shown[: _SHOWN_CHARS - 1] + "…"
    return f" with {shown}"


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _now_ms() -> int:
    return _ms(time.time())
