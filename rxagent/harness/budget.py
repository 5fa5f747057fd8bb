"""The context budget: everything a request sends, under one token limit, and an overflow recovered once.

:func:`budget_part` gives an agent middleware that keeps every request within
:attr:`ContextBudget.max_tokens`, counted with the exact tokenizer over the *whole* request: the system
prompt (skills and other parts' instructions included), the messages, what other middleware added to the
request (the todo reminder), the tool schemas and the response format. It works at three cut points:

=============  ==========================================================================================
cut point      what it does
=============  ==========================================================================================
``request``    1. **evicts** each tool result over ``evict_over_tokens`` to a file under
                  ``folder(ctx)/tool-results/`` and puts a pointer in its place: the path, the size, the
                  first lines, and that the file tools read the rest (AgentScope's
                  ``ToolResultEvictionMiddleware``);
               2. **counts** the request as the session's summary leaves it; if it fits, it is sent;
               3. **on overflow**, emits :class:`~rxagent.events.ContextOverflowRetry` (``cause="budget"``),
                  **compresses** (the oldest turns folded into the session's summary, by the memory layer's
                  :class:`~rxagent.memory.ContextWindow` and its summariser) and counts again: the call's
                  one retry. Still over: :class:`ContextBudgetExceeded`.
``model_call`` a server that refuses the request as too long (``ModelHTTPError.context_overflow``, HTTP 400
               ``context_length_exceeded``) is an overflow too: if the call has not retried yet, the request
               is compressed to ``overflow_shrink`` of what was sent and sent again
               (``ContextOverflowRetry`` with ``cause="provider"``); otherwise ContextBudgetExceeded.
``reasoning``  publishes the events of a retry made inside the model call, in order.
=============  ==========================================================================================

**Nothing half-done.** A run that fails with :class:`ContextBudgetExceeded` rolls back (the error's
``rolls_back`` is set, see :func:`~rxagent.agent.middleware.rolls_back`): the changes to the session that
its log does not have yet are dropped — its input, a summary the failed compression wrote — and so are the
files this request evicted; the log gets only the run's start and its failure. A tool call that ran
before stays recorded, as it must.

**Eviction changes the request, not the history.** The session keeps each result whole, as the tool
returned it: the executor records a call's result in the session's log before any hook sees it, so a
rewritten history would disagree with its own log; and what the model reads back from the file is then
always there, since a file that went missing is written again from the history at the next request. The
file's name is the call id and a hash of the content: written once, never overwritten with something
else, even in a workspace that sessions share.

**Order.** Put the budget's part last (:func:`~rxagent.harness.compose_parts` keeps the parts' order), so
its ``request`` hook is the innermost and counts what every other hook added. Do not combine it with a
:class:`~rxagent.memory.ContextWindow` of your own: both keep their summary under the same state key.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import reactivex
from reactivex import Observable
from reactivex import operators as ops

from rxagent.agent.middleware import Middleware, ReasoningStep
from rxagent.context import RunContext
from rxagent.events import AgentEvent, ContextOverflowRetry
from rxagent.harness._part import HarnessPart
from rxagent.memory import (
    Assembly,
    ContextBudgetExceeded,
    ContextWindow,
    Summariser,
    TokenCounter,
    default_counter,
)
from rxagent.messages import MessageMemo, Msg, TextBlock, ToolResultBlock
from rxagent.model.errors import ModelHTTPError
from rxagent.model.types import ChatChunk, ChatRequest
from rxagent.operators import Outcome, do_finally, frame_pushing, from_async_iterable

__all__ = [
    "EVICTED_DIR",
    "EVICTED_POINTER",
    "ContextBudget",
    "ContextBudgetExceeded",
    "WorkspaceFolder",
    "budget_part",
]

EVICTED_DIR = "tool-results"
"""The folder, inside ``folder(ctx)``, that evicted tool results are written to."""

EVICTED_POINTER = (
    "[The result of `{name}` is {tokens:,} tokens long, so it was saved to the file `{path}` ({lines:,} "
    "lines) instead of being kept here. Read that file with the file tools when you need it, a part at a "
    "time (an offset and a line limit). It begins:]\n{preview}"
)
"""What replaces an evicted result in the request (``{name}``, ``{tokens}``, ``{path}``, ``{lines}``,
``{preview}`` are filled in)."""

WorkspaceFolder = Callable[[RunContext], Path]
"""``folder(ctx) -> Path``: the folder of the run's workspace, where evicted results are written (a
function of a :class:`~rxagent.context.RuntimeContext` fits too)."""

_PREVIEW_LINE_CHARS = 200
_CALLS_KEPT = 64
"""Calls remembered per budget after their request: a side turn's (no ``reasoning`` step ends it) is
dropped when the run's next request replaces it, or by this bound."""


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """How large a request may be, and how the budget makes it fit.

    Attributes:
        max_tokens: the model's context: the whole request plus ``reply_reserve`` must fit in it.
        reply_reserve: tokens kept free for the reply (a request's own ``max_tokens`` raises it).
        evict_over_tokens: a tool result longer than this is evicted to a file.
        preview_lines: lines of an evicted result kept in its pointer.
        recent_turns: turns compression keeps whole as long as anything older can give way.
        compress_target: compression goes down to this fraction of the budget (so the next overflow is
            some turns away, not the next request).
        overflow_shrink: after the server refused a request as too long, the retry may have this fraction
            of the tokens the refused one had (the server counts with its own tokenizer, or has a
            smaller context than ``max_tokens`` says).
        counter: counts tokens (default: the shared tiktoken ``cl100k_base`` counter, counting images
            and PDFs as the run's provider documents them; see
            :class:`~rxagent.memory.ContextWindow`); give the model's own tokenizer when it has one.
        summariser: writes the summary of compressed turns (default: the memory layer's
            :class:`~rxagent.memory.TruncatingSummariser`, no model; :class:`~rxagent.memory.ModelSummariser`
            asks a model).

    Raises:
        ValueError: a setting out of range (a reserve that leaves no room, a fraction outside (0, 1]).

    Example:
        >>> budget = ContextBudget(max_tokens=8_000, reply_reserve=1_000, evict_over_tokens=2_000)
    """

    max_tokens: int
    reply_reserve: int = 1_000
    evict_over_tokens: int = 2_000
    preview_lines: int = 10
    recent_turns: int = 4
    compress_target: float = 0.75
    overflow_shrink: float = 0.75
    counter: TokenCounter | None = None
    summariser: Summariser | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1 or not 0 <= self.reply_reserve < self.max_tokens:
            raise ValueError(
                f"need 0 <= reply_reserve < max_tokens, got reply_reserve={self.reply_reserve}, "
                f"max_tokens={self.max_tokens}"
            )
        if self.evict_over_tokens < 1 or self.preview_lines < 0 or self.recent_turns < 0:
            raise ValueError(
                "evict_over_tokens must be at least 1, preview_lines and recent_turns at least 0"
            )
        for name in ("compress_target", "overflow_shrink"):
            value: float = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"{name} must be in (0, 1], got {value}")


