"""``rxagent serve`` as a real process: where it says it listens, and how it stops.

It runs against the loopback OpenAI-compatible server with a SQLite session store, is stopped with a real
signal mid-run, and the store is read afterwards. Bad inputs tried: a port out of range, a lease TTL of
zero, below zero or not a number, the command without the serve extra's options mixed in (``--json``
belongs to run and chat).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import aiohttp
import pytest

from rxagent.session import SQLiteStore, turns_of
from tests.model.openai_server import OpenAIServer, Reply, Stall, text_chunk
from tests.serve.conftest import WAIT
from tests.test_cli import command_env, finish, on, start, text_reply


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
