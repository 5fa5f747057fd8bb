"""The context window: what of a session's history each request sends, under a token budget.

:class:`ContextWindow` is middleware on the ``request`` cut point (a structural
:class:`~rxagent.agent.middleware.RequestHook`: memory does not import the agent). It receives the
agent's final request and sends instead, in this order:

::

    system part          the request's leading system messages, never changed
    summary              one system message: the oldest messages, compressed (once there are any)
    relevant memories    one system message: older context recalled by relevance (if configured)
    history window       the rest of the history: the recent turns in full, older ones as they fit
    system part          the request's trailing system messages (e.g. the agent's closing prompts)

everything counted, tool schemas and response format included, against ``max_context_tokens`` minus a
reserve for the reply. A **turn** starts at a user message and runs to the next one; an **exchange** is
an assistant message with the tool messages that answer it, and is never split.

When the request is over budget, the window gives up detail from the outside in, stopping as soon as it
fits:

1. evict large tool results of turns older than the ``recent_turns`` most recent, oldest first: each is
   replaced by a note naming the tool, its size, and that calling the tool again brings it back;
2. compress the oldest of those older turns into the summary (down to ``compress_target`` of the
   budget, so that compression happens every few turns, not on every request);
3. evict large tool results of the recent turns, oldest first, except the latest exchange;
4. compress the recent turns' oldest exchanges, except the latest exchange;
5. still over: :class:`ContextBudgetExceeded` with the numbers.

Every change is published as an event before the request: :class:`~rxagent.events.ToolResultsEvicted`,
:class:`~rxagent.events.ContextCompressed`, :class:`~rxagent.events.MemoriesRecalled`. Only the request
changes: the session's history keeps every message, whole.

Decisions are kept, in ``state.extras["context_window"]`` (what the summary covers, the summary text, the
evicted messages), so a span is summarised once and an evicted result stays evicted; and in a per-session
cache (the token count of every message in the window and where it stands), so a request costs the new
messages' counting plus a C-level identity check over the window (bounded by the budget), not a pass over
the history. The
window trusts the history to grow at its end, as an agent's does; where it finds it changed (message ids
at known positions differ) it recounts from there, and it drops the summary if the messages it covers
changed.
"""

from __future__ import annotations

import operator
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, TypeAlias, TypedDict, cast

import reactivex
from pydantic import JsonValue
from reactivex import Observable
from reactivex import operators as ops

from rxagent.context import RunContext
from rxagent.events import AgentEvent, ContextCompressed, MemoriesRecalled, ToolResultsEvicted
from rxagent.memory.longterm import LongTermMemory
from rxagent.memory.summary import Summariser, TruncatingSummariser
from rxagent.memory.tokens import (
    REPLY_PRIMING,
    TokenCounter,
    default_counter,
    media_rule_of,
    response_format_tokens,
    truncate_to_tokens,
)
from rxagent.messages import Msg, TextBlock, ToolResultBlock
from rxagent.operators import from_async_iterable
from rxagent.requests import ChatRequest
from rxagent.state import AgentState

__all__ = [
    "EVICTED_NOTE",
    "MEMORY_HEADER",
    "STATE_KEY",
    "SUMMARY_HEADER",
    "Assembly",
    "ContextBudgetExceeded",
    "ContextWindow",
    "MemoryScope",
]

STATE_KEY = "context_window"
"""Where the window keeps its decisions in ``AgentState.extras``."""

SUMMARY_HEADER = (
    "Summary of the earlier part of this conversation (older messages were compressed to fit the context "
    "window):"
)
"""First line of the summary message."""

MEMORY_HEADER = "Relevant earlier context (recalled from older parts of this conversation):"
"""First line of the recalled-memories message."""

EVICTED_NOTE = (
    "[The output of `{name}` ({tokens} tokens) was removed from the context to save space. "
    "Call `{name}` again with the same arguments if you need it.]"
)
"""What replaces an evicted tool result (``{name}``, ``{tokens}`` are filled in)."""

