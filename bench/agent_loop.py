"""Client CPU of a whole tool-using conversation: rxagent's ReAct agent vs. a hand-written aiohttp loop.

A loopback OpenAI-compatible server in a separate process scripts one conversation of ``--rounds`` tool
rounds and a final answer. It is stateless per request: it counts the ``role: "tool"`` messages in the
request body to know which response is due, and checks that the last tool result is the echo of the
arguments it streamed (any other body gets a 400, so a client that does the work wrong fails loudly).

* A tool round streams one ``echo`` call whose argument text arrives in ``--fragments`` SSE chunks (id and
  name on the first), then ``finish_reason: "tool_calls"``, a usage chunk and ``[DONE]``.
* The final response streams ``--fragments`` text deltas, ``finish_reason: "stop"``, usage, ``[DONE]``.

In this process, with ``time.process_time`` around each conversation, alternating (rxagent first):

(a) rxagent: ``await agent.call(question, ctx)`` on a :class:`~rxagent.agent.ReActAgent` over an
    :class:`~rxagent.model.openai.OpenAIChatModel` and a toolkit holding the async ``echo`` tool (each run
    in a fresh session, so every conversation starts from the question alone);
(b) raw: POST the growing message list as JSON, ``async for line in response.content``, ``json.loads``
    each ``data:`` line, accumulate text and argument fragments per call index (joined once),
    ``json.loads`` the arguments, call the tool function, append the assistant and tool messages, repeat
    until an answer without tool calls.

Prints the medians (ms per conversation, µs per streamed delta); then the history-growth figure, the
same two clients over :data:`HISTORY_ROUNDS` tool rounds of one delta each (little streaming, so what
grows is the cost of each request as the history lengthens), as ``history_ratio: X`` (rxagent ÷ raw;
goal 1.2 or below); then the per-token figure of the whole agent path, an answer of ``--text-deltas``
text deltas and no tool call, which rxagent's consumer reads with ``async for`` over
``agent.stream_events(...)`` (through ``to_async_iterator``) joining the
:class:`~rxagent.events.TextDelta` texts, against (b) on the same stream, as ``agent_text_ratio: X``
(rxagent ÷ raw; goal 0.6 or below), after ``agent_text_floor_ratio: X``, a client that only receives the same
response's bytes (``_loopback.floor_run``) ÷ raw: below it no client goes that takes each read as it
arrives; then the fixed cost, the client CPU of a one-delta run (no tool
call, one text delta: what a run costs before any streaming), over ``--fixed-runs`` runs of each client
in a fresh session each, as ``fixed_cost_ms: X`` (rxagent; goal 1 ms or below) and
``fixed_cost_raw_ms: X`` (the hand-written loop); and, as the last line, ``ratio: X`` (rxagent ÷ raw,
for the conversation above).

Run: ``.venv/bin/python bench/agent_loop.py [--rounds N] [--fragments N] [--text-deltas N] [--repeats N]
[--fixed-runs N] [--text-only] [--spin-us µs]``. ``--text-only`` measures the text run alone (its lines,
``agent_text_ratio`` last). ``--spin-us`` makes the text run's server busy-wait between events, so reads
carry one or two events as on a quiet machine (see ``bench/stream_overhead.py``); flat out (the default)
on a loaded machine the events pile up into large reads and the ratio is lower than on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import aiohttp
from _loopback import floor_run, spawned_server, write_sse
from _loopback import serve as serve_completions
from aiohttp import web

from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import TextDelta
from rxagent.model.openai import OpenAIChatModel
from rxagent.operators import to_async_iterator
from rxagent.tools import Toolkit, tool

__all__ = ["main"]

QUESTION = "Echo the ten notes, then answer."
HISTORY_ROUNDS = 20
"""Tool rounds of the history-growth figure (of one delta each)."""
ANSWER_PIECE = "ok "
MODEL = "bench"


@tool
async def echo(text: str) -> str:
    """Return the text unchanged.

    Args:
        text: what to echo.
    """
    return text


def echo_schema() -> dict[str, Any]:
    """The ``echo`` tool as an OpenAI ``tools`` entry (the raw loop sends the same schema rxagent does)."""
    schema = echo.schema()
    return {
        "type": "function",
        "function": {
            "name": schema.name,
            "description": schema.description,
            "parameters": dict(schema.parameters),
        },
    }


def note(round_number: int) -> str:
    """The text the model asks ``echo`` to return in ``round_number`` (different each round)."""
    return f"note {round_number}: " + "the quick brown fox jumps over the lazy dog " * 4


def arguments_of(round_number: int) -> str:
    """The argument JSON of the call in ``round_number``."""
    return json.dumps({"text": note(round_number)})


def split(text: str, count: int) -> list[str]:
    """``text`` in ``count`` pieces of (nearly) equal length."""
    size, extra = divmod(len(text), count)
    pieces: list[str] = []
    start = 0
    for i in range(count):
        end = start + size + (1 if i < extra else 0)
        pieces.append(text[start:end])
        start = end
    return pieces


# ---- the server process --------------------------------------------------------------------------


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


def _chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
    return _event(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        }
    )


def _usage(prompt: int, completion: int) -> bytes:
    return _event(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": MODEL,
            "choices": [],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }
    )


def tool_round_events(round_number: int, fragments: int) -> list[bytes]:
    """The SSE events of tool round ``round_number`` (0-based): one call, arguments in pieces."""
    events = [_chunk({"role": "assistant", "content": None})]
    for position, piece in enumerate(split(arguments_of(round_number), fragments)):
        call: dict[str, Any] = {"index": 0, "function": {"arguments": piece}}
        if position == 0:
            call["id"] = f"call_{round_number}"
            call["type"] = "function"
            call["function"]["name"] = "echo"
        events.append(_chunk({"tool_calls": [call]}))
    events.append(_chunk({}, "tool_calls"))
    events.append(_usage(100 + round_number, fragments))
    events.append(b"data: [DONE]\n\n")
    return events


def answer_events(fragments: int) -> list[bytes]:
    """The SSE events of the final answer: ``fragments`` text deltas."""
    events = [_chunk({"role": "assistant", "content": ""})]
    events.extend(_chunk({"content": ANSWER_PIECE}) for _ in range(fragments))
    events.append(_chunk({}, "stop"))
    events.append(_usage(200, fragments))
    events.append(b"data: [DONE]\n\n")
    return events


def serve(rounds: int, fragments: int, spin: float) -> None:
    """The server process: prints its port on stdout, serves until stdin closes."""
    responses = [tool_round_events(n, fragments) for n in range(rounds)]
    responses.append(answer_events(fragments))

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        tool_messages = [m for m in body["messages"] if m.get("role") == "tool"]
        done = len(tool_messages)
        if done > rounds or (done and tool_messages[-1].get("content") != note(done - 1)):
            return web.json_response({"error": {"message": "unexpected conversation"}}, status=400)
        return await write_sse(request, responses[done], spin=spin)

    serve_completions(completions)


# ---- the two clients -------------------------------------------------------------------------------


async def raw_run(session: aiohttp.ClientSession, url: str, tools: list[dict[str, Any]]) -> tuple[str, int]:
    """(b) the hand-written loop. Returns the answer text and the number of requests made."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    requests = 0
    while True:
        body = {
            "model": MODEL,
            "messages": messages,
            "tools": tools,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        text: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        requests += 1
        async with session.post(url, json=body) as response:
            response.raise_for_status()
            async for line in response.content:
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:].strip()
                if payload == b"[DONE]":
                    break
                for choice in json.loads(payload)["choices"]:
                    delta = choice["delta"]
                    content = delta.get("content")
                    if content:
                        text.append(content)
                    for fragment in delta.get("tool_calls") or ():
                        call = calls.get(fragment["index"])
                        if call is None:
                            call = calls[fragment["index"]] = {"id": None, "name": None, "arguments": []}
                        if fragment.get("id"):
                            call["id"] = fragment["id"]
                        function: dict[str, Any] = fragment.get("function") or {}
                        if function.get("name"):
                            call["name"] = function["name"]
                        if function.get("arguments"):
                            call["arguments"].append(function["arguments"])
        if not calls:
            return "".join(text), requests
        wire_calls: list[dict[str, Any]] = []
        results: list[dict[str, Any]] = []
        for call in calls.values():
            arguments = "".join(call["arguments"])
            output = await echo(**json.loads(arguments))
            wire_calls.append(
                {
                    "id": call["id"],
                    "type": "function",
                    "function": {"name": call["name"], "arguments": arguments},
                }
            )
            results.append({"role": "tool", "tool_call_id": call["id"], "content": output})
        messages.append({"role": "assistant", "content": "".join(text) or None, "tool_calls": wire_calls})
        messages.extend(results)


