"""A process that runs a ReActAgent on a session and gets killed while tools run (test_crash.py).

Run as ``python crash_process.py CONFIG`` where ``CONFIG`` is JSON. Two kinds of run:

**One call, killed where the test says** (``CONFIG`` without ``batches``): ``db`` (the SQLite file),
``user`` and ``session`` (the session), ``ledger`` and ``statuses`` (where the tools' side effects go),
``tool``, ``arguments`` and ``call_id`` (the one call the scripted model makes) and ``lease_ttl``.

It speaks one JSON line at a time (see child_process.py):

1. it prints ``{"ready": true}`` once the store is open, then reads the run's input text (``{"input": T}``);
2. the tool's body, once it runs, prints ``{"started": true, "facts": [[seq, kind, payload], ...]}``: the
   session's log as the store has it then (the call's ``tool_dispatched`` fact is committed before the
   body runs), and waits for ``{"go": true}``;
3. the tool does its side effect, prints ``{"written": true}`` and waits again, for a kill.

A closed stdin (the test is gone) ends the process. The tools are :func:`ledger_toolkit`, which the test
process uses too (without the waits) to finish the session after a kill.

**Batches, killed at random moments** (``CONFIG`` with ``"batches": true``): ``store`` (a path or URL, as
:func:`~rxagent.session.open_store` takes it), ``user``, ``session``, ``ledger``, ``seed`` and
``lease_ttl``. It prints ``{"ready": true}``, reads ``{"input": T}`` with ``T`` a :func:`round_text`,
prints ``{"running": true}`` and runs it: :func:`batch_model` answers with a batch of side-effecting calls
(:func:`effect_toolkit`, whose bodies take a few random milliseconds and print ``{"started": CALL_ID}``),
then with ``"done"``. It prints ``{"finished": REASON}`` and waits for its kill. The test process and the
server processes of tests/serve/crash_serve.py use the same tools and model.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, this file's folder is first on the path: put the checkout's root before it, so
    # the child runs the same rxagent as the test that started it (not another installed copy).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.model.scripted import (
    FunctionModel,
    ScriptedModel,
    ScriptedResponse,
    ScriptedToolCall,
    ScriptStep,
)
from rxagent.model.types import ChatRequest
from rxagent.session import SQLiteStore, open_store
from rxagent.tools import ToolContext, Toolkit, tool

Gate = Callable[[str], Awaitable[None]]
"""Called by a tool at ``"started"`` (before its side effect) and ``"written"`` (after it)."""


def _append(path: Path, line: str) -> None:
    with path.open("a") as ledger:
        ledger.write(line + "\n")


def ledger_toolkit(ledger: Path, statuses: Path, gate: Gate | None = None) -> Toolkit:
    """Two tools with side effects on files: ``append_line`` (running it twice appends twice) and the
    idempotent ``set_status`` (running it twice leaves the same status)."""

    @tool
    async def append_line(line: str) -> str:
        """Append a line to the ledger.

        Args:
            line: the line.
        """
        if gate is not None:
            await gate("started")
        await asyncio.to_thread(_append, ledger, line)
        if gate is not None:
            await gate("written")
        return f"appended {line!r}"

    @tool(idempotent=True)
    async def set_status(order: str, status: str) -> str:
        """Set an order's status.

        Args:
            order: the order.
            status: its new status.
        """
        if gate is not None:
            await gate("started")
        await asyncio.to_thread((statuses / order).write_text, status)
        if gate is not None:
            await gate("written")
        return f"{order} is {status}"

    return Toolkit([append_line, set_status])


# ---- batches of side effects ---------------------------------------------------------------------------


def _record(ledger: Path, call_id: str) -> None:
    """The side effect: the call's id appended to the ledger, on disk before the tool goes on."""
    descriptor = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, f"{call_id}\n".encode())
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def ledger_counts(ledger: Path) -> Counter[str]:
    """How many times each call id did its side effect."""
    return Counter(ledger.read_text().splitlines()) if ledger.exists() else Counter()


