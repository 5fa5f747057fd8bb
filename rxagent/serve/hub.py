"""What the endpoints share: the agent, a handle per session, the open event streams, and stopping.

Sessions are named by their id alone (``RuntimeContext(session_id=…)``, no user id): the server serves one
agent's sessions whose key has no user. A session *exists* once its log has a fact, or while a run
submitted here waits for its turn.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import re
from collections.abc import Sequence

from aiohttp import web

from rxagent.agent import (
    AgentInput,
    AnswerTakenError,
    PendingToolCallsError,
    ReActAgent,
    RunHandle,
    SessionBusyError,
    SessionHandle,
    SessionStatus,
)
from rxagent.context import RuntimeContext
from rxagent.messages import ToolUseBlock
from rxagent.serve.http import ApiError, JsonObject
from rxagent.serve.settings import ServeSettings
from rxagent.serve.streams import EventStream
from rxagent.session import Reconcile, ReconcileError

__all__ = ["HUB", "RECONCILE_HOW", "SESSION_ID", "SessionHub", "refusal", "uncertain_json"]

_log = logging.getLogger("rxagent.serve.runs")

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
"""What a session id may look like: up to 128 letters, digits and ``._:@-``, starting with a letter or a
digit (UUIDs and the ids AG-UI clients make fit)."""

RECONCILE_HOW = "POST /api/sessions/{id}/reconcile with an outcome for each"
"""How a client of the session API reconciles uncertain calls (what a 409 says)."""


class SessionHub:
    """The sessions one server serves (see the module).

    Args:
        agent: the agent that runs them.
        settings: the server's settings.
    """

    def __init__(self, agent: ReActAgent, settings: ServeSettings) -> None:
        self.agent = agent
        self.settings = settings
        self.stopping = False
        """The server is stopping: nothing new is started, no new stream is opened."""
        self.streams: set[EventStream] = set()
        """The event streams open now."""
        self._handles: dict[str, SessionHandle] = {}

    def session_id(self, raw: str) -> str:
        """``raw`` if it is a valid session id (see :data:`SESSION_ID`).

        Raises:
            ApiError: 400, it is not.
        """
        if SESSION_ID.fullmatch(raw) is None:
            raise ApiError(
                400, "a session id is 1 to 128 letters, digits and '._:@-', starting with a letter or a digit"
            )
        return raw

    def handle(self, session_id: str) -> SessionHandle:
        """The handle of the session (made on first use)."""
        handle = self._handles.get(session_id)
        if handle is None:
            handle = self._handles[session_id] = self.agent.session(RuntimeContext(session_id=session_id))
        return handle

    async def exists(self, session_id: str) -> bool:
        """Whether the session has facts, or runs submitted here are waiting or going."""
        handle = self._handles.get(session_id)
        if handle is not None and handle.status().state in ("running", "queued"):
            return True
        return await self.agent.store.head((None, session_id)) > 0

    async def existing(self, raw: str) -> SessionHandle:
        """The handle of the session ``raw`` names, which must exist.

        Raises:
            ApiError: 400 an invalid id, 404 no such session.
        """
        session_id = self.session_id(raw)
        if not await self.exists(session_id):
            raise ApiError(404, f"no session {session_id!r}")
        return self.handle(session_id)

    @staticmethod
    def submit(handle: SessionHandle, input: AgentInput, request: web.Request) -> RunHandle:
        """Queue a run of ``input`` on the session, joined to the caller's trace when the request carries
        a valid ``traceparent`` header (an invalid one is ignored, as the W3C asks: the run starts its
        own trace)."""
        header = request.headers.get("traceparent")
        run: RunHandle | None = None
        if header is not None:
            with contextlib.suppress(ValueError):
                run = handle.submit(input, traceparent=header)
        if run is None:
            run = handle.submit(input)
        ids = {"run_id": run.id, "session_id": handle.ctx.session_id, "trace_id": run.ctx.trace_id}
        _log.info("run %s queued on session %s", run.id, handle.ctx.session_id, extra=ids)
        run.add_done_callback(lambda ended: _log_end(ended, ids))
        return run

    async def submit_answers(
        self, handle: SessionHandle, input: AgentInput, request: web.Request
    ) -> RunHandle:
        """:meth:`submit` for an input that answers waiting calls, once the answers are taken: the run
        holds the session and checked them there, under its lease (it began), or it ended first.

        Raises:
            ApiError: 409 naming the call and the answer taken, when another answer to one of these calls
                was taken first (by a run going here, or one the log records: another server, another
                tab); no run starts then.
        """
        try:
            run = self.submit(handle, input, request)
        except AnswerTakenError as taken:  # a run submitted here carries an answer for the call already
            raise refusal(taken) from None
        if not await run.began():
            try:
                run.result()
            except AnswerTakenError as taken:  # the log had an answer when the run took the session
                raise refusal(taken) from None
            except Exception:  # the run's own failure, as for any run: its end tells the client
                pass
        return run

    def refuse_while_stopping(self) -> None:
        """Raise a 503 while the server stops (it starts nothing new then)."""
        if self.stopping:
            raise ApiError(503, "the server is stopping")

    @staticmethod
    def refuse_while_waiting(status: SessionStatus, what: str, how: str = RECONCILE_HOW) -> None:
        """Raise a 409 when the session waits for answers to tool calls, or has calls to reconcile, and no
        run is going (new text would be refused by the run; answers, or outcomes, must come first). The
        answer names the calls to reconcile (``uncertain``) and ``how``."""
        if status.state == "uncertain":
            raise ApiError(
                409,
                f"the session has tool calls whose outcome is unknown (the process running them stopped): "
                f"{_listed(status.uncertain)}. Nothing runs until each is reconciled: {how}, before {what}",
                uncertain=[uncertain_json(c) for c in status.uncertain],
            )
        if status.state in ("waiting_for_approval", "waiting_for_results"):
            calls = ", ".join(f"{p.call.name} ({p.call.id}, {p.kind})" for p in status.pending)
            raise ApiError(
                409, f"the session waits for answers to tool calls ({calls}): answer them before {what}"
            )

    async def reconcile(
        self,
        handle: SessionHandle,
        outcomes: Sequence[Reconcile],
        status: SessionStatus,
        how: str,
        *,
        every: bool = False,
    ) -> None:
        """Record what happened to the session's uncertain calls
        (:meth:`~rxagent.agent.sessions.Sessions.reconcile`); with ``every``, each call the session refuses
        to run on must be among them (the input must lead to a run).

        Raises:
            ApiError: 409, a run is going or queued, a call to reconcile is left out (``every``; named, with
                ``how``), or an outcome names no uncertain call or one twice (nothing is recorded then).
        """
        if status.state in ("running", "queued"):
            raise ApiError(409, "a run of this session is going or queued: reconcile once it has stopped")
        given = {o.call_id for o in outcomes}
        missing = [c for c in status.uncertain if c.id not in given]
        if every and missing:
            raise ApiError(
                409,
                f"reconcile every uncertain call at once ({how}); missing: {_listed(missing)}",
                uncertain=[uncertain_json(c) for c in status.uncertain],
            )
        try:
            await self.agent.sessions.reconcile(handle.ctx, outcomes)
        except (ReconcileError, SessionBusyError) as refused:
            raise ApiError(409, str(refused)) from None

    async def stop(self) -> None:
        """Stop every session's work: queued runs are cancelled, running ones interrupted (they end
        ``INTERRUPTED`` and are saved); waits ``stop_timeout`` seconds, then cancels what still runs."""
        self.stopping = True
        handles = list(self._handles.values())
        await asyncio.gather(*(h.stop(self.settings.stop_timeout) for h in handles))

    async def end_streams(self, grace: float) -> None:
        """Let the streams that end by themselves (AG-UI runs reporting how they ended) finish for up to
        ``grace`` seconds, then end the rest (session feeds, which never finish by themselves)."""
        finishing = [s.closed.wait() for s in self.streams if s.ends_by_itself]
        if finishing:
            with contextlib.suppress(TimeoutError):
                async with self.agent.clock.timeout(grace):
                    await asyncio.gather(*finishing)
        for stream in list(self.streams):
            stream.end()

    def known(self, session_id: str) -> SessionHandle | None:
        """The session's handle if the hub holds it already (never made here: for readers that must not
        bring sessions into memory)."""
        return self._handles.get(session_id)


def uncertain_json(call: ToolUseBlock) -> JsonObject:
    """An uncertain call as the API writes it: the call's JSON (``id``, ``name``, ``input``, …)."""
    return call.model_dump(mode="json")


