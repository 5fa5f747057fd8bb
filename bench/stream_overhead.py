"""Client CPU per streamed text delta: rxagent's client vs. a hand-written aiohttp + json.loads loop.

A loopback server in a separate process streams 20 000 text deltas (one ``write`` per event, as a real
server emits tokens) in the wire format of ``--provider``:

* ``openai`` (the default): chat-completions chunks, then a finish chunk, a usage chunk and ``[DONE]``;
* ``anthropic``: Anthropic Messages events (``event:`` and ``data:`` lines, ``message_start``, a text block
  of ``text_delta`` events, ``message_delta``, ``message_stop``); here (a) is rxagent's OpenAI client on the
  chat-completions stream, so the ratio is Anthropic client ÷ OpenAI client on the same loopback setup;
* ``responses``: OpenAI's Responses API events as OpenAI sends them (an ``event:`` line, then the JSON with
  its ``type``, ``sequence_number``, item id, indexes and ``obfuscation`` padding) between the response's
  opening events and ``response.completed``, which repeats the whole text and carries the usage.

In this process, with ``time.process_time`` around each run, alternating:

(a) raw: ``async for line in response.content``, ``json.loads`` of each ``data:`` line, the text
    appended to a list and joined;
(b) rxagent: ``OpenAIChatModel.stream(request).pipe(fold_message())`` (``OpenAIResponsesModel`` for
    ``responses``) awaited to the final ``Msg``;
(c) the floor: a bare asyncio protocol that sends the same request and only receives the response's bytes
    until the chunked body ends (no HTTP parsing, no SSE framing, no JSON): what any client pays to take
    each network read as it arrives (the event loop's wake-up, the ``recv``).

Prints the medians in µs per delta, ``floor_ratio: X`` (the floor ÷ raw: no client that handles every read
as it arrives goes below it; only reads that carry more events move it) and, as the last line,
``ratio: X`` (rxagent ÷ raw).

Run: ``.venv/bin/python bench/stream_overhead.py [--provider openai|anthropic|responses] [--deltas N]
[--repeats N] [--pace-us µs] [--spin-us µs]``. With ``--pace-us`` the server sleeps between events, so most
reads carry a single event (a model generating tokens slower than the network) and the client idles
between them; with ``--spin-us`` it busy-waits instead, so reads carry one or two events and the client
stays warm: the regime of a quiet machine, where the server only just keeps up with the client, also on a
loaded one (``--spin-us 20`` measured about the quiet machine's ratio there). The default streams flat out:
on a loaded machine the events then pile up into large reads, and the ratio is lower than on a quiet one.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from _loopback import floor_run, spawned_server, write_sse
from _loopback import serve as serve_completions
from aiohttp import web

from rxagent.messages import Msg
from rxagent.model.anthropic import AnthropicModel
from rxagent.model.openai import OpenAIChatModel
from rxagent.model.openai_responses import OpenAIResponsesModel
from rxagent.model.types import ChatModel, ChatRequest
from rxagent.operators import fold_message

__all__ = ["main"]

DELTA_TEXT = "tok"


def _events(deltas: int) -> list[bytes]:
    events = [
        b"data: "
        + json.dumps(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "bench",
                "choices": [{"index": 0, "delta": {"content": DELTA_TEXT}, "finish_reason": None}],
            },
            separators=(",", ":"),
        ).encode()
        + b"\n\n"
        for _ in range(deltas)
    ]
    events.append(
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","choices":'
        b'[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    )
    events.append(
        b'data: {"id":"chatcmpl-bench","object":"chat.completion.chunk","choices":[],'
        b'"usage":{"prompt_tokens":10,"completion_tokens":%d,"total_tokens":%d}}\n\n' % (deltas, deltas + 10)
    )
    events.append(b"data: [DONE]\n\n")
    return events


def _anthropic_event(kind: str, payload: dict[str, object]) -> bytes:
    data = json.dumps({"type": kind, **payload}, separators=(",", ":")).encode()
    return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"


def _anthropic_events(deltas: int) -> list[bytes]:
    message = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": "bench",
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    }
    delta = _anthropic_event(
        "content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": DELTA_TEXT}}
    )
    return [
        _anthropic_event("message_start", {"message": message}),
        _anthropic_event("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
        *([delta] * deltas),
        _anthropic_event("content_block_stop", {"index": 0}),
        _anthropic_event(
            "message_delta",
            {"delta": {"stop_reason": "end_turn", "stop_sequence": None}, "usage": {"output_tokens": deltas}},
        ),
        _anthropic_event("message_stop", {}),
    ]


def _responses_events(deltas: int) -> list[bytes]:
    sequence = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal sequence
        data = json.dumps({"type": kind, "sequence_number": sequence, **fields}, separators=(",", ":"))
        sequence += 1
        return f"event: {kind}\ndata: {data}\n\n".encode()

    response = {
        "id": "resp_bench",
        "object": "response",
        "status": "in_progress",
        "model": "bench",
        "output": [],
    }
    where = {"item_id": "msg_bench", "output_index": 0, "content_index": 0}
    added = {
        "id": "msg_bench",
        "type": "message",
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    events = [
        event("response.created", response=response),
        event("response.in_progress", response=response),
        event("response.output_item.added", output_index=0, item=added),
        event(
            "response.content_part.added",
            **where,
            part={"type": "output_text", "text": "", "annotations": []},
        ),
    ]
    events += [
        event("response.output_text.delta", **where, delta=DELTA_TEXT, logprobs=[], obfuscation="4mBv1sYq2xk")
        for _ in range(deltas)
    ]
    part = {"type": "output_text", "text": DELTA_TEXT * deltas, "annotations": []}
    item = {
        "id": "msg_bench",
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part],
    }
    usage = {
        "input_tokens": 10,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": deltas,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": deltas + 10,
    }
    events += [
        event("response.output_text.done", **where, text=part["text"], logprobs=[]),
        event("response.content_part.done", **where, part=part),
        event("response.output_item.done", output_index=0, item=item),
        event(
            "response.completed",
            response={**response, "status": "completed", "output": [item], "usage": usage},
        ),
    ]
    return events


def serve(provider: str, deltas: int, pace: float, spin: float) -> None:
    """The server process: prints its port on stdout, serves until stdin closes."""
    # Each provider's stream at its path; anthropic is measured against the OpenAI client's stream.
    wanted = {provider, "openai"} if provider == "anthropic" else {provider}
    streams = {f"/v1/{PROVIDERS[name].path}": PROVIDERS[name].events(deltas) for name in wanted}

    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        return await write_sse(request, streams[request.path], pace, spin)

    serve_completions(completions)


async def raw_run(session: aiohttp.ClientSession, url: str) -> str:
    """(a) the hand-written loop."""
    body = {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    parts: list[str] = []
    async with session.post(url, json=body) as response:
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            payload = line[6:].strip()
            if payload == b"[DONE]":
                break
            for choice in json.loads(payload)["choices"]:
                content = choice["delta"].get("content")
                if content:
                    parts.append(content)
    return "".join(parts)


async def raw_responses_run(session: aiohttp.ClientSession, url: str) -> str:
    """(a) the hand-written loop, for the Responses API's events."""
    body = {"model": "bench", "input": [{"role": "user", "content": "hi"}], "stream": True}
    parts: list[str] = []
    async with session.post(url, json=body) as response:
        async for line in response.content:
            if not line.startswith(b"data: "):
                continue
            event = json.loads(line[6:])
            kind = event["type"]
            if kind == "response.output_text.delta":
                parts.append(event["delta"])
            elif kind == "response.completed":
                break
    return "".join(parts)


