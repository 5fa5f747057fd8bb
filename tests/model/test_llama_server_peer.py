"""OpenAIChatModel against a real OpenAI-compatible server nobody here wrote: ``llama_cpp.server``.

One server per module (``python -m llama_cpp.server`` with the embedded SmolLM2 and the
``chatml-function-calling`` format, on a free loopback port). The tests check what rxagent guarantees
against any conforming server, never what the 135M model freely writes, and never the peer's current
shortcomings: they pass whether or not the peer mends them. What was found out about the peer
(llama-cpp-python 0.3.36), and what rxagent does about it:

- Streaming works and ends with ``[DONE]``, but **no usage is sent when streaming**, although rxagent asks
  for it (``stream_options.include_usage``); usage comes only with ``stream=False``. rxagent's message
  then simply has no ``usage`` in its metadata.
- A forced ``tool_choice`` gives a well-formed call (the 135M model's argument values are nonsense).
- An assistant message that carries ``tool_calls`` must have a *string* ``content``: ``null`` (which
  OpenAI accepts) is refused with HTTP 500 (a request validation error), and leaving it out crashes the
  chat template after the 200 response has started (an empty event stream). This is why rxagent sends
  ``""`` there; the tests below check that what rxagent sends is accepted, and run a tool round.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Annotated, Any, Literal

import aiohttp
import pytest
import reactivex
from pydantic import Field
from reactivex import Observable

from rxagent.agent.middleware import Middleware
from rxagent.agent.react import AgentOptions, ReActAgent
from rxagent.context import RunContext
from rxagent.events import AgentEvent, AgentResult, ToolCallCompleted, ToolResult
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.gguf import default_gguf_path
from rxagent.model.openai import OpenAIChatModel, Timeouts
from rxagent.model.types import ChatChunk, ChatRequest, ForceTool
from rxagent.operators import fold_message, to_list
from rxagent.retry import RetryPolicy
from rxagent.tools import Toolkit, tool
from tests.streams import expect

pytestmark = pytest.mark.llm

STARTUP_DEADLINE_S = 60.0
"""Longest wait for the server to answer ``GET /v1/models`` (it loads the 93 MB model in about a second)."""

POLL_S = 0.2
"""How long each readiness attempt waits: for the HTTP answer, then for the process to exit."""

MAX_TOKENS = 16


@dataclass(frozen=True, slots=True)
class LlamaServer:
    """A running ``llama_cpp.server``: its API root and the model name it reports."""

    base_url: str
    model_name: str


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tail(log: IO[bytes], limit: int = 4000) -> str:
    log.flush()
    log.seek(0)
    return log.read().decode("utf-8", "replace")[-limit:]


def _wait_until_ready(process: subprocess.Popen[bytes], url: str, stderr: IO[bytes]) -> str:
    """Poll ``GET /v1/models`` until it answers; the model id it lists. Fails with the server's stderr."""
    deadline = time.monotonic() + STARTUP_DEADLINE_S
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=POLL_S) as response:
                listing = json.load(response)
            return str(listing["data"][0]["id"])
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            pass
        try:
            # Waiting on the process is the pause between attempts, and it notices an early exit.
            code = process.wait(timeout=POLL_S)
        except subprocess.TimeoutExpired:
            continue
        pytest.fail(f"llama_cpp.server exited with code {code} before it was ready:\n{_tail(stderr)}")
    pytest.fail(f"llama_cpp.server was not ready after {STARTUP_DEADLINE_S:.0f} s:\n{_tail(stderr)}")


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """``python -m llama_cpp.server`` on a free port for this module; terminated (or killed) afterwards."""
    port = _free_port()
    command = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(default_gguf_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--chat_format",
        "chatml-function-calling",
        "--n_ctx",
        "2048",
    ]
    log_path: Path = tmp_path_factory.mktemp("llama_server") / "stderr.log"
    # A file, not a pipe: nobody reads the pipe while the tests run, and a full pipe would block the server.
    with log_path.open("w+b") as stderr:
        process = subprocess.Popen(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr
        )
        try:
            base_url = f"http://127.0.0.1:{port}/v1"
            model_name = _wait_until_ready(process, f"{base_url}/models", stderr)
            yield LlamaServer(base_url, model_name)
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _model(server: LlamaServer) -> OpenAIChatModel:
    # No retries: a refused request should fail the test at once, not after backoff.
    return OpenAIChatModel(
        server.model_name,
        base_url=server.base_url,
        api_key_env=None,
        retry=RetryPolicy(max_attempts=1),
        timeouts=Timeouts(connect=5, idle_read=30, total=60),
    )


@pytest.fixture
async def model(llama_server: LlamaServer) -> AsyncIterator[OpenAIChatModel]:
    async with _model(llama_server) as client:
        yield client


@tool
def get_weather(city: Annotated[str, Field(max_length=24)]) -> str:
    """The current weather in a city.

    Args:
        city: the city's name.
    """
    return f"sunny in {city}"


def ask(text: str, **options: Any) -> ChatRequest:
    """A one-message request, greedy and short unless ``options`` say otherwise."""
    settings: dict[str, Any] = {"max_tokens": MAX_TOKENS, "temperature": 0.0}
    settings.update(options)
    return ChatRequest((Msg.user(text),), **settings)


