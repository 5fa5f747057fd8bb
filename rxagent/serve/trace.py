"""The trace view's data: the request each model call sent, and a session's state at a fact of its log.

A run's events say *that* a model call was made (``model_call_started``: the model, how many messages, the
tools' names), not what it sent: the messages and the tool schemas grow with the conversation, and writing
them into the log at every call would make the log grow with the square of its length. So:

- **What the server's agent sent is kept in memory, by reference** (:class:`SentRequests`, a ``model_call``
  middleware the server puts first on its agent). A kept request is a tuple of the messages the session's
  history holds anyway and the tool schemas the toolkit holds anyway: keeping it costs a few pointers, and
  nothing is encoded until a client asks. The last :data:`KEPT` requests are kept.
- **A request the server did not keep is rebuilt from the log** (one made by another server of the same
  store, before a restart, by an agent used as a tool, or more than :data:`KEPT` calls ago): the history as
  the log has it before that call's answer (the n-th model call of a run answers with the run's n-th
  assistant message), the agent's system prompt (for the server's own agent's runs) and the tools the call
  offered (their schemas, for the server's own agent). What request middleware changed (a context window
  that evicted old results) and the instructions of a closing turn are not in the log; the answer says
  ``"source": "log"`` then, ``"sent"`` for a kept request.

Routes (behind the same guard as the rest):

``GET /api/sessions/{sid}/requests/{seq}``
    The request of the model call whose ``model_call_started`` event is fact ``seq`` of the session's log
    (a run nested in a tool call has its events there too): ``{"seq", "run_id", "session_id", "call",
    "model", "source": "sent"|"log", "messages": [<message JSON>], "tools": [{"name", "description",
    "parameters"}], "tool_choice", "response_format", "temperature", "max_tokens"}`` (``call``: the model
    call's place among its run's, from 0). ``404`` when the session, or fact ``seq``, is not there, or the
    fact is not a model call's start; ``400`` a ``seq`` that is not a whole number from 1.
``GET /api/sessions/{sid}/state?at=N``
    The session's state as its log has it up to fact ``N`` (default: its head): ``{"session_id", "at",
    "state": {"messages", "pending", "partial_results", "active_groups", "extras"}, "open_run",
    "uncertain"}``. The log is written in batches (every few tens of milliseconds, at once at tool calls),
    each with the state's changes first, so the state at a fact may include changes made a moment after
    it. ``404`` past the head, ``400`` a bad ``at``.
"""

from __future__ import annotations

import dataclasses
import re
from collections import OrderedDict
from collections.abc import Callable, Iterable
from typing import Any

from aiohttp import web
from reactivex import Observable

from rxagent.agent import ReActAgent
from rxagent.agent.middleware import Middleware
from rxagent.chunks import ChatChunk
from rxagent.context import RuntimeContext, run_context_of
from rxagent.messages import Msg
from rxagent.requests import ChatRequest, ToolSchema
from rxagent.serve.http import ApiError, JsonObject, json_response
from rxagent.serve.hub import HUB
from rxagent.serve.runs import fact_data
from rxagent.session import Projection, StoredFact

__all__ = ["KEPT", "SENT_REQUESTS", "SentRequests", "install", "routes"]

KEPT = 256
"""How many model calls' requests :class:`SentRequests` keeps (the newest)."""

_RUNS_COUNTED = 4096
"""How many runs' model calls :class:`SentRequests` counts at most (the most recent runs)."""