class Provider:
    """One wire format under test: its server's events, its endpoint, the raw loop (``None``: measured
    against rxagent's OpenAI client instead), rxagent's model."""

    def __init__(
        self,
        events: Callable[[int], list[bytes]],
        path: str,
        raw: Callable[[aiohttp.ClientSession, str], Any] | None,
        model: Callable[[str], ChatModel],
    ) -> None:
        self.events, self.path, self.raw, self.model = events, path, raw, model


PROVIDERS = {
    "openai": Provider(
        _events, "chat/completions", raw_run, lambda url: OpenAIChatModel("bench", base_url=url)
    ),
    "anthropic": Provider(
        _anthropic_events,
        "messages",
        None,
        lambda url: AnthropicModel("bench", base_url=url, api_key_env=None),
    ),
    "responses": Provider(
        _responses_events,
        "responses",
        raw_responses_run,
        lambda url: OpenAIResponsesModel("bench", base_url=url),
    ),
}


async def rxagent_run(model: ChatModel, request: ChatRequest) -> str:
    """(b) rxagent's client folded to the final message."""
    message: Msg = await model.stream(request).pipe(fold_message())
    return message.text


async def measure(
    provider: Provider, port: int, deltas: int, repeats: int
) -> tuple[list[float], list[float], list[float]]:
    """(a), (b) and (c) alternating: each one's client CPU per run."""
    base_url = f"http://127.0.0.1:{port}/v1"
    expected = DELTA_TEXT * deltas
    request = ChatRequest((Msg.user("hi"),))
    raw_times: list[float] = []
    rx_times: list[float] = []
    floor_times: list[float] = []
    floor_body = json.dumps(
        {"model": "bench", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    model = provider.model(base_url)
    async with aiohttp.ClientSession() as session, model:
        url = f"{base_url}/{provider.path}"
        raw_run = provider.raw
        assert raw_run is not None, "a provider without a raw loop is measured by measure_providers"
        # Warm-up: connections, imports, caches.
        assert await raw_run(session, url) == expected
        assert await rxagent_run(model, request) == expected
        size = await floor_run(port, provider.path, floor_body)
        for _ in range(repeats):
            start = time.process_time()
            text = await raw_run(session, url)
            raw_times.append(time.process_time() - start)
            assert text == expected
            start = time.process_time()
            text = await rxagent_run(model, request)
            rx_times.append(time.process_time() - start)
            assert text == expected
            start = time.process_time()
            received = await floor_run(port, provider.path, floor_body)
            floor_times.append(time.process_time() - start)
            assert received == size
    return raw_times, rx_times, floor_times


async def measure_providers(port: int, deltas: int, repeats: int) -> tuple[list[float], list[float]]:
    """``--provider anthropic``: the OpenAI client's runs and the Anthropic client's, alternating."""
    base_url = f"http://127.0.0.1:{port}/v1"
    expected = DELTA_TEXT * deltas
    request = ChatRequest((Msg.user("hi"),))
    openai_times: list[float] = []
    anthropic_times: list[float] = []
    async with (
        OpenAIChatModel("bench", base_url=base_url, api_key_env=None) as openai,
        AnthropicModel("bench", base_url=base_url, api_key_env=None) as anthropic,
    ):
        # Warm-up: connections, imports, caches.
        assert await rxagent_run(openai, request) == expected
        assert await rxagent_run(anthropic, request) == expected
        for _ in range(repeats):
            for model, times in ((openai, openai_times), (anthropic, anthropic_times)):
                start = time.process_time()
                text = await rxagent_run(model, request)
                times.append(time.process_time() - start)
                assert text == expected
    return openai_times, anthropic_times


def _runs(times: list[float]) -> str:
    return ", ".join(f"{t:.3f}" for t in times)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Client CPU per streamed text delta, rxagent vs raw aiohttp."
    )
    parser.add_argument("--provider", choices=sorted(PROVIDERS), default="openai", help="the wire format")
    parser.add_argument("--deltas", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--pace-us",
        type=float,
        default=0,
        help="server pause between events (µs); 0 streams flat out, so reads carry many events",
    )
    parser.add_argument(
        "--spin-us",
        type=float,
        default=0,
        help="server busy-wait between events (µs): reads of one or two events, as on a quiet machine",
    )
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.provider, args.deltas, args.pace_us / 1e6, args.spin_us / 1e6)
        return
    arguments = [
        *("--provider", args.provider, "--deltas", str(args.deltas)),
        *("--pace-us", str(args.pace_us), "--spin-us", str(args.spin_us)),
    ]
    with spawned_server(__file__, arguments) as port:
        if args.provider == "anthropic":
            openai_times, anthropic_times = asyncio.run(measure_providers(port, args.deltas, args.repeats))
        else:
            provider = PROVIDERS[args.provider]
            raw_times, rx_times, floor_times = asyncio.run(measure(provider, port, args.deltas, args.repeats))
    if args.provider == "anthropic":
        openai = statistics.median(openai_times) / args.deltas * 1e6
        anthropic = statistics.median(anthropic_times) / args.deltas * 1e6
        print(
            f"deltas per run: {args.deltas}, repeats: {args.repeats}, server pace: {args.pace_us:g} µs, "
            f"spin: {args.spin_us:g} µs (alternating runs, medians of client CPU)"
        )
        print(f"OpenAI client + fold:    {openai:.2f} µs/delta  (runs: {_runs(openai_times)} s)")
        print(f"Anthropic client + fold: {anthropic:.2f} µs/delta  (runs: {_runs(anthropic_times)} s)")
        print(f"ratio: {anthropic / openai:.2f}")
        return
    raw = statistics.median(raw_times) / args.deltas * 1e6
    rx = statistics.median(rx_times) / args.deltas * 1e6
    print(
        f"provider: {args.provider}, deltas per run: {args.deltas}, repeats: {args.repeats}, "
        f"server pace: {args.pace_us:g} µs, spin: {args.spin_us:g} µs "
        "(alternating runs, medians of client CPU)"
    )
    print(
        f"raw aiohttp + json.loads: {raw:.2f} µs/delta  (runs: {', '.join(f'{t:.3f}' for t in raw_times)} s)"
    )
    print(f"rxagent stream + fold:    {rx:.2f} µs/delta  (runs: {', '.join(f'{t:.3f}' for t in rx_times)} s)")
    floor = statistics.median(floor_times) / args.deltas * 1e6
    print(f"floor (bytes only):       {floor:.2f} µs/delta  (runs: {_runs(floor_times)} s)")
    print(f"floor_ratio: {floor / raw:.2f}")
    print(f"ratio: {rx / raw:.2f}")


if __name__ == "__main__":
    main()
