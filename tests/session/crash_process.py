"""A process that runs a ReActAgent on a SQLite session and gets killed while a tool runs (test_crash.py).

Run as ``python crash_process.py CONFIG`` where ``CONFIG`` is JSON: ``db`` (the SQLite file), ``user`` and
``session`` (the session), ``ledger`` and ``statuses`` (where the tools' side effects go), ``tool``,
``arguments`` and ``call_id`` (the one call the scripted model makes) and ``lease_ttl``.

It speaks one JSON line at a time (see child_process.py):

1. it prints ``{"ready": true}`` once the store is open, then reads the run's input text (``{"input": T}``);
2. the tool's body, once it runs, prints ``{"started": true, "facts": [[seq, kind, payload], ...]}``: the
   session's log as the store has it then (the call's ``tool_dispatched`` fact is committed before the
   body runs), and waits for ``{"go": true}``;
3. the tool does its side effect, prints ``{"written": true}`` and waits again, for a kill.

A closed stdin (the test is gone) ends the process. The tools are :func:`ledger_toolkit`, which the test
process uses too (without the waits) to finish the session after a kill.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.session import SQLiteStore
from rxagent.tools import Toolkit, tool

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
    asyncio.run(main(json.loads(sys.argv[1])))
