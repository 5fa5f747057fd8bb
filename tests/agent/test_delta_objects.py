"""A streamed text delta costs one event and nothing else on its way to the consumer: the objects the
garbage collector tracks, counted per delta through ``stream_events`` and ``to_async_iterator``, over HTTP.

The collector's generation-0 count (``gc.get_count()[0]``, with the collector off) goes up by one for each
tracked object made and down by one for each freed. A consumer that drops every event must leave it flat
over thousands of deltas (a model whose chunks piled up for a whole network read set off collections that
promoted them: a sixth of a delta's CPU); one that keeps every event must see it grow by one per delta (the
event holds no container). Counting objects is deterministic: no timing here.
"""

from __future__ import annotations

import dataclasses
import gc

from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import TextDelta
from rxagent.operators import to_async_iterator
from rxagent.tools import Toolkit
from tests.agent.test_agent_openai_loopback import answer_reply
from tests.model.openai_server import OpenAIServer, make_model

DELTAS = 3_000
FIRST, LAST = 200, 2_800
"""The deltas between which the count is compared (away from the run's start and end)."""


async def tracked_growth(server: OpenAIServer, *, keep: bool) -> tuple[int, list[TextDelta]]:
    """The net growth of tracked objects from delta ``FIRST`` to delta ``LAST`` of a run streaming
    ``DELTAS`` text deltas, and the deltas (all of them if ``keep``, else none)."""
    server.script(answer_reply("warm", "up"), answer_reply(*[f"t{i} " for i in range(DELTAS)]))
    kept: list[TextDelta] = []
    counts: list[int] = []
    async with make_model(server) as model:
        agent = ReActAgent(model, Toolkit([]))
        await agent.call("warm up", RuntimeContext(session_id="warm"))  # imports, caches, the connection
        gc.collect()
        gc.disable()
        try:
            seen = 0
            async for event in to_async_iterator(agent.stream_events("hi", RuntimeContext(session_id="s"))):
                if type(event) is TextDelta:
                    seen += 1
                    if keep:
                        kept.append(event)
                    if seen in (FIRST, LAST):
                        counts.append(gc.get_count()[0])
                del event
        finally:
            gc.enable()
    assert seen == DELTAS
    return counts[1] - counts[0], kept


async def test_dropped_deltas_leave_no_tracked_object_behind(server: OpenAIServer) -> None:
    growth, _ = await tracked_growth(server, keep=False)
    # What is left is the transport's, per network read (a few weakrefs), not per delta.
    assert growth <= (LAST - FIRST) // 20, growth


async def test_a_kept_delta_is_one_tracked_object(server: OpenAIServer) -> None:
    growth, kept = await tracked_growth(server, keep=True)
    deltas = LAST - FIRST
    # About one per delta (objects made before the window and freed in it count down).
    assert deltas - deltas // 20 <= growth <= deltas + deltas // 20, growth
    assert "".join(event.text for event in kept) == "".join(f"t{i} " for i in range(DELTAS))
    # A slotted value: no per-event dictionary; its fields are strings and numbers, nothing tracked.
    event = kept[FIRST]
    assert not hasattr(event, "__dict__")
    assert [e.seq for e in kept] == sorted({e.seq for e in kept})
    for field in dataclasses.fields(event):
        assert not gc.is_tracked(getattr(event, field.name)), field.name