MemoryScope: TypeAlias = Literal["session", "user", "global"]
"""Whose memories a request may recall: its session's, its user's, or everyone's."""

_FORMAT_VERSION = 1


class ContextBudgetExceeded(Exception):
    """The request does not fit the budget even after evicting and compressing everything allowed.

    What is left can only be sent whole: the system part, the tool schemas, the response format and the
    latest exchange (plus the summary, if there is one).

    Attributes:
        needed: the tokens the request would take.
        allowed: ``max_context_tokens`` minus the reply reserve.
        breakdown: ``needed`` by part: ``system``, ``tools``, ``response_format``, ``reply_priming``,
            ``summary``, ``memories``, ``history``.
        rolls_back: the run this error fails drops what it changed that its session's log does not have yet
            (see :func:`~rxagent.agent.middleware.rolls_back`); ``False`` here, so a run stopped by a
            :class:`ContextWindow` keeps its input. The harness's context budget sets it.
    """

    rolls_back: bool = False

    def __init__(
        self,
        needed: int,
        allowed: int,
        breakdown: Mapping[str, int],
        *,
        max_context_tokens: int,
        reserve: int,
        note: str | None = None,
    ) -> None:
        parts = ", ".join(f"{name} {tokens:,}" for name, tokens in breakdown.items())
        closing = note or (
            "Everything that may be evicted or compressed already was; the system part, the tool schemas and "
            "the latest exchange are sent whole: shorten them, send fewer tools, or raise max_context_tokens."
        )
        super().__init__(
            f"context budget exceeded: the request needs {needed:,} tokens but {allowed:,} are allowed "
            f"(max_context_tokens {max_context_tokens:,} minus {reserve:,} reserved for the reply). "
            f"Breakdown: {parts}. {closing}"
        )
        self.needed = needed
        self.allowed = allowed
        self.breakdown = dict(breakdown)
        self.max_context_tokens = max_context_tokens
        self.reserve = reserve


@dataclass(frozen=True, slots=True)
class Assembly:
    """What the window made of one request.

    Attributes:
        request: the request to send.
        events: what changed, to publish before the request.
        tokens: the request's tokens, as the window's counter counts them.
        allowed: the budget it had to fit (``max_context_tokens`` minus the reply reserve).
        breakdown: ``tokens`` by part (see :class:`ContextBudgetExceeded`).
    """

    request: ChatRequest
    events: tuple[AgentEvent, ...]
    tokens: int
    allowed: int
    breakdown: Mapping[str, int]


@dataclass(slots=True, eq=False)
class _Entry:
    """One history message in the window: the message, what is sent for it, and that one's tokens."""

    msg: Msg
    sent: Msg
    tokens: int


@dataclass(slots=True, eq=False)
class _Session:
    """A session's window: the summary and what it covers, and the messages after it."""

    covered: int = 0
    """History messages folded into the summary, from the start."""
    covered_first_id: str | None = None
    covered_last_id: str | None = None
    summary: str | None = None
    summary_msg: Msg | None = None
    summary_tokens: int = 0
    entries: list[_Entry] = field(default_factory=lambda: [])
    """The history from ``covered`` on, as far as the window has seen it."""
    total: int = 0
    """Tokens of the entries as sent."""
    counter: TokenCounter | None = None
    """What the entries were counted with (the run's provider decides how images and PDFs count)."""
    evicted: set[str] = field(default_factory=lambda: set[str]())
    """Ids of history messages sent with their large results replaced by notes."""
    persisted: dict[str, JsonValue] | None = None
    """The extras value last read or written (to notice another process's changes)."""
    last_user: Msg | None = None
    """The latest user message of the history (the query for long-term memory)."""
    memory: tuple[tuple[str, ...], tuple[str, ...], Msg, int] | None = None
    """The last memories message: the hits' ids, the ids kept, the message, its tokens."""
    dirty: bool = False
    """Decisions changed since they were last written to the state."""

    def drop_entries_from(self, index: int) -> None:
        for entry in self.entries[index:]:
            self.total -= entry.tokens
            self.evicted.discard(entry.msg.id)
        del self.entries[index:]
        if self.last_user is not None and not any(e.msg is self.last_user for e in self.entries):
            self.last_user = None


