"""CPU of preparing one request as the history grows: does turn N cost more than turn 2?

No network: for a conversation of ``N`` messages (tool rounds of an assistant call and its result, after a
system prompt and a user message), each step appends one round and times, with ``time.process_time``:

- ``build``: ``build_request`` (the repaired history and the request's tuple);
- ``encode``: ``OpenAIChatModel.encode_request`` (the JSON body);
- ``count``: ``ChatTokenCounter.count_request`` (with a cheap text counter, so what is timed is the
  bookkeeping, not the tokenizer);
- ``estimate``: the scripted test model's usage estimate.

Prints the median µs per request for each ``N``, and last ``request_growth: X``: the four together at the
largest ``N`` ÷ at the smallest (1.0 would be a cost independent of the history).

Run: ``.venv/bin/python bench/request_growth.py [--sizes 20 200 1000 4000] [--steps 60]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from rxagent.agent.reasoning import build_request
from rxagent.agent.run import new_run
from rxagent.memory.tokens import ChatTokenCounter
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.openai import OpenAIChatModel
from rxagent.model.scripted import ScriptedModel
from rxagent.model.types import ChatRequest
from rxagent.state import AgentState

__all__ = ["main"]

PARTS = ("build", "encode", "count", "estimate")


def tool_round(number: int) -> list[Msg]:
    """One tool round: the assistant's call and its result."""
    note = f"note {number} " * 10
    call = ToolUseBlock(id=f"call_{number}", name="echo", input={"text": note})
    result = ToolResultBlock(tool_use_id=f"call_{number}", name="echo", output=(TextBlock(text=note),))
    return [Msg(role="assistant", content=(call,)), Msg.from_tool_results(result)]


def estimate(model: ScriptedModel, request: ChatRequest) -> int:
    """The scripted model's usage estimate of ``request`` (what it reports when a script gives none)."""
    return model._estimate_input_tokens(request)  # pyright: ignore[reportPrivateUsage]


async def measure(size: int, steps: int) -> dict[str, float]:
    """Median seconds per request of each part, for a history of about ``size`` messages."""
    history = [Msg.user("Echo the notes.")]
    for number in range(size // 2):
        history += tool_round(number)
    state = AgentState(messages=history)
    async with OpenAIChatModel("bench", base_url="http://127.0.0.1:9/v1") as model:
        scripted = ScriptedModel()
        counter = ChatTokenCounter(lambda text: len(text) // 4)
        run = new_run(model, system_prompt="Echo every note.", state=state)
        request = build_request(run, False)
        model.encode_request(request)  # the first request fills the caches: what follows is a turn
        counter.count_request(request)
        estimate(scripted, request)
        times: dict[str, list[float]] = {part: [] for part in PARTS}
        for step in range(steps):
            state.messages.extend(tool_round(size + step))
            started = time.process_time()
            request = build_request(run, False)
            built = time.process_time()
            model.encode_request(request)
            encoded = time.process_time()
            counter.count_request(request)
            counted = time.process_time()
            estimate(scripted, request)
            estimated = time.process_time()
            for part, spent in zip(
                PARTS, (built - started, encoded - built, counted - encoded, estimated - counted), strict=True
            ):
                times[part].append(spent)
    return {part: statistics.median(spent) for part, spent in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description="CPU of preparing one request as the history grows.")
    parser.add_argument("--sizes", type=int, nargs="+", default=[20, 200, 1000, 4000])
    parser.add_argument("--steps", type=int, default=60, help="requests timed per size")
    args = parser.parse_args()
    totals: list[float] = []
    for size in args.sizes:
        medians = asyncio.run(measure(size, args.steps))
        totals.append(sum(medians.values()))
        parts = "  ".join(f"{part} {medians[part] * 1e6:7.1f}" for part in PARTS)
        print(f"history of {size:5d} messages: {parts}  µs per request")
    print(f"request_growth: {totals[-1] / totals[0]:.2f}")


if __name__ == "__main__":
    main()