@dataclass(slots=True, eq=False)
class _Call:
    """One model call under the budget: the request before the budget changed it, and its one retry."""

    original: ChatRequest
    tokens: int = 0
    """The tokens of the request the budget sent, as it counted them."""
    reserve: int = 0
    """The reply reserve that request was fitted with."""
    breakdown: dict[str, int] = field(default_factory=lambda: {})
    retried: bool = False
    written: list[Path] = field(default_factory=lambda: [])
    """Files this call evicted results to (removed if the call fails: nothing half-done)."""
    told: list[AgentEvent] = field(default_factory=lambda: [])
    """Events of a retry made inside the model call, for the ``reasoning`` hook to publish."""


@dataclass(slots=True)
class _Evicted:
    """A tool message as the budget sends it: its evicted form, and the files that form points to (paths
    relative to the workspace, with their text). It holds no reference to the message it came from, so
    the memo keeping it lets go with the message."""

    sent: Msg | None
    """The evicted form (``None``: no result of the message is over the threshold)."""
    files: tuple[tuple[Path, str], ...] = ()


class _Budgeting(Middleware):
    """The budget's hooks (see the module). One per :func:`budget_part`; it serves any number of runs."""

    watches_events = False  # the reasoning hook only adds events of its own

    def __init__(self, budget: ContextBudget, folder: WorkspaceFolder, evicted_dir: str) -> None:
        self.budget = budget
        self.folder = folder
        self.evicted_dir = evicted_dir
        self.counter = budget.counter or default_counter()
        self.window = ContextWindow(
            counter=budget.counter,  # None: the window picks the run's provider's rule for media
            max_context_tokens=budget.max_tokens,
            reply_reserve=budget.reply_reserve,
            recent_turns=budget.recent_turns,
            summariser=budget.summariser,
            evict_over_tokens=sys.maxsize,  # eviction is the budget's, to files
            compress_target=budget.compress_target,
        )
        self._calls: OrderedDict[str, _Call] = OrderedDict()
        self._evicted: MessageMemo[_Evicted] = MessageMemo()

    # ---- the hooks -------------------------------------------------------------------------------------

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        """Evict, count, and on overflow compress and count again; publish what changed, then send.

        Lifecycle:
            complete: after ``next``'s output. error: :class:`ContextBudgetExceeded` (rolling back), the
            summariser's error, or a file that cannot be written. cancel: the fitting task is cancelled.
            re-subscribe: fits again.
        """
        call = _Call(request)
        calls = self._calls
        calls[ctx.run_id] = call
        calls.move_to_end(ctx.run_id)
        while len(calls) > _CALLS_KEPT:
            calls.popitem(last=False)

        async def fitted() -> AsyncIterator[tuple[ChatRequest, list[AgentEvent]]]:
            yield await self._fit(call, ctx)

        def send(fit: tuple[ChatRequest, list[AgentEvent]]) -> Observable[ChatRequest | AgentEvent]:
            told: Observable[ChatRequest | AgentEvent] = reactivex.from_iterable(fit[1])
            return reactivex.concat(told, next(fit[0]))

        return from_async_iterable(fitted).pipe(ops.concat_map(send))

    def model_call(
        self, request: ChatRequest, ctx: RunContext, next: Callable[[ChatRequest], Observable[ChatChunk]]
    ) -> Observable[ChatChunk]:
        """Send the request; if the server refuses it as too long, compress and send it once more."""
        call = self._calls.get(ctx.run_id)
        if call is None:  # a call the request hook did not fit (a hook before it answered it)
            return next(request)

        def attempt(sent: ChatRequest) -> Observable[ChatChunk]:
            return next(sent).pipe(ops.catch(overflowed))

        def overflowed(error: Exception, _: Observable[ChatChunk]) -> Observable[ChatChunk]:
            if not isinstance(error, ModelHTTPError) or not error.context_overflow:
                return reactivex.throw(error)

            async def refitted() -> AsyncIterator[ChatRequest]:
                yield await self._refit(call, ctx, error)  # a second overflow raises instead

            return from_async_iterable(refitted).pipe(ops.concat_map(attempt))

        return attempt(request)

    def reasoning(
        self, step: ReasoningStep, ctx: RunContext, next: Callable[[ReasoningStep], Observable[AgentEvent]]
    ) -> Observable[AgentEvent]:
        """Publish the events of a retry made inside the step's model call, before the events after it."""
        run_id = ctx.run_id

        def each(event: AgentEvent, emit: Callable[[AgentEvent], None]) -> None:
            for told in self._told(run_id):
                emit(told)
            emit(event)

        def forget(_: Outcome) -> None:
            self._calls.pop(run_id, None)

        return next(step).pipe(frame_pushing(each, after=lambda: self._told(run_id)), do_finally(forget))

    # ---- fitting -----------------------------------------------------------------------------------------

    async def _fit(self, call: _Call, ctx: RunContext) -> tuple[ChatRequest, list[AgentEvent]]:
        """The request to send and the events before it: evicted, counted, and compressed on overflow."""
        events: list[AgentEvent] = []
        try:
            request = self._evict(call, ctx)
            try:
                assembly = await self.window.assemble(request, ctx, fit=False)
            except ContextBudgetExceeded as over:
                call.retried = True
                events.append(
                    self._overflow(ctx, "budget", over.needed, over.allowed, _parts(over.breakdown))
                )
                assembly = await self.window.assemble(request, ctx)
        except ContextBudgetExceeded as failed:
            raise self._failed(call, failed) from None
        self._sent(call, assembly, self.budget.max_tokens)
        return assembly.request, [*events, *assembly.events]

    async def _refit(self, call: _Call, ctx: RunContext, error: ModelHTTPError) -> ChatRequest:
        """The request again, after the server refused it as too long: compressed to ``overflow_shrink`` of
        what was sent (the call's one retry; its events go to the ``reasoning`` hook)."""
        allowed = int(call.tokens * self.budget.overflow_shrink)
        limit = allowed + call.reserve
        if call.retried:
            refused = ContextBudgetExceeded(
                call.tokens,
                allowed,
                call.breakdown,
                max_context_tokens=limit,
                reserve=call.reserve,
                note=(
                    "The model server refused the request as too long after the one compress-and-retry a "
                    f"call is allowed: {error}"
                ),
            )
            raise self._failed(call, refused) from error
        call.retried = True
        try:
            assembly = await self.window.assemble(self._evict(call, ctx), ctx, max_context_tokens=limit)
        except ContextBudgetExceeded as failed:
            raise self._failed(call, failed) from error
        call.told += [self._overflow(ctx, "provider", call.tokens, allowed, str(error)), *assembly.events]
        self._sent(call, assembly, limit)
        return assembly.request

    @staticmethod
    def _failed(call: _Call, error: ContextBudgetExceeded) -> ContextBudgetExceeded:
        """``error``, made to roll the run back, once the files this call wrote are removed."""
        for path in call.written:
            path.unlink(missing_ok=True)
        call.written.clear()
        error.rolls_back = True
        return error

    def _sent(self, call: _Call, assembly: Assembly, limit: int) -> None:
        call.tokens, call.reserve = assembly.tokens, limit - assembly.allowed
        call.breakdown = dict(assembly.breakdown)

    def _told(self, run_id: str) -> list[AgentEvent]:
        call = self._calls.get(run_id)
        if call is None or not call.told:
            return []
        told, call.told = call.told, []
        return told

    @staticmethod
    def _overflow(
        ctx: RunContext, cause: Literal["budget", "provider"], tokens: int, allowed: int, detail: str
    ) -> ContextOverflowRetry:
        return ContextOverflowRetry(
            run_id=ctx.run_id,
            session_id=ctx.session_id,
            trace_id=ctx.trace_id,
            seq=0,
            parent_run_id=ctx.parent_run_id,
            cause=cause,
            tokens=tokens,
            allowed=allowed,
            detail=detail[:1_000],
        )

    # ---- eviction ------------------------------------------------------------------------------------

    def _evict(self, call: _Call, ctx: RunContext) -> ChatRequest:
        """The call's request with its large tool results replaced by pointers to their files (the files
        it writes are noted in ``call.written``)."""
        request = call.original
        messages = request.messages
        sent: list[Msg] | None = None
        root: Path | None = None
        for index, message in enumerate(messages):
            if message.role != "tool":
                continue
            evicted = self._evicted.get(message, self._evicted_form)
            if evicted.sent is None:
                continue
            if root is None:
                root = Path(self.folder(ctx))
            for path, text in evicted.files:
                if _write_once(root, path, text):
                    call.written.append(root / path)
            if sent is None:
                sent = list(messages)
            sent[index] = evicted.sent
        if sent is None:
            return request
        return replace(request, messages=tuple(sent))

    def _evicted_form(self, message: Msg) -> _Evicted:
        """``message`` with each result over the threshold replaced by its pointer (computed once per
        message object: a request repeats the history)."""
        threshold = self.budget.evict_over_tokens
        blocks: list[object] = []
        files: list[tuple[Path, str]] = []
        for block in message.content:
            # A token is at least one byte and a character at most four: a shorter text is never over.
            text = block.text if isinstance(block, ToolResultBlock) else ""
            if not isinstance(block, ToolResultBlock) or len(text) * 4 <= threshold:
                blocks.append(block)
                continue
            tokens = self.counter.count_text(text)
            if tokens <= threshold:
                blocks.append(block)
                continue
            path = Path(self.evicted_dir) / _file_name(block.tool_use_id, text)
            pointer = EVICTED_POINTER.format(
                name=block.name,
                tokens=tokens,
                path=path.as_posix(),
                lines=text.count("\n") + 1,
                preview=self._preview(text),
            )
            if self.counter.count_text(pointer) >= tokens:
                blocks.append(block)
                continue
            blocks.append(block.model_copy(update={"output": (TextBlock(text=pointer),)}))
            files.append((path, text))
        if not files:
            return _KEPT
        return _Evicted(message.model_copy(update={"content": tuple(blocks)}), tuple(files))

    def _preview(self, text: str) -> str:
        lines = text.splitlines()[: self.budget.preview_lines]
        return "\n".join(
            line if len(line) <= _PREVIEW_LINE_CHARS else line[: _PREVIEW_LINE_CHARS - 1] + "…"
            for line in lines
        )