class SentRequests(Middleware):
    """Keeps the requests an agent's model calls send (the newest ``kept``), by run and place in the run.

    A ``model_call`` hook that passes every request on unchanged: it only keeps a reference to it, under
    ``(run id, n)`` for the run's ``n``-th model call (from 0), in the order the run makes them, which is
    the order of its ``model_call_started`` events. Put it first on an agent (outermost), so it sees the
    request as the ``request`` cut point left it.

    Args:
        kept: how many requests to keep.
    """

    def __init__(self, kept: int = KEPT) -> None:
        if kept < 1:
            raise ValueError("kept must be at least 1")
        self.kept = kept
        self._requests: OrderedDict[tuple[str, int], ChatRequest] = OrderedDict()
        self._calls: OrderedDict[str, int] = OrderedDict()

    def model_call(
        self, request: ChatRequest, ctx: RuntimeContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        """Keep ``request`` under its run and place, and send it on."""
        run = run_context_of(ctx)
        if run is not None and run.run_id:
            n = self._calls.pop(run.run_id, 0)
            self._calls[run.run_id] = n + 1  # moved to the end: the runs counted longest ago go first
            if len(self._calls) > _RUNS_COUNTED:
                self._calls.popitem(last=False)
            self._requests[(run.run_id, n)] = request
            if len(self._requests) > self.kept:
                self._requests.popitem(last=False)
        return next(request)

    def get(self, run_id: str, n: int) -> ChatRequest | None:
        """The request of run ``run_id``'s ``n``-th model call (from 0), if it is kept."""
        return self._requests.get((run_id, n))


SENT_REQUESTS = web.AppKey("rxagent.serve.sent_requests", SentRequests)
"""Where the app keeps its :class:`SentRequests`."""


def install(app: web.Application, agent: ReActAgent) -> None:
    """Add the trace routes to ``app`` and keep ``agent``'s requests (a :class:`SentRequests` it has
    already is used again: a second server over one agent does not keep them twice)."""
    sent = next((m for m in agent.middleware if isinstance(m, SentRequests)), None)
    if sent is None:
        sent = SentRequests()
        agent.middleware = (sent, *agent.middleware)
    app[SENT_REQUESTS] = sent
    app.add_routes(routes())


def routes() -> list[web.RouteDef]:
    """The trace view's routes."""
    return [
        web.get("/api/sessions/{sid}/requests/{seq}", get_request),
        web.get("/api/sessions/{sid}/state", get_state),
    ]


# ---- a model call's request ------------------------------------------------------------------------------


async def get_request(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/requests/{seq}``: the request of the model call started at fact ``seq``."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    seq = _number(request.match_info["seq"], "the fact's sequence number")
    store = hub.agent.store
    found = await store.read(handle.key, after=seq - 1, limit=1)
    if not found or found[0].seq != seq:
        raise ApiError(404, f"session {handle.key[1]!r} has no fact {seq}")
    event = _model_call_event(found[0])
    run_id, session_id = str(event["run_id"]), str(event["session_id"] or handle.key[1])
    # The call's place in its run: the run's model calls started before this one, in this log.
    n = _calls_before(await store.read(handle.key, after=0, limit=seq - 1), run_id)
    answer: JsonObject = {
        "seq": seq,
        "run_id": run_id,
        "session_id": session_id,
        "call": n,
        "model": event.get("model"),
    }
    sent = request.app[SENT_REQUESTS].get(run_id, n)
    if sent is not None:
        return json_response({**answer, "source": "sent", **request_json(sent)})
    own = session_id == handle.key[1]  # a run of the server's agent, not one nested in a tool call
    facts = await store.read((handle.key[0], session_id))
    if not facts:
        raise ApiError(
            404,
            f"the request of this model call was not kept here, and the log of session {session_id!r} that "
            "would rebuild it is not in this server's store",
        )
    messages = _history_before_answer(facts, run_id, n)
    agent = hub.agent
    if own and agent.system_prompt:
        messages = [Msg.system(agent.system_prompt), *messages]
    names: list[Any] = event.get("tools") or []
    tools = [_tool_json(agent, str(name), own) for name in names]
    rebuilt: JsonObject = {
        "source": "log",
        "messages": [m.model_dump(mode="json") for m in messages],
        "tools": tools,
        "tool_choice": None,
        "response_format": None,
        "temperature": None,
        "max_tokens": None,
    }
    return json_response({**answer, **rebuilt})


def request_json(request: ChatRequest) -> JsonObject:
    """What a :class:`~rxagent.requests.ChatRequest` sends, as JSON (its provider ``extra`` fields left out:
    they are the deployment's, not the conversation's)."""
    choice = request.tool_choice
    fmt = request.response_format
    return {
        "messages": [m.model_dump(mode="json") for m in request.messages],
        "tools": [_schema_json(t) for t in request.tools],
        "tool_choice": dataclasses.asdict(choice) if dataclasses.is_dataclass(choice) else choice,
        "response_format": dataclasses.asdict(fmt) if dataclasses.is_dataclass(fmt) else fmt,
        "temperature": request.temperature,
        "max_tokens": request.max_tokens,
    }


def _schema_json(schema: ToolSchema) -> JsonObject:
    return {"name": schema.name, "description": schema.description, "parameters": schema.parameters}


def _tool_json(agent: ReActAgent, name: str, own: bool) -> JsonObject:
    tool = agent.toolkit.get(name) if own else None
    if tool is None:
        return {"name": name, "description": None, "parameters": None}
    return _schema_json(tool.schema())


def _model_call_event(fact: StoredFact) -> dict[str, Any]:
    if fact.kind == "event":
        data = fact_data(fact)
        if data.get("type") == "model_call_started":
            return data
        what = f"a {data.get('type')} event"
    else:
        what = f"a {fact.kind} fact"
    raise ApiError(404, f"fact {fact.seq} is not the start of a model call (it is {what})")


def _calls_before(facts: Iterable[StoredFact], run_id: str) -> int:
    """How many of ``run_id``'s model calls ``facts`` record started (only events that may be one are
    decoded)."""
    count = 0
    for fact in facts:
        if fact.kind == "event" and fact.run_id == run_id and '"model_call_started"' in fact.payload:
            data = fact_data(fact)
            count += data.get("type") == "model_call_started" and data.get("run_id") == run_id
    return count


def _history_before_answer(facts: list[StoredFact], run_id: str, n: int) -> list[Msg]:
    """The conversation as ``facts`` (a session's log) have it right before run ``run_id``'s ``n``-th
    assistant message (the answer to its ``n``-th model call); up to the run's end when there is none (the
    call failed, or the run was cut short)."""
    projection = Projection()
    answers = 0
    for fact in facts:
        if fact.run_id == run_id and fact.kind == "message" and _role(fact) == "assistant":
            if answers == n:
                break
            answers += 1
        projection.apply(fact)
        if fact.kind in _RUN_ENDS and fact_data(fact).get("run_id") == run_id:
            break
    return list(projection.state.messages)


# ---- a session's state at a fact -------------------------------------------------------------------------


async def get_state(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/state?at=N``: the session's state as its log has it up to fact ``N``."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    facts = await hub.agent.store.read(handle.key)
    head = facts[-1].seq if facts else 0
    raw = request.query.get("at")
    at = head if raw is None else _number(raw, "'at'")
    if at > head:
        raise ApiError(404, f"session {handle.key[1]!r} has {head} facts, not {at}")
    projection = Projection.replay(None, (f for f in facts if f.seq <= at))
    state = projection.state.model_dump(mode="json")
    return json_response(
        {
            "session_id": handle.key[1],
            "at": at,
            "state": state,
            "open_run": projection.open_run,
            "uncertain": [c.model_dump(mode="json") for c in projection.uncertain.values()],
        }
    )


def _number(raw: str, what: str) -> int:
    if _DIGITS.fullmatch(raw) is None or int(raw) < 1:
        raise ApiError(400, f"{what} must be a whole number from 1, not {raw[:40]!r}")
    return int(raw)


_DIGITS = re.compile(r"[0-9]{1,18}")
_RUN_ENDS = frozenset({"run_finished", "run_failed", "run_cancelled"})


def _role(fact: StoredFact) -> object:
    message: Any = fact_data(fact).get("message")
    return message.get("role") if isinstance(message, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
