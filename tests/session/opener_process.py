"""A process that opens SQLite stores on request, for the tests of many processes opening one file at once.

Run as ``python opener_process.py``. It prints ``{"ready": true}``, then for each request line
``{"path": P, "session": S, "text": T}`` opens a :class:`~rxagent.session.SQLiteStore` on ``P`` (the moment
the line arrives: processes sent their lines together open the file together), takes the lease of the
session ``("ada", S)``, appends the message ``T``, closes the store and answers ``{"seq": N}``, or
``{"error": NAME, "message": M}`` if the store refused the file. A closed stdin ends the process.
"""

from __future__ import annotations

import asyncio
import json
import sys

from sqlite_process import message, say

from rxagent.session import SessionFileError, SQLiteStore


async def write(store: SQLiteStore, session: str, text: str) -> int:
    async with store:
        lease = await store.acquire(("ada", session), "opener", 60)
        assert lease is not None
        return await store.append(lease, [message(text)])


def main() -> None:
    say({"ready": True})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            store = SQLiteStore(request["path"], synchronous="NORMAL")  # a test of locks, not of fsync
        except SessionFileError as error:
            say({"error": type(error).__name__, "message": str(error)})
            continue
        say({"seq": asyncio.run(write(store, request["session"], request["text"]))})


if __name__ == "__main__":
    main()