def _listed(calls: Sequence[ToolUseBlock]) -> str:
    return ", ".join(f"{c.name} ({c.id})" for c in calls)


def refusal(error: PendingToolCallsError) -> ApiError:
    """The 409 for answers that do not fit the session: for a second answer to a call, one that names
    the call (``call_id``), the answer taken (``taken``: ``approval``, ``denial`` or ``external_result``)
    and the run that took it (``taken_by``)."""
    if isinstance(error, AnswerTakenError):
        taken = error.taken
        details = {"call_id": taken.call_id, "taken": taken.kind, "taken_by": taken.run_id}
        return ApiError(409, str(error), **details)
    return ApiError(409, str(error))


def _log_end(run: RunHandle, ids: dict[str, str | None]) -> None:
    try:
        result = run.result()
    except (asyncio.CancelledError, concurrent.futures.CancelledError):  # the handle's future is the latter
        _log.info("run %s cancelled", run.id, extra=ids)
    except Exception as error:
        _log.warning("run %s failed: %s: %s", run.id, type(error).__name__, error, extra=ids)
    else:
        usage = result.usage
        _log.info(
            "run %s ended: %s (%d input, %d output tokens)",
            run.id,
            result.reason,
            usage.input_tokens,
            usage.output_tokens,
            extra=ids,
        )


HUB = web.AppKey("rxagent.serve.hub", SessionHub)
"""Where the app keeps its :class:`SessionHub`."""