def effect_toolkit(ledger: Path, pause: Callable[[], float] | None = None) -> Toolkit:
    """``effect`` (one call at a time) and ``effect_together`` (``concurrency_safe``): each run of a body
    appends its call's id to ``ledger`` (fsync), between two waits of ``pause()`` seconds; with
    ``pause``, a body that starts prints ``{"started": CALL_ID}`` first (where a test times its kill)."""

    async def body(context: ToolContext) -> str:
        if pause is not None:
            say({"started": context.call_id})
            await asyncio.sleep(pause())
        await asyncio.to_thread(_record, ledger, context.call_id)
        if pause is not None:
            await asyncio.sleep(pause())
        return f"did {context.call_id}"

    @tool
    async def effect(step: int, context: ToolContext) -> str:
        """Do step ``step`` (a side effect; twice is wrong).

        Args:
            step: the step.
        """
        return await body(context)

    @tool(concurrency_safe=True)
    async def effect_together(step: int, context: ToolContext) -> str:
        """Do step ``step`` (a side effect that may run beside others; twice is wrong).

        Args:
            step: the step.
        """
        return await body(context)

    return Toolkit([effect, effect_together])


_ROUND = re.compile(r"round (\d+): (\d+) calls of (effect|effect_together)")


def round_text(number: int, calls: int, together: bool) -> str:
    """The input of round ``number``: a batch of ``calls`` calls, run together or one by one."""
    return f"round {number}: {calls} calls of {'effect_together' if together else 'effect'}"


def call_ids(number: int, calls: int) -> list[str]:
    """The ids of round ``number``'s calls, in the batch's order."""
    return [f"k{number}-c{j}" for j in range(calls)]


def batch_model() -> FunctionModel:
    """Answers a round's input (the newest message) with its batch of calls, and anything else with
    ``"done"``: the same answer in whatever process takes the session over after a kill."""

    def respond(request: ChatRequest) -> ScriptStep:
        last = request.messages[-1]
        asked = _ROUND.fullmatch(last.text) if last.role == "user" else None
        if asked is None:
            return "done"
        number, calls, name = int(asked[1]), int(asked[2]), asked[3]
        ids = call_ids(number, calls)
        return ScriptedResponse(
            tool_calls=[ScriptedToolCall(name, {"step": j}, id=i) for j, i in enumerate(ids)]
        )

    return FunctionModel(respond)


async def batches(config: dict[str, object]) -> None:
    loop = asyncio.get_running_loop()
    rng = random.Random(int(str(config["seed"])))
    ctx = RuntimeContext(user_id=str(config["user"]), session_id=str(config["session"]))
    lease_ttl = config["lease_ttl"]
    assert isinstance(lease_ttl, float | int)
    toolkit = effect_toolkit(Path(str(config["ledger"])), lambda: rng.uniform(0.002, 0.03))
    store = open_store(str(config["store"]))
    try:
        agent = ReActAgent(
            batch_model(), toolkit, store=store, options=AgentOptions(lease_ttl=float(lease_ttl))
        )
        say({"ready": True})
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            os._exit(3)
        say({"running": True})
        result = await agent.call(str(json.loads(line)["input"]), ctx)
        say({"finished": result.reason})
        await loop.run_in_executor(None, sys.stdin.readline)  # the kill comes here, if not before
        os._exit(3)
    finally:  # only when the run failed: a killed process closes nothing
        await store.aclose()


def say(answer: object) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def main(config: dict[str, object]) -> None:
    loop = asyncio.get_running_loop()
    key = (str(config["user"]), str(config["session"]))

    async def listen() -> dict[str, object]:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:  # the test is gone: stop here, as a kill would
            os._exit(3)
        request: dict[str, object] = json.loads(line)
        return request

    async with SQLiteStore(str(config["db"])) as store:

        async def gate(point: str) -> None:
            if point == "started":
                facts = await store.read(key)
                say({"started": True, "facts": [[f.seq, f.kind, f.payload] for f in facts]})
            else:
                say({"written": True})
            await listen()

        arguments = config["arguments"]
        assert isinstance(arguments, dict)
        call = ScriptedToolCall(str(config["tool"]), arguments, id=str(config["call_id"]))
        model = ScriptedModel([ScriptedResponse(tool_calls=[call]), "not reached: the process is killed"])
        toolkit = ledger_toolkit(Path(str(config["ledger"])), Path(str(config["statuses"])), gate)
        lease_ttl = config["lease_ttl"]
        assert isinstance(lease_ttl, float | int)
        options = AgentOptions(lease_ttl=float(lease_ttl))
        agent = ReActAgent(model, toolkit, store=store, options=options)
        say({"ready": True})
        text = (await listen())["input"]
        result = await agent.call(str(text), RuntimeContext(user_id=key[0], session_id=key[1]))
        say({"finished": result.reason})


if __name__ == "__main__":
    settings = json.loads(sys.argv[1])
    asyncio.run(batches(settings) if settings.get("batches") else main(settings))