async def rxagent_run(agent: ReActAgent, run_number: int) -> tuple[str, int]:
    """(a) the ReAct agent. Returns the answer text and the number of model calls made."""
    result = await agent.call(QUESTION, RuntimeContext(session_id=f"bench-{run_number}"))
    assert result.reason == "MODEL_STOP", result
    return result.text, result.usage.model_calls


async def measure(port: int, rounds: int, fragments: int, repeats: int) -> tuple[list[float], list[float]]:
    base_url = f"http://127.0.0.1:{port}/v1"
    url = f"{base_url}/chat/completions"
    expected = (ANSWER_PIECE * fragments, rounds + 1)
    tools = [echo_schema()]
    raw_times: list[float] = []
    rx_times: list[float] = []
    async with aiohttp.ClientSession() as session, OpenAIChatModel(MODEL, base_url=base_url) as model:
        agent = ReActAgent(
            model,
            Toolkit([echo]),
            options=AgentOptions(max_iters=rounds + 5),
        )
        # Warm-up: connections, imports, caches.
        assert await raw_run(session, url, tools) == expected
        assert await rxagent_run(agent, -1) == expected
        for run_number in range(repeats):
            start = time.process_time()
            outcome = await rxagent_run(agent, run_number)
            rx_times.append(time.process_time() - start)
            assert outcome == expected, outcome
            start = time.process_time()
            outcome = await raw_run(session, url, tools)
            raw_times.append(time.process_time() - start)
            assert outcome == expected, outcome
    return raw_times, rx_times


