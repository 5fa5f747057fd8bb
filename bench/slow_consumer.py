"""Peak client memory with a slow consumer: does it stay flat when the stream grows 10×?

A loopback aiohttp server in a separate process streams N lines of ~1 KB as fast as the socket takes
them. A client process reads them with aiohttp through ``from_async_iterable`` →
``to_async_iterator(overflow="block")`` and consumes each line with CPU busy-work calibrated to 10× the
per-line cost of reading it (a consumer ten times slower than the producer). The gate closes at
``max_buffer`` lines, the source stops reading, aiohttp's reader and the socket fill up, and TCP pushes
back on the server: the client buffers a bounded number of lines however long the stream is.

Each measurement is a fresh client subprocess reporting its own peak RSS (``ru_maxrss``), for N and
10×N lines, alternating, three repetitions each, medians. For comparison the same client also runs
(twice per size) with an unbounded buffer (``to_async_iterator`` with no gate and no limit), where the
stream piles up in memory as fast as the network delivers it. Everything runs on 127.0.0.1; the server
stops when its stdin closes.

Prints intermediate figures and, as the last line, ``rss_growth: X`` (median peak RSS at 10×N ÷ at N,
gated). Goal: ≤ 1.10.

Run: ``.venv/bin/python bench/slow_consumer.py [--lines N] [--repeats N] [--slowdown X]`` (≈ 25 s on an
idle two-core machine).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from typing import Literal

import aiohttp
from aiohttp import web

from rxagent.operators import from_async_iterable, to_async_iterator

__all__ = ["main"]

Mode = Literal["gated", "unbounded"]

LINE_BYTES = 1024
MAX_BUFFER = 256


def serve() -> None:
    """The server process: prints its port on stdout, streams ``/lines?n=N``, stops when stdin closes."""

    async def lines(request: web.Request) -> web.StreamResponse:
        count = int(request.query["n"])
        response = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await response.prepare(request)
        filler = b"x" * (LINE_BYTES - 10)
        batch = 64
        for start in range(0, count, batch):
            # One write per 64 lines: the server is never the bottleneck.
            await response.write(
                b"".join(b"%08d %s\n" % (i, filler) for i in range(start, min(start + batch, count)))
            )
        await response.write_eof()
        return response

    async def run() -> None:
        app = web.Application()
        app.router.add_get("/lines", lines)
        runner = web.AppRunner(app)
        await runner.setup()
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        await web.SockSite(runner, listener).start()
        print(listener.getsockname()[1], flush=True)
        # Stop when the parent closes our stdin (also when the parent dies).
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
        await runner.cleanup()

    asyncio.run(run())


def busy(seconds: float) -> None:
    """Spin the CPU for ``seconds`` (the slow consumer's work on one line)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        pass


async def consume(port: int, count: int, mode: Mode, work: float) -> int:
    """Read ``count`` lines from the server through rxagent, doing ``work`` seconds per line."""
    async with aiohttp.ClientSession() as session:

        async def read_lines() -> AsyncIterator[bytes]:
            async with session.get(f"http://127.0.0.1:{port}/lines", params={"n": str(count)}) as response:
                response.raise_for_status()
                async for line in response.content:
                    yield line

        source = from_async_iterable(read_lines)
        if mode == "gated":
            lines = to_async_iterator(source, max_buffer=MAX_BUFFER, overflow="block")
        else:  # the comparison: no gate, so the buffer holds whatever has arrived and not been consumed
            lines = to_async_iterator(source, max_buffer=sys.maxsize, overflow="error")
        received = 0
        async for line in lines:
            busy(work)
            received += len(line) == LINE_BYTES
            await asyncio.sleep(0)  # a real consumer awaits too (a UI write, a socket): let the producer run
        return received


def client(port: int, count: int, mode: Mode, work: float) -> None:
    """The client process: consume, then print its figures (peak RSS in KiB) as JSON."""
    start = time.perf_counter()
    received = asyncio.run(consume(port, count, mode, work))
    seconds = time.perf_counter() - start
    if received != count:
        raise SystemExit(f"expected {count} lines of {LINE_BYTES} bytes, received {received}")
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    print(json.dumps({"peak_kib": peak_kib, "seconds": seconds}))


def run_client(port: int, count: int, mode: Mode, work: float) -> dict[str, float]:
    """One measurement in a fresh subprocess."""
    command = [sys.executable, __file__, "--client", str(port), "--lines", str(count), "--mode", mode]
    command += ["--work", repr(work)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"client failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description="Peak client RSS with a slow consumer, N vs 10×N lines.")
    parser.add_argument("--lines", type=int, default=4_000, help="N (the short stream), in ~1 KB lines")
    parser.add_argument("--repeats", type=int, default=3, help="gated runs per size")
    parser.add_argument("--comparison-repeats", type=int, default=2, help="unbounded runs per size")
    parser.add_argument("--slowdown", type=float, default=10.0, help="consumer cost ÷ producer cost")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client", type=int, metavar="PORT", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=["gated", "unbounded"], default="gated", help=argparse.SUPPRESS)
    parser.add_argument("--work", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve()
        return
    if args.client is not None:
        client(args.client, args.lines, args.mode, args.work)
        return

    started = time.perf_counter()
    short, long = args.lines, 10 * args.lines
    server = subprocess.Popen(
        [sys.executable, __file__, "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())

        # Calibrate: the per-line cost of producing (reading through the bridge) with no consumer work.
        calibration = [run_client(port, short, "gated", 0.0)["seconds"] / short for _ in range(3)]
        per_line = min(calibration)
        work = args.slowdown * per_line
        print(f"server: 127.0.0.1:{port}, lines of {LINE_BYTES} B, N = {short}, 10×N = {long}")
        print(f"producer: {per_line * 1e6:.2f} µs/line (fastest of {len(calibration)} unloaded runs)")
        print(f"consumer: {work * 1e6:.2f} µs/line of busy-work ({args.slowdown:g}× slower)")

        peaks: dict[tuple[Mode, int], list[float]] = {}
        plan: list[tuple[Mode, int]] = [("gated", args.repeats), ("unbounded", args.comparison_repeats)]
        for mode, repeats in plan:
            for _ in range(repeats):
                for count in (short, long):
                    figures = run_client(port, count, mode, work)
                    peaks.setdefault((mode, count), []).append(figures["peak_kib"] / 1024)
                    print(
                        f"  {mode:9} {count:7} lines: peak RSS {figures['peak_kib'] / 1024:7.1f} MiB, "
                        f"{figures['seconds']:5.2f} s"
                    )
    finally:
        if server.stdin is not None:
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()

    growth: dict[Mode, float] = {}
    for mode in ("gated", "unbounded"):
        at_short = statistics.median(peaks[(mode, short)])
        at_long = statistics.median(peaks[(mode, long)])
        growth[mode] = at_long / at_short
        print(
            f"{mode:9} median peak RSS: {at_short:7.1f} MiB at N, {at_long:7.1f} MiB at 10×N, "
            f"growth {growth[mode]:.3f}"
        )
    print(f"wall time: {time.perf_counter() - started:.1f} s")
    print(f"unbounded buffer (no gate) for comparison: rss_growth would be {growth['unbounded']:.3f}")
    print(f"rss_growth: {growth['gated']:.3f}")


if __name__ == "__main__":
    main()
