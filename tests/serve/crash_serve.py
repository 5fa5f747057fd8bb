"""A server process to SIGKILL mid-run (test_crash_serve.py): the server ``rxagent serve`` runs
(:class:`~rxagent.serve.AgentServer`), over an agent whose model answers each round with a batch of
side-effecting calls (tests/session/crash_process.py's :func:`batch_model` and :func:`effect_toolkit`:
each call appends its id to a ledger file, fsync, between two waits of a few random milliseconds).

Run as ``python crash_serve.py CONFIG`` where ``CONFIG`` is JSON: ``store`` (a path or URL, as
:func:`~rxagent.session.open_store` takes it), ``ledger``, ``seed`` and ``lease_ttl``. It prints
``{"listening": URL}`` once it listens, then serves until it is killed (a closed stdin, the test gone, ends
it too).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
from pathlib import Path

if __name__ == "__main__":
    # Run as a script, this file's folder is first on the path: put the checkout's root before it (the
    # same rxagent as the test's, and the test helpers).
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.serve import AgentServer, ServeSettings
from rxagent.session import open_store
from tests.session.crash_process import batch_model, effect_toolkit


async def main(config: dict[str, object]) -> None:
    rng = random.Random(int(str(config["seed"])))
    lease_ttl = config["lease_ttl"]
    assert isinstance(lease_ttl, float | int)
    store = open_store(str(config["store"]))
    toolkit = effect_toolkit(Path(str(config["ledger"])), lambda: rng.uniform(0.002, 0.03))
    agent = ReActAgent(batch_model(), toolkit, store=store, options=AgentOptions(lease_ttl=float(lease_ttl)))
    server = AgentServer(agent, ServeSettings(port=0))
    await server.start()
    print(json.dumps({"listening": server.url}), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    os._exit(3)  # the test is gone: stop as a kill would


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
