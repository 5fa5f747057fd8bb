"""A write killed at any point (SIGKILL, from this test, the parent) leaves the old content or the new.

A child process writes 16 MiB over a 3 MiB file with :func:`~rxagent.harness.atomic_write` (what the
``write`` and ``edit`` tools write with), from an iterator that stops at a chosen chunk: it tells the
parent it is there (a line on its stdout) and waits. The parent then kills it with SIGKILL. No sleep
times anything: the child is killed exactly where it said it was.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from threading import Thread

import pytest

from rxagent.harness import atomic_write

ROOT = Path(__file__).resolve().parents[2]
CHUNKS = 16
CHUNK = 1 << 20
OLD = b"old content\n" * (3 * CHUNK // 12)
NEW = b"".join(bytes([65 + i]) * (CHUNK - 1) + b"\n" for i in range(CHUNKS))

CHILD = """
import sys
from rxagent.harness import atomic_write

folder, name, stop = sys.argv[1], sys.argv[2], int(sys.argv[3])


def stopped_here():
    print("here", flush=True)
    sys.stdin.read()  # until killed


def chunks():
    for index in range(CHUNKS + 1):
        if index == stop:
            stopped_here()
        if index == CHUNKS:
            return  # after the last chunk: atomic_write flushes and renames next
        yield bytes([65 + index]) * (CHUNK - 1) + b"\\n"


atomic_write(folder, name, chunks())
if stop > CHUNKS:
    stopped_here()  # the write is done
""".replace("CHUNKS", str(CHUNKS)).replace("CHUNK", str(CHUNK))


def _killed_at(folder: Path, stop: int) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder), "data.txt", str(stop)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    output = child.stdout
    assert output is not None
    try:
        said: Future[bytes] = Future()
        Thread(target=lambda: said.set_result(output.readline()), daemon=True).start()
        assert said.result(timeout=120) == b"here\n", "the child never reached the chosen point"
        child.send_signal(signal.SIGKILL)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL


@pytest.mark.parametrize(
    "stop", [0, 1, CHUNKS // 2, CHUNKS], ids=["before a byte", "one chunk in", "half way", "all written"]
)
def test_a_write_killed_midway_leaves_the_old_content_whole(tmp_path: Path, stop: int) -> None:
    (tmp_path / "data.txt").write_bytes(OLD)

    _killed_at(tmp_path, stop)

    assert (tmp_path / "data.txt").read_bytes() == OLD


def test_a_write_killed_once_done_leaves_the_new_content_whole(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_bytes(OLD)

    _killed_at(tmp_path, CHUNKS + 1)

    assert (tmp_path / "data.txt").read_bytes() == NEW
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]


def test_a_write_that_fails_leaves_the_file_and_no_temporary_file(tmp_path: Path) -> None:
    (tmp_path / "data.txt").write_bytes(OLD)

    def failing() -> Iterator[bytes]:
        yield b"partial"
        raise OSError("the disk is full")

    with pytest.raises(OSError, match="disk is full"):
        atomic_write(tmp_path, "data.txt", failing())

    assert (tmp_path / "data.txt").read_bytes() == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["data.txt"]
