"""What the endpoints share: the agent, a handle per session, the open event streams, and stopping.

Sessions are named by their id alone (``RuntimeContext(session_id=…)``, no user id): the server serves one
agent's sessions whose key has no user. A session *exists* once its log has a fact, or while a run
submitted here waits for its turn.

**Memory.** The hub keeps a session in memory (its handle, the runs submitted here) while something uses
it, and lets it go after ``ServeSettings.session_ttl`` seconds with no request, no run going or queued and
no feed client (checked every quarter of that, on the agent's clock); its log keeps everything, and the
next request loads it again. A handle is made by a request that needs one, after the request's body was
read and checked (:func:`~rxagent.serve.http.bodies`); a request that is refused lets go at once of a
session it brought into memory (see :meth:`SessionHub.scope`), so refused requests for new session ids
leave nothing behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import logging
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

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
from rxagent.context import RuntimeContext, ToolScope
from rxagent.messages import ToolUseBlock
from rxagent.serve.http import ApiError, Handler, JsonObject
from rxagent.serve.settings import ServeSettings
from rxagent.serve.streams import EventStream
from rxagent.session import Reconcile, ReconcileError

__all__ = ["HUB", "RECONCILE_HOW", "SESSION_ID", "RunEnd", "SessionHub", "refusal", "uncertain_json"]

_log = logging.getLogger("rxagent.serve.runs")

SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
"""What a session id may look like: up to 128 letters, digits and ``._:@-``, starting with a letter or a
digit (UUIDs and the ids AG-UI clients make fit)."""

_TASK_SESSION_ID = re.compile(rf"(?:{SESSION_ID.pattern})(?:/tasks/[A-Za-z0-9_-]{{1,64}})+")
"""What the session of a background task of a session looks like (``{session}/tasks/{task id}``, see
:attr:`rxagent.harness.TaskInfo.session_id`): the API reads it, and its task alone drives it."""

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
        self._sessions: dict[str, _Held] = {}
        self._sweeper: asyncio.Task[None] | None = None

    def session_id(self, raw: str) -> str:
        """``raw`` if it is a valid session id (see :data:`SESSION_ID`) of a session this server may run.

        Raises:
            ApiError: 400, it is not; 409, it is a background task's session (see :meth:`readable`).
        """
        if _TASK_SESSION_ID.fullmatch(raw) is not None:
            # Its task runs it with the task's subagent; a run of this server's agent there would mix two
            # agents in one conversation.
            raise ApiError(
                409,
                f"session {raw!r} is a background task's: read it here, and drive it through its task "
                "(resume_task, cancel_task)",
            )
        if SESSION_ID.fullmatch(raw) is None:
            raise ApiError(
                400, "a session id is 1 to 128 letters, digits and '._:@-', starting with a letter or a digit"
            )
        return raw

    async def readable(self, raw: str) -> SessionHandle:
        """The handle of the session ``raw`` names, which must exist, to read: a session, or the session of
        one of its background tasks (``{session}/tasks/{task id}``).

        Raises:
            ApiError: 400 an invalid id, 404 no such session.
        """
        if _TASK_SESSION_ID.fullmatch(raw) is None:
            return await self.existing(raw)
        if not await self.exists(raw):
            raise ApiError(404, f"no session {raw!r}")
        return self.handle(raw)

    def handle(self, session_id: str) -> SessionHandle:
        """The handle of the session (brought into memory on first use; within a request, kept there at
        least until the request ends)."""
        return self._held(session_id).handle

    def _held(self, session_id: str) -> _Held:
        held = self._sessions.get(session_id)
        made = held is None
        if held is None:
            handle = self.agent.session(RuntimeContext(session_id=session_id))
            held = self._sessions[session_id] = _Held(handle, self.agent.clock.now())
        scope = _SCOPE.get()
        if scope is not None and held not in scope:
            scope[held] = made
            held.users += 1
        return held

    async def exists(self, session_id: str) -> bool:
        """Whether the session has facts, or runs submitted here are waiting or going."""
        held = self._sessions.get(session_id)
        if held is not None and held.handle.status().state in ("running", "queued"):
            return True
        return await self.agent.store.head((None, session_id)) > 0

    # ---- memory ---------------------------------------------------------------------------------------

    def scope(self) -> Any:
        """The middleware that keeps the sessions a request uses in memory until it ends, and lets go at
        once of those it brought in when it is refused (see the module)."""

        @web.middleware
        async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
            used: dict[_Held, bool] = {}
            token = _SCOPE.set(used)
            refused = True
            try:
                response = await handler(request)
                refused = False
                return response
            finally:
                _SCOPE.reset(token)
                now = self.agent.clock.now()
                for held, made in used.items():
                    held.users -= 1
                    held.used = now
                    if refused and made:
                        self._let_go(held)

        return middleware

    def _let_go(self, held: _Held) -> bool:
        """Drop the session from memory if nothing uses it (its log keeps it)."""
        session_id = held.handle.key[1]
        if held.users or held.runs or self._sessions.get(session_id) is not held:
            return False
        if not self.agent.sessions.evict(held.handle.ctx):
            return False
        del self._sessions[session_id]
        return True

    def sweep(self) -> int:
        """Let go of the sessions nothing has used for ``session_ttl`` seconds; how many went."""
        oldest = self.agent.clock.now() - self.settings.session_ttl
        return sum(1 for held in list(self._sessions.values()) if held.used <= oldest and self._let_go(held))

    @property
    def in_memory(self) -> int:
        """How many sessions the hub holds in memory now."""
        return len(self._sessions)

    def start(self) -> None:
        """Start letting idle sessions go (on the running loop; a no-op when started already)."""
        if self._sweeper is None:
            self._sweeper = asyncio.get_running_loop().create_task(self._sweep(), name="rxagent.serve.sweep")

    async def _sweep(self) -> None:
        while True:
            await self.agent.clock.sleep(self.settings.session_ttl / 4)
            self.sweep()

    # ---- runs -----------------------------------------------------------------------------------------

    def run(self, session_id: str, run_id: str) -> RunHandle | RunEnd | None:
        """A run submitted here to the session: its handle while it is queued or running, how it ended
        when its log may not say (it ended without beginning, or a moment ago); ``None`` otherwise."""
        held = self._sessions.get(session_id)
        if held is None:
            return None
        return held.runs.get(run_id) or held.ended.get(run_id)

    def _ran(self, held: _Held, run: RunHandle) -> None:
        """``run`` (submitted to ``held``'s session) ended: keep how, the last few only."""
        held.runs.pop(run.id, None)
        held.used = self.agent.clock.now()
        try:
            run.result()
            end = RunEnd("finished")
        except (asyncio.CancelledError, concurrent.futures.CancelledError):
            end = RunEnd("cancelled")
        except Exception as error:
            end = RunEnd("failed", f"{type(error).__name__}: {error}")
        held.ended[run.id] = end
        while len(held.ended) > _ENDS_KEPT:
            del held.ended[next(iter(held.ended))]

    def deleted(self, session_id: str) -> None:
        """The session was deleted: end its feed streams and forget its runs."""
        for stream in list(self.streams):
            if stream.session == session_id:
                stream.end()
        held = self._sessions.get(session_id)
        if held is not None:
            held.ended.clear()

    async def existing(self, raw: str) -> SessionHandle:
        """The handle of the session ``raw`` names, which must exist.

        Raises:
            ApiError: 400 an invalid id, 404 no such session.
        """
        session_id = self.session_id(raw)
        if not await self.exists(session_id):
            raise ApiError(404, f"no session {session_id!r}")
        return self.handle(session_id)

    def submit(
        self,
        handle: SessionHandle,
        input: AgentInput,
        request: web.Request,
        *,
        tools: ToolScope | None = None,
    ) -> RunHandle:
        """Queue a run of ``input`` on the session, joined to the caller's trace when the request carries
        a valid ``traceparent`` header (an invalid one is ignored, as the W3C asks: the run starts its
        own trace); ``tools`` is the run's tool scope (a front end's own tools)."""
        header = request.headers.get("traceparent")
        run: RunHandle | None = None
        if header is not None:
            with contextlib.suppress(ValueError):
                run = handle.submit(input, traceparent=header, tools=tools)
        if run is None:
            run = handle.submit(input, tools=tools)
        ids = {"run_id": run.id, "session_id": handle.ctx.session_id, "trace_id": run.ctx.trace_id}
        _log.info("run %s queued on session %s", run.id, handle.ctx.session_id, extra=ids)
        held = self._held(handle.key[1])
        held.runs[run.id] = run
        run.add_done_callback(lambda ended: (self._ran(held, ended), _log_end(ended, ids)))
        return run

    async def submit_answers(
        self,
        handle: SessionHandle,
        input: AgentInput,
        request: web.Request,
        *,
        tools: ToolScope | None = None,
    ) -> RunHandle:
        """:meth:`submit` for an input that answers waiting calls, once the answers are taken: the run
        holds the session and checked them there, under its lease (it began), or it ended first.

        Raises:
            ApiError: 409 naming the call and the answer taken, when another answer to one of these calls
                was taken first (by a run going here, or one the log records: another server, another
                tab); no run starts then.
        """
        try:
            run = self.submit(handle, input, request, tools=tools)
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
        ``INTERRUPTED`` and are saved); waits ``stop_timeout`` seconds, then cancels what still runs.
        Idle sessions are no longer let go of (:meth:`start` again)."""
        self.stopping = True
        sweeper, self._sweeper = self._sweeper, None
        if sweeper is not None:
            sweeper.cancel()
        handles = [held.handle for held in self._sessions.values()]
        await asyncio.gather(*(h.stop(self.settings.stop_timeout) for h in handles))

    async def serve_stream(
        self,
        stream: EventStream,
        body: Callable[[], Awaitable[None]],
        last_word: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Serve ``stream`` (:meth:`EventStream.serve` with ``body`` and ``last_word``) as one of the open
        :attr:`streams` for as long as it lasts, so that stopping the server and deleting its session
        reach it."""
        self.streams.add(stream)
        try:
            await stream.serve(body, last_word)
        finally:
            self.streams.discard(stream)

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
        held = self._sessions.get(session_id)
        return None if held is None else held.handle


_ENDS_KEPT = 32
"""How many ends of runs submitted here the hub keeps per session in memory (for the runs whose log says
nothing of their end: cancelled before they began, or ended a moment ago)."""

_SCOPE: contextvars.ContextVar[dict[_Held, bool] | None] = contextvars.ContextVar(
    "rxagent.serve.scope", default=None
)
"""The sessions the current request uses, each with whether the request brought it into memory."""


@dataclass(frozen=True, slots=True)
class RunEnd:
    """How a run submitted here ended, as its handle says.

    Attributes:
        status: ``finished``, ``failed`` or ``cancelled``.
        error: why a failed run failed.
    """

    status: Literal["finished", "failed", "cancelled"]
    error: str | None = None


@dataclass(eq=False, slots=True)
class _Held:
    """A session the hub holds in memory."""

    handle: SessionHandle
    used: float
    """When a request last used it, or a run of it ended (the agent's clock)."""
    users: int = 0
    """Requests using it now."""
    runs: dict[str, RunHandle] = field(default_factory=lambda: {})
    """Runs submitted here that have not ended."""
    ended: dict[str, RunEnd] = field(default_factory=lambda: {})
    """How the last runs submitted here ended (at most :data:`_ENDS_KEPT`)."""


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
