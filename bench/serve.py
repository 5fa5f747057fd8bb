"""``rxagent serve`` under load: 100 SSE clients on one session while a 5 000-delta answer streams.

The server runs in a child process (this file with ``--server``): an agent whose model streams ``--deltas``
one-character deltas, one every ``--pace`` seconds, served by :class:`rxagent.serve.AgentServer` on
127.0.0.1. A first short run makes the session; then ``--clients`` clients (this process, raw sockets, so
the clients cost little CPU) follow the session's feed from its head, the long run is submitted, and each
client reads until the run's result. For every text delta every client reads, the latency is the time from
the event's creation (its ``time`` field, stamped by the run) to the moment the client read it; each
client checks it got every fact, in order, once.

Then the memory of a stalled client: a fresh server (SQLite store) with one client that connects to the
feed and reads nothing, while an answer of ``--deltas`` and then of 10× ``--deltas`` streams (a delta every
0.1 ms), and the same without that client. The server's peak RSS above its RSS before the run, and its
peak of traced Python allocations, for each: the stalled client's own cost is the difference, which stays
flat (about zero) however long the answer. (What the run itself holds, with or without the client, is the
store's write queue and the feed's ring, both bounded.)

Then 200 stalled clients (``--stalled``): a fresh server (SQLite store, a send buffer of 16 KiB per
connection so that the system takes little and the server's own buffering is what is measured) whose
session has a ``--deltas`` answer in its log; 200 clients ask for its feed from the start and never read.
The server's traced Python allocations and RSS once every one of them waits on its client, ÷ 200, then
after they all went away (the memory is given back: traced back to where it was). The contract's bound is
128 KiB per stalled client; before the fix a client held a page of the log and its encoding besides
(about 0.6 MB each, and 200 of them took the server from 61 to 189 MB).

Last line: ``serve_p99_ms: X`` (the 99th percentile of the per-event latency). Goal: ≤ 20.

Run: ``.venv/bin/python bench/serve.py [--clients N] [--deltas N] [--pace S]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from reactivex import Observable

from rxagent.agent import ReActAgent
from rxagent.chunks import ChatChunk
from rxagent.model.types import ChatRequest, ModelCapabilities
from rxagent.operators import from_async_iterable

SESSION = "bench"


class Paced:
    """A model whose first answer is one delta (it makes the session) and whose next ones stream
    ``deltas`` one-character deltas, one every ``pace`` seconds (0: a loop turn apart)."""

    def __init__(self, deltas: list[int], pace: float) -> None:
        self.deltas = deltas
        self.pace = pace
        self.calls = 0

    @property
    def model_name(self) -> str:
        return "bench"

    @property
    def capabilities(self) -> ModelCapabilities:
        return ModelCapabilities()

    def stream(self, request: ChatRequest) -> Observable[ChatChunk]:
        count = self.deltas[min(self.calls, len(self.deltas) - 1)]
        self.calls += 1

        async def chunks() -> AsyncIterator[ChatChunk]:
            loop = asyncio.get_running_loop()
            start = loop.time()
            for n in range(count):
                yield ChatChunk(text="x")
                # A steady rate: sleep to the next slot, not a fixed time after this one.
                await asyncio.sleep(max(0.0, start + (n + 1) * self.pace - loop.time()))
            yield ChatChunk(finish_reason="stop")

        return from_async_iterable(chunks)


# ---- the server (child process) -------------------------------------------------------------------------


async def run_server(
    deltas: list[int], pace: float, db: str | None, trace: bool, send_buffer: int | None
) -> None:
    from rxagent.serve import AgentServer, ServeSettings

    agent = ReActAgent(Paced(deltas, pace), store=db)
    server = AgentServer(agent, ServeSettings(port=0, send_timeout=3600.0, send_buffer=send_buffer))
    await server.start()
    if trace:
        tracemalloc.start()
    print(server.url, flush=True)
    loop = asyncio.get_running_loop()
    while True:  # commands on stdin (see Server), or the end of input (stop)
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command, *argument = line.split()
        streams = server.hub.streams
        if command == "stalled":  # until that many feed streams wait on their clients
            count = int(argument[0])
            await _until(lambda: sum(s.waiting for s in streams) >= count)  # noqa: B023 - awaited here
        elif command == "gone":  # until no feed stream is left
            await _until(lambda: not streams)  # noqa: B023 - awaited here
        if command in ("stalled", "gone"):
            await asyncio.sleep(0.2)  # what the last of them started settles
            gc.collect()
            print(f"traced {tracemalloc.get_traced_memory()[0]}", flush=True)
        elif trace:
            print(f"traced {tracemalloc.get_traced_memory()[1]}", flush=True)
            tracemalloc.reset_peak()
    await server.stop()
    await agent.aclose()


async def _until(done: Callable[[], bool]) -> None:
    """Look every 50 ms until ``done()`` (a benchmark's wait for many clients: it may take its time)."""
    while True:
        if done():
            return
        await asyncio.sleep(0.05)


# ---- the clients ----------------------------------------------------------------------------------------


class Server:
    """The child process running the server."""

    def __init__(
        self,
        deltas: list[int],
        pace: float,
        db: str | None = None,
        trace: bool = False,
        send_buffer: int | None = None,
    ) -> None:
        profile = (
            ["-m", "cProfile", "-o", os.environ["BENCH_PROFILE"]] if os.environ.get("BENCH_PROFILE") else []
        )
        args = [
            sys.executable,
            *profile,
            __file__,
            "--server",
            "--deltas",
            ",".join(map(str, deltas)),
            "--pace",
            str(pace),
        ]
        if db:
            args += ["--db", db]
        if trace:
            args.append("--trace")
        if send_buffer is not None:
            args += ["--send-buffer", str(send_buffer)]
        self.process = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        host, port = self.url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)

    def rss(self) -> int:
        """The server's resident memory now, in bytes."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def traced_peak(self) -> int:
        """The peak of traced allocations since the last call (and starts a new peak)."""
        return self.ask("peak")

    def ask(self, command: str) -> int:
        """Send a command (``peak``; ``stalled N``: once N feed streams wait on their clients; ``gone``:
        once none is left) and read the traced bytes it answers (the peak, or what is traced now)."""
        assert self.process.stdin is not None
        assert self.process.stdout is not None
        self.process.stdin.write(f"{command}\n")
        self.process.stdin.flush()
        return int(self.process.stdout.readline().split()[1])

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=60)


async def request(server: Server, method: str, path: str, body: object = None) -> dict[str, object]:
    reader, writer = await asyncio.open_connection(server.host, server.port)
    data = json.dumps(body).encode() if body is not None else b""
    head = (
        f"{method} {path} HTTP/1.0\r\nHost: {server.host}:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n\r\n"
    )
    writer.write(head.encode() + data)
    answer = await reader.read()
    writer.close()
    return json.loads(answer.split(b"\r\n\r\n", 1)[1])


async def open_feed(
    server: Server, after: int, receive_buffer: int | None = None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A feed client: the request sent, the answer's head read. HTTP/1.0, so the body is not chunked."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, (server.host, server.port))
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 22)
    path = f"/api/sessions/{SESSION}/feed?after={after}"
    writer.write(f"GET {path} HTTP/1.0\r\nHost: {server.host}:{server.port}\r\n\r\n".encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200") or head.startswith(b"HTTP/1.1 200"), head
    return reader, writer


class Follower(asyncio.Protocol):
    """One client reading the feed until the run's result.

    For each read it notes only when it came and which facts it held (the first and last ``id``, and how
    many facts: they must be consecutive), with a few C-level searches and no per-event Python work, so
    a client costs little more than its reads and what is measured is the server, not the clients. The
    facts' creation times are read once after the run (:func:`creation_times`).
    """

    def __init__(self, after: int) -> None:
        self.after = self.seq = after
        self.reads: list[tuple[float, int, int]] = []
        """``(when, first id, last id)`` per read that held whole facts."""
        self.buffer = b""
        self.head_read = False
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        now = time.time()
        buffer = self.buffer + data
        if not self.head_read:
            head, _, buffer = buffer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.0 200"), head
            self.head_read = True
            self.ready.set_result(None)
        cut = buffer.rfind(b"\n\n") + 2
        if cut < 2:
            self.buffer = buffer
            return
        whole, self.buffer = buffer[:cut], buffer[cut:]
        count = whole.count(b"\nevent: fact\n")
        if not count:
            return  # heartbeats only
        first = int(whole[whole.find(b"id: ") + 4 : whole.find(b"\n")])
        at = whole.rfind(b"id: ")
        last = int(whole[at + 4 : whole.find(b"\n", at)])
        if (first, last - first + 1) != (self.seq + 1, count) and not self.done.done():
            self.done.set_exception(
                AssertionError(f"facts {first}..{last} after {self.seq}: a gap or a repeat")
            )
        self.seq = last
        self.reads.append((now, first, last))
        if b'"type":"agent_result"' in whole and not self.done.done():
            self.done.set_result(self.seq - self.after)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(AssertionError("the feed ended early"))


async def follow(server: Server, after: int) -> Follower:
    """A client following the feed from ``after`` (await its ``done`` for the facts it read)."""
    loop = asyncio.get_running_loop()
    transport, follower = await loop.create_connection(lambda: Follower(after), server.host, server.port)
    path = f"/api/sessions/{SESSION}/feed?after={after}"
    transport.write(f"GET {path} HTTP/1.0\r\nHost: {server.host}:{server.port}\r\n\r\n".encode())
    return follower


async def creation_times(server: Server, after: int) -> dict[int, float]:
    """When each text delta after ``after`` was created (its event's ``time``), by fact id."""
    reader, writer = await open_feed(server, after)
    times: dict[int, float] = {}
    try:
        while True:
            event = await reader.readuntil(b"\n\n")
            if not event.startswith(b"id: "):
                continue
            fact = json.loads(event.split(b"data: ", 1)[1])
            if fact["kind"] == "event" and fact["data"]["type"] == "text_delta":
                times[fact["seq"]] = fact["data"]["time"]
            elif fact["kind"] == "event" and fact["data"]["type"] == "agent_result":
                return times
    finally:
        writer.close()


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user + system)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def latency_phase(clients: int, deltas: int, pace: float) -> list[float]:
    server = Server([1, deltas], pace)
    try:
        await request(server, "POST", f"/api/sessions/{SESSION}/runs", {"input": "warm up"})
        head = await until_result(server, 0)  # the session exists; the clients follow it from here
        followers = [await follow(server, head) for _ in range(clients)]
        await asyncio.gather(*(f.ready for f in followers))  # every client's stream is open
        started = time.perf_counter()
        server_cpu, client_cpu = cpu_seconds(server.process.pid), time.process_time()
        await request(server, "POST", f"/api/sessions/{SESSION}/runs", {"input": "stream"})
        read = await asyncio.gather(*(f.done for f in followers))
        elapsed = time.perf_counter() - started
        server_cpu = cpu_seconds(server.process.pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
        assert len(set(read)) == 1, "every client read the same facts"
        created = await creation_times(server, head)
        latencies = [
            when - created[n]
            for follower in followers
            for when, first, last in follower.reads
            for n in range(first, last + 1)
            if n in created
        ]
        assert len(latencies) == clients * deltas, (len(latencies), clients * deltas)
        print(f"{clients} clients × {deltas} deltas in {elapsed:.2f} s ({read[0]} facts each, none missed)")
        per_event = server_cpu / (clients * deltas) * 1e6
        load = f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
        print(f"CPU: server {server_cpu:.2f} s ({per_event:.1f} µs per event delivered), ", end="")
        print(f"clients {client_cpu:.2f} s")
        print(f"({load}: the latency's tail grows with the machine's other work)")
        return latencies
    finally:
        server.stop()


async def until_result(server: Server, after: int) -> int:
    """Follow the feed from ``after`` to the next run's result; the result's fact id."""
    reader, writer = await open_feed(server, after)
    try:
        while True:
            event = await reader.readuntil(b"\n\n")
            if event.startswith(b"id: ") and b'"type":"agent_result"' in event:
                return int(event[4 : event.index(b"\n")])
    finally:
        writer.close()


async def peak_rss(server: Server, stop: asyncio.Event) -> int:
    """The server's highest RSS, sampled every 20 ms until ``stop`` is set."""
    peak = 0
    while True:
        peak = max(peak, server.rss())
        try:
            await asyncio.wait_for(stop.wait(), 0.02)
            return peak
        except TimeoutError:
            continue


async def memory_phase(deltas: int, stalled: bool) -> tuple[int, int]:
    """The server's RSS growth (peak during the run − before it) and its peak of traced allocations,
    while a ``deltas`` answer streams with one client connected and reading nothing (or none)."""
    with tempfile.TemporaryDirectory() as folder:
        server = Server([1, deltas], 0.0001, db=os.path.join(folder, "bench.db"), trace=True)
        client: asyncio.StreamWriter | None = None
        try:
            await request(server, "POST", f"/api/sessions/{SESSION}/runs", {"input": "warm up"})
            head = await until_result(server, 0)
            if stalled:
                _, client = await open_feed(server, 0, receive_buffer=4096)  # connected, never reads
            done = asyncio.Event()
            sampling = asyncio.ensure_future(peak_rss(server, done))
            baseline = server.rss()
            server.traced_peak()
            await request(server, "POST", f"/api/sessions/{SESSION}/runs", {"input": "stream"})
            await until_result(server, head)
            done.set()
            peak = await sampling
            return peak - baseline, server.traced_peak()
        finally:
            if client is not None:
                client.close()
            server.stop()


async def stalled_phase(clients: int, deltas: int) -> None:
    """``clients`` feed clients that never read, on a session with a ``deltas`` answer: what each costs the
    server, and what is left once they went away."""
    with tempfile.TemporaryDirectory() as folder:
        server = Server([deltas], 0.0, db=os.path.join(folder, "bench.db"), trace=True, send_buffer=16384)
        stalled: list[socket.socket] = []
        try:
            await request(server, "POST", f"/api/sessions/{SESSION}/runs", {"input": "a long answer"})
            await until_result(server, 0)
            # Asked from a thread: this loop must go on meanwhile (closing the clients it closed).
            before, rss_before = await asyncio.to_thread(server.ask, "gone"), server.rss()
            loop = asyncio.get_running_loop()
            for _ in range(clients):
                client = socket.socket()
                stalled.append(client)
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                client.setblocking(False)
                await loop.sock_connect(client, (server.host, server.port))
                path = f"/api/sessions/{SESSION}/feed"
                await loop.sock_sendall(
                    client, f"GET {path} HTTP/1.0\r\nHost: {server.host}\r\n\r\n".encode()
                )
            during, rss_during = await asyncio.to_thread(server.ask, f"stalled {clients}"), server.rss()
            for client in stalled:
                client.close()
            stalled.clear()
            after, rss_after = await asyncio.to_thread(server.ask, "gone"), server.rss()
        finally:
            for client in stalled:
                client.close()
            server.stop()
    kib = 1024
    print(
        f"{clients} stalled feed clients: traced +{(during - before) / clients / kib:.0f} KiB each "
        f"(+{(during - before) / 2**20:.1f} MiB), RSS +{(rss_during - rss_before) / 2**20:.1f} MiB; "
        f"after they left: traced {(after - before) / kib:+.0f} KiB, "
        f"RSS {(rss_after - rss_before) / 2**20:+.1f} MiB"
    )


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(clients: int, deltas: int, pace: float, memory: bool, stalled: int) -> None:
    latencies = await latency_phase(clients, deltas, pace)
    ms = [v * 1000 for v in latencies]
    print(
        f"latency per event: p50 {statistics.median(ms):.2f} ms, p90 {percentile(ms, 0.9):.2f} ms, "
        f"p99 {percentile(ms, 0.99):.2f} ms, max {max(ms):.2f} ms"
    )
    if memory:
        extra: list[str] = []
        for answer in (deltas, 10 * deltas):
            (rss, traced), (rss_stalled, traced_stalled) = [
                await memory_phase(answer, s) for s in (False, True)
            ]
            print(
                f"{answer:6d}-delta answer: server RSS +{rss / 2**20:.1f} MiB without a stalled client, "
                f"+{rss_stalled / 2**20:.1f} MiB with one (traced peaks {traced / 2**20:.1f} / "
                f"{traced_stalled / 2**20:.1f} MiB)"
            )
            extra.append(f"{(traced_stalled - traced) / 2**20:+.1f} MiB at {answer} deltas")
        print(f"the stalled client's own cost (traced peak, with − without): {', '.join(extra)}")
    if stalled:
        await stalled_phase(stalled, deltas)
    print(f"serve_p99_ms: {percentile(ms, 0.99):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--deltas", default="5000")
    parser.add_argument("--pace", type=float, default=0.001, help="seconds between two deltas")
    parser.add_argument("--no-memory", action="store_true", help="skip the stalled-client memory parts")
    parser.add_argument("--stalled", type=int, default=200, help="stalled feed clients at once (0: none)")
    parser.add_argument("--server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--trace", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--send-buffer", type=int, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.server:
        counts = [int(n) for n in options.deltas.split(",")]
        asyncio.run(run_server(counts, options.pace, options.db, options.trace, options.send_buffer))
    else:
        memory = not options.no_memory
        stalled = options.stalled if memory else 0
        asyncio.run(main(options.clients, int(options.deltas), options.pace, memory, stalled))
