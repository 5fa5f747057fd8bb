"""What an AG-UI thread shares with its client besides a run's events: the client's own tools, its messages
and its state, kept in step with the session (the thread).

**Read from the input** (:func:`front_end_of`, :func:`tool_results`), before anything changes:

- ``tools`` are the front end's own tools (CopilotKit's actions): the run sees them beside the agent's
  (:attr:`~rxagent.context.ToolScope.caller_tools`), and a call to one suspends the run; the run ends
  ``RUN_FINISHED`` ``success`` with the calls in ``outcome.pendingToolCallIds``, the client runs them and
  sends their results in the next input as ``tool`` messages, which answer the calls as
  :class:`~rxagent.agent.ExternalResult` values, as interrupts are answered (a ``resume`` entry works
  too). A tool message for a call the thread has a result for already is history, and ignored; one for a
  call the thread never made or does not wait for is refused with 409.
- ``state`` is the thread's shared state (:mod:`rxagent.agent.shared_state`): a JSON object the run starts
  from, replacing the session's. ``{}`` or ``null`` (a client that was just loaded has no state) leaves
  the session's as it is; the client then gets it as ``STATE_SNAPSHOT``.
- ``forwardedProps.cancelOnDisconnect`` (a boolean) says whether the client's going away interrupts its
  run, instead of ``ServeSettings.cancel_on_disconnect``.

**Sent to the client** (:class:`ClientSync`), right after ``RUN_STARTED``:

- ``MESSAGES_SNAPSHOT`` when the client's messages differ from the thread's as the run starts (after an
  aborted run went on without it, after a reload, after an approval with edited arguments): the thread's
  messages, with the input's new ones after them. Messages are compared by role, text, tool calls (id,
  name, arguments) and results; ids do not count, since a streamed message's id is not the stored one's
  (reasoning, system and activity messages are left out, and so kept by the client). ``@ag-ui/client``
  keeps the messages a snapshot names by id, in its own order, and adds the others after them, so the
  messages both sides agree on from the start keep the client's ids and every later one has an id the
  client does not have; a user message then carries ``metadata.rxagent_message_id``, its id in the thread,
  which the server reads back in later inputs.
- ``STATE_SNAPSHOT``: the shared state the run starts from. Each change the run makes (a tool, a step) is
  then sent as ``STATE_DELTA``, a JSON Patch (RFC 6902, made by ``jsonpatch``) from the state the client has,
  as the session's log records the change.

The history the run starts from is the session's as read before the run was submitted, brought up to date
with the facts the session's feed shows before the run's first (a run of the thread still going when the
input came), so the comparison is with what the run really starts from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeAlias, cast

from ag_ui.core import (
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Message,
    MessagesSnapshotEvent,
    RunAgentInput,
    StateDeltaEvent,
    StateSnapshotEvent,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from pydantic import JsonValue

from rxagent.agent import ExternalResult
from rxagent.agent.inputs import InvalidInputError, check_input_value
from rxagent.agent.shared_state import SHARED_STATE_KEY
from rxagent.messages import Msg
from rxagent.requests import ToolSchema
from rxagent.serve.http import ApiError
from rxagent.session import FeedItem, Projection, StoredFact
from rxagent.state import PendingCall
from rxagent.tools import Toolkit

__all__ = [
    "MESSAGE_ID_KEY",
    "ClientSync",
    "FrontEnd",
    "front_end_of",
    "message_id_of",
    "tool_results",
]

MESSAGE_ID_KEY = "rxagent_message_id"
"""The metadata key of a user message in a ``MESSAGES_SNAPSHOT`` whose id there is not its id in the thread
(see the module): the server takes it as the message's id when the client sends the message back."""

_NO_PARAMETERS: dict[str, JsonValue] = {"type": "object", "properties": {}}


# ---- the input -------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FrontEnd:
    """What an AG-UI input brings besides messages and answers (see the module).

    Attributes:
        tools: the front end's own tools, as the run's caller tools.
        state: the shared state the run starts from (``None``: the session's, as it is).
        cancel_on_disconnect: the client's going away interrupts its run.
    """

    tools: tuple[ToolSchema, ...]
    state: dict[str, JsonValue] | None
    cancel_on_disconnect: bool


