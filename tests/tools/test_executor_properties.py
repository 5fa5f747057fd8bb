"""Property: whatever JSON a model sends as arguments, the executor answers every call exactly once."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from reactivex import operators as ops

from rxagent.messages import ToolUseBlock
from rxagent.tools import ToolBatchFinished, ToolCallSettled, ToolEvent, ToolExecutor, Toolkit, tool


class Address(BaseModel):
    street: str
    number: int


@tool(concurrency_safe=True)
def register(
    name: str, age: int, tags: list[str], address: Address, vip: bool = False, score: float | None = None
) -> str:
    """Register a person."""
    return f"{name}:{age}:{len(tags)}:{address.number}:{vip}:{score}"


@tool
async def echo(value: Any = None) -> str:
    """Echo anything."""
    return json.dumps(value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
argument_objects = st.dictionaries(
    st.sampled_from(["name", "age", "tags", "address", "vip", "score", "value", "other"])
    | st.text(max_size=6),
    json_values,
    max_size=6,
)


def as_call(index: int, name: str, payload: Any, raw_only: bool) -> ToolUseBlock:
    text = json.dumps(payload)
    if isinstance(payload, dict) and not raw_only:
        return ToolUseBlock(id=f"c{index}", name=name, input=payload, raw_arguments=text)
    return ToolUseBlock(id=f"c{index}", name=name, input=None, raw_arguments=text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["register", "echo", "missing"]), argument_objects | json_values, st.booleans()
        ),
        min_size=1,
        max_size=5,
    ),
    st.booleans(),
)
def test_arbitrary_json_arguments_never_crash_and_each_call_gets_exactly_one_result(
    calls: list[tuple[str, Any, bool]], parallel: bool
) -> None:
    blocks = [as_call(i, name, payload, raw_only) for i, (name, payload, raw_only) in enumerate(calls)]
    toolkit = Toolkit([register, echo])

    async def execute() -> list[ToolEvent]:
        return await ToolExecutor(parallel=parallel).execute(blocks, toolkit.view()).pipe(ops.to_list())

    events = asyncio.run(execute())
    finished = [e for e in events if isinstance(e, ToolCallSettled)]
    assert sorted(e.call.id for e in finished) == sorted(b.id for b in blocks)
    last = events[-1]
    assert isinstance(last, ToolBatchFinished)
    assert [r.tool_use_id for r in last.results] == [b.id for b in blocks]
    for block, result in zip(blocks, last.results, strict=True):
        assert result.name == block.name
        assert result.status in ("ok", "error")
