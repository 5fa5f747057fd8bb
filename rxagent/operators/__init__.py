"""rxagent's stream operators: the catalogue.

Each public function here is a thin, documented entry that imports its implementation lazily from one
private module (``_fold_message.py``, ``_using_resource.py``, …), as ``reactivex.operators`` does. Every
operator is cold and re-subscribable (per-subscription state lives inside ``subscribe``), and every
source is loop-bound: it subscribes inside a running asyncio loop and disposing it cancels its task.

The plumbing for writing fast loop-bound sources is public too: :class:`Source`, :func:`subscribe_to`,
:func:`subscribe_sink` and :func:`subscribe_through` (direct subscription, see ``_source.py``),
:func:`deferred`, :func:`running_loop` and :func:`start_task`, and :func:`first_step` with
:class:`Resumed` (a call of our own run up to its first wait at once, see ``_first_step.py``); the
subscription objects a hot path subclasses instead of passing closures (:class:`Sink`, :class:`Relay`,
:class:`Frame` for ``frame``, :class:`StepLoop` for ``run_steps``); the loop-bound disposables
(:class:`Slot`, :data:`NO_SUBSCRIPTION`); the :class:`MessageFold` accumulator behind ``fold_message``, and
the :class:`KeyedSerializer` that makes runs on one session take turns.

The operators that wait (``retry_backoff``, ``timeout_total``) take a ``clock``: the running loop's by
default, a :class:`~rxagent.clock.VirtualClock` in tests, which then assert exact waits without sleeping.
``map_concurrent`` shows its progress when asked: :class:`ProgressCounts` told to a :class:`ProgressDisplay`,
such as :class:`TqdmProgress` (a notebook widget or a terminal bar; tqdm is the ``notebook`` extra).

To everyone else they are ordinary ``reactivex`` observables. Among themselves the hot ones (``frame``,
``run_steps``, ``sync_of``, ``from_async_iterable``, ``using_resource``, ``to_async_iterator``) subscribe
directly, without reactivex's per-subscribe wrapping (see ``_source.py`` for the promises that makes
safe), and they leave no reference cycles behind: a finished agent run is freed by reference counting
alone. Each subscription is one object with ``__slots__`` (no closures, no ``RLock``): a run in flight
keeps a few dozen objects for the garbage collector to walk (``bench/turn_objects.py``), not a few
hundred.

**Threads.** No subscription takes a lock, so each is driven from one thread: the one it was subscribed
on sends its source's signals and disposes it. The loop-bound operators — ``from_async_iterable``,
``using_resource``, ``retry_backoff``, ``timeout_total``, ``to_async_iterator``, ``last_value``,
``to_list`` and :class:`KeyedSerializer` — run on the event loop's thread only. The synchronous ones —
``frame``, ``run_steps``, ``map_many``, ``map_concurrent``, ``sync_of``, ``fold_message``, ``do_finally``
and ``deferred`` (and the :class:`Frame`, :class:`StepLoop` and :class:`Relay` bases) — may be used on
any thread, one thread per subscription. To feed one from another thread (a worker, a UI callback), hop
onto its thread first: ``loop.call_soon_threadsafe``, or reactivex's ``observe_on`` with an
``AsyncIOThreadSafeScheduler``. What an agent offers other threads is elsewhere:
``RunControl.interrupt`` and a tool's ``ToolContext.progress`` are safe from any thread.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from typing import TYPE_CHECKING, Any, Literal, TypeAlias, TypeVar

from reactivex import Observable

from rxagent.clock import SYSTEM_CLOCK, Clock
from rxagent.operators._awaitables import last_value as _last_value_impl
from rxagent.operators._awaitables import to_list as _to_list_impl
from rxagent.operators._do_finally import do_finally as _do_finally_impl
from rxagent.operators._first_step import Resumed, first_step
from rxagent.operators._flow_control import BufferOverflowError
from rxagent.operators._fold_message import MessageFold
from rxagent.operators._frame import Frame, Push
from rxagent.operators._frame import frame as _frame_impl
from rxagent.operators._frame import frame_pushing as _frame_pushing_impl
from rxagent.operators._from_async_iterable import SourceCancelledError, running_loop, start_task
from rxagent.operators._from_async_iterable import from_async_batches as _from_async_batches_impl
from rxagent.operators._from_async_iterable import from_async_iterable as _from_async_iterable_impl
from rxagent.operators._map_many import map_many as _map_many_impl
from rxagent.operators._outcome import Outcome
from rxagent.operators._progress import (
    ProgressCounts,
    ProgressDisplay,
    ProgressFactory,
    ProgressOption,
    TqdmProgress,
)
from rxagent.operators._run_steps import StepLoop
from rxagent.operators._run_steps import run_steps as _run_steps_impl
from rxagent.operators._serialize_on_key import KeyedSerializer, Turn
from rxagent.operators._slot import NO_SUBSCRIPTION, Slot
from rxagent.operators._source import (
    Relay,
    Sink,
    Source,
    deferred,
    subscribe_sink,
    subscribe_through,
    subscribe_to,
)
from rxagent.operators._sync_of import sync_of as _sync_of_impl
from rxagent.operators._typing import Operator
from rxagent.operators._using_resource import using_resource as _using_resource_impl

# The wrappers of the operators built on every agent step (frame, run_steps, sync_of, …) call their
# implementation imported once, above: a `from` import inside the wrapper ran on each call and cost about
# 2% of an agent conversation (bench/agent_loop.py).

if TYPE_CHECKING:
    from rxagent.chunks import ChatChunk
    from rxagent.messages import Msg
    from rxagent.retry import RetryBudget, RetryPolicy

__all__ = [
    "NO_SUBSCRIPTION",
    "BufferOverflowError",
    "Frame",
    "KeyedSerializer",
    "MessageFold",
    "Operator",
    "Outcome",
    "OverflowPolicy",
    "ProgressCounts",
    "ProgressDisplay",
    "ProgressFactory",
    "ProgressOption",
    "Push",
    "Relay",
    "Resumed",
    "Sink",
    "Slot",
    "Source",
    "SourceCancelledError",
    "StepLoop",
    "TqdmProgress",
    "Turn",
    "deferred",
    "do_finally",
    "first_step",
    "fold_message",
    "frame",
    "frame_pushing",
    "from_async_batches",
    "from_async_iterable",
    "last_value",
    "map_concurrent",
    "map_many",
    "retry_backoff",
    "run_steps",
    "running_loop",
    "start_task",
    "subscribe_sink",
    "subscribe_through",
    "subscribe_to",
    "sync_of",
    "timeout_total",
    "to_async_iterator",
    "to_list",
    "using_resource",
]

_T = TypeVar("_T")
_R = TypeVar("_R")

OverflowPolicy: TypeAlias = Literal["block", "drop_oldest", "error"]
"""What a bounded buffer does when full: pause the producer, drop the oldest item, or fail the stream."""


def fold_message(*, snapshots: bool = False) -> Operator[ChatChunk, Msg]:
    """Fold a model's chunk stream into the assistant :class:`~rxagent.messages.Msg`.

    ::

        chunks:   ─ "He" ─ "llo" ─ call#0 '{"a"' ─ call#0 ': 1}' ─|
        fold:     ───────────────────────────────────────────────── Msg(text "Hello", tool_use a=1) ─|
        (snapshots=True also emits a running Msg after every chunk)

    Tool-call deltas are keyed by id when present and by index otherwise, so two calls that reuse an
    index are never merged; fragments are joined once at the end (linear time); arguments are parsed only
    when complete, and text that is not a JSON object gives a block with ``state="invalid"``, never ``{}``.
    Usage (reports are cumulative: the largest value of each field wins), the finish reason and the
    answering model (``ChatChunk.model``, when a chunk names it) land in ``metadata``; snapshots and the
    final message share one message id.

    Lifecycle:
        complete: emits the final message, then completes (an empty stream gives an empty message).
        error: the upstream error passes through; no partial message is emitted.
        cancel: disposes upstream; emits nothing.
        re-subscribe: a fresh accumulator per subscription.
        threads: any, one per subscription (see the module's **Threads**).
    """
    from rxagent.operators._fold_message import fold_message as impl

    return impl(snapshots=snapshots)


def frame(
    each: Callable[[_T], Iterable[_R]],
    *,
    before: Callable[[], Iterable[_R]] | None = None,
    after: Callable[[], Iterable[_R]] | None = None,
    recover: Callable[[Exception], Observable[_R] | None] | None = None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None = None,
) -> Operator[_T, _R]:
    """Frame a stream in one subscription: ``before()`` items, ``each(item)`` per item, ``after()`` items.

    ::

        source:  ──── a ──── b ──|
        frame:   B ── a' ─── b' ─ A ─|     (B = before(), a' = each(a), A = after())

    ``concat(of(*before), source.pipe(map_many(each)), defer(after))`` says the same with three
    subscriptions and two trampolines; this is the one-subscription form for paths that run once per
    agent step. ``recover(error)`` may return a stream to continue with instead of failing (``None``:
    fail). ``until(stop)`` registers ``stop`` with an outside signal (an interrupt) and returns an
    unregister function: calling ``stop`` ends the source early as if it had completed. ``inject(push)``
    registers ``push`` with an outside producer whose items go through ``each`` like the source's (the
    agent routes retry notices in this way) and returns an unregister function.

    Lifecycle:
        complete: ``after()`` items, then complete. error: ``recover`` or fail. cancel: disposes the
        source (or the recovery stream) and unregisters ``until``. re-subscribe: ``before`` runs again.
        threads: any, one per subscription (the source's signals, ``until`` and ``inject`` callbacks and
        the dispose all on the thread it was subscribed on).

    A hot path subclasses :class:`Frame` instead (its mapping as methods, one object per subscription).
    """
    return _frame_impl(each, before=before, after=after, recover=recover, until=until, inject=inject)


def frame_pushing(
    push: Push[_T, _R],
    *,
    before: Callable[[], Iterable[_R]] | None = None,
    after: Callable[[], Iterable[_R]] | None = None,
    recover: Callable[[Exception], Observable[_R] | None] | None = None,
    until: Callable[[Callable[[], None]], Callable[[], None]] | None = None,
    inject: Callable[[Callable[[_T], None]], Callable[[], None]] | None = None,
) -> Operator[_T, _R]:
    """:func:`frame` whose mapper hands on its results itself: ``push(item, emit)`` calls ``emit(r)`` for
    each result ``r`` of ``item``.

    ::

        source:        ──── a ──── b ──|
        frame_pushing: B ── a' ─── b' ─ A ─|     (push(a, emit) calls emit(a'))

    For per-token paths, where ``each`` would build a container per item only to have it iterated once:
    a model call turns each chunk into its delta events and emits each as it is made. A failure raised
    by ``push`` (by ``emit`` too, that is, downstream) is the stream's failure, as ``each``'s is;
    ``before``, ``after``, ``recover``, ``until`` and ``inject`` are :func:`frame`'s.

    Lifecycle:
        As :func:`frame`'s. complete: ``after()`` items, then complete. error: ``recover`` or fail.
        cancel: disposes the source (or the recovery stream) and unregisters ``until``. re-subscribe:
        ``before`` runs again.
    """
    return _frame_pushing_impl(push, before=before, after=after, recover=recover, until=until, inject=inject)


def sync_of(*items: _T) -> Observable[_T]:
    """Emit ``items``, then complete, synchronously inside ``subscribe``.

    ``reactivex.of`` goes through the current-thread scheduler's trampoline (about twice the cost);
    this is for the small fixed streams built once per agent step or tool call.

    Lifecycle:
        complete: right after the items. cancel: nothing to release. re-subscribe: emits them again.
        threads: any.
    """
    return _sync_of_impl(*items)


def run_steps(
    next_step: Callable[[], Observable[_T] | None],
    recover: Callable[[Exception], Observable[_T] | None] | None = None,
) -> Observable[_T]:
    """Emit the items of ``next_step()``, then of the next ``next_step()``, … until it returns ``None``.

    ::

        next_step() -> ─a─b─|   next_step() -> ─c─|   next_step() -> None
        run_steps:     ─a─b─────c─|

    The loop operator of the agent: every step is subscribed from this one place, so delivery and stack
    depth stay constant however many steps run (``concat(step, defer(rest))`` recursion nests one
    observer per step and dies of ``RecursionError`` on long runs). ``recover(error)`` may turn a
    failing step into one final step (``None``: the error stands).

    Lifecycle:
        complete: when ``next_step()`` returns ``None``. error: a step's error (unless recovered).
        cancel: disposes the current step; no further step starts. re-subscribe: ``next_step`` afresh.
        threads: any, one per subscription (every step signals on the thread it was subscribed on).

    A loop with state of its own subclasses :class:`StepLoop` instead (``next_step`` and ``recover`` as
    methods).
    """
    return _run_steps_impl(next_step, recover)


def map_many(mapper: Callable[[_T], Iterable[_R]]) -> Operator[_T, _R]:
    """Emit every item of ``mapper(item)`` for each upstream item, in order.

    ::

        source:   ─ a ──────── b ─|
        map_many: ─ a1 ─ a2 ── ───|      (mapper(b) == [])

    Like ``flat_map`` over plain iterables, but without subscribing to an observable per item (a
    reactivex subscription costs about as much as 50 plain calls): the hot-path choice for turning each
    chunk into several events. A mapper that raises fails the stream.

    Lifecycle:
        complete/error: passed through. cancel: disposes upstream. re-subscribe: stateless.
        threads: any, one per subscription.
    """
    return _map_many_impl(mapper)


def map_concurrent(
    project: Callable[[_T], Observable[_R]],
    max_concurrent: int,
    *,
    ordered: bool = True,
    progress: ProgressOption = False,
    is_failure: Callable[[_R], bool] | None = None,
    unit: str = "it",
) -> Operator[_T, _R]:
    """Map each item to an observable and run at most ``max_concurrent`` of them at once.

    ::

        source:            ─ a ─ b ─ c ──────────────|       (max_concurrent=2)
        project(a):          ──────── a1 ─|
        project(b):              ─ b1 ─|
        project(c):                     ── c1 ─|           (starts when b ends)
        ordered=True:      ─────────── a1 b1 ── c1 ─|     (b1 held until a ended)
        ordered=False:     ───── b1 ─── a1 ─── c1 ─|      (as they come)

    Items wait (in arrival order) until a place is free. ``ordered=True`` emits the inner streams' items
    in the order of the items they came from: the oldest running stream's items pass at once, later
    ones are held until every stream before them has ended; a stream starts only while it is within
    ``max_concurrent`` of the oldest unfinished one, so the held items never belong to more than
    ``max_concurrent`` streams. ``ordered=False`` emits items as they come (``merge(max_concurrent=n)``
    with a per-subscription state that frees each stream as it ends). The fan-out of an agent over many
    inputs (``ReActAgent.map_runs``) is built on it.

    **Progress.** ``progress=True`` shows a bar (``tqdm.auto``: a widget in a notebook, text on stderr in
    a terminal) of the items finished out of those arrived, with the counts of done, failed and running
    beside it; a text is the bar's label; a factory of :class:`ProgressDisplay` draws it your way (it is
    told every :class:`ProgressCounts`). An item counts as failed when its stream fails (which fails the
    whole stream) or emits an item for which ``is_failure(item)`` is true. The bar is drawn once the
    source has been subscribed to, so a source that emits at subscription (a list) draws a bar of its
    length; tqdm is the ``notebook`` extra, checked when the operator is built.

    Args:
        project: the observable for one item (a run, a request); called when the item's turn comes.
        max_concurrent: most inner streams subscribed at once (at least 1).
        ordered: input order (``True``) or as they come (``False``).
        progress: ``False`` (none), ``True`` (a tqdm bar), a label for the bar, or a factory of
            :class:`ProgressDisplay` called once per subscription.
        is_failure: which emitted items make their stream count as failed in the progress counts.
        unit: what the bar calls one item.

    Raises:
        ValueError: ``max_concurrent`` is below 1 (when the operator is built).
        ImportError: a tqdm bar is asked for and tqdm is not installed (when the operator is built).
        TypeError: ``progress`` is none of the above (when the operator is built).

    Lifecycle:
        complete: once the source has completed and every inner stream has ended (and its held items
        were emitted). error: the source's, an inner stream's or ``project``'s error fails the stream at
        once and disposes every running inner stream. cancel: disposes the source and every running
        inner stream; items still waiting never start. re-subscribe: fresh state (a new numbering,
        nothing shared). The progress display is made at subscription and closed exactly once, with
        its final counts, on complete, error or cancel (cancelled items no longer count as running); a
        display that raises is not called again and fails the stream with its error.
        threads: any, one per subscription (the inner streams signal on the thread it was subscribed on;
        the progress is drawn on the loop's next turn when a loop runs there).

    Example:
        >>> import asyncio, reactivex
        >>> squares = reactivex.of(1, 2, 3).pipe(map_concurrent(lambda n: reactivex.of(n * n), 2))
        >>> asyncio.run(to_list(squares))
        [1, 4, 9]
    """
    from rxagent.operators._map_concurrent import map_concurrent as impl

    return impl(project, max_concurrent, ordered=ordered, progress=progress, is_failure=is_failure, unit=unit)


def from_async_iterable(factory: Callable[[], AsyncIterator[_T]]) -> Observable[_T]:
    """Turn an async iterator factory into a cold, loop-bound observable (see the module for details).

    Lifecycle:
        complete/error: as the iterator ends. cancel: the driving task is cancelled and the iterator's
        ``aclose()`` runs. re-subscribe: ``factory()`` is called again.
        A cancellation that is not a dispose — a deadline the iterator set with ``asyncio.timeout``
        firing while the task waits at a slow consumer's flow gate, outside the iterator — is thrown into
        the iterator, so the stream ends with the iterator's own error (its timeout), else with
        ``SourceCancelledError``: never without a terminal signal.
        threads: the event loop's only (subscribe and dispose on it; items come on it).
    """
    return _from_async_iterable_impl(factory)


def from_async_batches(factory: Callable[[], AsyncIterator[Iterable[_T]]]) -> Observable[_T]:
    """:func:`from_async_iterable` for an iterator that yields its items in batches: each item is emitted
    on its own.

    ::

        factory() yields:  [a, b] ──── [c] ──|
        observable:        a ─ b ───── c ──|

    The iterator is resumed once per batch instead of once per item (resuming an async generator that
    yields from another costs about half a microsecond): :class:`~rxagent.model.openai.OpenAIChatModel`
    yields the chunks of a network read in batches of a few dozen (small enough that the garbage collector
    never finds a batch alive). Between items the dispose and flow-gate checks of
    :func:`from_async_iterable` still run, so a downstream ``take`` or a full consumer stops it inside a
    batch.

    Lifecycle:
        As :func:`from_async_iterable`'s: complete/error as the iterator ends (the items of a batch
        before its error come first when the iterator yields them before raising); cancel cancels the
        task and closes the iterator; re-subscribe calls ``factory()`` again.
    """
    return _from_async_batches_impl(factory)


def using_resource(
    acquire: Callable[[], Awaitable[_R]],
    use: Callable[[_R], Observable[_T]],
    release: Callable[[_R, Outcome], Awaitable[None] | None],
) -> Observable[_T]:
    """Acquire a resource, stream what ``use`` makes of it, and release it exactly once with the outcome.

    ::

        acquire() ──r──▶ use(r): ─ a ─ b ─|   release(r, Outcome.completed()) ─▶ ─ a ─ b ─|
                         use(r): ─ a ─ X      release(r, Outcome.failed(X))    ─▶ ─ a ─ X
                         dispose             release(r, Outcome.cancelled())

    Lifecycle:
        complete: ``release(r, completed)`` is awaited, then ``on_completed``.
        error: ``release(r, failed(e))`` is awaited, then ``on_error(e)``; if release itself fails, its
        error is attached to ``e`` as a note and ``__context__``, never replacing it.
        cancel: ``release(r, cancelled)`` runs (scheduled on the loop); nothing more is emitted. Disposed
        while ``acquire`` is still running: acquire is cancelled; if it returns a resource anyway, that
        resource is released with ``cancelled``.
        re-subscribe: acquires a new resource.
        threads: the event loop's only.
    """
    return _using_resource_impl(acquire, use, release)


def do_finally(action: Callable[[Outcome], None]) -> Operator[_T, _T]:
    """Call ``action(outcome)`` exactly once when the stream ends, saying why: completed, failed or cancelled.

    Lifecycle:
        complete/error: ``action`` runs after the terminal signal has been passed downstream.
        cancel: ``action(Outcome.cancelled())`` runs on dispose. re-subscribe: once per subscription.
        threads: any, one per subscription (``action`` runs on it).
    """
    return _do_finally_impl(action)


def to_async_iterator(
    source: Observable[_T],
    *,
    max_buffer: int = 256,
    low_watermark: int | None = None,
    overflow: OverflowPolicy = "block",
) -> AsyncGenerator[_T, None]:
    """Consume an observable with ``async for`` through a bounded buffer.

    ``overflow="block"`` pauses rxagent's own sources when ``max_buffer`` items are buffered and resumes
    them at ``low_watermark`` (default ``max_buffer // 4``). Items already in flight when it paused are
    still accepted up to a hard cap of ``max_buffer + max(max_buffer, 64)``; a source that cannot pause (a
    synchronous one) and overruns that cap fails the iteration with :class:`BufferOverflowError`.
    ``"drop_oldest"`` keeps the newest ``max_buffer`` items; ``"error"`` fails with ``BufferOverflowError``
    as soon as an item arrives while ``max_buffer`` are buffered. An overflow failure discards the buffer
    and is raised by the next ``__anext__``; a source error is raised after the items buffered before it.

    Lifecycle:
        Subscribes on the first ``__anext__``. Cancelling the consuming task or calling ``aclose()``
        disposes the subscription at once; leaving the ``async for`` early (``break``, an exception)
        disposes it when the abandoned async generator is finalized (on CPython, the loop's next turn;
        ``contextlib.aclosing`` makes it deterministic).
        threads: the event loop's only: items must arrive on it.
    """
    from rxagent.operators._to_async_iterator import to_async_iterator as impl

    return impl(source, max_buffer=max_buffer, low_watermark=low_watermark, overflow=overflow)


def last_value(source: Observable[_T]) -> Coroutine[Any, Any, _T]:
    """Await the last item of ``source``; an empty source raises ``LookupError``. Cancelling disposes it.

    A plain function returning the one coroutine that subscribes and waits (no coroutine of its own).

    Lifecycle:
        complete: returns the last item. error: raises it. cancel: cancelling the awaiting task disposes
        the subscription. re-subscribe: each await subscribes afresh. threads: the event loop's only.
    """
    return _last_value_impl(source)


def to_list(source: Observable[_T]) -> Coroutine[Any, Any, list[_T]]:
    """Await all items of ``source`` as a list. Cancelling the awaiting task disposes the subscription.

    Lifecycle:
        as :func:`last_value`'s, returning every item. threads: the event loop's only.
    """
    return _to_list_impl(source)


def retry_backoff(
    policy: RetryPolicy | None = None, budget: RetryBudget | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> Operator[_T, _T]:
    """Re-subscribe to the source after a retryable error, waiting ``policy.delay(n, error)`` first.

    ::

        attempt 1: ─ X(503)                 wait ≈ base_delay
        attempt 2: ─ X(429, Retry-After 2)  wait 2 s
        attempt 3: ─ a ─ b ─|           ─▶  ─ a ─ b ─|

    An error is retried only when all of these hold: it is retryable
    (:func:`rxagent.retry.is_retryable`); this subscription has not emitted an item yet (a retry would
    emit those items again); the policy has attempts left; the server's ``Retry-After`` is within the
    policy's cap; and ``budget`` (when given) grants a retry. Before each wait the budget's listeners hear
    a :class:`~rxagent.retry.RetryAttempt`. Non-retryable errors, and every error after the first item,
    pass through unchanged; a retryable error that was refused a retry ends the stream as
    :class:`~rxagent.retry.RetryExhausted` (``why`` says which limit, ``__cause__`` is the error).

    Args:
        policy: attempts and backoff (its ``rng`` draws the jitter); ``None`` uses ``RetryPolicy()``.
        budget: the run's shared retry budget; ``None`` limits retries by ``policy.max_attempts`` only.
        clock: where the waits run: the loop's by default, a :class:`~rxagent.clock.VirtualClock` in tests.

    Returns:
        An operator that re-subscribes as described.

    Lifecycle:
        complete: passes through.
        error: retried after a wait (a timer on ``clock``), or passed on as above.
        cancel: disposes the current attempt, or cancels the pending wait so no new attempt starts.
        re-subscribe: a fresh attempt count; the budget, being the run's, is shared.
        threads: the event loop's only (the waits are timers on it).

    Example:
        >>> import asyncio, reactivex
        >>> from rxagent.clock import VirtualClock
        >>> from rxagent.retry import RetryPolicy
        >>> class Flaky(Exception):
        ...     retryable = True
        >>> clock = VirtualClock()
        >>> attempts_at: list[float] = []
        >>> def call() -> reactivex.Observable[str]:
        ...     attempts_at.append(clock.now())
        ...     return reactivex.throw(Flaky()) if len(attempts_at) < 3 else reactivex.of("ok")
        >>> retried = reactivex.defer(lambda _: call()).pipe(
        ...     retry_backoff(RetryPolicy(max_attempts=3, base_delay=1, jitter=0), clock=clock)
        ... )
        >>> asyncio.run(clock.run(retried)), attempts_at
        ('ok', [0.0, 1.0, 3.0])
    """
    from rxagent.operators._retry_backoff import retry_backoff as impl

    return impl(policy, budget, clock=clock)


def timeout_total(
    seconds: float, error: Callable[[], Exception] | None = None, *, clock: Clock = SYSTEM_CLOCK
) -> Operator[_T, _T]:
    """Fail the stream with ``error()`` if it has not completed or failed ``seconds`` after subscription.

    ::

        source:  ─ a ─ b ──────── c ─|
        deadline:            ▲
        result:  ─ a ─ b ─── X(error())

    Unlike ``reactivex.operators.timeout``, which bounds the gap between items and raises a bare
    ``Exception('Timeout')``, this bounds the whole stream (all retries included when placed after
    :func:`retry_backoff`), and the error is yours to choose.

    Args:
        seconds: the deadline, counted from subscription; must be positive and finite.
        error: makes the error to raise; ``None`` gives ``TimeoutError``.
        clock: where the deadline runs: the loop's by default, a :class:`~rxagent.clock.VirtualClock` in
            tests.

    Returns:
        An operator that passes items through until the deadline.

    Raises:
        ValueError: ``seconds`` is not a positive, finite number.

    Lifecycle:
        complete/error before the deadline: passes through and cancels the timer.
        deadline: disposes upstream first (so its task and connection are released), then errors.
        cancel: cancels the timer and disposes upstream.
        re-subscribe: a new deadline per subscription.
        threads: the event loop's only (the deadline is a timer on it).

    Example:
        >>> import asyncio, reactivex
        >>> from rxagent.clock import VirtualClock
        >>> clock = VirtualClock()
        >>> async def main() -> str:
        ...     too_slow = timeout_total(30, lambda: TimeoutError("too slow"), clock=clock)
        ...     try:
        ...         await clock.run(reactivex.never().pipe(too_slow))
        ...     except TimeoutError as error:
        ...         return f"{error} after {clock.now()} s"
        ...     return "unreachable"
        >>> asyncio.run(main())
        'too slow after 30.0 s'
    """
    from rxagent.operators._timeout_total import timeout_total as impl

    return impl(seconds, error, clock=clock)