_KEPT = _Evicted(None)
"""A tool message sent as it is."""


def _parts(breakdown: Mapping[str, int]) -> str:
    return ", ".join(f"{name} {tokens:,}" for name, tokens in breakdown.items())


_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


def _file_name(call_id: str, text: str) -> str:
    """A file name for a result: the call id (made safe) and a hash of the text, so one name is one
    content whatever session writes it."""
    safe = _UNSAFE.sub("_", call_id)[:80] or "result"
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{safe}-{digest}.txt"


def _write_once(root: Path, relative: Path, text: str) -> bool:
    """Write ``text`` to ``root/relative`` unless the file is there already; ``True`` if this wrote it.

    The file appears whole or not at all (written beside it, then renamed over). A folder that leads out
    of ``root`` (a symlink) is refused.

    Raises:
        PermissionError: the folder for evicted results resolves outside the workspace.
        OSError: the file cannot be written.
    """
    target = root / relative
    if target.is_file():
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    real_root, real_parent = os.path.realpath(root), os.path.realpath(target.parent)
    if os.path.commonpath([real_root, real_parent]) != real_root:
        raise PermissionError(
            f"the folder for evicted tool results, {target.parent}, leads outside the workspace {root}"
        )
    handle, temporary = tempfile.mkstemp(dir=real_parent, prefix=".evicting-", suffix=".txt")
    try:
        with os.fdopen(handle, "w", encoding="utf-8", errors="surrogatepass") as file:
            file.write(text)
        os.replace(temporary, os.path.join(real_parent, target.name))
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return True


