"""Steered and injected messages reach the session in the order they were delivered, however they go: into
the running run at its next boundary, into the history with no run going, as the input of the next run, or
handed back by a run that ended before taking them in.

300 messages, steered or injected at random (a seeded generator), delivered while runs start, go, end and
hand the session on; between deliveries the test yields to the loop a random number of times (now and then
until everything delivered has landed), so each delivery lands in a different state. Checked on the
in-memory store and on a real SQLite file: the user messages of the log, and those of every request the
model got, are the delivered ones in order (on the code before this, 49 of the in-memory run's 300 were
out of place).
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.messages import Msg
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import MemoryStore, SessionStore, SQLiteStore

WAIT = 30.0
MESSAGES = 300


async def loop_turns(count: int) -> None:
    """Let the loop run ``count`` rounds of its ready callbacks (no time passes: a scheduling point)."""
    for _ in range(count):
        await asyncio.sleep(0)


@pytest.mark.parametrize("store_kind", ["memory", "sqlite"])
async def test_300_steered_and_injected_messages_keep_their_order(tmp_path: Path, store_kind: str) -> None:
    rng = random.Random(21)
    requests: list[list[str]] = []

    async def respond(request: ChatRequest) -> str:
        requests.append([m.text for m in request.messages if m.role == "user"])
        await loop_turns(rng.randrange(4))  # a model call takes a few rounds of the loop
        return "noted"

    store: SessionStore = MemoryStore() if store_kind == "memory" else SQLiteStore(tmp_path / "order.db")
    agent = ReActAgent(FunctionModel(respond), store=store)
    ctx = RuntimeContext(session_id="order")
    handle = agent.session(ctx)
    delivered: list[str] = []
    kinds = {"steer": 0, "inject": 0}
    try:
        for index in range(MESSAGES):
            text = f"message {index:03d}"
            delivered.append(text)
            if rng.random() < 0.5:
                handle.steer(text)
                kinds["steer"] += 1
            else:
                handle.inject(Msg.user(text))
                kinds["inject"] += 1
            pause = rng.choice((0, 0, 1, 2, 5, 20, -1))
            if pause < 0:  # now and then, until what was delivered has landed (SQLite works on a thread)
                await asyncio.wait_for(handle.wait(), WAIT)
            else:
                await loop_turns(pause)
        await asyncio.wait_for(handle.wait(), WAIT)
        agent.keeper.forget(handle.key)  # read the log back, not the projection kept in memory
        logged = [m.text for m in (await agent.sessions.state(ctx)).messages if m.role == "user"]
    finally:
        await agent.aclose()
        await store.aclose()

    misplaced = sum(a != b for a, b in zip(logged, delivered, strict=False))
    print(
        f"\n{store_kind}: {kinds['steer']} steered, {kinds['inject']} injected, {len(requests)} model "
        f"requests, {misplaced} out of place"
    )
    assert logged == delivered
    assert requests, "no run started"
    for sent in requests:  # every request carried the messages delivered so far, in order, none skipped
        assert sent == delivered[: len(sent)]
    assert requests[-1] == delivered[: len(requests[-1])]
