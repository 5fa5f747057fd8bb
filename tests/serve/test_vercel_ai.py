"""The AI SDK's chat route (``POST /api/chat``) on a real server on 127.0.0.1, read by the Vercel AI SDK's own
client code: the ``ai`` package from npm, run by node (``vercel_ai_client/chat_client.mjs``; the test set-up
installs it with ``npm ci``). Its transport parses every SSE chunk against the SDK's chunk schema, and
``readUIMessageStream`` (or ``useChat``'s core, ``AbstractChat``) assembles the message and reports every
protocol error; the tests assert there is none, and what the assembled message holds.

Bad inputs tried: a body that is not JSON, one sent as another content type, no ``id``, an ``id`` that is
not a session id, a ``trigger`` the SDK does not have, no ``messages``, an empty list, a message that is
not an object, one with no id, a wrong role, parts that are not objects, a last message that is the
system's, a user message with only empty text, a part type a user message does not take, a file part with
no URL, a ``data:`` URL that is not base64, base64 that does not decode, a file type we do not take, an
image the model does not take, an approval part with no decision, an assistant message for a session that
does not exist, an assistant message that answers nothing, the same user message twice, a new message
while a call waits for approval, an approval given twice; without the token, and from another origin.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import AgentOptions, ReActAgent
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentResult,
    MessageCompleted,
    ModelCallStarted,
    RunStarted,
    TextDelta,
    ToolCallArgumentsDelta,
    ToolCallCompleted,
    ToolCallStarted,
    ToolExecutionStarted,
    ToolResult,
)
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.types import ModelCapabilities
from rxagent.serve.vercel_ai import UIMessageTranslator, encode
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import WAIT, Live, ValveModel, is_result_of, serving

CLIENT = Path(__file__).with_name("vercel_ai_client")
"""The node client and its ``package.json`` (the ``ai`` package, pinned)."""

TOKEN = "tok-vercel-NEVER-SHOWN"

ran: list[str] = []


@tool
def lookup(city: str) -> str:
    """Look a city up."""
    ran.append(f"lookup {city}")
    return f"{city}: big"


@tool
def refund(order: str) -> str:
    """Refund an order."""
    ran.append(f"refund {order}")
    return f"refunded {order}"


@tool(external=True)
def sign(document: str) -> str:
    """A human signs it elsewhere."""
    raise AssertionError("external tools do not run here")


@tool(return_direct=True)
def quote(symbol: str) -> str:
    """The price of a share, which is the answer."""
    ran.append(f"quote {symbol}")
    return f"{symbol}: 42"


@pytest.fixture(autouse=True)
def nothing_ran() -> None:
    ran.clear()


# ---- the AI SDK, run by node -------------------------------------------------------------------------------


@dataclass(frozen=True)
class AiSdk:
    """Runs the node client with a plan; its report."""

    node: str

    async def __call__(self, plan: dict[str, Any]) -> dict[str, Any]:
        process = await asyncio.create_subprocess_exec(
            self.node,
            str(CLIENT / "chat_client.mjs"),
            cwd=CLIENT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(json.dumps(plan).encode()), WAIT * 3)
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        assert process.returncode == 0, f"the AI SDK client failed:\n{err.decode()}"
        return json.loads(out)


def _client_problem() -> tuple[str | None, str]:
    """The node binary, or why the AI SDK client cannot run here."""
    node = shutil.which("node")
    if node is None:
        return None, "node is not installed: the AI SDK client tests need Node.js (20 or later)"
    wanted = json.loads((CLIENT / "package.json").read_text())["dependencies"]["ai"]
    installed = CLIENT / "node_modules" / "ai" / "package.json"
    if not installed.exists():
        return None, f"the AI SDK is not installed in {CLIENT}: `bash scripts/test.sh` installs it (npm ci)"
    version = json.loads(installed.read_text())["version"]
    if version != wanted:
        return (
            None,
            f"{CLIENT} has ai {version}, not {wanted}: run `npm ci` there (or `bash scripts/test.sh`)",
        )
    return node, ""


@pytest.fixture
def ai_sdk() -> AiSdk:
    """The AI SDK client. In CI a missing node or package fails the tests; elsewhere it skips them, saying
    why (the set-up could not install it)."""
    node, problem = _client_problem()
    if node is None:
        if os.environ.get("CI"):
            pytest.fail(problem, pytrace=False)
        pytest.skip(problem)
    return AiSdk(node)


def brief(part: dict[str, Any]) -> dict[str, Any]:
    """The fields of an assembled UI part a test looks at."""
    keys = ("type", "state", "text", "input", "output", "errorText", "approval")
    return {k: part[k] for k in keys if k in part}


def text_run(*responses: Any) -> ScriptedModel:
    return ScriptedModel(list(responses))


# ---- runs read by the AI SDK -------------------------------------------------------------------------------


async def test_the_ai_sdk_reads_a_text_a_reasoning_and_a_tool_run_without_a_protocol_error(
    ai_sdk: AiSdk,
) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(text="Hello there.", chunk_size=3),
            ScriptedResponse(thinking="The user wants Oslo.", text="Oslo, then.", chunk_size=3),
            ScriptedResponse(
                text="Let me look.", tool_calls=[ScriptedToolCall("lookup", {"city": "Oslo"}, id="c1")]
            ),
            ScriptedResponse(text="Oslo is big."),
        ]
    )
    async with serving(ReActAgent(model, Toolkit([lookup]))) as live:
        plan = {"mode": "read", "api": f"{live.url}/api/chat", "chatId": "chat-1"}
        report = await ai_sdk({**plan, "texts": ["Hi!", "Which city?", "How big is Oslo?"]})
    text, reasoning, tools = report["runs"]
    for run in report["runs"]:
        assert run["errors"] == []
        assert run["types"][0] == "start"
        assert run["types"][-2:] == ["finish-step", "finish"]

    assert text["types"] == ["start", "start-step", "text-start"] + ["text-delta"] * 4 + [
        "text-end",
        "finish-step",
        "finish",
    ]
    assert [brief(p) for p in text["message"]["parts"]] == [
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Hello there."},
    ]
    assert text["chunks"][-1] == {"type": "finish", "finishReason": "stop"}

    assert [brief(p) for p in reasoning["message"]["parts"]] == [
        {"type": "step-start"},
        {"type": "reasoning", "state": "done", "text": "The user wants Oslo."},
        {"type": "text", "state": "done", "text": "Oslo, then."},
    ]

    assert [brief(p) for p in tools["message"]["parts"]] == [
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Let me look."},
        {
            "type": "tool-lookup",
            "state": "output-available",
            "input": {"city": "Oslo"},
            "output": "Oslo: big",
        },
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Oslo is big."},
    ]
    assert "tool-input-delta" in tools["types"]  # the arguments streamed as the model wrote them
    assert ran == ["lookup Oslo"]
    # what the SDK sent: useChat's body, the chat's id and the whole conversation
    last = report["bodies"][-1]
    assert (last["id"], last["trigger"], len(last["messages"])) == ("chat-1", "submit-message", 5)


async def test_a_failed_run_reaches_the_ai_sdk_as_an_error_part_then_finish(ai_sdk: AiSdk) -> None:
    model = ScriptedModel([RuntimeError("the model fell over")])
    async with serving(ReActAgent(model, options=AgentOptions(retry_budget=0))) as live:
        report = await ai_sdk({"mode": "read", "api": f"{live.url}/api/chat", "chatId": "c", "texts": ["hi"]})
    (run,) = report["runs"]
    assert run["types"] == ["start", "start-step", "finish-step", "error", "finish"]
    assert run["chunks"][-1] == {"type": "finish", "finishReason": "error"}
    # the error part is the only error the SDK reports: no protocol error
    assert [e["message"] for e in run["errors"]] == ["RuntimeError: the model fell over"]


# ---- useChat: approvals and external tools ----------------------------------------------------------------


async def test_use_chat_approves_a_call_and_the_same_message_goes_on_with_its_result(ai_sdk: AiSdk) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(
                text="I will refund it.", tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]
            ),
            "Refunded A-1.",
        ]
    )
    permissions = Permissions().ask("refund", reason="refunds need a person")
    agent = ReActAgent(model, Toolkit([refund]), permissions=permissions)
    async with serving(agent, token=TOKEN) as live:
        report = await ai_sdk(
            {
                "mode": "chat",
                "api": f"{live.url}/api/chat",
                "headers": {"Authorization": f"Bearer {TOKEN}"},
                "chatId": "chat-approve",
                "text": "Refund order A-1.",
                "approve": True,
                "responses": 2,
            }
        )
    assert report["errors"] == []
    assert report["finishes"] == [
        {"finishReason": "tool-calls", "isError": False, "isAbort": False},
        {"finishReason": "stop", "isError": False, "isAbort": False},
    ]
    user, answer = report["messages"]  # the answer goes on in the message that asked, not a second one
    assert user["role"] == "user"
    assert [brief(p) for p in answer["parts"]] == [
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "I will refund it."},
        {
            "type": "tool-refund",
            "state": "output-available",
            "input": {"order": "A-1"},
            "output": "refunded A-1",
            "approval": {"id": "r1", "requestReason": "refunds need a person", "approved": True},
        },
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Refunded A-1."},
    ]
    assert ran == ["refund A-1"]
    first, second = report["bodies"]
    assert first["messages"][-1]["id"] == user["id"]
    assert second["messages"][-1]["id"] == answer["id"] == second["messageId"]


async def test_use_chat_denies_a_call_and_the_model_is_told_why(ai_sdk: AiSdk) -> None:
    model = ScriptedModel(
        [
            ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]),
            "Not refunded.",
        ]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        report = await ai_sdk(
            {
                "mode": "chat",
                "api": f"{live.url}/api/chat",
                "chatId": "chat-deny",
                "text": "Refund order A-1.",
                "approve": False,
                "reason": "not today",
                "responses": 2,
            }
        )
    assert report["errors"] == []
    _, answer = report["messages"]
    call = next(p for p in answer["parts"] if p["type"] == "tool-refund")
    assert call["state"] == "output-denied"
    assert call["approval"]["approved"] is False
    assert answer["parts"][-1]["text"] == "Not refunded."
    assert ran == []
    assert "not today" in model.requests[1].messages[-1].tool_results[0].text


async def test_use_chat_gives_an_external_tool_its_output_from_on_tool_call(ai_sdk: AiSdk) -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("sign", {"document": "NDA"}, id="e1")]), "Signed."]
    )
    async with serving(ReActAgent(model, Toolkit([sign]))) as live:
        report = await ai_sdk(
            {
                "mode": "chat",
                "api": f"{live.url}/api/chat",
                "chatId": "chat-external",
                "text": "Get the NDA signed.",
                "toolOutputs": {"sign": "signed by Ada"},
                "responses": 2,
            }
        )
    assert report["errors"] == []
    assert [f["finishReason"] for f in report["finishes"]] == ["tool-calls", "stop"]
    _, answer = report["messages"]
    assert [brief(p) for p in answer["parts"]] == [
        {"type": "step-start"},
        {
            "type": "tool-sign",
            "state": "output-available",
            "input": {"document": "NDA"},
            "output": "signed by Ada",
        },
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Signed."},
    ]
    assert model.requests[1].messages[-1].tool_results[0].text == "signed by Ada"


# ---- the translation on its own: streams a scripted model does not produce --------------------------------

HEAD: dict[str, Any] = {"run_id": "run_1", "session_id": "s", "trace_id": "trace_1", "seq": 0}


async def test_odd_streams_still_parse_in_the_ai_sdk(ai_sdk: AiSdk) -> None:
    """A call whose id and name come late, a result for a call the client has no part for (one run again
    after a crash), a return-direct answer, a run cut off mid-text (a heartbeat in between), and a run that
    never started."""
    late = UIMessageTranslator("run_1", "m1")
    late_events = [
        RunStarted(**HEAD, agent="a", input=[]),
        ModelCallStarted(**HEAD, iteration=1, model="m", messages=1, tools=["lookup"]),
        ToolCallStarted(**HEAD, index=0, call_id=None, name=None),
        ToolCallArgumentsDelta(**HEAD, index=0, call_id=None, fragment='{"city": "Oslo"}'),
        ToolCallCompleted(**HEAD, call=ToolUseBlock(id="c1", name="lookup", input={"city": "Oslo"})),
        MessageCompleted(**HEAD, message=Msg.assistant("")),
        ToolExecutionStarted(**HEAD, call=ToolUseBlock(id="old", name="lookup", input={"city": "Rome"})),
        ToolResult(**HEAD, result=_result("old", "Rome: big"), duration_s=0.0),
        ToolResult(**HEAD, result=_result("c1", "Oslo: big"), duration_s=0.0),
        AgentResult(**HEAD, message=Msg.assistant("Oslo: big"), reason="TOOL_RETURN_DIRECT"),
    ]
    cut = UIMessageTranslator("run_1", "m2")
    cut_events = [RunStarted(**HEAD, agent="a", input=[]), TextDelta(**HEAD, text="Half an ans")]
    cut_chunks = [c for e in cut_events for c in cut.translate(e)]
    bodies = [
        encode([c for e in late_events for c in late.translate(e)]),
        # with the heartbeat a quiet stream sends between chunks
        encode(cut_chunks) + b": ping\n\n" + encode(cut.fail("the server stopped", "stop")),
        encode(UIMessageTranslator("run_1", "m3").fail("the run was cancelled", "cancelled")),
    ]
    report = await ai_sdk(
        {"mode": "parse", "api": "http://127.0.0.1:9/unused", "bodies": [b.decode() for b in bodies]}
    )
    late_run, cut_run, never = report["runs"]
    assert late_run["errors"] == []
    assert [brief(p) for p in late_run["message"]["parts"]] == [
        {"type": "step-start"},
        {
            "type": "tool-lookup",
            "state": "output-available",
            "input": {"city": "Oslo"},
            "output": "Oslo: big",
        },
        {
            "type": "tool-lookup",
            "state": "output-available",
            "input": {"city": "Rome"},
            "output": "Rome: big",
        },
        {"type": "step-start"},
        {"type": "text", "state": "done", "text": "Oslo: big"},
    ]
    assert [e["message"] for e in cut_run["errors"]] == ["the server stopped"]
    assert cut_run["types"][-2:] == ["error", "finish"]
    assert [e["message"] for e in never["errors"]] == ["the run was cancelled"]
    assert never["types"] == ["start", "error", "finish"]


async def test_the_client_reports_protocol_errors(ai_sdk: AiSdk) -> None:
    """The check the tests above rely on: a stream that breaks the protocol is reported."""
    broken = [
        'data: {"type":"start"}\n\ndata: {"type":"text-delta","id":"t1","delta":"no start"}\n\n',
        'data: {"type":"start"}\n\ndata: {"type":"tool-output-available","output":"no call id"}\n\n',
        'data: {"type":"start"}\n\ndata: {"type":"tool-output-available","toolCallId":"x","output":1}\n\n',
    ]
    report = await ai_sdk({"mode": "parse", "api": "http://127.0.0.1:9/unused", "bodies": broken})
    missing_start, bad_schema, unknown_call = report["runs"]
    assert any("text-start" in e["message"] for e in missing_start["errors"])
    assert bad_schema["errors"]
    assert any(
        'No tool invocation found for tool call ID "x"' in e["message"] for e in unknown_call["errors"]
    )


def _result(call_id: str, text: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=call_id, name="lookup", output=(TextBlock(text=text),))


# ---- the wire, and input refused --------------------------------------------------------------------------


def chat_body(chat_id: str, *messages: dict[str, Any], trigger: str = "submit-message") -> dict[str, Any]:
    return {"id": chat_id, "messages": list(messages), "trigger": trigger, "messageId": None}


def user(message_id: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"id": message_id, "role": "user", "parts": list(parts)}


def said(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


async def stream_of(live: Live, body: dict[str, Any], **kwargs: Any) -> list[str]:
    """POST /api/chat and read the whole answer: its ``data:`` values, as text."""
    async with live.http.post("/api/chat", json=body, **kwargs) as response:
        assert response.status == 200, await response.text()
        assert response.headers["x-vercel-ai-ui-message-stream"] == "v1"
        assert response.headers["Content-Type"].startswith("text/event-stream")
        raw = (await response.read()).decode()
    events = [e for e in raw.split("\n\n") if e and not e.startswith(":")]
    assert all(e.startswith("data: ") and "\n" not in e for e in events), raw
    return [e.removeprefix("data: ") for e in events]


def chunks_of(data: list[str]) -> list[dict[str, Any]]:
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]]


async def test_a_failed_turn_runs_again_when_its_message_is_sent_again_and_only_then() -> None:
    model = ScriptedModel([RuntimeError("the model fell over"), "Recovered."])
    agent = ReActAgent(model, options=AgentOptions(retry_budget=0))
    async with serving(agent) as live:
        failed = chunks_of(await stream_of(live, chat_body("s", user("u1", said("hi")))))
        assert [c["type"] for c in failed][-2:] == ["error", "finish"]
        assert failed[-2]["errorText"] == "RuntimeError: the model fell over"
        # useChat's regenerate() after the error sends the same message again: its turn runs again
        again = chunks_of(
            await stream_of(live, chat_body("s", user("u1", said("hi")), trigger="regenerate-message"))
        )
        assert "".join(c.get("delta", "") for c in again if c["type"] == "text-delta") == "Recovered."
        assert again[-1] == {"type": "finish", "finishReason": "stop"}
        status, error = await live.post("/api/chat", chat_body("s", user("u1", said("hi"))))
        assert status == 409
        assert "nothing to run" in error["error"]
        state = await agent.sessions.state(RuntimeContext(session_id="s"))
    assert [(m.role, m.id if m.role == "user" else m.text) for m in state.messages] == [
        ("user", "u1"),
        ("assistant", "Recovered."),
    ]
    assert len(model.requests) == 2


async def test_an_interrupted_run_closes_its_text_and_finishes_interrupted() -> None:
    model = ValveModel(ScriptedResponse(text="a long story", chunk_size=1))
    body = chat_body("s", user("u1", said("tell me")))
    async with serving(ReActAgent(model)) as live, live.sse("/api/chat", json=body) as stream:
        model.release(2)
        await stream.until(lambda e: e.data.startswith('{"type":"text-delta"'))
        assert await live.post("/api/sessions/s/interrupt") == (200, {"interrupted": True})
        rest = [e.data for e in await stream.rest()]
    assert [json.loads(d)["type"] for d in rest[-4:-1]] == ["text-end", "finish-step", "finish"]
    assert json.loads(rest[-2]) == {"type": "finish", "finishReason": "interrupted"}
    assert rest[-1] == "[DONE]"


async def test_a_run_that_never_starts_is_an_error_then_finish() -> None:
    model = ValveModel(ScriptedResponse(text="holding the session"))
    agent = ReActAgent(model, options=AgentOptions(session_wait=0.0))
    async with serving(agent) as live:
        _, first = await live.post("/api/sessions/s/runs", {"input": "hold it"})
        await asyncio.wait_for(model.waiting.wait(), WAIT)
        chunks = chunks_of(await stream_of(live, chat_body("s", user("u1", said("me too")))))
        assert [c["type"] for c in chunks] == ["start", "error", "finish"]
        assert "SessionBusyError" in chunks[1]["errorText"]
        model.open()
        async with live.sse("/api/sessions/s/feed") as feed:
            await feed.until(is_result_of(first["run_id"]))


async def test_a_return_direct_answer_is_the_last_steps_text() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("quote", {"symbol": "RX"}, id="q1")])]
    )
    async with serving(ReActAgent(model, Toolkit([quote]))) as live:
        chunks = chunks_of(await stream_of(live, chat_body("s", user("u1", said("RX?")))))
    types = [c["type"] for c in chunks]
    assert types[types.index("tool-output-available") :] == [
        "tool-output-available",
        "finish-step",
        "start-step",
        "text-start",
        "text-delta",
        "text-end",
        "finish-step",
        "finish",
    ]
    assert chunks[types.index("text-delta")]["delta"] == "RX: 42"


PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


async def test_file_parts_reach_the_model_as_images_and_documents() -> None:
    model = ScriptedModel(["A red dot and a note."])
    image = {
        "type": "file",
        "mediaType": "image/png",
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
    }
    note = {
        "type": "file",
        "mediaType": "text/plain",
        "filename": "note.txt",
        "url": "data:text/plain;base64," + base64.b64encode(b"remember the milk").decode(),
    }
    linked = {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/brief.pdf"}
    async with serving(ReActAgent(model)) as live:
        await stream_of(live, chat_body("s", user("u1", image, note, linked, said("What are these?"))))
    blocks = model.requests[0].messages[-1].content
    assert [b.type for b in blocks] == ["image", "document", "document", "text"]
    assert blocks[1].name == "note.txt"


def answering(*tool_parts: dict[str, Any]) -> dict[str, Any]:
    """The assistant message useChat sends back with its answers."""
    return {"id": "a1", "role": "assistant", "parts": [{"type": "tool-refund", **p} for p in tool_parts]}


APPROVED = {"toolCallId": "r1", "state": "approval-responded", "approval": {"id": "r1", "approved": True}}

BAD_BODIES: list[tuple[Any, int, str]] = [
    ({"messages": [user("u1", said("hi"))]}, 400, "'id'"),
    ({"id": "bad id!", "messages": [user("u1", said("hi"))]}, 400, "session id"),
    ({"id": "s", "trigger": "resume-stream", "messages": [user("u1", said("hi"))]}, 400, "'trigger'"),
    ({"id": "s"}, 400, "'messages'"),
    ({"id": "s", "messages": []}, 400, "'messages'"),
    ({"id": "s", "messages": ["hi"]}, 400, "messages[0] must be a UI message"),
    ({"id": "s", "messages": [{"role": "user", "parts": []}]}, 400, "messages[0] needs an 'id'"),
    ({"id": "s", "messages": [{"id": "u1", "role": "robot", "parts": []}]}, 400, "'role'"),
    ({"id": "s", "messages": [{"id": "u1", "role": "user", "parts": ["hi"]}]}, 400, "'parts'"),
    (
        {"id": "s", "messages": [{"id": "x", "role": "system", "parts": [said("Be brief.")]}]},
        400,
        "user's new message",
    ),
    ({"id": "s", "messages": [user("u1", said("  "))]}, 400, "has no text and no file"),
    ({"id": "s", "messages": [user("u1", {"type": "data-weather", "data": {}})]}, 400, "not 'data-weather'"),
    ({"id": "s", "messages": [user("u1", {"type": "file", "mediaType": "image/png"})]}, 400, "'url'"),
    (
        {
            "id": "s",
            "messages": [user("u1", {"type": "file", "mediaType": "image/png", "url": "data:image/png,xx"})],
        },
        400,
        "must be base64",
    ),
    (
        {
            "id": "s",
            "messages": [user("u1", {"type": "file", "mediaType": "image/png", "url": "data:;base64,!!"})],
        },
        400,
        "base64 is not valid",
    ),
    (
        {
            "id": "s",
            "messages": [
                user("u1", {"type": "file", "mediaType": "video/mp4", "url": "https://x.org/a.mp4"})
            ],
        },
        400,
        "'video/mp4' is not taken",
    ),
    (
        {"id": "s", "messages": [answering({"toolCallId": "r1", "state": "approval-responded"})]},
        400,
        "'approval'",
    ),
    ({"id": "s", "messages": [answering({"state": "approval-responded"})]}, 400, "needs 'toolCallId'"),
    ({"id": "s", "messages": [answering(APPROVED)]}, 404, "no session 's'"),
]


async def test_bad_requests_are_refused_and_nothing_runs_or_is_recorded() -> None:
    model = ScriptedModel(["never"])
    agent = ReActAgent(model)
    async with serving(agent) as live:
        async with live.http.post(
            "/api/chat", data=b"{not json", headers={"Content-Type": "application/json"}
        ) as r:
            assert (r.status, "not valid JSON" in (await r.json())["error"]) == (400, True)
        async with live.http.post("/api/chat", data=b"{}", headers={"Content-Type": "text/plain"}) as r:
            assert r.status == 415
        for body, status, fragment in BAD_BODIES:
            answer = await live.post("/api/chat", body)
            assert answer[0] == status, (body, answer)
            assert fragment in answer[1]["error"], (body, answer)
        sessions = (await live.get("/api/sessions"))[1]["sessions"]
    assert sessions == []
    assert model.requests == []


async def test_an_image_the_model_does_not_take_is_refused() -> None:
    model = ScriptedModel(["never"], capabilities=ModelCapabilities(images=False))
    image = {
        "type": "file",
        "mediaType": "image/png",
        "url": "data:image/png;base64," + base64.b64encode(PNG).decode(),
    }
    async with serving(ReActAgent(model)) as live:
        status, error = await live.post("/api/chat", chat_body("s", user("u1", image, said("What is it?"))))
    assert status == 400
    assert "image" in error["error"]
    assert model.requests == []


async def test_answers_that_do_not_fit_are_refused_and_the_first_answer_counts() -> None:
    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")]), "Refunded."]
    )
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        asked = chunks_of(await stream_of(live, chat_body("s", user("u1", said("Refund A-1.")))))
        request = next(c for c in asked if c["type"] == "tool-approval-request")
        assert (request["approvalId"], request["toolCallId"]) == ("r1", "r1")
        assert asked[-1] == {"type": "finish", "finishReason": "tool-calls"}
        message_id = asked[0]["messageId"]

        # a new message while the call waits for its approval
        status, error = await live.post(
            "/api/chat", chat_body("s", user("u1", said("Refund A-1.")), user("u2", said("Hello?")))
        )
        assert status == 409
        assert "waits for answers" in error["error"]
        # an assistant message that answers nothing, and one whose approval says nothing
        called = {"type": "tool-refund", "toolCallId": "r1", "input": {"order": "A-1"}}
        pending = {
            "id": message_id,
            "role": "assistant",
            "parts": [{**called, "state": "approval-requested"}],
        }
        status, error = await live.post("/api/chat", chat_body("s", user("u1", said("Refund A-1.")), pending))
        assert status == 409
        assert "nothing to run" in error["error"]
        empty = {**pending, "parts": [{**called, "state": "approval-responded", "approval": {"id": "r1"}}]}
        status, error = await live.post("/api/chat", chat_body("s", user("u1", said("Refund A-1.")), empty))
        assert status == 400
        assert "'approval'" in error["error"]
        assert ran == []

        approved = {
            **pending,
            "parts": [{**called, "state": "approval-responded", "approval": {"id": "r1", "approved": True}}],
        }
        body = chat_body("s", user("u1", said("Refund A-1.")), approved)
        went_on = chunks_of(await stream_of(live, body))
        assert went_on[0] == {"type": "start", "messageId": message_id}
        assert {"type": "tool-output-available", "toolCallId": "r1", "output": "refunded A-1"} in went_on
        # the same approval again (another tab): refused, naming the answer taken
        status, error = await live.post("/api/chat", body)
        assert status == 409
        assert (error["call_id"], error["taken"]) == ("r1", "approval")
    assert ran == ["refund A-1"]


async def test_the_route_is_behind_the_token_and_the_origin_check() -> None:
    model = ScriptedModel(["never"])
    async with serving(ReActAgent(model), token=TOKEN) as live:
        body = chat_body("s", user("u1", said("hi")))
        status, error = await live.post("/api/chat", body)
        assert status == 401
        assert TOKEN not in json.dumps(error)
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        status, _ = await live.post("/api/chat", body, headers={**bearer, "Origin": "https://evil.example"})
        assert status == 403
    assert model.requests == []
