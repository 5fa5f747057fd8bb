"""Bad input never reaches the log, on the Python API: text UTF-8 cannot encode (a lone surrogate, as text
decoded with ``errors="surrogateescape"`` holds) and values nested too deep are refused at every door with
``InvalidInputError`` naming where; nothing is queued or recorded (the real SQLite file's log is the same
after), and the session goes on.

Bad inputs tried: a lone surrogate in text input, in a message's text and in its metadata, in a steered and
an injected message, in ``add_messages``, in a denial's reason, in an external result, in edited arguments
(and in one of their keys); edited arguments nested 10 000 deep; a surrogate pair written as two code
points (not text either).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedResponse, ScriptedToolCall
from rxagent.agent import (
    AgentInput,
    ExternalResult,
    InvalidInputError,
    ReActAgent,
    SessionHandle,
    ToolDecision,
)
from rxagent.agent.inputs import MAX_NESTING
from rxagent.context import RuntimeContext
from rxagent.messages import Msg
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.session import SQLiteStore
from rxagent.tools import Permissions, Toolkit, tool

WAIT = 10.0
CTX = RuntimeContext(session_id="bad-input")
LONE = "caf\udce9"  # "café" read from Latin-1 bytes with errors="surrogateescape"

refunds: list[str] = []


@tool
def refund(order: str) -> str:
    """Refund an order."""
    refunds.append(order)
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external tools do not run here")


def clerk(request: ChatRequest) -> ScriptedResponse | str:
    last = request.messages[-1]
    if last.role == "user" and last.text == "refund and sign":
        return ScriptedResponse(
            tool_calls=[
                ScriptedToolCall("refund", {"order": "A-1"}, id="r1"),
                ScriptedToolCall("sign", {"document": "NDA"}, id="e1"),
            ]
        )
    return f"answered: {last.text or last.role}"


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"inner": value}
    return value


BAD_ANSWERS: list[tuple[str, AgentInput, str]] = [
    ("text input", f"hello {LONE}", "input: the text holds '\\udce9'"),
    ("message text", Msg.user(f"hi {LONE}"), "input.content[0].text"),
    ("message metadata", Msg.user("hi", metadata={"from": LONE}), "input.metadata.from"),
    ("pair as code points", "\ud83d\ude00", "a lone surrogate"),
    ("denial reason", ToolDecision("r1", False, LONE), "input.reason"),
    ("external result", ExternalResult("e1", LONE), "input.output"),
    ("edited arguments", ToolDecision("r1", True, arguments={"order": LONE}), "input.arguments.order"),
    ("argument key", ToolDecision("r1", True, arguments={LONE: "x"}), "the key"),
    (
        "deep arguments",
        ToolDecision("r1", True, arguments=nested(10_000)),
        f"nested deeper than {MAX_NESTING} levels",
    ),
    (
        "answers in a list",
        [ToolDecision("r1", False), ExternalResult("e1", f"signed {LONE}")],
        "input[1].output",
    ),
]


@pytest.mark.parametrize(("what", "bad", "where"), BAD_ANSWERS, ids=[w for w, _, _ in BAD_ANSWERS])
async def test_bad_input_is_refused_at_every_door_and_the_log_keeps_nothing(
    tmp_path: Path, what: str, bad: AgentInput, where: str
) -> None:
    agent = clerk_agent(tmp_path)
    try:
        assert (await agent.call("refund and sign", CTX)).reason == "PERMISSION_ASKING"
        before = await agent.sessions.facts(CTX)
        handle = agent.session(CTX)
        doors: list[Callable[[], Any]] = [
            lambda: agent.stream_events(bad, CTX),
            lambda: handle.submit(bad),
            lambda: handle.respond(bad),  # type: ignore[arg-type]
        ]
        for door in doors:
            with pytest.raises(InvalidInputError) as refused:
                door()
            assert where in str(refused.value), what
        with pytest.raises(InvalidInputError):
            await agent.call(bad, CTX)
        assert handle.status().queued == 0
        assert handle.last_run is None
        assert await agent.sessions.facts(CTX) == before, what
        await answer_and_go_on(agent, handle)
    finally:
        await agent.aclose()


def clerk_agent(tmp_path: Path) -> ReActAgent:
    """The refund desk on a SQLite file, its refund asking a human (no refund made yet)."""
    refunds.clear()
    return ReActAgent(
        FunctionModel(clerk),
        Toolkit([refund, sign]),
        permissions=Permissions().ask("refund"),
        store=SQLiteStore(tmp_path / "sessions.db"),
    )


async def answer_and_go_on(agent: ReActAgent, handle: SessionHandle) -> None:
    """The session still works: its calls are answered, and a new run answers."""
    answered = handle.respond([ToolDecision("r1", True), ExternalResult("e1", "signed")])
    assert (await asyncio.wait_for(answered, WAIT)).reason == "MODEL_STOP"
    assert refunds == ["A-1"]
    assert (await agent.call("still there?", CTX)).text == "answered: still there?"


async def test_bad_messages_are_refused_by_steer_inject_and_add_messages(tmp_path: Path) -> None:
    agent = clerk_agent(tmp_path)
    try:
        assert (await agent.call("refund and sign", CTX)).reason == "PERMISSION_ASKING"
        before = await agent.sessions.facts(CTX)
        handle = agent.session(CTX)
        with pytest.raises(InvalidInputError, match=r"message\.content\[0\]\.text: the text holds"):
            handle.steer(f"steer {LONE}")
        with pytest.raises(InvalidInputError, match=r"message\.metadata\.note"):
            handle.inject(Msg.user("fine text", metadata={"note": LONE}))
        with pytest.raises(InvalidInputError, match=r"messages\[1\]\.content\[0\]\.text"):
            await agent.sessions.add_messages(CTX, [Msg.user("fine"), Msg.user(LONE)])
        await asyncio.wait_for(handle.wait(), WAIT)
        assert await agent.sessions.facts(CTX) == before
        await answer_and_go_on(agent, handle)
    finally:
        await agent.aclose()
