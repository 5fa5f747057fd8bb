"""Context window bench: the cost of assembling one request after one more message, by history length.

For histories of 100, 1 000 and 10 000 messages (turns of a user question, a tool call, a ~250-token tool
result and an answer), the window first assembles the whole history once (cold: every message counted,
the oldest compressed); then, ``--appends`` times, one message is appended and one request assembled,
timing only :meth:`ContextWindow.assemble` (the agent's own request building is not the window's work).
The window keeps per-session state (token counts of the messages in the window, the summary and what it
covers), so this cost should not grow with the history: ``growth`` is the median time at 10 000 messages
divided by the median time at 100 (goal: at most 3).

Run: ``.venv/bin/python bench/context.py [--appends N]``. The last line is ``growth: X``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Iterator

from rxagent.context import RunContext
from rxagent.memory import ContextWindow, TruncatingSummariser, default_counter
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.types import ChatRequest, ToolSchema
from rxagent.state import AgentState

SIZES = (100, 1_000, 10_000)
SYSTEM = Msg.system("You are a research assistant. Use the tools, cite what you found, answer briefly.")
TOOLS = (
    ToolSchema(
        "search",
        "Search the document store.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
)
WORDS = (
    "alpha",
    "beta",
    "gamma",
    "delta",
    "epsilon",
    "zeta",
    "eta",
    "theta",
    "iota",
    "kappa",
    "lambda",
    "mu",
)


def text(seed: int, words: int) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words))


def conversation() -> Iterator[Msg]:
    """An endless conversation: question, tool call, tool result (~250 tokens), answer; repeat."""
    turn = 0
    while True:
        turn += 1
        call_id = f"call_{turn}"
        yield Msg.user(f"Question {turn}: {text(turn, 30)}?")
        yield Msg(
            role="assistant",
            content=(ToolUseBlock(id=call_id, name="search", input={"query": text(turn, 5)}),),
        )
        result = ToolResultBlock(
            tool_use_id=call_id, name="search", output=(TextBlock(text=text(turn, 250)),)
        )
        yield Msg.from_tool_results(result)
        yield Msg.assistant(f"Answer {turn}: {text(turn + 1, 50)}.")


async def measure(size: int, appends: int) -> list[float]:
    messages = conversation()
    state = AgentState(messages=[next(messages) for _ in range(size)])
    ctx = RunContext(user_id="bench", session_id=f"s{size}", run_id="run", state=state)
    window = ContextWindow(
        counter=default_counter(), summariser=TruncatingSummariser(counter=default_counter())
    )
    await window.assemble(ChatRequest(messages=(SYSTEM, *state.messages), tools=TOOLS), ctx)  # cold
    times: list[float] = []
    for _ in range(appends):
        state.messages.append(next(messages))
        request = ChatRequest(messages=(SYSTEM, *state.messages), tools=TOOLS)
        started = time.perf_counter()
        await window.assemble(request, ctx)
        times.append(time.perf_counter() - started)
    return times


async def main(appends: int) -> None:
    print(f"context window: assemble one request after appending one message (median of {appends})")
    medians: dict[int, float] = {}
    for size in SIZES:
        times = await measure(size, appends)
        medians[size] = statistics.median(times)
        print(
            f"{size:>6} messages: {medians[size] * 1e6:8.1f} µs median, "
            f"{statistics.fmean(times) * 1e6:8.1f} µs mean, {max(times) * 1e6:8.1f} µs max"
        )
    print(f"growth: {medians[SIZES[-1]] / medians[SIZES[0]]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=500, help="appended messages timed per size")
    asyncio.run(main(parser.parse_args().appends))
