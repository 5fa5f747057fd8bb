"""``rxagent serve`` as a real process: where it says it listens, and how it stops.

It runs against the loopback OpenAI-compatible server with a SQLite session store, is stopped with a real
signal mid-run, and the store is read afterwards. Bad inputs tried: a port out of range, a lease TTL of
zero, below zero or not a number, the command without the serve extra's options mixed in (``--json``
belongs to run and chat), a session database it cannot open (PostgreSQL where nothing listens, a database
the server does not have, a SQLite file under a file), a port another process listens on.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import sys
from pathlib import Path

import aiohttp
import pytest

from rxagent.session import SQLiteStore, turns_of
from tests.model.openai_server import OpenAIServer, Reply, Stall, text_chunk
from tests.postgres_server import TestPostgres
from tests.serve.conftest import WAIT
from tests.test_cli import (
    closed_port,
    command_env,
    finish,
    on,
    one_line,
    own_home,  # noqa: F401  (a fixture: every command here gets a home of its own)
    start,
    text_reply,
)


@pytest.mark.parametrize("stop_with", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_interrupts_running_runs_saves_them_and_closes_everything(
    server: OpenAIServer, tmp_path: Path, stop_with: signal.Signals
) -> None:
    db = tmp_path / "sessions.db"
    server.script(
        Reply.sse(text_chunk("Once upon"), Stall()),  # the session API's run: streams, then hangs
        Reply.sse(text_chunk("Long ago"), Stall()),  # the AG-UI run, likewise
    )
    process = await start(*on(server, "serve", "--port", "0", "--db", str(db), "--tools", "none"))
    assert process.stdout is not None
    first = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode()
    assert first.startswith("listening on http://127.0.0.1:")
    url = first.split()[-1]
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(url, timeout=timeout) as http:
        async with http.post("/api/sessions/a/runs", json={"input": "a story"}) as response:
            assert response.status == 202
            run_id = (await response.json())["run_id"]
        async with http.post("/api/sessions/a/runs", json={"input": "and another"}) as response:
            queued_id = (await response.json())["run_id"]  # waits behind the first
        feed = await http.get("/api/sessions/a/feed")
        await _read_until(feed, '"type":"text_delta"')
        message = {"id": "m1", "role": "user", "content": "an old story"}
        agui = await http.post("/ag-ui", json={"threadId": "b", "runId": "r1", "messages": [message]})
        await _read_until(agui, "TEXT_MESSAGE_CONTENT")

        process.send_signal(stop_with)
        done = await finish(process)

        assert done.code == 0, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stdout == ""  # nothing after the first line on stdout
        # The AG-UI client heard how its run ended, and both streams were closed by the server.
        agui_rest = await _read_to_end(agui)
        last = json.loads(agui_rest.strip().splitlines()[-1].removeprefix("data: "))
        assert last["type"] == "RUN_FINISHED"
        assert last["outcome"] == {"type": "cancelled"}
        await _read_to_end(feed)
    await asyncio.wait_for(server.disconnected.wait(), WAIT)  # the model calls were closed
    store = SQLiteStore(db)
    try:
        (turn,) = turns_of(await store.read((None, "a")))
        assert [(r.run_id, r.outcome, r.reason) for r in turn.runs] == [(run_id, "finished", "INTERRUPTED")]
        assert queued_id not in {r.run_id for r in turn.runs}  # cancelled before it started
        (other,) = turns_of(await store.read((None, "b")))
        assert [(r.outcome, r.reason) for r in other.runs] == [("finished", "INTERRUPTED")]
        assert all(s.owner is None for s in await store.sessions())  # every lease was released
    finally:
        await store.aclose()


async def test_otel_spans_and_json_log_lines_carry_the_callers_trace(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # As under `opentelemetry-instrument`: the process sets an SDK tracer provider up, then runs the command.
    spans_file = tmp_path / "spans.jsonl"
    server.script(text_reply("Hello", " there"))
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).with_name("otel_serve.py")),
        str(spans_file),
        *on(server, "serve", "--port", "0", "--tools", "none", "--otel", "--log-json"),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=command_env(),
    )
    assert process.stdout is not None
    url = (await asyncio.wait_for(process.stdout.readline(), WAIT)).decode().split()[-1]
    trace_id, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    async with aiohttp.ClientSession(url) as http:
        headers = {"traceparent": f"00-{trace_id}-{caller_span}-01"}
        async with http.post("/api/sessions/t/runs", json={"input": "hi"}, headers=headers) as response:
            assert response.status == 202
            run_id = (await response.json())["run_id"]
        async with http.get("/api/sessions/t/feed") as feed:
            await _read_until(feed, '"kind":"run_finished"')
    process.send_signal(signal.SIGTERM)
    done = await finish(process)
    assert done.code == 0, done.stderr

    lines = [json.loads(line) for line in done.stderr.splitlines() if line.strip()]  # every line is JSON
    about_run = [line for line in lines if line.get("run_id") == run_id]
    assert [line["message"] for line in about_run] == [
        f"run {run_id} queued on session t",
        f"run {run_id} ended: MODEL_STOP (11 input, 3 output tokens)",
    ]
    assert {(line["trace_id"], line["session_id"]) for line in about_run} == {(trace_id, "t")}
    # Serving tunes the collector (many turns at once; see bench/soak.py) and says so.
    assert any(line["message"].startswith("garbage collector: first threshold 50000;") for line in lines)

    spans = {span["name"]: span for span in map(json.loads, spans_file.read_text().splitlines())}
    agent_span, chat_span = spans["invoke_agent rxagent-cli"], spans["chat test-model"]
    assert agent_span["context"]["trace_id"] == chat_span["context"]["trace_id"] == f"0x{trace_id}"
    assert agent_span["parent_id"] == f"0x{caller_span}"  # under the caller's span
    assert chat_span["parent_id"] == agent_span["context"]["span_id"]
    assert agent_span["attributes"]["gen_ai.conversation.id"] == "t"
    assert agent_span["attributes"]["rxagent.run.id"] == run_id


async def test_bad_serve_options_are_usage_errors() -> None:
    for args in (
        ("--port", "70000"),
        ("--port", "http"),
        ("--json",),
        ("--gc-threshold", "-1"),
        ("--lease-ttl", "0"),
        ("--lease-ttl", "-5"),
        ("--lease-ttl", "soon"),
    ):
        done = await finish(await start("serve", "--tools", "none", *args))
        assert done.code == 2, args
        assert done.stdout == ""
        if args[0] == "--lease-ttl":
            assert "--lease-ttl" in done.stderr


async def test_serve_refuses_to_start_on_a_database_it_cannot_open(
    server: OpenAIServer, tmp_path: Path, postgres: TestPostgres
) -> None:
    (tmp_path / "a-file").write_text("where a folder should be")
    with closed_port() as port:
        for db, message in [
            (  # nothing listens there
                f"postgresql://postgres@127.0.0.1:{port}/rx",
                f"rxagent: cannot connect to the PostgreSQL session store at 127.0.0.1:{port}/rx: ",
            ),
            (  # a real server, a database it does not have
                postgres.url("no_such_database"),
                'database "no_such_database" does not exist',
            ),
            (  # root writes anywhere: a file where the folder should be is what stops it
                str(tmp_path / "a-file" / "sessions.db"),
                f"rxagent: cannot open the session store {tmp_path}/a-file/sessions.db: "
                f"{tmp_path}/a-file is not a folder",
            ),
        ]:
            done = await finish(
                await start(*on(server, "serve", "--port", "0", "--db", db, "--tools", "none"))
            )

            assert done.code == 1, (db, done.stderr)
            assert "listening on" not in done.stdout
            assert done.stdout == ""
            assert message in one_line(said(done.stderr)), done.stderr


async def test_serve_refuses_to_start_on_a_port_in_use(server: OpenAIServer) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]

        done = await finish(await start(*on(server, "serve", "--port", str(port), "--tools", "none")))

    assert done.code == 1
    assert done.stdout == ""
    line = one_line(said(done.stderr))
    assert f"('127.0.0.1', {port})" in line
    assert "address already in use" in line


def said(stderr: str) -> str:
    """``stderr`` without the server's log lines (which start with their time)."""
    assert "Traceback" not in stderr
    return "\n".join(line for line in stderr.splitlines() if not line[:1].isdigit())


async def _read_until(response: aiohttp.ClientResponse, marker: str) -> None:
    async with asyncio.timeout(WAIT):
        while True:
            line = (await response.content.readline()).decode()
            assert line, f"the stream ended before {marker}"
            if marker in line:
                return


async def _read_to_end(response: aiohttp.ClientResponse) -> str:
    async with asyncio.timeout(WAIT):
        return (await response.content.read()).decode()
