"""A process that drives a SQLiteStore for the cross-process tests: one JSON request per stdin line.

Run as ``python sqlite_process.py PATH``. It opens the store, prints ``{"ready": true}``, then answers each
request line with one JSON line:

- ``{"op": "acquire", "owner": O, "ttl": S}`` → ``{"token": N}`` or ``{"token": null}`` (held by another)
- ``{"op": "acquire_wait", "owner": O, "ttl": S, "timeout": S}`` → ``{"token": N}`` once the lease could be
  taken (a process that wants the session retries until the holder's lease expires)
- ``{"op": "append", "text": T}`` → ``{"seq": N}`` or ``{"error": "LeaseLostError"}``
- ``{"op": "renew", "ttl": S}`` → ``{"token": N}`` or ``{"error": "LeaseLostError"}``
- ``{"op": "append_forever"}`` → ``{"seq": N}`` after each committed append, until the process is killed
"""

from __future__ import annotations

import asyncio
import json
import sys

from rxagent.messages import Msg
from rxagent.session import Fact, Lease, LeaseLostError, SQLiteStore
from rxagent.state import SessionKey

KEY: SessionKey = ("ada", "shared")


def message(text: str) -> Fact:
    return Fact("message", json.dumps({"message": Msg.user(text).model_dump(mode="json")}))


def say(answer: object) -> None:
    sys.stdout.write(json.dumps(answer) + "\n")
    sys.stdout.flush()


async def main(path: str) -> None:
    loop = asyncio.get_running_loop()
    lease: Lease | None = None
    async with SQLiteStore(path) as store:
        say({"ready": True})
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            request = json.loads(line)
            op = request["op"]
            try:
                if op == "acquire":
                    lease = await store.acquire(KEY, request["owner"], request["ttl"])
                    say({"token": lease.token if lease is not None else None})
                elif op == "acquire_wait":
                    deadline = loop.time() + request["timeout"]
                    while (lease := await store.acquire(KEY, request["owner"], request["ttl"])) is None:
                        if loop.time() > deadline:
                            raise TimeoutError("the lease was not freed in time")
                        await asyncio.sleep(0.02)
                    say({"token": lease.token})
                elif op == "append":
                    assert lease is not None
                    say({"seq": await store.append(lease, [message(request["text"])])})
                elif op == "renew":
                    assert lease is not None
                    say({"token": (await store.renew(lease, request["ttl"])).token})
                elif op == "append_forever":
                    assert lease is not None
                    n = 0
                    while True:
                        n += 1
                        say({"seq": await store.append(lease, [message(f"fact {n}")])})
            except LeaseLostError:
                say({"error": "LeaseLostError"})


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