def front_end_of(run_input: RunAgentInput, toolkit: Toolkit, cancel_on_disconnect: bool) -> FrontEnd:
    """The input's tools, state and ``forwardedProps.cancelOnDisconnect`` (``cancel_on_disconnect`` when it
    says nothing), checked.

    Raises:
        ApiError: 400 for a tool whose name a tool may not have, that two tools share, or that one of the
            agent's own tools has; parameters that are not a JSON Schema of an object; a state that is not
            a JSON object (or that a log could not keep); a ``cancelOnDisconnect`` that is not a boolean.
    """
    tools: list[ToolSchema] = []
    names: set[str] = set()
    for index, tool in enumerate(run_input.tools or ()):
        name = tool.name
        where = f"tools[{index}] ({name!r})"
        if not name or not name.replace("_", "a").replace("-", "a").isalnum() or len(name) > 64:
            raise ApiError(400, f"{where}: a tool's name is 1 to 64 letters, digits, '_' or '-'")
        if name in names:
            raise ApiError(400, f"{where}: two front-end tools have this name")
        if toolkit.get(name) is not None:
            raise ApiError(
                400, f"{where}: the agent has a tool of this name; give the front-end tool another"
            )
        names.add(name)
        tools.append(ToolSchema(name, tool.description, _parameters(tool.parameters, where)))
    return FrontEnd(
        tuple(tools), _state(run_input.state), _cancel(run_input.forwarded_props, cancel_on_disconnect)
    )


def _parameters(parameters: Any, where: str) -> dict[str, JsonValue]:
    if parameters is None:
        return dict(_NO_PARAMETERS)
    # Imported here: jsonschema costs as much to import as the rest of the package (see rxagent.tools).
    from jsonschema import Draft202012Validator, SchemaError

    if not isinstance(parameters, dict):
        raise ApiError(400, f"{where}: 'parameters' must be the JSON Schema of an object")
    schema = cast("dict[str, Any]", parameters)
    if schema.get("type", "object") != "object":
        raise ApiError(400, f"{where}: 'parameters' must be the JSON Schema of an object")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        raise ApiError(400, f"{where}: 'parameters' is not a valid JSON Schema: {error.message}") from None
    return cast("dict[str, JsonValue]", schema)


def _state(state: Any) -> dict[str, JsonValue] | None:
    if state is None or state == {}:
        return None
    if not isinstance(state, dict):
        raise ApiError(
            400, f"'state' must be a JSON object (the thread's shared state), not {_json_kind(state)}"
        )
    try:
        check_input_value(cast("dict[str, object]", state), "state")
    except InvalidInputError as error:
        raise ApiError(400, str(error)) from None
    return cast("dict[str, JsonValue]", state)


def _cancel(props: Any, default: bool) -> bool:
    if not isinstance(props, dict):  # forwardedProps are free-form: only an object can say this
        return default
    value = cast("dict[str, Any]", props).get("cancelOnDisconnect", default)
    if not isinstance(value, bool):
        raise ApiError(
            400, f"forwardedProps.cancelOnDisconnect must be true or false, not {_json_kind(value)}"
        )
    return value


def _json_kind(value: object) -> str:
    """What JSON calls the kind of ``value`` (for a message)."""
    match value:
        case bool():
            return "a boolean"
        case int() | float():
            return "a number"
        case str():
            return "a string"
        case list():
            return "a list"
        case dict():
            return "an object"
        case _:
            return "null"


def message_id_of(message: Message) -> str:
    """The message's id in the thread: ``metadata.rxagent_message_id`` when a snapshot gave it another id
    (see the module), else its id."""
    metadata = message.metadata or {}
    given = metadata.get(MESSAGE_ID_KEY)
    return given if isinstance(given, str) and given else message.id


def tool_results(
    run_input: RunAgentInput, waiting: Mapping[str, PendingCall], history: Sequence[Msg]
) -> list[ExternalResult]:
    """The results the input's ``tool`` messages give to calls the thread waits on (see the module).

    Raises:
        ApiError: 409 for a tool message naming a call the thread has no result for and does not wait on
            (``call_id`` says which).
    """
    answered = {r.tool_use_id for m in history for r in m.tool_results}
    results: list[ExternalResult] = []
    for message in run_input.messages:
        if not isinstance(message, ToolMessage) or message.tool_call_id in answered:
            continue
        call_id = message.tool_call_id
        if call_id not in waiting:
            known = ", ".join(repr(i) for i, p in waiting.items() if p.kind == "external") or "none"
            raise ApiError(
                409,
                f"tool message {message.id!r} answers tool call {call_id!r}, which this thread does not wait "
                f"for (calls waiting for results: {known})",
                call_id=call_id,
            )
        text = _text(message.content)
        if message.error:
            results.append(ExternalResult(call_id, text or message.error, "error"))
        else:
            results.append(ExternalResult(call_id, text))
    return results


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(getattr(part, "text", "") for part in cast("list[Any]", content or []))


