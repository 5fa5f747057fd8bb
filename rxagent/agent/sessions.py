"""An agent's sessions, administered from outside its runs: ``agent.sessions``.

The agent runs; :class:`Sessions` reads and changes what its store keeps between runs:

=======  ======================================================================================
read     ``state(ctx)``, ``facts(ctx)``, ``turns(ctx)``, ``uncertain(ctx)``, ``list()``
change   ``add_messages(ctx, messages)``, ``reconcile(ctx, outcomes)``, ``delete(ctx)`` (each waits
         for the session as a run would), ``fork(ctx, at, into)``
live     ``handle(ctx)`` (also ``agent.session(ctx)``), ``active_run(ctx)``, ``evict(ctx)``
=======  ======================================================================================

A session is named by a :class:`~rxagent.context.RuntimeContext`: its ``(user_id, session_id)``
(:func:`session_key`; ``ctx=None`` or no ``session_id`` is the session ``"default"``). The methods that
change a session take it as a run does, in the session's line (bounded by ``AgentOptions.session_wait``),
so they never write beside a run.

Example:
    >>> agent = ReActAgent(model, store="sessions.db")  # doctest: +SKIP
    >>> await agent.call("My name is Ada.", ctx)
    >>> [m.text for m in (await agent.sessions.state(ctx)).messages]
    ['My name is Ada.', 'Nice to meet you, Ada.']
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from rxagent.agent.inputs import SessionBusyError, check_message
from rxagent.agent.live import SessionHandle
from rxagent.agent.run import RunState
from rxagent.context import RuntimeContext
from rxagent.messages import Msg, ToolUseBlock
from rxagent.session import Claim, SessionBusy, SessionInfo, StoredFact, TurnRecord, turns_of
from rxagent.session.reconcile import Reconcile, settle_uncertain
from rxagent.state import DEFAULT_SESSION, AgentState, SessionKey

if TYPE_CHECKING:
    from rxagent.agent.react import AnyAgent

__all__ = ["Sessions", "session_key"]


def session_key(ctx: RuntimeContext | None) -> SessionKey:
    """The session a context names: ``(user_id, session_id)``, the session ``"default"`` when unnamed."""
    context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
    return (context.user_id, context.session_id or DEFAULT_SESSION)


class Sessions:
    """The sessions of one agent's store: read them, change them between runs, fork, delete, and drive
    one live (see the module). The agent builds one, ``agent.sessions``; build no other.

    It also knows which run holds each session in this process (:meth:`active_run`), which the agent
    tells it of (:meth:`run_started`, :meth:`run_ended`), so steered messages reach the run.
    """

    def __init__(self, agent: AnyAgent) -> None:
        self._agent = agent
        self._active: dict[SessionKey, RunState] = {}
        """The run holding each session in this process (where steering goes)."""
        self._handles: dict[SessionKey, SessionHandle] = {}

    # ---- reading ------------------------------------------------------------------------------------

    async def state(self, ctx: RuntimeContext | None = None) -> AgentState:
        """The session's state as its log has it now (a copy; a fresh state for a new session)."""
        return (await self._agent.keeper.peek(session_key(ctx))).state

    async def facts(
        self, ctx: RuntimeContext | None = None, *, after: int = 0, limit: int | None = None
    ) -> list[StoredFact]:
        """The session's facts after sequence number ``after``, in order (:mod:`rxagent.session.facts`)."""
        return await self._agent.store.read(session_key(ctx), after=after, limit=limit)

    async def turns(self, ctx: RuntimeContext | None = None) -> list[TurnRecord]:
        """The session's turns, each with its input and its runs (see :mod:`rxagent.session.history`)."""
        return turns_of(await self._agent.store.read(session_key(ctx)))

    async def list(self) -> list[SessionInfo]:
        """Every session in the agent's store (its key, last sequence number, last update, lease holder)."""
        return await self._agent.store.sessions()

    # ---- uncertain calls -------------------------------------------------------------------------------

    async def uncertain(self, ctx: RuntimeContext | None = None) -> list[ToolUseBlock]:
        """The session's calls that were dispatched with no recorded outcome (see :meth:`reconcile`)."""
        return list((await self._agent.keeper.peek(session_key(ctx))).uncertain.values())

    def unsafe_to_repeat(self, calls: Iterable[ToolUseBlock]) -> list[ToolUseBlock]:
        """Of uncertain ``calls``, those a run refuses to run again by itself: calls of tools that are
        neither idempotent nor read-only (or that this agent does not have). Each must be reconciled
        (:meth:`reconcile`) before the session runs again; the others are run again without asking."""
        toolkit = self._agent.toolkit
        unsafe: list[ToolUseBlock] = []
        for call in calls:
            tool = toolkit.get(call.name)
            if tool is None or not tool.traits.repeatable:
                unsafe.append(call)
        return unsafe

    async def reconcile(self, ctx: RuntimeContext | None, outcomes: Sequence[Reconcile]) -> None:
        """Settle the session's uncertain calls: each succeeded (with its output), failed, or is to be run
        again by the next run. Once nothing of the batch is open the session can run again.

        Raises:
            ReconcileError: an id that is not an uncertain call of the session, or one given twice
                (nothing is recorded then).
            SessionBusyError: as for a run.
        """
        claim = await self._take(session_key(ctx))
        try:
            settle_uncertain(claim, outcomes)
            await claim.flush()
        finally:
            await self._agent.keeper.release(claim)

    # ---- changing ------------------------------------------------------------------------------------

    async def add_messages(self, ctx: RuntimeContext | None, messages: Sequence[Msg]) -> None:
        """Add ``messages`` to the session's history without a model call (waiting, as a run would, for a
        run that holds the session): context the next run will see.

        Raises:
            InvalidInputError: text a log cannot keep, or media over the cap or that the model does not
                take (see :mod:`rxagent.agent.inputs`); nothing is added.
            SessionBusyError: as for a run.
        """
        cap, model = self._agent.options.max_inline_media_bytes, self._agent.model
        for index, message in enumerate(messages):
            check_message(message, f"messages[{index}]", cap, model)
        claim = await self._take(session_key(ctx))
        try:
            claim.projection.state.messages.extend(messages)
            await claim.flush()
        finally:
            await self._agent.keeper.release(claim)

    async def fork(self, ctx: RuntimeContext | None, at: int, into: RuntimeContext) -> None:
        """Start the new session ``into`` as a copy of this one up to sequence number ``at``.

        Raises:
            SessionExistsError: ``into`` already has facts.
        """
        target = session_key(into)
        await self._agent.store.fork(session_key(ctx), at, target)
        self._agent.keeper.forget(target)

    async def delete(self, ctx: RuntimeContext | None) -> None:
        """Delete the session (waiting, as a run would, for a run that holds it).

        Raises:
            SessionBusyError: as for a run.
        """
        key = session_key(ctx)
        keeper = self._agent.keeper
        claim = await self._take(key)
        try:
            await self._agent.store.delete(key)
        finally:
            claim.broken = True  # nothing of it is kept in memory
            await keeper.release(claim)
            keeper.forget(key)

    async def _take(self, key: SessionKey) -> Claim:
        keeper = self._agent.keeper
        try:
            return await keeper.claim(keeper.place(key), key, wait=self._agent.options.session_wait)
        except SessionBusy as busy:
            raise SessionBusyError(key, busy.waited, busy.ahead, busy.holder) from None

    # ---- live ----------------------------------------------------------------------------------------

    def handle(self, ctx: RuntimeContext | None = None) -> SessionHandle:
        """The handle that drives and watches the session ``ctx`` names: submit, steer, inject, respond,
        interrupt, wait, status, and its feed (see :class:`~rxagent.agent.live.SessionHandle`).

        One handle per session and agent: asking again returns the same one. Create it on the agent's
        event loop; its methods may then be called from any thread.
        """
        key = session_key(ctx)
        handle = self._handles.get(key)
        if handle is None:
            context = ctx or RuntimeContext(session_id=DEFAULT_SESSION)
            handle = self._handles[key] = SessionHandle(self._agent, context)
        return handle

    def evict(self, ctx: RuntimeContext | None = None) -> bool:
        """Let the session go from this process's memory when nothing here uses it: its handle (no run
        submitted through it is queued or running, no message is on its way in), the projection kept
        between runs, and no run, place in its line or feed watcher of this process holds it. The log
        keeps everything: the next :meth:`handle` or run loads it again. A handle let go of is not to be
        used again (ask :meth:`handle` for the session's current one).

        Returns:
            Whether it went (``False``: something uses it; nothing changed).
        """
        key = session_key(ctx)
        handle = self._handles.get(key)
        keeper = self._agent.keeper
        if (handle is not None and not handle.idle) or key in self._active or keeper.in_use(key):
            return False
        self._handles.pop(key, None)
        keeper.forget(key)
        return True

    def active_run(self, ctx: RuntimeContext | None = None) -> RunState | None:
        """The run holding the session in this process now, if any (where steered messages go)."""
        return self._active.get(session_key(ctx))

    def run_started(self, key: SessionKey, run: RunState) -> None:
        """The agent's run ``run`` holds the session ``key`` now (the agent calls this)."""
        self._active[key] = run

    def run_ended(self, key: SessionKey, run: RunState) -> None:
        """The agent's run ``run`` lets the session ``key`` go (the agent calls this): messages steered to it
        too late for it go back to the session's handle, which delivers them next."""
        if self._active.get(key) is run:
            del self._active[key]
        inbox = run.deps.control.inbox
        if inbox:
            handle = self._handles.get(key)
            if handle is not None:
                handle.take_left_over(list(inbox))
            inbox.clear()
