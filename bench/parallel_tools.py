"""Parallel tool execution: three async 0.5 s tools in one batch, and the per-call overhead of a trivial tool.

Prints the overhead figures first and, as its last line, ``wall_s: X`` for the batch (median of 5).
Goal: wall_s <= 0.60 (the floor is 0.50).
"""

from __future__ import annotations

import asyncio
import statistics
import time

from rxagent.messages import ToolUseBlock
from rxagent.operators import to_list
from rxagent.tools import ToolExecutor, Toolkit, tool


@tool(concurrency_safe=True)
async def wait_half_second(n: int) -> str:
    """Sleep for half a second."""
    await asyncio.sleep(0.5)
    return f"slept {n}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers (a trivial sync tool)."""
    return a + b


@tool
async def add_async(a: int, b: int) -> int:
    """Add two integers (a trivial async tool)."""
    return a + b


async def batch_wall(executor: ToolExecutor, toolkit: Toolkit) -> float:
    calls = [ToolUseBlock(id=f"c{i}", name="wait_half_second", input={"n": i}) for i in range(3)]
    start = time.perf_counter()
    events = await to_list(executor.execute(calls, toolkit.view()))
    elapsed = time.perf_counter() - start
    assert len(events) == 3 * 2 + 1
    return elapsed


async def per_call_us(executor: ToolExecutor, toolkit: Toolkit, name: str, calls: int) -> float:
    """One call per batch, as an agent turn usually makes: the whole path, events included."""
    view = toolkit.view()
    batch = [ToolUseBlock(id="c", name=name, input={"a": 1, "b": 2})]
    for _ in range(50):  # warm caches
        await to_list(executor.execute(batch, view))
    start = time.perf_counter()
    for _ in range(calls):
        await to_list(executor.execute(batch, view))
    return (time.perf_counter() - start) / calls * 1e6


async def validation_us(calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        add.prepare({"a": i, "b": "1"})
    return (time.perf_counter() - start) / calls * 1e6


async def main() -> None:
    toolkit = Toolkit([wait_half_second, add, add_async])
    executor = ToolExecutor(parallel=True)
    print(f"validation only (coerce + jsonschema + pydantic), per call: {await validation_us(5000):.1f} µs")
    for name in ("add_async", "add"):
        samples = [await per_call_us(executor, toolkit, name, 1000) for _ in range(3)]
        median = statistics.median(samples)
        print(f"trivial {name} tool, one-call batch (validation + execution + events): {median:.1f} µs")
    walls = [await batch_wall(executor, toolkit) for _ in range(5)]
    print("batch of three 0.5 s tools, runs:", ", ".join(f"{w:.3f}" for w in walls))
    print(f"wall_s: {statistics.median(walls):.3f}")


if __name__ == "__main__":
    asyncio.run(main())
