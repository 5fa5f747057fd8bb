"""The session API: list, read and delete sessions, follow a session's feed (SSE), submit, steer, respond,
interrupt, read a run and cancel a queued one.

The contract (statuses, bodies, the feed's wire format) is in :mod:`rxagent.serve`'s docstring; this
module implements it. Every endpoint checks its input whole before it changes anything.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections import deque
from collections.abc import Iterable
from contextlib import aclosing
from typing import Any

from aiohttp import web

from rxagent.agent import (
    ExternalResult,
    PendingToolCallsError,
    RunHandle,
    SessionBusyError,
    SessionHandle,
    SessionStatus,
    ToolDecision,
)
from rxagent.serve.http import ApiError, JsonObject, json_response, read_json
from rxagent.serve.hub import HUB, RECONCILE_HOW, SESSION_ID, refusal, uncertain_json
from rxagent.serve.runs import run_record
from rxagent.serve.streams import EventStream
from rxagent.session import FeedGap, FeedItem, Reconcile, SessionFeed
from rxagent.state import PendingCall

__all__ = ["encode_feed", "pending_json", "routes", "status_json"]

_CHUNK = 16 * 1024
"""Bytes per write at most (more only for one larger fact): a stalled client holds one such write beside
its connection's buffer, however much it missed."""


def routes() -> list[web.RouteDef]:
    """The session API's routes."""
    return [
        web.get("/api/sessions", list_sessions),
        web.get("/api/sessions/{sid}", get_session),
        web.delete("/api/sessions/{sid}", delete_session),
        web.get("/api/sessions/{sid}/turns", get_turns),
        web.get("/api/sessions/{sid}/messages", get_messages),
        web.get("/api/sessions/{sid}/feed", get_feed, allow_head=False),  # a HEAD would hold a watcher
        web.post("/api/sessions/{sid}/runs", post_run),
        web.get("/api/sessions/{sid}/runs/{run_id}", get_run),
        web.delete("/api/sessions/{sid}/runs/{run_id}", cancel_run),
        web.post("/api/sessions/{sid}/steer", post_steer),
        web.post("/api/sessions/{sid}/respond", post_respond),
        web.post("/api/sessions/{sid}/reconcile", post_reconcile),
        web.post("/api/sessions/{sid}/interrupt", post_interrupt),
    ]


# ---- reading ---------------------------------------------------------------------------------------------


async def list_sessions(request: web.Request) -> web.Response:
    """``GET /api/sessions``: every session of the store (without a user id), newest first."""
    hub = request.app[HUB]
    infos = [i for i in await hub.agent.sessions.list() if i.key[0] is None]
    infos.sort(key=lambda i: i.updated_at, reverse=True)
    return json_response(
        {
            "sessions": [
                {"session_id": i.key[1], "facts": i.facts, "updated_at": i.updated_at, "owner": i.owner}
                for i in infos
            ]
        }
    )


async def get_session(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}``: the session's head and where it stands."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    feed = await handle.open_feed()
    status = await handle.read_status()
    head = feed.durable_head
    queued = [_queued_json(run) for run in handle.runs if run.status == "queued"]
    return json_response(
        {"session_id": handle.key[1], "head": head, "status": {**status_json(status), "queued_runs": queued}}
    )


def _queued_json(run: RunHandle) -> JsonObject:
    """A run waiting here for its turn: its id, its place in the session's line, and what it will run."""
    given = run.input
    what = given if isinstance(given, str) else None if given is None else type(given).__name__
    return {"run_id": run.id, "position": run.position, "input": what[:200] if what is not None else None}


