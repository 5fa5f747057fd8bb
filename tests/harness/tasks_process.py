"""A process whose background tasks are in flight when the test kills it (test_tasks.py).

Run as ``python tasks_process.py DB``: the parent agent of :mod:`tests.harness.task_agents`, on the SQLite
file ``DB``, with one task at a time, starts a ``researcher`` task in one run and a second in another run.
The first looks the Eiffel tower up (a tool round, so its session's log holds its run), then its next
model call holds forever; the second waits in line. Once both runs have ended and the first task holds,
the process prints one JSON line, ``{"running": …, "queued": …, "answers": […]}`` (the two task ids and
the parent's answers), and waits to be killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, this file's folder is first on the path: put the checkout's root before it, so
    # the child runs the same rxagent as the test that started it (not another installed copy).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rxagent.context import RuntimeContext
from rxagent.model.scripted import FunctionModel, ScriptedModel, ScriptedResponse, ScriptStep
from rxagent.model.types import ChatRequest
from tests.harness.task_agents import build, call

CTX = RuntimeContext(user_id="ada", session_id="trip")
QUESTION = "How tall is the Eiffel tower, and who built it?"
SECOND = "Who designed its lifts?"


async def main(path: str) -> None:
    holding = asyncio.Event()

    async def researcher(request: ChatRequest) -> ScriptStep:
        if not any(m.tool_results for m in request.messages):
            return call("lookup", name="Eiffel tower")
        holding.set()
        await asyncio.Event().wait()  # the process is killed here
        raise AssertionError("unreachable")

    parent = ScriptedModel(
        [
            call("start_task", agent="researcher", instructions=QUESTION),
            ScriptedResponse("It runs in the background."),
            call("start_task", agent="researcher", instructions=SECOND),
            ScriptedResponse("That one waits its turn."),
        ]
    )
    agent, tasks = build(parent, FunctionModel(researcher), store=path, max_tasks=1)
    first = await agent.call("Find out about the Eiffel tower, in the background.", CTX)
    second = await agent.call("And about its lifts.", CTX)
    await holding.wait()
    running, queued = await tasks.list(CTX)
    assert (running.status, queued.status) == ("running", "queued")
    said = {"running": running.task_id, "queued": queued.task_id, "answers": [first.text, second.text]}
    print(json.dumps(said), flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
