"""The session feed's cost: 100 watchers on one session while a 5 000-delta answer streams.

One process, the in-memory store. A run is submitted through the session handle (so it records its events
in the session's log and publishes them to the feed); its model streams ``--deltas`` one-character text
deltas, yielding to the event loop after each (as chunks off a socket would). With ``--watchers`` watchers
attached from the start, each reads the whole feed (in batches, as a server writing to a client does)
until it has the run's result. CPU time (``time.process_time``) is measured from the submission to the
moment the run and every watcher are done; the same run with no watcher is the baseline. Alternating,
``--repeats`` times each.

Prints the medians and, as the last line, ``feed_overhead: X`` (CPU with the watchers ÷ CPU without).
Goal: ≤ 1.5.

Run: ``.venv/bin/python bench/session_feed.py [--watchers N] [--deltas N] [--repeats N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import AsyncIterator

from reactivex import Observable

from rxagent.agent import ReActAgent
from rxagent.chunks import ChatChunk
from rxagent.context import RuntimeContext
from rxagent.events import AgentResult
from rxagent.model.types import ChatRequest, ModelCapabilities
from rxagent.operators import from_async_iterable
from rxagent.session import FeedGap, SessionFeed


class Streaming:
    """A model that streams ``deltas`` one-character deltas, a loop turn apart."""

    def __init__(self, deltas: int) -> None:
        self.deltas = deltas

    @property
    def model_name(self) -> str:
        return "bench"

    @property
    def capabilities(self) -> ModelCapabilities:
        return ModelCapabilities()

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        async def chunks() -> AsyncIterator[ChatChunk]:
            for _ in range(self.deltas):
                yield ChatChunk(text="x")
                await asyncio.sleep(0)
            yield ChatChunk(finish_reason="stop")

        return from_async_iterable(chunks)


async def watch(feed: SessionFeed, after: int, run_id: str) -> int:
    items = 0
    async for batch in feed.watch_batches(after):
        if isinstance(batch, FeedGap):
            raise AssertionError("a watcher missed items")
        items += len(batch)
        last = batch[-1]
        if last.kind == "event" and isinstance(last.event, AgentResult) and last.run_id == run_id:
            return items
    raise AssertionError("the feed ended")


async def one_run(agent: ReActAgent, turn: int, watchers: int) -> tuple[float, int]:
    ctx = RuntimeContext(session_id=f"bench-{turn}")
    session = agent.session(ctx)
    feed = agent.keeper.feed((None, f"bench-{turn}"))
    start = time.process_time()
    run = session.submit("stream")
    watching = [asyncio.ensure_future(watch(feed, 0, run.id)) for _ in range(watchers)]
    result = await run
    seen = await asyncio.gather(*watching)
    elapsed = time.process_time() - start
    assert result.text == "x" * len(result.text)
    assert len(set(seen)) <= 1  # every watcher saw the same items
    return elapsed, seen[0] if seen else 0


async def main(watchers: int, deltas: int, repeats: int) -> None:
    agent = ReActAgent(Streaming(deltas))
    await one_run(agent, -1, watchers)  # warm up
    await one_run(agent, -2, 0)
    with_watchers: list[float] = []
    without: list[float] = []
    items = 0
    for turn in range(repeats):
        elapsed, items = await one_run(agent, 2 * turn, watchers)
        with_watchers.append(elapsed)
        elapsed, _ = await one_run(agent, 2 * turn + 1, 0)
        without.append(elapsed)
    watched, alone = statistics.median(with_watchers), statistics.median(without)
    print(f"run with {watchers} watchers: {watched * 1000:8.1f} ms CPU  ({items} feed items each)")
    print(f"run with no watcher:   {alone * 1000:8.1f} ms CPU")
    print(f"per delta: {alone / deltas * 1e6:.1f} µs alone, {watched / deltas * 1e6:.1f} µs watched")
    print(f"feed_overhead: {watched / alone:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--watchers", type=int, default=100)
    parser.add_argument("--deltas", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    asyncio.run(main(options.watchers, options.deltas, options.repeats))