def history_ratio(repeats: int) -> tuple[float, float]:
    """The history-growth figure: median client CPU per conversation of :data:`HISTORY_ROUNDS` rounds of
    one delta, ``(rxagent, raw)`` in seconds, alternating as :func:`measure` does."""
    serving = ["--rounds", str(HISTORY_ROUNDS), "--fragments", "1"]
    with spawned_server(__file__, serving) as port:
        raw_times, rx_times = asyncio.run(measure(port, HISTORY_ROUNDS, 1, repeats))
    return statistics.median(rx_times), statistics.median(raw_times)


def fixed_cost(runs: int) -> tuple[float, float]:
    """The fixed-cost figure: median client CPU of a one-delta run (an answer of one text delta, no tool
    call), ``(rxagent, raw)`` in seconds, over ``runs`` runs of each, alternating as :func:`measure` does."""
    with spawned_server(__file__, ["--rounds", "0", "--fragments", "1"]) as port:
        raw_times, rx_times = asyncio.run(measure(port, 0, 1, runs))
    return statistics.median(rx_times), statistics.median(raw_times)


async def rxagent_text_run(agent: ReActAgent, run_number: int) -> str:
    """The text run through rxagent: ``async for`` over the run's events, joining the text deltas."""
    parts: list[str] = []
    context = RuntimeContext(session_id=f"bench-text-{run_number}")
    async for event in to_async_iterator(agent.stream_events(QUESTION, context)):
        if type(event) is TextDelta:
            parts.append(event.text)
    return "".join(parts)


async def measure_text(port: int, deltas: int, repeats: int) -> tuple[list[float], list[float], list[float]]:
    """Client CPU of the text run, ``(raw, rxagent, floor)`` seconds per run, alternating (rxagent first)."""
    base_url = f"http://127.0.0.1:{port}/v1"
    url = f"{base_url}/chat/completions"
    expected = ANSWER_PIECE * deltas
    tools = [echo_schema()]
    raw_times: list[float] = []
    rx_times: list[float] = []
    floor_times: list[float] = []
    floor_body = json.dumps(
        {"model": MODEL, "messages": [{"role": "user", "content": QUESTION}], "stream": True}
    ).encode()
    async with aiohttp.ClientSession() as session, OpenAIChatModel(MODEL, base_url=base_url) as model:
        agent = ReActAgent(model, Toolkit([echo]))
        # Warm-up: connections, imports, caches.
        assert await raw_run(session, url, tools) == (expected, 1)
        assert await rxagent_text_run(agent, -1) == expected
        size = await floor_run(port, "chat/completions", floor_body)
        for run_number in range(repeats):
            start = time.process_time()
            text = await rxagent_text_run(agent, run_number)
            rx_times.append(time.process_time() - start)
            assert text == expected
            start = time.process_time()
            outcome = await raw_run(session, url, tools)
            raw_times.append(time.process_time() - start)
            assert outcome == (expected, 1), outcome
            start = time.process_time()
            received = await floor_run(port, "chat/completions", floor_body)
            floor_times.append(time.process_time() - start)
            assert received == size
    return raw_times, rx_times, floor_times


def text_ratio(deltas: int, repeats: int, spin_us: float = 0) -> tuple[list[float], list[float], list[float]]:
    """The per-token figure: the text run's client CPU per run, ``(rxagent, raw, floor)`` in seconds,
    against a server that answers with ``deltas`` text deltas at once (no tool round), busy-waiting
    ``spin_us`` between them."""
    serving = ["--rounds", "0", "--fragments", str(deltas), "--spin-us", str(spin_us)]
    with spawned_server(__file__, serving) as port:
        raw_times, rx_times, floor_times = asyncio.run(measure_text(port, deltas, repeats))
    return rx_times, raw_times, floor_times


