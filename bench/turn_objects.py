"""Live container objects per turn in flight: what each running turn keeps for the garbage collector to walk.

``--sessions`` sessions (default 200) each start a turn at once on one :class:`~rxagent.agent.ReActAgent`
over the in-memory store and a :class:`~rxagent.model.scripted.ScriptedModel` (no transport to count): the
model calls the async tool ``wait``, which blocks on one ``asyncio.Event``. Once every session is inside
the tool, ``gc.collect()`` runs and the count of objects the collector tracks (``len(gc.get_objects())``:
containers, the objects that can form cycles) is taken again; the difference from the count taken the
same way before the turns started, divided by the sessions, is the figure. The event is then set and every
turn must end with the model's answer.

A warm-up turn on a session of its own runs first, so one-off caches (imports, compiled schemas) are not
counted as every turn's. The agent runs on a :class:`~rxagent.clock.VirtualClock`, so no timer fires
while the turns wait (a background flush of the session log would otherwise come or not, by timing). The
test model records every request it gets; a real model keeps none, so the bench's model keeps none either.
What is counted is everything a turn holds while it waits: its subscriptions, tasks and coroutines, its
run state and the session's new messages and facts.

Prints the top types among the new objects, then, last, ``turn_containers: X`` (goal <= 100). The count is
deterministic for a given Python and rxagent: ``tests/agent/test_turn_objects.py`` holds a ceiling on it.

Run: ``.venv/bin/python bench/turn_objects.py [--sessions N] [--top N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
from dataclasses import dataclass

from rxagent.agent import ReActAgent
from rxagent.clock import VirtualClock
from rxagent.context import RuntimeContext
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.model.types import ChatRequest, Usage
from rxagent.session import MemoryStore
from rxagent.tools import Toolkit, tool

__all__ = ["TurnObjects", "count_turn_objects", "main"]

USAGE = Usage(input_tokens=10, output_tokens=5)


@dataclass(frozen=True)
class TurnObjects:
    """What :func:`count_turn_objects` found."""

    per_turn: float
    """New container objects per turn in flight."""
    by_type: collections.Counter[str]
    """The new objects (alive while every turn waited, not before), counted by type name."""


class _Unrecorded(list[ChatRequest]):
    """A request log that keeps nothing (the test model's recording is not rxagent's)."""

    def append(self, request: ChatRequest, /) -> None:
        del request


async def count_turn_objects(sessions: int) -> TurnObjects:
    """Run ``sessions`` turns that all wait inside a tool at once, and count the objects they keep alive."""
    release = asyncio.Event()
    inside = 0
    all_inside = asyncio.Event()

    @tool
    async def wait(item: str) -> str:
        """Wait until released.

        Args:
            item: what to wait for.
        """
        nonlocal inside
        inside += 1
        if inside == sessions:
            all_inside.set()
        await release.wait()
        return f"{item}: done"

    turns = sessions + 1  # the warm-up turn first
    calls = [
        ScriptedResponse(tool_calls=[ScriptedToolCall("wait", {"item": f"i{n}"}, id=f"c{n}")], usage=USAGE)
        for n in range(turns)
    ]
    answers = [ScriptedResponse(text="done", usage=USAGE) for _ in range(turns)]
    # The warm-up turn takes one call and its answer; then every session asks before any tool returns.
    model = ScriptedModel([calls[0], answers[0], *calls[1:], *answers[1:]])
    model.requests = _Unrecorded()
    # On a virtual clock, so that no timer (a lease's renewal, a background flush of the session's log)
    # fires while the turns wait: the count is the same on every run and every machine.
    agent = ReActAgent(model, Toolkit([wait]), store=MemoryStore(), clock=VirtualClock())
    release.set()
    warm = await agent.call("warm up", RuntimeContext(user_id="u", session_id="warm-up"))
    assert warm.text == "done", warm
    release.clear()
    inside = 0
    contexts = [RuntimeContext(user_id="u", session_id=f"s{n}") for n in range(sessions)]
    questions = [f"question {n}" for n in range(sessions)]

    gc.collect()
    before = {id(o) for o in gc.get_objects()}
    count_before = len(before)
    tasks = [asyncio.ensure_future(agent.call(q, ctx)) for q, ctx in zip(questions, contexts, strict=True)]
    await all_inside.wait()
    gc.collect()
    now = gc.get_objects()
    count_now = len(now)
    by_type = collections.Counter(type(o).__name__ for o in now if id(o) not in before)
    del now
    release.set()
    results = await asyncio.gather(*tasks)
    assert all(r.text == "done" for r in results), results
    await agent.aclose()
    return TurnObjects((count_now - count_before) / sessions, by_type)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--top", type=int, default=15, help="how many types to list")
    args = parser.parse_args()
    if args.sessions < 1:
        parser.error("--sessions must be at least 1")
    found = asyncio.run(count_turn_objects(args.sessions))
    print(f"new container objects per turn in flight, by type (top {args.top}):")
    for name, count in found.by_type.most_common(args.top):
        print(f"  {name:<32} {count / args.sessions:7.1f}")
    print(f"turn_containers: {found.per_turn:.1f}")


if __name__ == "__main__":
    main()
