"""Driving and watching a session from outside a run: :class:`SessionHandle` and :class:`RunHandle`.

``stream_events`` serves the one caller that started a run. A session handle serves everyone else: a
dashboard, a notebook cell opened later, a bridge to a chat app. It queues runs
(:meth:`~SessionHandle.submit`, :meth:`~SessionHandle.respond`), delivers messages into the running run
(:meth:`~SessionHandle.steer`, :meth:`~SessionHandle.inject`), stops it (:meth:`~SessionHandle.interrupt`),
says where the session stands
(:meth:`~SessionHandle.status`), and opens the session's feed to any number of watchers
(:meth:`~SessionHandle.feed`): every fact of the session's log, numbered by its sequence, replayed from any
point and then live (see :mod:`rxagent.session.feed`). Runs submitted through a handle record their
events in the log, so the feed holds them too (deltas included).

Thread-safety: create the handle on the agent's event loop (``agent.session(ctx)``); its methods may then
be called from any thread (a UI thread, a widget callback): they hand their work to the loop. A
:class:`RunHandle` is awaitable on the loop and has a blocking :meth:`~RunHandle.result` for other threads.

Disconnecting is not stopping: a watcher that stops watching (leaves its ``async for``, disposes its
subscription) never affects a run. Stopping is :meth:`SessionHandle.interrupt` (the run ends
``INTERRUPTED``, what finished kept) or :meth:`RunHandle.cancel` (cleanup only).

**One answer per call.** A call waiting for an approval or an external result takes one answer: the first.
:meth:`~SessionHandle.respond` refuses an answer for a call that a run submitted here already carries an
answer for (:class:`~rxagent.agent.inputs.AnswerTakenError`, at once, before anything is queued), and a run
that carries answers checks them again when it takes the session, under its lease, before it starts: an
answer the log records already (another process, another handle) refuses it the same way, with no event
and nothing recorded.

**Messages keep their order.** What :meth:`~SessionHandle.steer` and :meth:`~SessionHandle.inject` deliver
reaches the session in the order it was delivered, whichever way each goes (into the running run at its
next boundary, into the history, or as the input of the next run): messages wait on the handle until
those before them have reached the session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import AsyncGenerator, Callable, Generator, Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVarTuple

from reactivex import Observable, abc

from rxagent.agent.control import RunControl
from rxagent.agent.inputs import (
    AgentInput,
    AnswerTakenError,
    ExternalResult,
    ToolDecision,
    check_message,
    normalise_input,
)
from rxagent.agent.routing import check_answers
from rxagent.agent.run import tool_view
from rxagent.context import RuntimeContext, ToolScope
from rxagent.deprecation import renamed
from rxagent.events import AgentEvent, AgentResult
from rxagent.messages import Msg, ToolUseBlock, new_id
from rxagent.operators import from_async_iterable, map_many
from rxagent.session import (
    AnswerKind,
    AnswerRecord,
    FeedGap,
    FeedItem,
    FeedPolicy,
    SessionFeed,
    answers_of,
    one_by_one,
)
from rxagent.state import PendingCall

if TYPE_CHECKING:
    from rxagent.agent.react import AnyAgent

__all__ = ["RunHandle", "SessionActivity", "SessionHandle", "SessionStatus"]

_log = logging.getLogger("rxagent")
_Ts = TypeVarTuple("_Ts")

SessionActivity: TypeAlias = Literal[
    "idle", "queued", "running", "waiting_for_approval", "waiting_for_results", "uncertain"
]
"""Where a session stands: nothing to do, runs waiting for their turn, a run going, calls waiting for a
human's decision or for external results, or calls whose outcome a stopped process lost, which must be
reconciled before the session runs again (:meth:`~rxagent.agent.sessions.Sessions.reconcile`)."""

if TYPE_CHECKING:
    SessionState = SessionActivity
    """Deprecated: the old name of :data:`SessionActivity`, kept one release."""
else:
    __getattr__ = renamed(__name__, {"SessionState": ("SessionActivity", SessionActivity)})


@dataclass(frozen=True, slots=True)
class SessionStatus:
    """A snapshot of a session, as :meth:`SessionHandle.status` gives it.

    Attributes:
        state: see :data:`SessionActivity`.
        running: the id of the run going now in this process (``None``: none).
        queued: runs submitted through the handle and waiting for their turn (the first of them may wait
            for a run of another process: see ``held_elsewhere``).
        pending: the calls waiting for decisions or results (as of the last run this process saw).
        held_elsewhere: the next run waits for the session's lease, which another process holds (its
            run goes on there; several servers on one database).
        position: the place of the first of the ``queued`` runs in the session's line, which the runs of
            every agent object and process share in the order they were submitted (``1``: it is next;
            ``None``: none waits here, or it has not joined the line yet).
        uncertain: calls dispatched with no recorded outcome that the session refuses to run again by
            itself (their tools are neither idempotent nor read-only): each must be reconciled first.
    """

    state: SessionActivity
    running: str | None
    queued: int
    pending: tuple[PendingCall, ...]
    held_elsewhere: bool = False
    position: int | None = None
    uncertain: tuple[ToolUseBlock, ...] = ()


class RunHandle:
    """One run submitted through a :class:`SessionHandle`.

    ``await run`` gives its :class:`~rxagent.events.AgentResult` (or raises its error); other threads use
    :meth:`result`.

    Attributes:
        id: the run's id (its events carry it), known from the moment it is submitted.
        input: what it was submitted with.
        ctx: the context it runs with (the session's, joined to a caller's trace when submitted with a
            ``traceparent``).
        control: its :class:`~rxagent.agent.control.RunControl`.
    """

    def __init__(self, session: SessionHandle, input: AgentInput, ctx: RuntimeContext) -> None:
        self.id = new_id("run")
        self.input = input
        self.ctx = ctx
        self.control = RunControl()
        self._session = session
        self._future: concurrent.futures.Future[AgentResult] = concurrent.futures.Future()
        self._began: concurrent.futures.Future[bool] = concurrent.futures.Future()
        self._subscription: abc.DisposableBase | None = None
        self._result: AgentResult | None = None

    @property
    def status(self) -> Literal["queued", "running", "done"]:
        """``queued`` (waiting for its session, behind the runs submitted before it here or in another
        process, or for the lease another process holds), ``running`` or ``done`` (its result is out: what
        is left is giving the session back, which a run submitted now waits for)."""
        if self._future.done() or self._result is not None:
            return "done"
        return "queued" if self.control.status != "running" else "running"

    @property
    def position(self) -> int | None:
        """``0`` while it runs, ``n`` while it waits ``n``-th in the session's line (``None`` when done)."""
        return None if self._future.done() else self.control.position

    def done(self) -> bool:
        """Whether it ended (with a result or an error, or cancelled)."""
        return self._future.done()

    async def began(self) -> bool:
        """Wait until the run began (it holds its session and emitted its first event: its input passed
        the checks made as it took the session) or ended first (on the loop). ``True`` once it began;
        ``False`` when it ended without beginning (refused, cancelled, or failed to take its session:
        awaiting the handle raises why). A waiter that is cancelled stops waiting, as for the result."""
        return await asyncio.shield(asyncio.wrap_future(self._began))

    def interrupt(self) -> bool:
        """Interrupt it (from any thread); ``False`` if it is not running."""
        return self.control.interrupt()

    def cancel(self) -> None:
        """Cancel it (from any thread): cleanup only, what happened is recorded; awaiting it then raises
        ``CancelledError``."""
        self._session.on_loop(self._cancel)

    def _cancel(self) -> None:
        subscription, self._subscription = self._subscription, None
        if subscription is not None:
            subscription.dispose()
        if not self._future.done():
            self._future.cancel()
        self._begin(False)
        self._session.finished(self)

    def _begin(self, began: bool) -> None:
        if not self._began.done():
            self._began.set_result(began)
            if began:
                self._session.run_began(self)

    def add_done_callback(self, callback: Callable[[RunHandle], object]) -> None:
        """Call ``callback(self)`` once the run ended (with a result or an error, or cancelled); at once if
        it already has. It is called on the thread that ends the run: the session's loop."""
        self._future.add_done_callback(lambda _: callback(self))

    def result(self, timeout: float | None = None) -> AgentResult:
        """Block until it ends and return its result (from a thread other than the loop's; on the loop only
        once it ended, as in a :meth:`add_done_callback` callback).

        Raises:
            CancelledError: it was cancelled.
            Exception: the run's error.
        """
        if not self._future.done() and self._session.is_loop_thread():
            raise RuntimeError("on the event loop, `await` the run handle instead of blocking on result()")
        return self._future.result(timeout)

    def __await__(self) -> Generator[object, None, AgentResult]:
        # Shielded: a waiter that is cancelled (a client that went away) stops waiting, never the run, and
        # never cancels the result every other waiter reads (wrap_future alone would cancel it).
        return asyncio.shield(asyncio.wrap_future(self._future)).__await__()

    # ---- called on the loop by the session handle ---------------------------------------------------------

    def start(self, events: Observable[AgentEvent]) -> None:
        def on_next(event: AgentEvent) -> None:
            self._begin(True)
            if isinstance(event, AgentResult) and event.run_id == self.id:
                self._result = event

        def on_error(error: Exception) -> None:
            if not self._future.done():
                self._future.set_exception(error)
            self._begin(False)
            self._session.finished(self)

        def on_completed() -> None:
            if not self._future.done():
                if self._result is not None:
                    self._future.set_result(self._result)
                else:
                    self._future.set_exception(RuntimeError("the run ended without a result"))
            self._begin(False)
            self._session.finished(self)

        self._subscription = events.subscribe(on_next, on_error, on_completed)