def print_text_ratio(deltas: int, repeats: int, spin_us: float) -> None:
    """Measure the text run (:func:`text_ratio`) and print its lines, ``agent_text_ratio: X`` last."""
    text_rx_times, text_raw_times, floor_times = text_ratio(deltas, repeats, spin_us)
    text_rx, text_raw = statistics.median(text_rx_times), statistics.median(text_raw_times)
    floor = statistics.median(floor_times)
    per_delta = 1e6 / deltas
    spun = f", server spin {spin_us:g} µs" if spin_us else ""
    print(f"text run, {deltas} deltas through async for over stream_events{spun} (medians of client CPU)")
    print(
        f"rxagent stream_events:   {text_rx * 1e3:7.2f} ms/run  {text_rx * per_delta:6.2f} µs/delta"
        f"  (runs: {', '.join(f'{t * 1e3:.1f}' for t in text_rx_times)} ms)"
    )
    print(
        f"raw aiohttp loop:        {text_raw * 1e3:7.2f} ms/run  {text_raw * per_delta:6.2f} µs/delta"
        f"  (runs: {', '.join(f'{t * 1e3:.1f}' for t in text_raw_times)} ms)"
    )
    print(
        f"floor (bytes only):      {floor * 1e3:7.2f} ms/run  {floor * per_delta:6.2f} µs/delta"
        f"  (runs: {', '.join(f'{t * 1e3:.1f}' for t in floor_times)} ms)"
    )
    print(f"agent_text_floor_ratio: {floor / text_raw:.2f}")
    print(f"agent_text_ratio: {text_rx / text_raw:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Client CPU of a tool-using conversation, rxagent's ReAct agent vs a raw aiohttp loop."
    )
    parser.add_argument("--rounds", type=int, default=10, help="tool rounds before the answer")
    parser.add_argument("--fragments", type=int, default=50, help="argument fragments / text deltas")
    parser.add_argument("--text-deltas", type=int, default=2_000, help="text deltas of the text run")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--fixed-runs", type=int, default=300, help="one-delta runs of the fixed-cost figure")
    parser.add_argument("--text-only", action="store_true", help="measure the text run alone")
    parser.add_argument(
        "--spin-us",
        type=float,
        default=0,
        help="the text run's server busy-waits between events (µs): reads of one or two events",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.rounds, args.fragments, args.spin_us / 1e6)
        return
    if args.fixed_runs < 1:
        parser.error("--fixed-runs must be 1 or more")
    if args.text_only:
        print_text_ratio(args.text_deltas, args.repeats, args.spin_us)
        return
    serving = ["--rounds", str(args.rounds), "--fragments", str(args.fragments)]
    with spawned_server(__file__, serving) as port:
        raw_times, rx_times = asyncio.run(measure(port, args.rounds, args.fragments, args.repeats))
    deltas = (args.rounds + 1) * args.fragments
    raw = statistics.median(raw_times)
    rx = statistics.median(rx_times)
    print(
        f"conversation: {args.rounds} tool rounds + answer = {args.rounds + 1} requests, "
        f"{deltas} streamed deltas; repeats: {args.repeats} (alternating, medians of client CPU)"
    )
    print(
        f"rxagent ReActAgent.call: {rx * 1e3:7.2f} ms/conversation  {rx / deltas * 1e6:6.2f} µs/delta"
        f"  (runs: {', '.join(f'{t * 1e3:.1f}' for t in rx_times)} ms)"
    )
    print(
        f"raw aiohttp loop:        {raw * 1e3:7.2f} ms/conversation  {raw / deltas * 1e6:6.2f} µs/delta"
        f"  (runs: {', '.join(f'{t * 1e3:.1f}' for t in raw_times)} ms)"
    )
    history_rx, history_raw = history_ratio(args.repeats)
    print(
        f"history growth, {HISTORY_ROUNDS} tool rounds of 1 delta: rxagent {history_rx * 1e3:.2f} ms, "
        f"raw {history_raw * 1e3:.2f} ms per conversation"
    )
    print(f"history_ratio: {history_rx / history_raw:.2f}")
    print_text_ratio(args.text_deltas, args.repeats, args.spin_us)
    fixed_rx, fixed_raw = fixed_cost(args.fixed_runs)
    print(f"fixed cost, a one-delta run ({args.fixed_runs} runs each, alternating, medians of client CPU)")
    print(f"fixed_cost_ms: {fixed_rx * 1e3:.2f}")
    print(f"fixed_cost_raw_ms: {fixed_raw * 1e3:.2f}")
    print(f"ratio: {rx / raw:.2f}")


if __name__ == "__main__":
    main()