async def test_streams_text_deltas_then_a_finish_reason(model: OpenAIChatModel) -> None:
    seen = await expect(model.stream(ask("Say hello to the world.")))

    assert seen.completed, seen.error
    deltas = [chunk.text for chunk in seen.items if chunk.text]
    reasons = [chunk.finish_reason for chunk in seen.items if chunk.finish_reason is not None]
    assert reasons in (["stop"], ["length"])
    message = await reactivex.from_iterable(seen.items).pipe(fold_message())
    assert message.text == "".join(deltas)
    assert message.metadata["finish_reason"] == reasons[0]


async def test_a_stream_folds_with_or_without_usage_from_the_server(model: OpenAIChatModel) -> None:
    request = ask("Say hello.")
    assert b'"stream_options":{"include_usage":true}' in model.encode_request(request)

    chunks: list[ChatChunk] = await to_list(model.stream(request))

    assert any(chunk.finish_reason is not None for chunk in chunks)
    usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    message = await reactivex.from_iterable(chunks).pipe(fold_message())
    if usages:  # the peer learnt to send it: it is the last word, and it reaches the message
        assert usages[-1].input_tokens > 0
        assert message.metadata["usage"]["input_tokens"] == usages[-1].input_tokens
    else:  # llama-cpp-python 0.3.36 sends none while streaming
        assert "usage" not in message.metadata


async def test_usage_is_reported_without_streaming(model: OpenAIChatModel) -> None:
    message = await model.stream(ask("Say hello.", stream=False)).pipe(fold_message())

    usage = message.metadata["usage"]
    assert usage["input_tokens"] > 0
    assert 0 <= usage["output_tokens"] <= MAX_TOKENS


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_forced_tool_choice_gives_a_well_formed_call(model: OpenAIChatModel, stream: bool) -> None:
    request = ask(
        "What is the weather in Paris?",
        tools=(get_weather.schema(),),
        tool_choice=ForceTool("get_weather"),
        max_tokens=128,
        stream=stream,
    )

    message = await model.stream(request).pipe(fold_message())

    (call,) = message.tool_calls
    assert isinstance(call, ToolUseBlock)
    assert call.id
    assert call.name == "get_weather"
    if message.metadata["finish_reason"] == "length":  # how long the model makes the arguments is its choice
        assert call.state == "invalid"
        return
    assert (call.state, call.error) == ("complete", None)
    assert isinstance(call.input, dict)


async def test_the_server_accepts_a_tool_round_as_rxagent_sends_it(
    model: OpenAIChatModel, llama_server: LlamaServer
) -> None:
    call = ToolUseBlock(
        id="call_1", name="get_weather", input={"city": "Oslo"}, raw_arguments='{"city":"Oslo"}'
    )
    round_trip = ChatRequest(
        (
            Msg.user("Weather in Oslo?"),
            Msg(role="assistant", content=(call,)),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id="call_1", name="get_weather", output=(TextBlock(text="sunny"),))
            ),
        ),
        tools=(get_weather.schema(),),
        max_tokens=2,
        temperature=0.0,
        stream=False,
    )
    body = json.loads(model.encode_request(round_trip))
    assert body["messages"][1]["content"] == ""  # not null: what this peer needs next to tool calls

    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{llama_server.base_url}/chat/completions", json=body) as answer,
    ):
        status, reply = answer.status, await answer.json()

    assert status == 200, reply
    assert reply["choices"][0]["message"]["role"] == "assistant"


class ForceFirstTool(Middleware):
    """Forces a call of the first offered tool (the summarising turn offers none and is left alone)."""

    def request(
        self,
        request: ChatRequest,
        ctx: RunContext,
        next: Callable[[ChatRequest], Observable[ChatRequest | AgentEvent]],
    ) -> Observable[ChatRequest | AgentEvent]:
        if request.tools:
            request = replace(request, tool_choice=ForceTool(request.tools[0].name))
        return next(request)


async def test_react_agent_runs_one_tool_round(llama_server: LlamaServer) -> None:
    ran: list[str] = []

    # An enum keeps the forced call short whatever the model picks, so max_tokens cannot cut it off.
    @tool
    def weather(city: Literal["Paris", "Oslo", "Rome"]) -> str:
        """The current weather in a city.

        Args:
            city: the city.
        """
        ran.append(city)
        return f"sunny in {city}"

    async with _model(llama_server) as model:
        agent = ReActAgent(
            model,
            Toolkit([weather]),
            options=AgentOptions(max_iters=1, max_tokens=128, temperature=0.0),
            middleware=[ForceFirstTool()],
        )
        events = await to_list(agent.stream_events("What is the weather in Paris?"))

    result = events[-1]
    assert isinstance(result, AgentResult)
    assert result.reason == "MAX_ITERATIONS"  # one step, then the summarising turn, whatever it says
    (tool_result,) = [event for event in events if isinstance(event, ToolResult)]
    assert tool_result.result.name == "weather"
    assert tool_result.result.status == "ok"
    assert len(ran) == 1
    assert tool_result.result.text == f"sunny in {ran[0]}"
    (completed,) = [event for event in events if isinstance(event, ToolCallCompleted)]
    assert (completed.call.name, completed.call.state) == ("weather", "complete")
    assert completed.call.id == tool_result.result.tool_use_id
