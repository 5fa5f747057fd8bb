"""A process that runs a ReActAgent on a shared session, for test_two_process.py.

Run as ``python agent_process.py CONFIG`` where ``CONFIG`` is JSON: ``store`` (a path or URL, as
:func:`~rxagent.session.open_store` takes it), ``user`` and ``session``, ``name`` (this process's name in
its inputs, answers and call ids) and ``lease_ttl``.

Every turn is a tool round: the model (a :class:`~rxagent.model.scripted.FunctionModel`) calls the
read-only ``note`` tool with the user's text, then answers ``"<name> noted <text>"``.

It prints ``{"ready": true}`` once the store is open, then answers one JSON line per request:

- ``{"op": "turns", "count": N}`` runs the turns ``"<name> turn 1"`` … ``"<name> turn N"`` one after the
  other; answers ``{"reasons": [...]}``.
- ``{"op": "hold", "text": T}`` runs ``T``; after the tool round, the model call prints
  ``{"holding": true}`` and waits for ``{"op": "release"}`` before it answers (the test pauses the process
  meanwhile). Answers ``{"reasons": [...], "error": NAME, "message": M}`` (``error`` is ``null`` when the
  run succeeded; ``reasons`` are those of the ``AgentResult`` events it emitted).
- ``{"op": "submit", "text": T, "hold": bool}`` starts the turn ``T`` and answers once it joined the
  session's line: ``{"position": n}``, its place as the store gave it (``0``: it got the session at once).
  With ``hold``, its first model call waits for ``{"op": "open"}`` (answered ``{"opened": true}``).
- ``{"op": "wait"}`` waits for the turns submitted so far; answers ``{"reasons": [...]}`` in the order
  they were submitted here.

A closed stdin (the test is gone) ends the process.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sys

from reactivex import operators as ops

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import AgentEvent, AgentResult
from rxagent.model.scripted import FunctionModel, ScriptedResponse, ScriptedToolCall, ScriptStep
from rxagent.model.types import ChatRequest
from rxagent.operators import to_list
from rxagent.session import DelegatingStore, Lease, SessionStore, Waiting, open_store
from rxagent.state import SessionKey
from rxagent.tools import Toolkit, tool


@tool(read_only=True)
def note(text: str) -> str:
    """Note a text.

    Args:
        text: the text.
    """
    return f"noted {text}"


class Joining(DelegatingStore):
    """Tells where each run joined the session's line: the store's answer to its enqueue."""

    def __init__(self, inner: SessionStore) -> None:
        super().__init__(inner)
        self.places: asyncio.Queue[int] = asyncio.Queue()

    async def enqueue(self, key: SessionKey, owner: str, ttl: float) -> Lease | Waiting:
        answer = await super().enqueue(key, owner, ttl)
        self.places.put_nowait(0 if isinstance(answer, Lease) else answer.ahead + 1)
        return answer


def say(answer: object) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def main(config: dict[str, str | float]) -> None:
    loop = asyncio.get_running_loop()
    name = str(config["name"])
    ctx = RuntimeContext(user_id=str(config["user"]), session_id=str(config["session"]))
    calls = itertools.count(1)
    holding = False
    held: set[str] = set()
    opened = asyncio.Event()
    submitted: list[asyncio.Future[AgentResult]] = []

    async def listen() -> dict[str, object]:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            os._exit(3)
        request: dict[str, object] = json.loads(line)
        return request

    async def respond(request: ChatRequest) -> ScriptStep:
        last = request.messages[-1]
        if last.role == "user":
            if last.text in held:
                await opened.wait()
            # Ids unique across the processes: both write calls into the same session.
            call = ScriptedToolCall("note", {"text": last.text}, id=f"{name}-{next(calls)}")
            return ScriptedResponse(tool_calls=[call])
        if holding:
            say({"holding": True})
            assert (await listen()) == {"op": "release"}
        asked = next(m.text for m in reversed(request.messages) if m.role == "user")
        return f"{name} noted {asked}"

    async def serve(opened_store: SessionStore) -> None:
        store = Joining(opened_store)
        options = AgentOptions(lease_ttl=float(config["lease_ttl"]))
        agent = ReActAgent(FunctionModel(respond), Toolkit([note]), store=store, options=options, name=name)
        say({"ready": True})
        while True:  # until stdin closes (the test is gone)
            request = await listen()
            if request["op"] == "turns":
                count = request["count"]
                assert isinstance(count, int)
                reasons = [(await agent.call(f"{name} turn {k}", ctx)).reason for k in range(1, count + 1)]
                say({"reasons": reasons})
            elif request["op"] == "hold":
                say(await hold(agent, str(request["text"])))
            elif request["op"] == "submit":
                text = str(request["text"])
                if request.get("hold"):
                    held.add(text)
                while not store.places.empty():  # places of earlier turns, which nobody asked for
                    store.places.get_nowait()
                submitted.append(asyncio.ensure_future(agent.call(text, ctx)))
                say({"position": await store.places.get()})
                continue  # the turn goes on
            elif request["op"] == "open":
                opened.set()
                say({"opened": True})
                continue
            elif request["op"] == "wait":
                say({"reasons": [(await run).reason for run in submitted]})
                submitted.clear()
            await agent.keeper.aclose()  # the checkpoints of its runs are written

    async def hold(agent: ReActAgent, text: str) -> dict[str, object]:
        nonlocal holding
        holding = True
        events: list[AgentEvent] = []
        failure: Exception | None = None
        try:
            await to_list(agent.stream_events(text, ctx).pipe(ops.do_action(events.append)))
        except Exception as error:
            failure = error
        finally:
            holding = False
        return {
            "reasons": [e.reason for e in events if isinstance(e, AgentResult)],
            "error": type(failure).__name__ if failure is not None else None,
            "message": str(failure) if failure is not None else None,
        }

    store = open_store(str(config["store"]))
    try:
        await serve(store)
    finally:
        await store.aclose()


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