_MSG = operator.attrgetter("msg")
_SENT = operator.attrgetter("sent")
"""An entry's message and what is sent for it, read in C by ``map`` over the window."""


class _Header(TypedDict):
    run_id: str
    session_id: str | None
    trace_id: str
    seq: int


@dataclass(slots=True)
class _Budget:
    """The fixed parts of one request and the running total of the rest."""

    allowed: int
    system: int
    tools: int
    response_format: int
    memories: int = 0

    def total(self, session: _Session) -> int:
        return self.fixed + session.summary_tokens + self.memories + session.total

    @property
    def fixed(self) -> int:
        return REPLY_PRIMING + self.system + self.tools + self.response_format

    def breakdown(self, session: _Session) -> dict[str, int]:
        return {
            "system": self.system,
            "tools": self.tools,
            "response_format": self.response_format,
            "reply_priming": REPLY_PRIMING,
            "summary": session.summary_tokens,
            "memories": self.memories,
            "history": session.total,
        }


def _system_bounds(messages: Sequence[Msg]) -> tuple[int, int]:
    """``(lead, end)``: ``messages[:lead]`` and ``messages[end:]`` are the system part, the rest history."""
    lead, end = 0, len(messages)
    while lead < end and messages[lead].role == "system":
        lead += 1
    while end > lead and messages[end - 1].role == "system":
        end -= 1
    return lead, end