def budget_part(
    budget: ContextBudget, *, folder: WorkspaceFolder, evicted_dir: str = EVICTED_DIR
) -> HarnessPart:
    """The context budget as a harness part: its middleware, and a line telling the model about evicted
    results. Put it last among the parts (see the module).

    Args:
        budget: the limits.
        folder: the run's workspace folder, from its context (evicted results are written under it, and
            the pointers give paths relative to it, as the file tools take them).
        evicted_dir: the folder inside it for evicted results.

    Emits (through the agent's events): :class:`~rxagent.events.ContextOverflowRetry` before the one retry
    of a call, and the memory layer's :class:`~rxagent.events.ContextCompressed` for each compression; a
    run that cannot fit fails with :class:`ContextBudgetExceeded` and keeps nothing half-done.

    Example:
        >>> part = budget_part(ContextBudget(max_tokens=8_000), folder=lambda ctx: Path("work"))
        >>> part.name
        'budget'
    """
    relative = Path(evicted_dir)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise ValueError(f"evicted_dir must be a folder inside the workspace, got {evicted_dir!r}")
    hooks = _Budgeting(budget, folder, relative.as_posix())
    instructions = (
        f"A tool result longer than {budget.evict_over_tokens:,} tokens is saved to a file under "
        f"{relative.as_posix()}/ in the workspace, and the result you see says which file and how it begins; "
        "read the file with the file tools, a part at a time, when you need more of it."
    )
    return HarnessPart("budget", middleware=(hooks,), instructions=instructions)