# ---- the messages ----------------------------------------------------------------------------------------

_Key: TypeAlias = tuple[object, ...]
"""What two messages are compared by (role, text, calls or the call a result answers)."""


@dataclass(frozen=True, slots=True)
class _Unit:
    """One AG-UI message as compared: its key, its id (and its id in the thread), and where it comes from (a
    message of the thread is made an AG-UI message only when a snapshot needs it)."""

    key: _Key
    id: str
    thread_id: str
    source: Msg | Message
    result: int = 0
    """Which of a tool message's results (one AG-UI message each)."""

    def message(self) -> Message:
        """The AG-UI message (made now for a message of the thread)."""
        source = self.source
        if not isinstance(source, Msg):
            return source
        if source.role == "user":
            return UserMessage(id=self.id, content=source.text)
        if source.role == "tool":
            result = source.tool_results[self.result]
            error = result.text if result.status == "error" else None
            return ToolMessage(id=self.id, content=result.text, tool_call_id=result.tool_use_id, error=error)
        calls = [
            ToolCall(id=c.id, function=FunctionCall(name=c.name, arguments=c.raw_arguments))
            for c in source.tool_calls
        ]
        return AssistantMessage(id=self.id, content=source.text or None, tool_calls=calls or None)


def _thread_units(history: Sequence[Msg]) -> list[_Unit]:
    """The thread's messages as the client keeps them: user, assistant (text and calls), one ``tool``
    message per result; system messages and thinking are left out."""
    units: list[_Unit] = []
    for msg in history:
        if msg.role == "user":
            units.append(_Unit(("user", msg.text), msg.id, msg.id, msg))
        elif msg.role == "assistant":
            calls = msg.tool_calls
            if not msg.text and not calls:
                continue  # thinking alone: the client keeps it as a reasoning message, not compared
            key = ("assistant", msg.text, tuple((c.id, c.name, c.raw_arguments) for c in calls))
            units.append(_Unit(key, msg.id, msg.id, msg))
        elif msg.role == "tool":
            for index, result in enumerate(msg.tool_results):
                told = f"{msg.id}.{result.tool_use_id}"
                units.append(_Unit(("tool", result.tool_use_id, result.text), told, told, msg, index))
    return units


def _client_units(messages: Sequence[Message]) -> list[_Unit]:
    units: list[_Unit] = []
    for message in messages:
        if isinstance(message, UserMessage):
            key: _Key = ("user", _text(message.content))
            units.append(_Unit(key, message.id, message_id_of(message), message))
        elif isinstance(message, AssistantMessage):
            calls = tuple((c.id, c.function.name, c.function.arguments) for c in message.tool_calls or ())
            if not message.content and not calls:
                continue
            units.append(_Unit(("assistant", message.content or "", calls), message.id, message.id, message))
        elif isinstance(message, ToolMessage):
            key = ("tool", message.tool_call_id, _text(message.content))
            units.append(_Unit(key, message.id, message.id, message))
    return units


def _results_in_call_order(units: list[_Unit]) -> list[_Unit]:
    """Results told as their calls finished come in the order of the calls, as the thread keeps them."""
    ordered: list[_Unit] = []
    order: dict[object, int] = {}
    run: list[_Unit] = []
    for unit in [*units, None]:
        if unit is not None and unit.key[0] == "tool":
            run.append(unit)
            continue
        ordered.extend(sorted(run, key=lambda u: order.get(u.key[1], len(order))))
        run = []
        if unit is not None:
            if unit.key[0] == "assistant":
                calls = cast("tuple[tuple[str, str, str], ...]", unit.key[2])
                order = {call[0]: i for i, call in enumerate(calls)}
            ordered.append(unit)
    return ordered


