"""JSON log lines carry the ids of the run that wrote them: in its steps, its async tools and its sync tools'
worker threads, in runs nested in tool calls; and nothing outside runs.

Bad inputs tried: a message that is not text, a record with an exception and a stack, ids given by the
caller (they win), a record logged outside any run.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import reactivex
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.context import RunContext, RuntimeContext
from rxagent.logs import JsonLogFormatter, RunLogFilter, current_run, json_log_handler, with_current_run
from rxagent.operators import to_list
from rxagent.tools import Toolkit, tool

from .agent.helpers import run

log = logging.getLogger("tests.shop")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the ``tests.shop`` logger writes, as JSON lines."""
    stream = io.StringIO()
    handler = json_log_handler(stream)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield stream
    finally:
        log.removeHandler(handler)
        log.propagate = True


def read(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


@tool
async def charge(order: str) -> str:
    """Charge an order (async)."""
    log.info("charging %s", order)
    return "charged"


@tool
def ship(order: str) -> str:
    """Ship an order (sync: runs in a worker thread)."""
    log.info("shipping %s", order)
    return "shipped"


async def test_tool_log_lines_carry_the_runs_ids(lines: io.StringIO) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("charge", {"order": "42"}),
                    ScriptedToolCall("ship", {"order": "42"}),
                ]
            ),
            "Done.",
        ]
    )
    agent = ReActAgent(model, Toolkit([charge, ship]))
    result, _ = await run(agent, "Charge and ship 42.", RuntimeContext(session_id="alice"))
    written = read(lines)
    assert [line["message"] for line in written] == ["charging 42", "shipping 42"]
    for line in written:
        assert (line["trace_id"], line["run_id"], line["session_id"]) == (
            result.trace_id,
            result.run_id,
            "alice",
        )
        assert line["logger"] == "tests.shop"
        assert line["level"] == "INFO"
        assert "parent_run_id" not in line
        assert "span_id" not in line
    log.info("after the run")
    assert read(lines)[-1].keys() == {"time", "level", "logger", "message"}  # outside runs: no ids


async def test_lines_of_a_nested_run_carry_its_own_run_and_its_parent() -> None:
    stream = io.StringIO()
    handler = json_log_handler(stream)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    try:
        clerk = ReActAgent(
            ScriptedModel(
                [ScriptedResponse(tool_calls=[ScriptedToolCall("ship", {"order": "7"})]), "Shipped."]
            ),
            Toolkit([ship]),
            name="clerk",
        )
        lead = ReActAgent(
            ScriptedModel(
                [ScriptedResponse(tool_calls=[ScriptedToolCall("clerk", {"task": "ship 7"})]), "Ok."]
            ),
            Toolkit([clerk.as_tool()]),
        )
        result, events = await run(lead, "Ship order 7.")
    finally:
        log.removeHandler(handler)
    (line,) = read(stream)
    nested = {e.run_id for e in events} - {result.run_id}
    assert line["run_id"] in nested
    assert (line["parent_run_id"], line["trace_id"]) == (result.run_id, result.trace_id)


def test_the_formatter_writes_one_json_object_per_record() -> None:
    formatter = JsonLogFormatter()
    record = logging.LogRecord("x.y", logging.WARNING, __file__, 1, {"not": "text"}, None, None)
    record.created = 1_780_000_000.25
    line = json.loads(formatter.format(record))
    assert line == {
        "time": "2026-05-28T20:26:40.250Z",
        "level": "WARNING",
        "logger": "x.y",
        "message": "{'not': 'text'}",
    }
    try:
        raise ValueError("bad\nmultiline")
    except ValueError:
        failing = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed: %s", ("why",), sys.exc_info())
    failing.stack_info = "Stack (most recent call last):\n  here"
    text = formatter.format(failing)
    assert "\n" not in text  # one line, whatever the exception says
    parsed = json.loads(text)
    assert parsed["message"] == "failed: why"
    assert parsed["exception"].startswith("Traceback")
    assert "ValueError: bad\nmultiline" in parsed["exception"]
    assert parsed["stack"].endswith("here")


async def test_ids_given_by_the_caller_win_over_the_current_runs() -> None:
    ctx = RunContext(session_id="s", run_id="run_current", trace_id="4bf92f3577b34da6a3ce929d0e0e4736")
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "m", None, None)
    record.run_id = "run_given"

    def stamp(_: object) -> None:
        RunLogFilter().filter(record)

    await to_list(
        reactivex.defer(lambda _: reactivex.of(1).pipe(ops.do_action(stamp))).pipe(with_current_run(ctx))
    )
    line = json.loads(JsonLogFormatter().format(record))
    assert (line["run_id"], line["trace_id"], line["session_id"]) == ("run_given", ctx.trace_id, "s")


# ---- with_current_run's lifecycle ------------------------------------------------------------------------

CTX = RunContext(session_id="s", run_id="run_1")


async def test_with_current_run_completes_and_sets_the_run_only_while_subscribing() -> None:
    seen: list[RunContext | None] = []
    source = reactivex.defer(lambda _: (seen.append(current_run()), reactivex.of(1, 2))[1])
    assert await to_list(source.pipe(with_current_run(CTX))) == [1, 2]
    assert seen == [CTX]
    assert current_run() is None  # the subscriber's context is left as it was


async def test_with_current_run_passes_errors() -> None:
    with pytest.raises(ValueError, match="boom"):
        await to_list(reactivex.throw(ValueError("boom")).pipe(with_current_run(CTX)))


async def test_with_current_run_reaches_tasks_the_subscription_starts() -> None:
    async def later() -> RunContext | None:
        await asyncio.sleep(0)
        return current_run()

    source = reactivex.defer(lambda _: reactivex.from_future(asyncio.ensure_future(later())))
    assert await to_list(source.pipe(with_current_run(CTX))) == [CTX]


async def test_with_current_run_cancel_disposes_upstream() -> None:
    disposed = asyncio.Event()
    never = reactivex.never().pipe(ops.finally_action(disposed.set))
    subscription = never.pipe(with_current_run(CTX)).subscribe()
    subscription.dispose()
    await asyncio.wait_for(disposed.wait(), 5)


async def test_with_current_run_resubscribe_is_cold() -> None:
    subscriptions: list[int] = []
    source = reactivex.defer(lambda _: (subscriptions.append(1), reactivex.of(len(subscriptions)))[1])
    scoped = source.pipe(with_current_run(CTX))
    assert await to_list(scoped) == [1]
    assert await to_list(scoped) == [2]