async def get_turns(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/turns``: the session's turns, each with its runs."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    turns = await hub.agent.sessions.turns(handle.ctx)
    return json_response({"turns": [dataclasses.asdict(t) for t in turns]})


async def get_messages(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/messages``: the session's conversation as its log has it."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    state = await hub.agent.sessions.state(handle.ctx)
    return json_response(
        {"session_id": handle.key[1], "messages": [m.model_dump(mode="json") for m in state.messages]}
    )


async def get_run(request: web.Request) -> web.Response:
    """``GET /api/sessions/{sid}/runs/{run_id}``: where a run stands, and how it ended (its result and
    usage)."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    run_id = _run_id(request)
    session_id = handle.key[1]
    here = hub.run(session_id, run_id)
    if isinstance(here, RunHandle):  # "done": its result is out, its end being recorded: still running
        status = "queued" if here.status == "queued" else "running"
        return json_response(_run_json(run_id, status, position=here.position))
    record = run_record(await hub.agent.sessions.facts(handle.ctx), run_id)
    if record is None or (record.status == "unfinished" and here is not None):
        if here is None:
            raise ApiError(404, f"no run {run_id!r} in session {session_id!r}")
        return json_response(_run_json(run_id, here.status, error=here.error))  # not in the log (yet)
    return json_response(
        _run_json(
            run_id,
            record.status,
            started=record.started,
            ended=record.ended,
            reason=record.reason,
            error=record.error,
            result=record.result,
        )
    )


def _run_json(
    run_id: str,
    status: str,
    *,
    position: int | None = None,
    started: int | None = None,
    ended: int | None = None,
    reason: str | None = None,
    error: str | None = None,
    result: JsonObject | None = None,
) -> JsonObject:
    return {
        "run_id": run_id,
        "status": status,
        "position": position if status == "queued" else None,
        "started": started,
        "ended": ended,
        "reason": reason,
        "error": error,
        "result": result,
        "usage": None if result is None else result.get("usage"),
    }


async def cancel_run(request: web.Request) -> web.Response:
    """``DELETE /api/sessions/{sid}/runs/{run_id}``: cancel a run queued here before it starts."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    run_id = _run_id(request)
    session_id = handle.key[1]
    here = hub.run(session_id, run_id)
    if isinstance(here, RunHandle) and here.status == "queued":
        here.cancel()
        return json_response({"run_id": run_id, "cancelled": True})
    if isinstance(here, RunHandle):
        raise ApiError(
            409, f"run {run_id!r} is running: interrupt it (POST /api/sessions/{session_id}/interrupt)"
        )
    record = run_record(await hub.agent.sessions.facts(handle.ctx), run_id)
    if here is None and record is None:
        raise ApiError(
            404,
            f"no run {run_id!r} queued on this server in session {session_id!r} (a run queued on another "
            "server is cancelled there)",
        )
    status = here.status if here is not None else record.status if record is not None else "unfinished"
    raise ApiError(409, f"run {run_id!r} is not queued: it {_STATES.get(status, status)}", run_status=status)


_STATES = {
    "finished": "has finished",
    "failed": "has failed",
    "cancelled": "was cancelled",
    "unfinished": "has started",
}


async def delete_session(request: web.Request) -> web.Response:
    """``DELETE /api/sessions/{sid}``: delete the session and its log, when no run of it is going or
    queued (here, or on another server of the same store)."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    hub.refuse_while_stopping()
    session_id = handle.key[1]
    status = handle.status()
    if status.state in ("running", "queued") or status.held_elsewhere:
        raise ApiError(
            409,
            f"a run of session {session_id!r} is going or queued: interrupt it (POST "
            f"/api/sessions/{session_id}/interrupt) or cancel it, then delete the session",
            state="running" if status.held_elsewhere else status.state,
        )
    try:
        await hub.agent.sessions.delete(handle.ctx)
    except SessionBusyError as busy:  # a run of another server took it meanwhile
        raise ApiError(409, str(busy)) from None
    hub.deleted(session_id)
    return json_response({"session_id": session_id, "deleted": True})


def _run_id(request: web.Request) -> str:
    raw = request.match_info["run_id"]
    if SESSION_ID.fullmatch(raw) is None:
        raise ApiError(
            400, "a run id is 1 to 128 letters, digits and '._:@-', starting with a letter or a digit"
        )
    return raw


def status_json(status: SessionStatus) -> JsonObject:
    """A :class:`~rxagent.agent.SessionStatus` as the API writes it."""
    return {
        "state": status.state,
        "running": status.running,
        "queued": status.queued,
        "pending": [pending_json(p) for p in status.pending],
        "held_elsewhere": status.held_elsewhere,
        "position": status.position,
        "uncertain": [uncertain_json(c) for c in status.uncertain],
    }


def pending_json(pending: PendingCall) -> JsonObject:
    """A pending call as the API writes it: the call's JSON (``id``, ``name``, ``input``, …), its
    ``kind`` (``ask``, ``external``, ``retry``) and the ``reason`` it waits."""
    return {**pending.call.model_dump(mode="json"), "kind": pending.kind, "reason": pending.reason}


# ---- the feed --------------------------------------------------------------------------------------------


async def get_feed(request: web.Request) -> web.StreamResponse:
    """``GET /api/sessions/{sid}/feed``: the session's feed as SSE, after ``Last-Event-ID`` or ``after``."""
    hub = request.app[HUB]
    handle = await hub.readable(request.match_info["sid"])
    hub.refuse_while_stopping()
    after = _after(request)
    feed = await handle.open_feed()
    head = feed.durable_head
    if after > head:
        # The feed serves durable facts only, so no client of a server of this log can have seen a fact
        # past its head: the client's numbers are not this log's (another store, a session deleted and
        # begun again). Skipping to the head would hide the facts under those numbers: say what to do.
        raise ApiError(
            409,
            f"the session's log ends at fact {head}, before {after}: the facts this client numbered past "
            f"{head} are not this log's. Reconnect from {head} (Last-Event-ID: {head}), or from 0 to "
            "read the log again",
            head=head,
            reconnect_from=head,
        )
    settings = hub.settings
    stream = EventStream(
        request,
        heartbeat=settings.heartbeat,
        send_timeout=settings.send_timeout,
        clock=hub.agent.clock,
        session=handle.key[1],
    )
    encoded = _encoded(feed)

    async def body() -> None:
        cursor = after
        while True:
            cursor, (data, last) = await _write_while_read(stream, feed, encoded, cursor)
            # The client is behind: of all it missed, this one write is all that is held for it.
            await stream.send(data, drain=True)
            cursor = last
            del data  # its connection's buffer has it

    await hub.serve_stream(stream, body)
    return stream.response


async def _write_while_read(
    stream: EventStream, feed: SessionFeed, encoded: _Encoded, cursor: int
) -> tuple[int, tuple[bytes, int]]:
    """Write the feed after fact ``cursor`` for as long as the client takes it; at the first write that
    could wait for the client, return it unwritten with the fact written up to, having let go of the
    watcher (and the page of the log it read) and of the batch (see :mod:`rxagent.serve.streams`)."""
    async with aclosing(feed.watch_batches(cursor)) as batches:
        async for batch in batches:
            cursor, waiting = await _write_batch(stream, encoded.get(batch), cursor)
            if waiting is not None:
                return cursor, waiting
            del batch  # a watcher that waits for new facts holds nothing of those it wrote
    raise AssertionError("a session's feed never ends")


async def _write_batch(
    stream: EventStream, writes: list[tuple[bytes, int]], cursor: int
) -> tuple[int, tuple[bytes, int] | None]:
    """Write ``writes`` up to the first that could wait for the client (returned, unwritten)."""
    for write in writes:
        if stream.would_wait(len(write[0])):
            return cursor, write
        await stream.send(write[0])
        cursor = write[1]
    return cursor, None


def _after(request: web.Request) -> int:
    raw = request.headers.get("Last-Event-ID")
    name = "Last-Event-ID"
    if raw is None:
        raw, name = request.query.get("after", "0"), "after"
    try:
        after = int(raw)
    except ValueError:
        raise ApiError(400, f"{name} must be a whole number, not {raw[:40]!r}") from None
    if after < 0:
        raise ApiError(400, f"{name} must be 0 or more")
    return after


class _Encoded:
    """The batches of one feed encoded last: the clients a wake of the feed wakes together read the same
    batch (the same items of the shared ring), which is then encoded once for all of them."""

    __slots__ = ("entries",)

    def __init__(self) -> None:
        self.entries: deque[tuple[FeedItem, FeedItem, list[tuple[bytes, int]]]] = deque(maxlen=4)

    def get(self, batch: list[FeedItem] | FeedGap) -> list[tuple[bytes, int]]:
        if isinstance(batch, FeedGap):
            return list(encode_feed(batch))
        first, last = batch[0], batch[-1]
        for known_first, known_last, chunks in self.entries:
            if known_first is first and known_last is last:  # the very items: held here, so not reused
                return chunks
        chunks = list(encode_feed(batch))
        self.entries.append((first, last, chunks))
        return chunks


_ENCODED: weakref.WeakKeyDictionary[SessionFeed, _Encoded] = weakref.WeakKeyDictionary()


def _encoded(feed: SessionFeed) -> _Encoded:
    encoded = _ENCODED.get(feed)
    if encoded is None:
        encoded = _ENCODED[feed] = _Encoded()
    return encoded


def encode_feed(batch: list[FeedItem] | FeedGap) -> Iterable[tuple[bytes, int]]:
    """A batch of the feed as SSE events (see the wire format in :mod:`rxagent.serve`), in writes of about
    16 KiB at most (more only for one larger fact), each with the sequence number of its last fact."""
    if isinstance(batch, FeedGap):
        data = json.dumps({"first": batch.first, "last": batch.last})
        yield f"id: {batch.last}\nevent: gap\ndata: {data}\n\n".encode(), batch.last
        return
    parts: list[str] = []
    size = 0
    for item in batch:
        payload = item.payload
        if "\n" in payload or "\r" in payload:  # a line break would end the SSE data line early
            payload = json.dumps(json.loads(payload))
        run_id = "null" if item.run_id is None else json.dumps(item.run_id)
        seq = item.seq
        part = (
            f'id: {seq}\nevent: fact\ndata: {{"seq":{seq},"kind":"{item.kind}","run_id":{run_id},'
            f'"at":{item.at!r},"data":{payload}}}\n\n'
        )
        parts.append(part)
        size += len(part)
        if size >= _CHUNK:
            yield "".join(parts).encode(), seq
            parts, size = [], 0
    if parts:
        yield "".join(parts).encode(), batch[-1].seq


# ---- driving ---------------------------------------------------------------------------------------------


async def post_run(request: web.Request) -> web.Response:
    """``POST /api/sessions/{sid}/runs`` ``{"input": "text"}``: queue a run (the session is made if new)."""
    hub = request.app[HUB]
    session_id = hub.session_id(request.match_info["sid"])
    body = await read_json(request, hub.settings.max_body)
    _only(body, required={"input"})
    text = _text(body, "input")
    hub.refuse_while_stopping()
    handle = hub.handle(session_id)  # once the body passed: a refused one brings nothing into memory
    hub.refuse_while_waiting(await handle.read_status(), "new input")
    run = hub.submit(handle, text, request)
    return json_response({"run_id": run.id}, 202)


async def post_steer(request: web.Request) -> web.Response:
    """``POST /api/sessions/{sid}/steer`` ``{"message": "text"}``: deliver a message into the running run
    at its next reasoning boundary (or start a run with it)."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    body = await read_json(request, hub.settings.max_body)
    _only(body, required={"message"})
    text = _text(body, "message")
    hub.refuse_while_stopping()
    hub.refuse_while_waiting(await handle.read_status(), "steering")
    handle.steer(text)
    return json_response({}, 202)


async def post_respond(request: web.Request) -> web.Response:
    """``POST /api/sessions/{sid}/respond``: answer the calls the session waits on; a run carries on."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    body = await read_json(request, hub.settings.max_body)
    _only(body, optional={"decisions", "results"})
    answers: list[ToolDecision | ExternalResult] = [
        *(_decision(d, i) for i, d in enumerate(_list(body, "decisions"))),
        *(_result(r, i) for i, r in enumerate(_list(body, "results"))),
    ]
    if not answers:
        raise ApiError(400, "send at least one entry in 'decisions' or 'results'")
    hub.refuse_while_stopping()
    await _check_answers(handle, answers)
    run = await hub.submit_answers(handle, answers, request)
    return json_response({"run_id": run.id}, 202)


async def _check_answers(handle: SessionHandle, answers: list[ToolDecision | ExternalResult]) -> None:
    """Refuse (409) answers for calls answered already (naming the answer taken), answers that do not
    fit the pending calls, or answers while a run is going or queued."""
    try:
        await handle.check(answers)
        # Again after the wait, with nothing awaited from here to the submission: a run that took one of
        # these calls' answers meanwhile is named, not reported as "a run is going".
        handle.refuse_taken(a.call_id for a in answers)
    except PendingToolCallsError as refused:
        raise refusal(refused) from None
    status = handle.status()
    if status.state in ("running", "queued"):
        raise ApiError(409, "a run of this session is going or queued: answer its calls once it has stopped")


async def post_reconcile(request: web.Request) -> web.Response:
    """``POST /api/sessions/{sid}/reconcile``: say what happened to (some of) the session's uncertain
    calls; once none is left, a run carries on from the outcomes."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    body = await read_json(request, hub.settings.max_body)
    _only(body, required={"outcomes"})
    outcomes = [_outcome(o, i) for i, o in enumerate(_list(body, "outcomes"))]
    if not outcomes:
        raise ApiError(400, "send at least one entry in 'outcomes'")
    hub.refuse_while_stopping()
    await hub.reconcile(handle, outcomes, await handle.read_status(), RECONCILE_HOW)
    left = (await handle.read_status()).uncertain
    if left:  # recorded; the session still runs nothing
        return json_response({"run_id": None, "uncertain": [uncertain_json(c) for c in left]})
    run = hub.submit(handle, None, request)
    return json_response({"run_id": run.id}, 202)


async def post_interrupt(request: web.Request) -> web.Response:
    """``POST /api/sessions/{sid}/interrupt`` (no body, or ``{}``): interrupt the running run (``false``:
    none was going)."""
    hub = request.app[HUB]
    handle = await hub.existing(request.match_info["sid"])
    if request.body_exists:  # a body is checked as any other: nothing is taken from it
        _only(await read_json(request, hub.settings.max_body))
    return json_response({"interrupted": handle.interrupt()})


# ---- checking bodies -------------------------------------------------------------------------------------


def _only(
    body: JsonObject,
    *,
    required: frozenset[str] | set[str] = frozenset(),
    optional: frozenset[str] | set[str] = frozenset(),
) -> None:
    unknown = sorted(set(body) - required - optional)
    if unknown:
        raise ApiError(400, f"unknown field(s): {', '.join(map(repr, unknown))}")
    missing = sorted(required - set(body))
    if missing:
        raise ApiError(400, f"missing field(s): {', '.join(map(repr, missing))}")


def _text(body: JsonObject, name: str, where: str = "") -> str:
    value = body[name]
    if not isinstance(value, str):
        raise ApiError(400, f"{where}{name!r} must be a string, not {_kind(value)}")
    if not value.strip():
        raise ApiError(400, f"{where}{name!r} must not be empty")
    return value


def _list(body: JsonObject, name: str) -> list[Any]:
    value = body.get(name, [])
    if not isinstance(value, list):
        raise ApiError(400, f"{name!r} must be a list, not {_kind(value)}")
    return value  # pyright: ignore[reportUnknownVariableType]


def _entry(value: Any, name: str, index: int, required: set[str], optional: set[str]) -> JsonObject:
    where = f"{name}[{index}]: "
    if not isinstance(value, dict):
        raise ApiError(400, f"{where}an entry must be an object, not {_kind(value)}")
    entry: JsonObject = value  # pyright: ignore[reportUnknownVariableType]
    try:
        _only(entry, required=required, optional=optional)
    except ApiError as error:
        raise ApiError(400, where + error.message) from None
    return entry


def _decision(value: Any, index: int) -> ToolDecision:
    entry = _entry(value, "decisions", index, {"call_id", "allow"}, {"reason", "arguments", "always"})
    where = f"decisions[{index}]: "
    allow = entry["allow"]
    if not isinstance(allow, bool):
        raise ApiError(400, f"{where}'allow' must be true or false, not {_kind(allow)}")
    always = entry.get("always", False)
    if not isinstance(always, bool):
        raise ApiError(400, f"{where}'always' must be true or false, not {_kind(always)}")
    reason = entry.get("reason", "")
    if not isinstance(reason, str):
        raise ApiError(400, f"{where}'reason' must be a string, not {_kind(reason)}")
    arguments = entry.get("arguments")
    if arguments is not None and not isinstance(arguments, dict):
        raise ApiError(400, f"{where}'arguments' must be an object, not {_kind(arguments)}")
    return ToolDecision(_text(entry, "call_id", where), allow, reason, arguments, always)  # pyright: ignore[reportUnknownArgumentType]


def _result(value: Any, index: int) -> ExternalResult:
    entry = _entry(value, "results", index, {"call_id", "output"}, {"status"})
    where = f"results[{index}]: "
    output = entry["output"]
    if not isinstance(output, str):
        raise ApiError(400, f"{where}'output' must be a string, not {_kind(output)}")
    status = entry.get("status", "ok")
    if status not in ("ok", "error"):
        raise ApiError(400, f"{where}'status' must be 'ok' or 'error'")
    return ExternalResult(_text(entry, "call_id", where), output, status)


def _outcome(value: Any, index: int) -> Reconcile:
    entry = _entry(value, "outcomes", index, {"call_id", "outcome"}, {"output"})
    where = f"outcomes[{index}]: "
    outcome = entry["outcome"]
    if outcome not in ("succeeded", "failed", "retry"):
        raise ApiError(400, f"{where}'outcome' must be 'succeeded', 'failed' or 'retry'")
    output = entry.get("output", "")
    if not isinstance(output, str):
        raise ApiError(400, f"{where}'output' must be a string, not {_kind(output)}")
    if outcome == "retry" and output:
        raise ApiError(400, f"{where}a call to run again has no 'output' (its run gives it one)")
    return Reconcile(_text(entry, "call_id", where), outcome, output)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__
