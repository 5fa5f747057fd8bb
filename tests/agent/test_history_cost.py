"""The work of a turn does not grow with the history: counted, not timed.

A 30-request conversation (29 tool rounds, then the answer) runs through the real parts: the ReAct agent,
the OpenAI client against the loopback server, a context window with a counting tokenizer, and the
scripted test model. Counting wrappers note, per request, how many messages each history-sized step
handled: repaired (``repair_transcript``), encoded to JSON (``message_to_wire``), looked up one by one in
a per-message cache (``MessageMemo.get_all``), tokenised (the counter's text calls) and measured for the
scripted model's usage estimate. From the second request on every request adds the same two messages (the
last answer's call and its result), so each count must be the same at request 30 as at request 2, and
small; what the requests send is checked against a full recomputation, so the counts cannot be low
because something was skipped.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import rxagent.agent.transcript as transcript
import rxagent.model._openai_wire as wire
import rxagent.model.scripted as scripted
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.events import ModelCallFinished
from rxagent.memory import ContextWindow
from rxagent.memory.tokens import ChatTokenCounter
from rxagent.messages import MessageMemo, Msg
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool
from tests.model.openai_server import (
    DONE,
    OpenAIServer,
    Reply,
    chunk,
    finish_chunk,
    make_model,
    text_chunk,
    tool_chunk,
    usage_chunk,
)

ROUNDS = 29
"""Tool rounds before the answer: 30 requests in all."""


@tool
def echo(text: str) -> str:
    """Return the text.

    Args:
        text: what to return.
    """
    return text


def note(round_number: int) -> str:
    return f"note {round_number}: " + "the quick brown fox " * 3


def tool_round(round_number: int) -> Reply:
    arguments = json.dumps({"text": note(round_number)})
    return Reply.sse(
        chunk({"role": "assistant", "content": None}),
        tool_chunk(0, f"call_{round_number}", "echo", arguments[:10]),
        tool_chunk(0, None, None, arguments[10:]),
        finish_chunk("tool_calls"),
        usage_chunk(10, 5),
        DONE,
    )


class WorkLog:
    """Messages handled per request, by kind: ``turn`` says which request is being prepared."""

    def __init__(self, turn: Callable[[], int]) -> None:
        self.turn = turn
        self.counts: dict[str, Counter[int]] = {}

    def add(self, kind: str, amount: int) -> None:
        self.counts.setdefault(kind, Counter())[self.turn()] += amount

    def per_turn(self, kind: str, turns: int) -> list[int]:
        counts = self.counts.get(kind, Counter())
        return [counts[turn] for turn in range(turns)]


def count_history_steps(monkeypatch: pytest.MonkeyPatch, log: WorkLog) -> None:
    """Wrap the steps whose work could grow with the history, so they note how much they do."""
    repair, encode, get_all = transcript.repair_transcript, wire.message_to_wire, MessageMemo.get_all

    def counting_repair(messages: Sequence[Msg]) -> list[Msg]:
        log.add("repaired", len(messages))
        return repair(messages)

    def counting_encode(msg: Msg, *, send_reasoning: bool = False) -> list[dict[str, Any]]:
        log.add("encoded", 1)
        return encode(msg, send_reasoning=send_reasoning)

    def counting_get_all(
        memo: MessageMemo[Any], messages: Sequence[Msg], compute: Callable[[Msg], Any]
    ) -> Any:
        log.add("looked up", len(messages))
        return get_all(memo, messages, compute)

    monkeypatch.setattr(transcript, "repair_transcript", counting_repair)
    monkeypatch.setattr(wire, "message_to_wire", counting_encode)
    monkeypatch.setattr(MessageMemo, "get_all", counting_get_all)


def assert_flat(log: WorkLog, kind: str, turns: int, *, most: int) -> None:
    """From the second request on, each request did the same work, and at most ``most``."""
    work = log.per_turn(kind, turns)
    assert work[1] > 0, f"nothing {kind}: the wrapper saw no work"
    assert work[1:] == [work[1]] * (turns - 1), f"{kind} per request: {work}"
    assert work[-1] <= most, f"{kind} per request: {work}"


async def test_a_request_over_http_does_the_same_work_at_turn_30_as_at_turn_2(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.script(
        *(tool_round(n) for n in range(ROUNDS)),
        Reply.sse(text_chunk("all "), text_chunk("echoed"), finish_chunk("stop"), usage_chunk(10, 2), DONE),
    )
    log = WorkLog(lambda: len(server.requests))  # the request being prepared is the next one received
    count_history_steps(monkeypatch, log)

    def counting_text(text: str) -> int:
        log.add("tokenised", 1)
        return len(text.split())

    window = ContextWindow(counter=ChatTokenCounter(counting_text), max_context_tokens=1_000_000)
    async with make_model(server) as model:
        agent = ReActAgent(
            model,
            Toolkit([echo]),
            system_prompt="Echo every note.",
            middleware=[window],
            options=AgentOptions(max_iters=ROUNDS + 5),
        )
        result = await agent.call("Echo the notes, then answer.")

    assert (result.reason, result.text, result.iterations) == ("MODEL_STOP", "all echoed", ROUNDS + 1)
    turns = ROUNDS + 1
    assert len(server.requests) == turns
    # Each request after the first adds the last answer's call and its result: two messages, repaired,
    # encoded, looked up and tokenised once each.
    assert_flat(log, "repaired", turns, most=2)
    assert_flat(log, "encoded", turns, most=2)
    assert_flat(log, "looked up", turns, most=2)
    assert_flat(log, "tokenised", turns, most=12)
    # ... and the requests still send the whole conversation, in order.
    last = server.requests[-1].body["messages"]
    assert [m["role"] for m in last] == ["system", "user", *(["assistant", "tool"] * ROUNDS)]
    assert [m["content"] for m in last if m["role"] == "tool"] == [note(n) for n in range(ROUNDS)]
    for number, request in enumerate(server.requests):
        assert len(request.body["messages"]) == 2 + 2 * number


def estimate_of(request_messages: Sequence[Msg]) -> int:
    """The scripted model's usage estimate computed from scratch: four characters a token."""
    characters = sum(len(block.model_dump_json()) for msg in request_messages for block in msg.content)
    return max(1, characters // 4)


async def test_the_scripted_model_estimates_usage_from_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    model: ScriptedModel | None = None
    log = WorkLog(lambda: len(model.requests) if model is not None else 0)
    count_history_steps(monkeypatch, log)
    measure = scripted._characters  # pyright: ignore[reportPrivateUsage]

    def counting_measure(msg: Msg) -> int:
        log.add("measured", 1)
        return measure(msg)

    monkeypatch.setattr(scripted, "_characters", counting_measure)
    model = ScriptedModel(
        [
            *(
                ScriptedResponse(tool_calls=[ScriptedToolCall("echo", {"text": note(n)})])
                for n in range(ROUNDS)
            ),
            "all echoed",
        ]
    )
    agent = ReActAgent(
        model, Toolkit([echo]), system_prompt="Echo every note.", options=AgentOptions(max_iters=ROUNDS + 5)
    )

    events = await to_list(agent.stream_events("Echo the notes, then answer."))

    turns = ROUNDS + 1
    assert len(model.requests) == turns
    # The estimate of request n is measured when its answer ends, with n + 1 requests recorded.
    measured = log.per_turn("measured", turns + 1)[1:]
    assert measured[1:] == [2] * (turns - 1), measured
    looked_up = log.per_turn("looked up", turns + 1)[1:]
    assert looked_up[1:] == [2] * (turns - 1), looked_up
    assert_flat(log, "repaired", turns, most=2)
    # The incremental estimate is the full one, request by request.
    usage = [e.usage.input_tokens for e in events if isinstance(e, ModelCallFinished)]
    assert usage == [estimate_of(request.messages) for request in model.requests]