class ContextWindow:
    """Fits every request into a token budget: system part, summary, recent turns, relevant memories.

    See the module documentation for the policy. Use it as agent middleware
    (``ReActAgent(model, middleware=[ContextWindow(...)])``), or call :meth:`assemble` directly.

    Args:
        counter: counts tokens. Default: the shared tiktoken ``cl100k_base`` counter (offline) that
            counts images and PDFs as the run's provider documents them (Anthropic's method for an
            Anthropic model, OpenAI's for the others; see :mod:`rxagent.memory.tokens`). Give the model's
            own counter when it has one (its ``media`` then says how media counts).
        max_context_tokens: the model's context size to respect.
        reply_reserve: tokens kept free for the reply (a request's ``max_tokens`` raises it).
        recent_turns: turns kept in full as long as anything older can give way.
        summariser: compresses old messages (default: :class:`TruncatingSummariser`, no model).
        memory: long-term memory: compressed messages are remembered there, and the records most
            relevant to the latest user message are recalled into the room the window leaves.
        memory_k: memories recalled per request, at most.
        memory_tokens: the most tokens recalled memories take.
        memory_scope: whose memories are written and recalled: the session's, the user's, everyone's.
        evict_over_tokens: a tool message larger than this may have its results evicted.
        compress_target: compression goes down to this fraction of the budget (hysteresis: the next
            compression waits until the window has grown again).
        max_sessions: sessions whose window is cached in memory (their decisions are in their state).

    Raises:
        ValueError: a budget that leaves no room, or a setting out of range.

    Emits (before the request, from the ``request`` hook):
        :class:`~rxagent.events.ToolResultsEvicted`, :class:`~rxagent.events.ContextCompressed`,
        :class:`~rxagent.events.MemoriesRecalled`; fails the step with :class:`ContextBudgetExceeded`
        when nothing more can give way.

    Example:
        >>> window = ContextWindow(max_context_tokens=8_000, reply_reserve=1_000, recent_turns=4)
        >>> # agent = ReActAgent(model, toolkit, middleware=[window])
    """

    def __init__(
        self,
        *,
        counter: TokenCounter | None = None,
        max_context_tokens: int = 12_000,
        reply_reserve: int = 1_000,
        recent_turns: int = 8,
        summariser: Summariser | None = None,
        memory: LongTermMemory | None = None,
        memory_k: int = 3,
        memory_tokens: int = 800,
        memory_scope: MemoryScope = "session",
        evict_over_tokens: int = 200,
        compress_target: float = 0.75,
        max_sessions: int = 256,
    ) -> None:
        if max_context_tokens < 1 or reply_reserve < 0 or reply_reserve >= max_context_tokens:
            raise ValueError(
                f"need 0 <= reply_reserve < max_context_tokens, got reply_reserve={reply_reserve}, "
                f"max_context_tokens={max_context_tokens}"
            )
        if recent_turns < 0 or memory_k < 0 or memory_tokens < 0 or evict_over_tokens < 0:
            raise ValueError("recent_turns, memory_k, memory_tokens and evict_over_tokens must be >= 0")
        if not 0 < compress_target <= 1:
            raise ValueError(f"compress_target must be in (0, 1], got {compress_target}")
        if max_sessions < 1:
            raise ValueError("max_sessions must be at least 1")
        self.counter = counter or default_counter()
        """Counts tokens: the counter given, else the shared default (see :meth:`counter_for`)."""
        self._given_counter = counter
        self.max_context_tokens = max_context_tokens
        self.reply_reserve = reply_reserve
        self.recent_turns = recent_turns
        self.summariser: Summariser = summariser or TruncatingSummariser(counter=self.counter)
        self.memory = memory
        self.memory_k = memory_k
        self.memory_tokens = memory_tokens
        self.memory_scope: MemoryScope = memory_scope
        self.evict_over_tokens = evict_over_tokens
        self.compress_target = compress_target
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str | None, str | None], _Session] = OrderedDict()
        self._summary_frame = self.counter.count_message(Msg.system(SUMMARY_HEADER + "\n"))

    def __repr__(self) -> str:
        return (
            f"ContextWindow(max_context_tokens={self.max_context_tokens}, "
            f"reply_reserve={self.reply_reserve}, recent_turns={self.recent_turns}, "
            f"summariser={self.summariser.name!r})"
        )

    def counter_for(self, ctx: RunContext) -> TokenCounter:
        """The counter that counts the requests of the run ``ctx`` belongs to: the one the window was given,
        else the shared counter of the run's provider's media rule
        (:func:`~rxagent.memory.tokens.media_rule_of` of ``ctx.provider_name``)."""
        if self._given_counter is not None:
            return self._given_counter
        return default_counter(media_rule_of(ctx.provider_name))

    # ---- the middleware hook --------------------------------------------------------------------------

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        """Publish what the window changed, then pass the fitted request on.

        ::

            request ──▶ assemble (count · evict · compress · recall) ──▶ events… ─ next(fitted request)

        Lifecycle:
            complete: after ``next``'s output completes. error: :class:`ContextBudgetExceeded`, or the
            summariser's or the memory's error; nothing is kept of a compression that failed, evictions
            decided before it are kept (in the state, without their event).
            cancel: the assembly task is cancelled (a summariser call in flight with it).
            re-subscribe: assembles again (decisions already taken are reused).
        """

        async def assembled() -> AsyncIterator[Assembly]:
            yield await self.assemble(request, ctx)

        def send(assembly: Assembly) -> Observable[ChatRequest | AgentEvent]:
            published: Observable[ChatRequest | AgentEvent] = reactivex.from_iterable(assembly.events)
            return reactivex.concat(published, next(assembly.request))

        return from_async_iterable(assembled).pipe(ops.concat_map(send))

    # ---- assembly -------------------------------------------------------------------------------------

    async def assemble(
        self,
        request: ChatRequest,
        ctx: RunContext,
        *,
        fit: bool = True,
        max_context_tokens: int | None = None,
    ) -> Assembly:
        """Fit ``request`` to the budget for the session of ``ctx`` (its ``state`` keeps the decisions).

        Args:
            request: the request as the agent built it.
            ctx: the run's context; its ``state`` keeps the window's decisions.
            fit: ``False`` only applies the decisions already taken (the summary, earlier evictions) and
                counts: nothing more is evicted or compressed, and a request over the budget raises (what
                the harness's context budget tries first, before it compresses).
            max_context_tokens: the context size for this request only (default: the window's own).

        Returns:
            The request to send, the events describing what changed, and the token counts.

        Raises:
            ContextBudgetExceeded: it cannot fit.
        """
        messages = request.messages
        lead, end = _system_bounds(messages)
        state = ctx.state
        session = self._session((ctx.user_id, ctx.session_id), state)
        counter = self.counter_for(ctx)
        self._sync(session, messages, lead, end, counter)
        count = counter.count_message
        reserve = max(self.reply_reserve, request.max_tokens or 0)
        limit = self.max_context_tokens if max_context_tokens is None else max_context_tokens
        budget = _Budget(
            allowed=max(0, limit - reserve),
            system=sum(count(m) for m in messages[:lead]) + sum(count(m) for m in messages[end:]),
            tools=counter.count_tools(request.tools),
            response_format=response_format_tokens(counter, request.response_format),
        )
        events: list[AgentEvent] = []
        header = _Header(run_id=ctx.run_id, session_id=ctx.session_id, trace_id=ctx.trace_id, seq=0)
        try:
            if fit and budget.total(session) > budget.allowed:
                await self._fit(session, budget, ctx, header, events)
        finally:
            # Kept even when a later step failed: an eviction or a summary is not redone next time.
            if session.dirty and state is not None:
                self._persist(session, state)
        memories = await self._recall(session, budget, ctx, header, events)
        tokens = budget.total(session)
        if tokens > budget.allowed:
            raise ContextBudgetExceeded(
                tokens,
                budget.allowed,
                budget.breakdown(session),
                max_context_tokens=limit,
                reserve=reserve,
                note=None if fit else "Nothing was evicted or compressed (fit=False).",
            )
        sent: list[Msg] = list(messages[:lead])
        if session.summary_msg is not None:
            sent.append(session.summary_msg)
        if memories is not None:
            sent.append(memories)
        sent.extend(map(_SENT, session.entries))
        sent.extend(messages[end:])
        return Assembly(
            request=replace(request, messages=tuple(sent)),
            events=tuple(events),
            tokens=tokens,
            allowed=budget.allowed,
            breakdown=budget.breakdown(session),
        )

    # ---- per-session state ----------------------------------------------------------------------------

    def _session(self, key: tuple[str | None, str | None], state: AgentState | None) -> _Session:
        persisted = state.extras.get(STATE_KEY) if state is not None else None
        session = self._sessions.get(key)
        if session is not None:
            self._sessions.move_to_end(key)
            if persisted is session.persisted or persisted == session.persisted:
                return session
        session = self._restore(persisted)
        self._sessions[key] = session
        while len(self._sessions) > self.max_sessions:
            self._sessions.popitem(last=False)
        return session

    def _restore(self, persisted: JsonValue) -> _Session:
        """A session from its stored decisions; anything malformed is ignored (the window starts over)."""
        session = _Session()
        if not isinstance(persisted, dict) or persisted.get("version") != _FORMAT_VERSION:
            return session
        covered, summary, evicted = (
            persisted.get("covered"),
            persisted.get("summary"),
            persisted.get("evicted"),
        )
        first_id, last_id = persisted.get("covered_first_id"), persisted.get("covered_last_id")
        if isinstance(evicted, list):
            session.evicted = {item for item in evicted if isinstance(item, str)}
        anchored = isinstance(first_id, str) and isinstance(last_id, str)
        if isinstance(covered, int) and covered > 0 and anchored and isinstance(summary, str):
            session.covered = covered
            session.covered_first_id, session.covered_last_id = cast("str", first_id), cast("str", last_id)
            self._set_summary(session, summary)
        session.persisted = persisted
        return session

    def _persist(self, session: _Session, state: AgentState) -> None:
        value: dict[str, JsonValue] = {
            "version": _FORMAT_VERSION,
            "covered": session.covered,
            "covered_first_id": session.covered_first_id,
            "covered_last_id": session.covered_last_id,
            "summary": session.summary,
            "evicted": cast("list[JsonValue]", sorted(session.evicted)),
        }
        state.extras[STATE_KEY] = value
        session.persisted = value
        session.dirty = False

    def _set_summary(self, session: _Session, summary: str | None) -> None:
        session.summary = summary
        if summary is None:
            session.summary_msg, session.summary_tokens = None, 0
            return
        message = Msg.system(f"{SUMMARY_HEADER}\n{summary}", metadata={"rxagent": "context_summary"})
        session.summary_msg, session.summary_tokens = message, self.counter.count_message(message)

    def _sync(
        self, session: _Session, messages: Sequence[Msg], lead: int, end: int, counter: TokenCounter
    ) -> None:
        """Bring the session's entries up to date with the request's history, counted by ``counter``.

        Cost: a C-level identity check over the window, plus counting the messages that are new.
        """
        if session.counter is not counter:
            if session.counter is not None:
                # The session's requests go to another provider now: its images and PDFs count anew.
                session.total = 0
                for entry in session.entries:
                    entry.tokens = counter.count_message(entry.sent)
                    session.total += entry.tokens
            session.counter = counter
        covered = session.covered
        if covered and (
            covered > end - lead
            or messages[lead].id != session.covered_first_id
            or messages[lead + covered - 1].id != session.covered_last_id
        ):
            # The messages under the summary changed: the summary no longer describes them.
            session.covered, session.covered_first_id, session.covered_last_id = 0, None, None
            self._set_summary(session, None)
            session.drop_entries_from(0)
            session.dirty = True
        base = lead + session.covered
        entries = session.entries
        limit = min(len(entries), end - base)
        # The usual case, checked in C: the window's messages are the history's own objects, so only the
        # messages after them are new.
        same = all(map(operator.is_, messages[base : base + limit], map(_MSG, entries)))
        index = limit if same else 0
        while index < limit:
            message, entry = messages[base + index], entries[index]
            if message is not entry.msg:
                # Another object: the state was reloaded (a new run), or a message was replaced.
                if message.id != entry.msg.id:
                    break
                unchanged = message == entry.msg
                entry.msg = message
                if not unchanged:  # same id, new content (a transcript repair): count it again
                    session.total -= entry.tokens
                    entry.sent = self._sent_form(session, message)
                    entry.tokens = counter.count_message(entry.sent)
                    session.total += entry.tokens
                elif message.id not in session.evicted:
                    entry.sent = message
            index += 1
        if index < len(entries):
            had = len(session.evicted)
            session.drop_entries_from(index)
            session.dirty = session.dirty or len(session.evicted) != had
        count = counter.count_message
        for position in range(base + len(entries), end):
            message = messages[position]
            sent = self._sent_form(session, message)
            tokens = count(sent)
            entries.append(_Entry(message, sent, tokens))
            session.total += tokens
            if message.role == "user":
                session.last_user = message
        if session.last_user is None and self.memory is not None:
            # Only recall needs it; usually the latest turn's start is a few messages back.
            session.last_user = next(
                (messages[i] for i in range(end - 1, lead - 1, -1) if messages[i].role == "user"), None
            )

    def _sent_form(self, session: _Session, message: Msg) -> Msg:
        if message.id in session.evicted:
            return self._evicted_form(message) or message
        return message

    def _evicted_form(self, message: Msg) -> Msg | None:
        """``message`` with each result that is longer than its note replaced by the note."""
        if message.role != "tool":
            return None
        count_text = self.counter.count_text
        blocks: list[object] = []
        replaced = False
        for block in message.content:
            if isinstance(block, ToolResultBlock):
                tokens = count_text(block.text)
                note = EVICTED_NOTE.format(name=block.name, tokens=f"{tokens:,}")
                if count_text(note) < tokens:
                    blocks.append(block.model_copy(update={"output": (TextBlock(text=note),)}))
                    replaced = True
                    continue
            blocks.append(block)
        if not replaced:
            return None
        return message.model_copy(update={"content": tuple(blocks)})

    # ---- fitting --------------------------------------------------------------------------------------

    def _layout(self, session: _Session) -> tuple[list[int], int, int]:
        """``(turn starts, start of the recent turns, start of the latest exchange)`` as entry indices."""
        entries = session.entries
        turns = [i for i, entry in enumerate(entries) if entry.msg.role == "user"]
        tail = next((i for i in range(len(entries) - 1, -1, -1) if entries[i].msg.role != "tool"), 0)
        if self.recent_turns == 0:
            recent = tail
        elif len(turns) >= self.recent_turns:
            recent = min(turns[-self.recent_turns], tail)
        else:
            recent = 0
        return turns, recent, tail

    async def _fit(
        self,
        session: _Session,
        budget: _Budget,
        ctx: RunContext,
        header: _Header,
        events: list[AgentEvent],
    ) -> None:
        """Evict and compress, outside in, until the request fits (or nothing more may give way)."""
        target = int(budget.allowed * self.compress_target)
        turns, recent, tail = self._layout(session)
        # 1-2: turns older than the recent ones: evict their large tool results, then compress them.
        self._evict(session, budget, 0, recent, header, events)
        if budget.total(session) > budget.allowed and recent > 0:
            cuts = [t for t in turns if 0 < t < recent] + [recent]
            await self._compress(session, budget, cuts, target, ctx, header, events)
            turns, recent, tail = self._layout(session)
        # 3-4: the recent turns, but never the latest exchange.
        if budget.total(session) > budget.allowed:
            self._evict(session, budget, recent, tail, header, events)
        if budget.total(session) > budget.allowed and tail > 0:
            entries = session.entries
            cuts = [i for i in range(1, tail + 1) if entries[i].msg.role != "tool"]
            await self._compress(session, budget, cuts, target, ctx, header, events)

    def _evict(
        self,
        session: _Session,
        budget: _Budget,
        start: int,
        stop: int,
        header: _Header,
        events: list[AgentEvent],
    ) -> None:
        before = budget.total(session)
        message_ids: list[str] = []
        call_ids: list[str] = []
        tools: list[str] = []
        for entry in session.entries[start:stop]:
            if budget.total(session) <= budget.allowed:
                break
            large_result = entry.msg.role == "tool" and entry.tokens > self.evict_over_tokens
            if entry.sent is not entry.msg or not large_result:
                continue
            replacement = self._evicted_form(entry.msg)
            if replacement is None:
                continue
            tokens = (session.counter or self.counter).count_message(replacement)
            if tokens >= entry.tokens:
                continue
            session.total += tokens - entry.tokens
            entry.sent, entry.tokens = replacement, tokens
            session.evicted.add(entry.msg.id)
            message_ids.append(entry.msg.id)
            for old, new in zip(entry.msg.tool_results, replacement.tool_results, strict=True):
                if old is not new:
                    call_ids.append(old.tool_use_id)
                    tools.append(old.name)
        if not message_ids:
            return
        session.dirty = True
        after = budget.total(session)
        events.append(
            ToolResultsEvicted(
                **header,
                message_ids=message_ids,
                call_ids=call_ids,
                tools=tools,
                tokens_removed=before - after,
                tokens_before=before,
                tokens_after=after,
            )
        )

    async def _compress(
        self,
        session: _Session,
        budget: _Budget,
        cuts: Sequence[int],
        target: int,
        ctx: RunContext,
        header: _Header,
        events: list[AgentEvent],
    ) -> None:
        """Fold ``entries[:cut]`` into the summary, for the first cut that reaches ``target`` (else the last).

        Nothing changes unless the summariser (and the memory, if any) succeed.
        """
        if not cuts:
            return
        before = budget.total(session)
        summary_cost = self._summary_frame + self.summariser.max_summary_tokens
        entries = session.entries
        prefix = 0
        done = 0
        cut = cuts[-1]
        for candidate in cuts:
            prefix += sum(entry.tokens for entry in entries[done:candidate])
            done = candidate
            if before - session.summary_tokens - prefix + summary_cost <= target:
                cut = candidate
                break
        span = entries[:cut]
        # The summariser sees the original messages: what eviction removed from the window may still be
        # worth a line of summary (summarisers cut long lines to their own budget).
        text = await self.summariser.summarise(session.summary, [entry.msg for entry in span])
        text = truncate_to_tokens(self.counter, text.strip(), self.summariser.max_summary_tokens)
        indexed = 0
        if self.memory is not None:
            records = await self.memory.remember([entry.msg for entry in span], scope=self._scope(ctx))
            indexed = len(records)
        # Both succeeded: apply.
        session.dirty = True
        self._set_summary(session, text or "(nothing to keep)")
        session.covered += cut
        if session.covered_first_id is None:
            session.covered_first_id = span[0].msg.id
        session.covered_last_id = span[-1].msg.id
        del entries[:cut]
        for entry in span:
            session.total -= entry.tokens
            session.evicted.discard(entry.msg.id)
        after = budget.total(session)
        events.append(
            ContextCompressed(
                **header,
                messages=len(span),
                first_message_id=span[0].msg.id,
                last_message_id=span[-1].msg.id,
                compressed_total=session.covered,
                summary_tokens=session.summary_tokens,
                summariser=self.summariser.name,
                memories_indexed=indexed,
                tokens_before=before,
                tokens_after=after,
            )
        )

    # ---- long-term memory -----------------------------------------------------------------------------

    def _scope(self, ctx: RunContext) -> str:
        if self.memory_scope == "session":
            return f"{ctx.user_id or ''}/{ctx.session_id or ''}"
        if self.memory_scope == "user":
            return ctx.user_id or ""
        return ""

    async def _recall(
        self,
        session: _Session,
        budget: _Budget,
        ctx: RunContext,
        header: _Header,
        events: list[AgentEvent],
    ) -> Msg | None:
        """The memories most relevant to the latest user message, in the room the window leaves."""
        memory, query = self.memory, session.last_user
        room = min(self.memory_tokens, budget.allowed - budget.total(session))
        if memory is None or query is None or self.memory_k == 0 or room <= self._summary_frame:
            return None
        hits = await memory.recall(query.text, k=self.memory_k, scope=self._scope(ctx))
        if not hits:
            return None
        ids = tuple(hit.record.id for hit in hits)
        cached = session.memory
        if cached is not None and cached[0] == ids and cached[3] <= room:
            ids, message, tokens = cached[1], cached[2], cached[3]
        else:
            hit_ids = ids
            lines = [MEMORY_HEADER]
            message, tokens, kept = None, 0, 0
            for hit in hits:
                lines.append(f"- {hit.record.text}")
                candidate = Msg.system("\n".join(lines), metadata={"rxagent": "recalled_memories"})
                candidate_tokens = self.counter.count_message(candidate)
                if candidate_tokens > room:
                    break
                message, tokens, kept = candidate, candidate_tokens, kept + 1
            if message is None:
                return None
            ids = ids[:kept]
            session.memory = (hit_ids, ids, message, tokens)
        budget.memories = tokens
        scores = {hit.record.id: hit.score for hit in hits}
        events.append(
            MemoriesRecalled(
                **header,
                query=query.text[:200],
                memory_ids=list(ids),
                scores=[scores[i] for i in ids],
                tokens=tokens,
            )
        )
        return message