class SessionHandle:
    """The one way to drive a session from outside a run (see the module).

    Get it with ``agent.session(ctx)``.
    """

    def __init__(self, agent: AnyAgent, ctx: RuntimeContext) -> None:
        self.agent = agent
        self.ctx = ctx
        self.key = (ctx.user_id, ctx.session_id or "default")
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._runs: list[RunHandle] = []
        self._chores = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._stopping = False
        self._guard = threading.Lock()
        self._taken: dict[str, AnswerRecord] = {}
        """Answers carried by runs submitted here that have not ended, by call id (guarded: ``submit`` may
        be called from any thread)."""
        self._mail: deque[tuple[Msg, bool]] = deque()
        """Steered (``True``) and injected messages waiting for those before them to reach the session."""
        self._mail_busy: RunHandle | asyncio.Future[None] | None = None
        """What the messages delivered before are on their way in: a run they started that has not begun,
        or their write into the history."""
        self.last_run: RunHandle | None = None
        """The run submitted most recently (a steer that started one included)."""

    # ---- threads ------------------------------------------------------------------------------------------

    def is_loop_thread(self) -> bool:
        """Whether the caller runs on the agent's loop."""
        return threading.get_ident() == self._thread

    def on_loop(self, work: Callable[[*_Ts], None], *args: *_Ts) -> None:
        """Run ``work`` on the agent's loop: now when called there, soon when called from elsewhere."""
        if self.is_loop_thread():
            work(*args)
        else:
            self._loop.call_soon_threadsafe(work, *args)

    # ---- driving ------------------------------------------------------------------------------------------

    def submit(
        self, input: AgentInput, *, traceparent: str | None = None, tools: ToolScope | None = None
    ) -> RunHandle:
        """Queue a run of ``input``: it starts when the runs before it on this session have ended.

        ``traceparent`` (the W3C header of the request that submits the run) joins the run to the
        caller's trace: its trace id and parent span (see
        :meth:`~rxagent.context.RuntimeContext.with_traceparent`); without it the run has the session
        context's trace id. ``tools`` is this run's tool scope instead of the session context's (a front
        end's own tools, its :attr:`~rxagent.context.ToolScope.caller_tools`, for this run).

        An input that answers waiting calls is refused when a run submitted here and not ended yet carries
        an answer for one of them (only the first answer counts; see the module); the answers are checked
        once more when the run takes the session.

        Raises:
            ValueError: ``traceparent`` is not a valid header (nothing is queued; the W3C asks a server
                to ignore such a header: catch this and submit without it).
            InvalidInputError: text a log cannot keep, or media over the cap or that the model does not
                take (see :mod:`rxagent.agent.inputs`); nothing is queued.
            AnswerTakenError: an answer for a call another answer was taken for; nothing is queued.
            TypeError: not an agent input.
        """
        decisions = normalise_input(
            input, self.agent.options.max_inline_media_bytes, self.agent.model
        ).decisions
        ctx = self.ctx if traceparent is None else self.ctx.with_traceparent(traceparent)
        if tools is not None:
            ctx = replace(ctx, tools=tools)
        run = RunHandle(self, input, ctx)
        if decisions:
            with self._guard:  # checked and taken in one step, whichever thread answers
                for decision in decisions:
                    taken = self._taken.get(decision.call_id)
                    if taken is not None:
                        raise AnswerTakenError(taken)
                for decision in decisions:
                    self._taken[decision.call_id] = AnswerRecord(decision.call_id, _kind(decision), run.id)
        self.last_run = run
        self._runs.append(run)
        self._idle.clear()
        self.on_loop(self._start, run)
        return run

    def _start(self, run: RunHandle) -> None:
        if run.done():  # cancelled before it got to the loop
            return
        run.start(
            self.agent.stream_events(run.input, run.ctx, control=run.control, run_id=run.id, record=True)
        )

    def respond(
        self,
        answers: ToolDecision | ExternalResult | Sequence[ToolDecision | ExternalResult],
        *,
        traceparent: str | None = None,
    ) -> RunHandle:
        """Answer calls waiting for approval or for external results (a run that carries on from them);
        ``traceparent`` as for :meth:`submit`.

        Raises:
            AnswerTakenError: a run submitted here and not ended carries an answer for one of these calls
                already (nothing is queued). The run checks its answers again as it takes the session:
                awaiting it raises ``AnswerTakenError`` when the log has an answer for one of them by then
                (given through another handle or process); it then never began.
        """
        return self.submit(answers, traceparent=traceparent)

    def steer(self, message: str | Msg) -> None:
        """Deliver ``message`` (a user message) into the running run at its next reasoning boundary: it
        joins the history right before the next model turn, recorded where it took effect. When no run is
        going, or the run ends before such a boundary, it starts the next run (see :attr:`last_run`).
        Messages steered and injected reach the session in the order they were delivered (see the module).

        Raises:
            InvalidInputError: text a log cannot keep, or media over the cap or that the model does not
                take (nothing is delivered).
        """
        delivered = _as_message(message, self.agent)
        self.on_loop(self._deliver, delivered, True)

    def inject(self, message: str | Msg) -> None:
        """Add ``message`` to the conversation without starting a turn: into the running run at its next
        boundary, or, when none is going, straight into the session's history (no model call) — after the
        messages delivered before it.

        Raises:
            InvalidInputError: text a log cannot keep, or media over the cap or that the model does not
                take (nothing is delivered).
        """
        delivered = _as_message(message, self.agent)
        self.on_loop(self._deliver, delivered, False)

    def _deliver(self, message: Msg, steer: bool) -> None:
        self._mail.append((message, steer))
        self._idle.clear()
        self._send_mail()

    def take_left_over(self, entries: Sequence[tuple[Msg, bool]]) -> None:
        """Messages a run did not take in before it ended (on the loop): they go on ahead of any delivered
        since, together — as the input of the next run when one of them was steered, else into the
        history."""
        self._mail.extendleft(reversed(entries))
        self._idle.clear()
        self._send_mail()

    def _send_mail(self) -> None:
        """Hand the waiting messages on, in order: into the run holding the session (it hands back what
        it does not take in), else as one batch, once the batch before it has reached the session."""
        if not self._mail or self._mail_busy is not None:
            return
        active = self.agent.sessions.active_run(self.ctx)
        if active is not None:  # it holds the session until it has handed its inbox back
            active.deps.control.inbox.extend(self._mail)
            self._mail.clear()
            return
        entries = list(self._mail)
        self._mail.clear()
        messages = [m for m, _ in entries]
        # No new run while the session stops: the messages join the history.
        if self._stopping or not any(steer for _, steer in entries):
            self._mail_busy = self._chore(self.agent.sessions.add_messages(self.ctx, messages))
        else:
            self._mail_busy = self.submit(messages)

    def _mail_sent(self, what: RunHandle | asyncio.Future[None]) -> None:
        if self._mail_busy is what:
            self._mail_busy = None
            self._send_mail()
        self._check_idle()

    def run_began(self, run: RunHandle) -> None:
        """A submitted run began (called by the run handle, on the loop): the messages delivered since
        it was submitted may go into it."""
        self._mail_sent(run)

    def _chore(self, work: Any) -> asyncio.Future[None]:
        self._chores += 1
        self._idle.clear()
        task: asyncio.Future[None] = asyncio.ensure_future(work)

        def done(_: asyncio.Future[None]) -> None:
            self._chores -= 1
            error = None if task.cancelled() else task.exception()
            if error is not None:
                _log.warning("rxagent: adding messages to session %r failed", self.key[1], exc_info=error)
            self._mail_sent(task)

        task.add_done_callback(done)
        return task

    def interrupt(self) -> bool:
        """Interrupt the running run (from any thread); ``False`` when none is going."""
        active = self.agent.sessions.active_run(self.ctx)
        return active is not None and active.deps.control.interrupt()

    def finished(self, run: RunHandle) -> None:
        """A submitted run ended (called by the run handle, on the loop): the answers it carried are in
        the log now, or were never taken."""
        if run in self._runs:
            self._runs.remove(run)
        with self._guard:
            for call_id in [i for i, taken in self._taken.items() if taken.run_id == run.id]:
                del self._taken[call_id]
        self._mail_sent(run)

    def _check_idle(self) -> None:
        if not self._runs and not self._chores and not self._mail and self._mail_busy is None:
            self._idle.set()

    @property
    def idle(self) -> bool:
        """Whether no run submitted through this handle is queued or running, and no message steered or
        injected through it is on its way in (what :meth:`wait` waits for)."""
        return self._idle.is_set()

    async def wait(self) -> None:
        """Return once no run submitted through this handle is queued or running (on the loop)."""
        await self._idle.wait()

    async def stop(self, grace: float | None = None) -> None:
        """Stop the session's work (on the loop): runs waiting for their turn are cancelled before they
        start, the running run is interrupted (it ends ``INTERRUPTED``, what finished kept and saved), and
        messages steered into it too late join the history instead of starting a run. Returns once
        nothing submitted here is queued or running; what still runs after ``grace`` seconds is
        cancelled (cleanup only). The handle takes new work again afterwards."""
        self._stopping = True
        try:
            for run in list(self._runs):
                if run.status == "queued":
                    run.cancel()
                else:  # a run that holds the session, or is about to (it ends as soon as it has it)
                    run.interrupt()
            self.interrupt()  # a run of this session not submitted here
            try:
                async with self.agent.clock.timeout(grace):
                    await self.wait()
            except TimeoutError:
                for run in list(self._runs):
                    run.cancel()
                await self.wait()
        finally:
            self._stopping = False

    # ---- where it stands ----------------------------------------------------------------------------------

    @property
    def runs(self) -> tuple[RunHandle, ...]:
        """The runs submitted here that have not ended, in the order submitted (the first may be running)."""
        return tuple(self._runs)

    def status(self) -> SessionStatus:
        """Where the session stands now, as this process knows it (from any thread)."""
        active = self.agent.sessions.active_run(self.ctx)
        runs = list(self._runs)
        queued = sum(1 for run in runs if run.status == "queued")
        places = [p for run in runs if run.status == "queued" and (p := run.position) is not None]
        # A run that holds its turn but is still taking the lease or loading the session is not active yet.
        starting = next((run for run in runs if run.status == "running"), None)
        projection = self.agent.keeper.cached(self.key)
        pending: tuple[PendingCall, ...] = ()
        uncertain: list[ToolUseBlock] = []
        if active is not None:  # an ended run still giving the session back: its state is the last word
            pending = tuple(active.state.pending)
        elif projection is not None:
            pending = tuple(projection.state.pending)
            uncertain = self.agent.sessions.unsafe_to_repeat(list(projection.uncertain.values()))
        running: str | None = None
        if active is not None and not active.ended:
            state: SessionActivity = "running"
            running = active.run_id
        elif starting is not None:
            state, running = "running", starting.id
        elif queued:
            state = "queued"
        else:
            state = _waiting(pending, uncertain)
        held = self.agent.keeper.held_elsewhere(self.key)
        return SessionStatus(
            state, running, queued, pending, held, min(places, default=None), tuple(uncertain)
        )

    async def read_status(self) -> SessionStatus:
        """:meth:`status`, with the pending and uncertain calls read from the session's log when no run is
        going (on the loop): right for a session this process has not run yet, or one another process ran
        (or that a process left when it died)."""
        status = self.status()
        if status.state in ("running", "queued"):
            return status
        projection = await self.agent.keeper.peek(self.key)
        pending = tuple(projection.state.pending)
        uncertain = tuple(self.agent.sessions.unsafe_to_repeat(projection.uncertain.values()))
        return SessionStatus(_waiting(pending, uncertain), None, 0, pending, uncertain=uncertain)

    async def check(
        self, answers: Sequence[ToolDecision | ExternalResult], *, tools: ToolScope | None = None
    ) -> None:
        """Check that ``answers`` fit the calls the session waits on now, as :meth:`respond` would need
        (on the loop; nothing changes); ``tools`` is the scope the run carrying them will have (as
        :meth:`submit` takes it), whose caller tools an edited call may name.

        Raises:
            AnswerTakenError: a call another answer was taken for (by a run submitted here that has not
                ended, or as the log records it).
            PendingToolCallsError: an unknown call id, two answers for one call, the wrong kind of answer,
                or edited arguments the tool refuses (see
                :func:`~rxagent.agent.routing.check_answers`).
        """
        self.refuse_taken(a.call_id for a in answers)
        state = await self.agent.sessions.state(self.ctx)
        waiting = {p.call.id: p for p in state.pending if p.kind != "retry"}
        gone = [a.call_id for a in answers if a.call_id not in waiting]
        if gone:
            taken = await self.taken_answers(gone)
            for call_id in gone:
                if call_id in taken:
                    raise AnswerTakenError(taken[call_id])
        ctx = self.ctx if tools is None else replace(self.ctx, tools=tools)
        check_answers(answers, waiting, tool_view(self.agent.toolkit, ctx, state))

    def refuse_taken(self, call_ids: Iterable[str]) -> None:
        """Refuse answers to ``call_ids`` when a run submitted here that has not ended carries an answer
        for one of them (from any thread; what :meth:`submit` checks as it queues answers).

        Raises:
            AnswerTakenError: the first such call, with the answer taken.
        """
        with self._guard:
            for call_id in call_ids:
                taken = self._taken.get(call_id)
                if taken is not None:
                    raise AnswerTakenError(taken)

    async def taken_answers(self, call_ids: Sequence[str]) -> dict[str, AnswerRecord]:
        """The answers taken for ``call_ids``, by call id (on the loop): carried by runs submitted here
        that have not ended, or recorded in the session's log (by any run, in any process). A call with
        none is left out."""
        with self._guard:
            taken = {i: self._taken[i] for i in call_ids if i in self._taken}
        rest = [i for i in call_ids if i not in taken]
        if rest:
            taken.update(answers_of(await self.agent.sessions.facts(self.ctx), rest))
        return taken

    # ---- watching -----------------------------------------------------------------------------------------

    def watch(
        self, after: int = 0, *, policy: FeedPolicy = "catch_up"
    ) -> AsyncGenerator[FeedItem | FeedGap, None]:
        """The session's feed from sequence number ``after`` on, as an async iterator (on the loop): the
        log's facts up to now, then each new one as it comes (see :mod:`rxagent.session.feed`)."""
        return one_by_one(self.watch_batches(after, policy=policy))

    async def watch_batches(
        self, after: int = 0, *, policy: FeedPolicy = "catch_up"
    ) -> AsyncGenerator[list[FeedItem] | FeedGap, None]:
        """:meth:`watch`, in batches: everything new at each wake of the feed as one list (what a server
        writes to a client in one go; see :meth:`~rxagent.session.SessionFeed.watch_batches`)."""
        feed = await self.open_feed()
        async with aclosing(feed.watch_batches(after, policy=policy)) as batches:  # closed with this one
            async for batch in batches:
                yield batch

    async def open_feed(self) -> SessionFeed:
        """The session's feed in this process, its head brought up to the log's first (a session this
        process has not run yet, or that another process appended to, has facts the feed must know of)."""
        return self.agent.keeper.feed(self.key, head=await self.agent.store.head(self.key))

    def feed(self, after: int = 0, *, policy: FeedPolicy = "catch_up") -> Observable[FeedItem | FeedGap]:
        """:meth:`watch` as an observable: each subscription is one watcher; disposing it stops only that
        watcher, never a run."""
        return from_async_iterable(lambda: self.watch(after, policy=policy))

    def events(self, after: int = 0, *, policy: FeedPolicy = "catch_up") -> Observable[AgentEvent | FeedGap]:
        """The feed's recorded events only (what the session's runs emitted), with gaps when they occur."""

        def pick(item: FeedItem | FeedGap) -> list[AgentEvent | FeedGap]:
            if isinstance(item, FeedGap):
                return [item]
            event = item.event
            return [event] if event is not None else []

        return self.feed(after, policy=policy).pipe(map_many(pick))


def _waiting(pending: Sequence[PendingCall], uncertain: Sequence[ToolUseBlock]) -> SessionActivity:
    """Where a session with no run going or queued stands: calls to reconcile come first (no run starts
    before they are), then calls waiting for a decision, then for results (calls to run again wait for
    nobody: the next run runs them, whatever its input)."""
    if uncertain:
        return "uncertain"
    if any(p.kind == "ask" for p in pending):
        return "waiting_for_approval"
    if any(p.kind == "external" for p in pending):
        return "waiting_for_results"
    return "idle"


def _as_message(message: str | Msg, agent: AnyAgent) -> Msg:
    made = Msg.user(message) if isinstance(message, str) else message
    check_message(made, "message", agent.options.max_inline_media_bytes, agent.model)
    return made


def _kind(answer: ToolDecision | ExternalResult) -> AnswerKind:
    if isinstance(answer, ExternalResult):
        return "external_result"
    return "approval" if answer.allow else "denial"
