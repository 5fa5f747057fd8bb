"""The rxagent command line: the embedded model end to end, JSON lines, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rxagent.cli import main
from rxagent.events import event_from_json


@pytest.mark.llm
def test_run_on_the_embedded_model_calls_the_calculator_and_answers_as_json_lines() -> None:
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "rxagent",
            "run",
            "What is 17 * 23? Use the calculator.",
            "--tools",
            "calculator",
            "--require-tool",
            "--max-iters",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    events = [event_from_json(line) for line in completed.stdout.splitlines()]
    assert events[0].type == "run_started"
    assert events[-1].type == "agent_result"
    calls = [e.call for e in events if e.type == "tool_call_completed"]
    assert calls
    assert calls[0].name == "calculator"
    assert calls[0].state == "complete"
    results = [e.result for e in events if e.type == "tool_result"]
    assert results[0].tool_use_id == calls[0].id
    assert any(e.type == "text_delta" for e in events)


@pytest.mark.llm
def test_run_shows_the_tool_call_and_the_streamed_answer(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", "What is 17 * 23?", "--tools", "calculator", "--require-tool", "--max-iters", "2"])
    out = capsys.readouterr().out
    assert code == 0
    assert "⚙ calculator(" in out
    assert "→ ok:" in out or "→ error:" in out
    assert "step(s)" in out


def test_a_missing_model_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hi", "--gguf", "/nowhere/model.gguf"]) == 1
    assert "MissingModelError: model file not found: /nowhere/model.gguf" in capsys.readouterr().err


def test_a_missing_extra_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    assert main(["run", "hi"]) == 1
    assert "pip install 'rxagent[local]'" in capsys.readouterr().err


def test_an_unreachable_server_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "none"]) == 1
    err = capsys.readouterr().err
    assert "Cannot connect to host 127.0.0.1:9" in err
    assert "gave up after 4 attempts" in err


def test_a_model_name_without_a_server_is_refused() -> None:
    with pytest.raises(SystemExit, match="needs --base-url"):
        main(["run", "hi", "--model", "gpt-x"])


def test_json_lines_stream_from_an_openai_compatible_server(capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio
    import threading

    from aiohttp import web

    body = (
        'data: {"choices":[{"index":0,"delta":{"content":"Hel"}}]}\n\n'
        'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    )

    async def completions(request: web.Request) -> web.Response:
        return web.Response(body=body.encode(), content_type="text/event-stream")

    ready = threading.Event()
    port: list[int] = []
    stopping: list[tuple[asyncio.AbstractEventLoop, asyncio.Event]] = []

    def serve() -> None:
        async def run_server() -> None:
            stop = asyncio.Event()
            stopping.append((asyncio.get_running_loop(), stop))
            app = web.Application()
            app.router.add_post("/v1/chat/completions", completions)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port.append(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
            ready.set()
            await stop.wait()
            await runner.cleanup()

        asyncio.run(run_server())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(5)
    try:
        code = main(
            [
                "run",
                "hi",
                "--base-url",
                f"http://127.0.0.1:{port[0]}/v1",
                "--model",
                "m",
                "--tools",
                "none",
                "--json",
            ]
        )
    finally:
        loop, stop = stopping[0]
        loop.call_soon_threadsafe(stop.set)
        thread.join(5)
    assert code == 0
    lines = capsys.readouterr().out.splitlines()
    events = [json.loads(line) for line in lines]
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "Hello"
    assert events[-1]["type"] == "agent_result"
    assert events[-1]["reason"] == "MODEL_STOP"
