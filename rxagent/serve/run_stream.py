"""One run streamed to the client that started it, translated on the way: what ``POST /ag-ui`` and
``POST /api/chat`` share.

An endpoint that runs the agent for a request (AG-UI, the AI SDK's chat route) submits the run, then hands
it to :func:`stream_run` with a translator of its protocol (:class:`RunTranslator`). The run's events are
read from the session's feed (so the stream shows exactly what the log holds), translated, encoded and
written in one write per wake of the feed, until the translator has made the run's last word. When the
run ends without its end reaching the stream (it failed before it started, it was cancelled, the server
stops), the translator's :meth:`~RunTranslator.fail` says so instead. The events of nested runs (agents
used as tools) are not this run's and are skipped.

A client that disconnects stops only its stream: the run goes on, and its events stay in the session's
feed (unless the endpoint asks, with ``on_gone``, to stop it then). A :class:`FeedWatcher` sees every fact
of the feed besides the run's events (another run's, the run's state changes) and may add items of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, TypeVar

from aiohttp import web

from rxagent.agent import RunHandle
from rxagent.events import AgentEvent
from rxagent.serve.hub import HUB
from rxagent.serve.streams import EventStream
from rxagent.session import FeedGap, FeedItem, SessionFeed

__all__ = ["FeedWatcher", "RunTranslator", "stream_run"]

ItemT = TypeVar("ItemT")
ItemT_co = TypeVar("ItemT_co", covariant=True)


class RunTranslator(Protocol[ItemT_co]):
    """Turns one run's events into a protocol's items (AG-UI events, UI message chunks), in an order the
    protocol accepts."""

    @property
    def closed(self) -> bool:
        """The run's last word has been made: nothing follows."""
        ...

    def translate(self, event: AgentEvent) -> Sequence[ItemT_co]:
        """The items for one event of the run (none once :attr:`closed`)."""
        ...

    def fail(self, message: str, code: str | None = None) -> Sequence[ItemT_co]:
        """The last word of a run whose own end will not come (``code``: a short machine name)."""
        ...


class FeedWatcher(Protocol[ItemT_co]):
    """Sees each fact of the feed the stream reads that is not one of the run's events (AG-UI follows the
    history and the shared state with it)."""

    def see(self, item: FeedItem, own: bool) -> Sequence[ItemT_co]:
        """Items to send for ``item`` before what follows it; ``own``: it is one of the run's facts."""
        ...


async def stream_run(
    request: web.Request,
    run: RunHandle,
    feed: SessionFeed,
    after: int,
    translator: RunTranslator[ItemT],
    encode: Callable[[Sequence[ItemT]], bytes],
    *,
    headers: Mapping[str, str] | None = None,
    watcher: FeedWatcher[ItemT] | None = None,
    on_gone: Callable[[RunHandle], None] | None = None,
) -> web.StreamResponse:
    """Answer ``request`` with the events of ``run`` as server-sent events (see the module).

    Args:
        request: the request that submitted the run.
        run: the run.
        feed: the session's feed, opened before the run was submitted.
        after: the feed position the run's facts come after (the feed's durable head before the submit).
        translator: the protocol's translator for this run.
        encode: writes a batch of the translator's items as SSE bytes.
        headers: more response headers (a protocol's own, such as the AI SDK's stream version).
        watcher: sees the feed's other facts (see :class:`FeedWatcher`).
        on_gone: called with the run when the client went away before the run's last word (not while the
            server stops): to stop it.
    """
    hub = request.app[HUB]
    settings = hub.settings
    stream = EventStream(
        request,
        heartbeat=settings.heartbeat,
        send_timeout=settings.send_timeout,
        ends_by_itself=True,
        clock=hub.agent.clock,
    )
    stream.response.headers.update(headers or {})
    cursor = after
    outcome: list[BaseException | None] = []

    async def take(upto: int | None) -> None:
        nonlocal cursor
        if upto is not None and cursor >= upto:
            return
        async for batch in feed.watch_batches(cursor):
            if isinstance(batch, FeedGap):  # not with the catch-up policy; kept exact all the same
                cursor = batch.last
                continue
            items = _take_batch(batch, run.id, translator, watcher)
            cursor = batch[-1].seq
            if items:
                await stream.send(encode(items))
            if translator.closed or (upto is not None and cursor >= upto):
                return

    async def body() -> None:
        await take(None)

    async def last_word() -> None:
        if translator.closed:
            return
        if run.done():  # it ended before its end reached this stream: read the feed up to now
            try:
                async with hub.agent.clock.timeout(settings.stop_timeout):
                    await take(feed.durable_head)
            except TimeoutError:
                pass
            if translator.closed:
                return
        await stream.send(encode(translator.fail(*_why_no_end(run, outcome, hub.stopping))))

    settled = asyncio.ensure_future(_settle(run, outcome))
    settled.add_done_callback(lambda _: stream.end())
    try:
        await hub.serve_stream(stream, body, last_word)
    finally:
        settled.cancel()
        if on_gone is not None and not translator.closed and not hub.stopping:
            on_gone(run)  # the client went away before the run's end reached it
    return stream.response


def _take_batch(
    batch: list[FeedItem], run_id: str, translator: RunTranslator[ItemT], watcher: FeedWatcher[ItemT] | None
) -> list[ItemT]:
    items: list[ItemT] = []
    for item in batch:
        # The run's own facts carry its id; of its events, nested runs' (agents used as tools) are skipped.
        own = item.run_id == run_id
        if watcher is not None:
            items.extend(watcher.see(item, own))
        if not own or item.kind != "event":
            continue
        event = item.event
        if event is None or event.run_id != run_id:
            continue
        items.extend(translator.translate(event))
        if translator.closed:
            break
    return items


async def _settle(run: RunHandle, outcome: list[BaseException | None]) -> None:
    try:
        await run
        outcome.append(None)
    except BaseException as error:
        outcome.append(error)


def _why_no_end(run: RunHandle, outcome: list[BaseException | None], stopping: bool) -> tuple[str, str]:
    """Why a run's stream ends without the run's own end: a message and a code."""
    if not run.done():
        return "the server stopped before the run ended", "server_stopping"
    error = outcome[0] if outcome else None
    if isinstance(error, asyncio.CancelledError):
        return (
            "the run was cancelled (the server is stopping)" if stopping else "the run was cancelled"
        ), "cancelled"
    if error is not None:
        return f"{type(error).__name__}: {error}", type(error).__name__
    return "the run ended without reporting how", "no_result"