def _snapshot(client: list[_Unit], expected: list[_Unit]) -> list[Message] | None:
    """The ``MESSAGES_SNAPSHOT`` messages that bring ``client`` to ``expected`` (``None``: they agree)."""
    if [u.key for u in client] == [u.key for u in expected]:
        return None
    agreed = 0
    for mine, theirs in zip(client, expected, strict=False):
        if mine.key != theirs.key:
            break
        agreed += 1
    taken = {u.id for u in client}
    messages: list[Message] = []
    for index, unit in enumerate(expected):
        message = unit.message()
        if index < agreed:  # both sides agree up to here: the client's ids stay, so its order does
            messages.append(message.model_copy(update={"id": client[index].id}))
            continue
        fresh, n = unit.id, 0
        while fresh in taken:
            n += 1
            fresh = f"{unit.id}.{n}"
        taken.add(fresh)
        update: dict[str, Any] = {"id": fresh}
        if isinstance(message, UserMessage):
            update["metadata"] = {**(message.metadata or {}), MESSAGE_ID_KEY: unit.thread_id}
        messages.append(message.model_copy(update=update))
    return messages


# ---- keeping the client in step -------------------------------------------------------------------------


class ClientSync:
    """Keeps one AG-UI client's messages and state in step with its thread for one run (see the module).

    Args:
        projection: the session as read before the run was submitted (a copy this object changes).
        run_id: the run's id (its facts carry it).
        client: the messages the input holds (the client's view).
        incoming: the input's messages that are new to the thread (results and the user message), in the
            input's order: the run adds them.
        state: the shared state the input gives (``None``: the session's stays).
    """

    def __init__(
        self,
        projection: Projection,
        run_id: str,
        client: Sequence[Message],
        incoming: Sequence[Message],
        state: dict[str, JsonValue] | None,
    ) -> None:
        self._projection = projection
        self._run_id = run_id
        self._client = client
        self._incoming = incoming
        self._given = state
        self._begun = False
        self._messages: list[Message] | None = None
        self._state: JsonValue = None
        self._told: JsonValue | Literal[False] = False
        """The state as the client has it, once the snapshot was sent (``False``: not yet)."""

    def follow(self, item: FeedItem) -> None:
        """Take in a fact of the session's feed that is not the run's: before the run's first fact, what
        changes the history or the state the run will start from (another run of the thread ending)."""
        if self._begun or item.kind not in ("message", "message_replaced", "extras"):
            return
        fact = StoredFact(seq=item.seq, kind=item.kind, payload=item.payload, run_id=item.run_id, at=item.at)
        self._projection.apply(fact)

    def begin(self) -> None:
        """The run's first fact came: what it starts from is known (called for each of its facts; the first
        call counts)."""
        if self._begun:
            return
        self._begun = True
        state = self._projection.state
        expected = _results_in_call_order(_thread_units(state.messages) + _client_units(self._incoming))
        self._messages = _snapshot(_results_in_call_order(_client_units(self._client)), expected)
        start: JsonValue = self._given if self._given is not None else state.extras.get(SHARED_STATE_KEY, {})
        self._state = start

    def opening(self) -> list[BaseEvent]:
        """What follows ``RUN_STARTED``: ``MESSAGES_SNAPSHOT`` (when the client's messages differ) and
        ``STATE_SNAPSHOT``."""
        self.begin()
        events: list[BaseEvent] = []
        if self._messages is not None:
            events.append(MessagesSnapshotEvent(messages=self._messages))
        events.append(StateSnapshotEvent(snapshot=self._state))
        self._told = _copy(self._state)
        return events

    def extras(self, item: FeedItem) -> list[BaseEvent]:
        """The run's ``extras`` fact: ``STATE_DELTA`` when it changed the shared state the client has (none
        before the snapshot: the snapshot will carry it)."""
        self.begin()
        data = json.loads(item.payload)
        extras = cast("dict[str, JsonValue]", data.get("extras") or {})
        now: JsonValue = extras.get(SHARED_STATE_KEY, {})
        self._state = now
        told = self._told
        if told is False or told == now:
            return []
        # Imported here: only a run whose state changes needs the library.
        import jsonpatch

        patch = jsonpatch.make_patch(told, now).patch
        self._told = _copy(now)
        return [StateDeltaEvent.model_validate({"delta": patch})]


def _copy(value: JsonValue) -> JsonValue:
    copied: JsonValue = json.loads(json.dumps(value))
    return copied
