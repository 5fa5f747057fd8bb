"""The trace view's data on a real server: each model call's request (as sent, or rebuilt from the log by a
server that did not send it, for a run nested in a tool call too) and a session's state at a fact.

Bad inputs tried: a sequence number that is 0, negative, not a number or too long; one past the log's head;
a fact that is not a model call's start; an unknown session; a bad or future ``at``.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.serve import AgentServer, ServeSettings
from rxagent.serve.trace import SentRequests
from rxagent.session import MemoryStore
from rxagent.tools import Permissions, Toolkit, tool
from tests.serve.conftest import Live, fact_events, is_result_of, serving


@tool
def lookup(city: str) -> str:
    """The temperature in a city."""
    return f"12 °C in {city}"


@tool
def convert(celsius: float) -> str:
    """Celsius to Fahrenheit."""
    return f"{celsius * 9 / 5 + 32:.1f} °F"


def team(store: MemoryStore) -> tuple[ReActAgent, ScriptedModel, ScriptedModel]:
    """A lead with two tools and a researcher (an agent used as a tool), on one store."""
    child_model = ScriptedModel(["Oslo is in Norway."])
    researcher = ReActAgent(child_model, name="researcher", store=store)
    lead_model = ScriptedModel(
        [
            ScriptedResponse(
                tool_calls=[
                    ScriptedToolCall("researcher", {"task": "Where is Oslo?"}, id="t1"),
                    ScriptedToolCall("lookup", {"city": "Oslo"}, id="l1"),
                ]
            ),
            ScriptedResponse(tool_calls=[ScriptedToolCall("convert", {"celsius": 12}, id="c1")]),
            ScriptedResponse(text="Oslo, Norway: 53.6 °F."),
        ]
    )
    tools = Toolkit([researcher.as_tool(description="Finds facts."), lookup, convert])
    lead = ReActAgent(lead_model, tools, system_prompt="Be precise.", store=store)
    return lead, lead_model, child_model


async def run_to_end(live: Live, session: str, text: str) -> list[dict[str, Any]]:
    status, answer = await live.post(f"/api/sessions/{session}/runs", {"input": text})
    assert status == 202, answer
    async with live.sse(f"/api/sessions/{session}/feed") as feed:
        return fact_events(await feed.until(is_result_of(answer["run_id"])))


def model_calls(facts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``model_call_started`` facts, in order."""
    return [f for f in facts if f["kind"] == "event" and f["data"]["type"] == "model_call_started"]


def dumped(messages: Any) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


async def test_a_request_is_the_one_sent_and_a_server_that_did_not_send_it_rebuilds_it() -> None:
    store = MemoryStore()
    lead, lead_model, child_model = team(store)
    async with serving(lead) as live:
        facts = await run_to_end(live, "w", "How warm is Oslo, and where is it?")
        calls = model_calls(facts)
        nested = [c for c in calls if c["data"]["parent_run_id"] is not None]
        own = [c for c in calls if c["data"]["parent_run_id"] is None]
        assert (len(own), len(nested)) == (3, 1)
        for n, call in enumerate(own):
            status, request = await live.get(f"/api/sessions/w/requests/{call['seq']}")
            assert status == 200, request
            assert (request["source"], request["call"], request["run_id"]) == ("sent", n, call["run_id"])
            sent = lead_model.requests[n]
            assert request["messages"] == dumped(sent.messages)
            assert [t["name"] for t in request["tools"]] == ["researcher", "lookup", "convert"]
            assert request["tools"][1]["parameters"]["properties"]["city"]["type"] == "string"
        assert request["messages"][0] == {**request["messages"][0], "role": "system"}
        # The researcher is another agent: its request was not kept, and is rebuilt from its own log.
        status, child = await live.get(f"/api/sessions/w/requests/{nested[0]['seq']}")
        assert status == 200, child
        assert child["session_id"].startswith("w/researcher/")
        assert (child["source"], child["call"]) == ("log", 0)
        assert child["messages"] == dumped(child_model.requests[0].messages)
        assert [t["name"] for t in child["tools"]] == []

    # Another server over the same store did not send them: it rebuilds each from the log, the same.
    again = ReActAgent(ScriptedModel([]), lead.toolkit, system_prompt="Be precise.", store=store)
    async with serving(again) as other:
        for n, call in enumerate(own):
            status, request = await other.get(f"/api/sessions/w/requests/{call['seq']}")
            assert status == 200, request
            assert request["source"] == "log"
            sent = dumped(lead_model.requests[n].messages)
            assert request["messages"][1:] == sent[1:]  # the history, as the log has it
            system = request["messages"][0]  # the agent's system prompt, made again
            assert (system["role"], system["content"]) == ("system", sent[0]["content"])
            assert [t["name"] for t in request["tools"]] == ["researcher", "lookup", "convert"]
            assert request["tools"][2]["description"] == "Celsius to Fahrenheit."


async def test_the_server_keeps_the_newest_requests_only_and_one_recorder_per_agent() -> None:
    sent = SentRequests(kept=2)
    agent = ReActAgent(ScriptedModel(["one", "two", "three"]), middleware=[sent])
    async with serving(agent) as live:
        assert agent.middleware == (sent,)  # the server used the recorder the agent had
        for text in ("a", "b", "c"):
            facts = await run_to_end(live, "s", text)  # the feed from the start: every run's
        starts = [c["seq"] for c in model_calls(facts)]
        sources = [(await live.get(f"/api/sessions/s/requests/{seq}"))[1]["source"] for seq in starts]
        assert sources == ["log", "sent", "sent"]
    with pytest.raises(ValueError, match="at least 1"):
        SentRequests(kept=0)


async def test_bad_sequence_numbers_and_facts_that_are_not_model_calls_are_refused() -> None:
    async with serving(ReActAgent(ScriptedModel(["hello"]))) as live:
        facts = await run_to_end(live, "s", "hi")
        head = facts[-1]["seq"]
        for bad in ("0", "-1", "x", "1.5", "9" * 19):
            status, answer = await live.get(f"/api/sessions/s/requests/{bad}")
            assert status == 400, (bad, answer)
            assert "whole number from 1" in answer["error"]
        status, answer = await live.get(f"/api/sessions/s/requests/{head + 1}")
        assert (status, answer["error"]) == (404, f"session 's' has no fact {head + 1}")
        status, answer = await live.get("/api/sessions/s/requests/1")
        assert status == 404
        assert answer["error"] == "fact 1 is not the start of a model call (it is a turn_started fact)"
        delta = next(f["seq"] for f in facts if f["kind"] == "event" and f["data"]["type"] == "text_delta")
        status, answer = await live.get(f"/api/sessions/s/requests/{delta}")
        assert (status, answer["error"].endswith("(it is a text_delta event)")) == (404, True)
        assert (await live.get("/api/sessions/nobody/requests/1"))[0] == 404
        assert (await live.get("/api/sessions/nobody/state"))[0] == 404


@tool
def refund(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


async def test_the_state_at_a_fact_is_the_log_s_projection_up_to_it() -> None:
    asks = ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])
    model = ScriptedModel([asks])
    agent = ReActAgent(model, Toolkit([refund]), permissions=Permissions().ask("refund"))
    async with serving(agent) as live:
        facts = await run_to_end(live, "s", "refund A-1")
        head = facts[-1]["seq"]
        status, whole = await live.get("/api/sessions/s/state")
        assert status == 200
        assert whole["at"] == head
        assert [p["call"]["id"] for p in whole["state"]["pending"]] == ["r1"]
        state = await agent.sessions.state(RuntimeContext(session_id="s"))
        assert whole["state"] == state.model_dump(mode="json")
        first_message = next(f["seq"] for f in facts if f["kind"] == "message")
        status, early = await live.get(f"/api/sessions/s/state?at={first_message}")
        assert status == 200
        assert [m["role"] for m in early["state"]["messages"]] == ["user"]
        assert early["state"]["pending"] == []
        assert early["open_run"] == next(f["data"]["run_id"] for f in facts if f["kind"] == "run_started")
        for bad in ("0", "abc", ""):
            assert (await live.get(f"/api/sessions/s/state?at={bad}"))[0] == 400
        status, answer = await live.get(f"/api/sessions/s/state?at={head + 1}")
        assert (status, answer["error"]) == (404, f"session 's' has {head} facts, not {head + 1}")


async def test_a_second_server_over_one_agent_does_not_keep_requests_twice() -> None:
    agent = ReActAgent(ScriptedModel([]))
    async with AgentServer(agent, ServeSettings(port=0)), AgentServer(agent, ServeSettings(port=0)) as second:
        assert sum(isinstance(m, SentRequests) for m in agent.middleware) == 1
        async with aiohttp.ClientSession(base_url=second.url) as http, http.get("/api/sessions") as r:
            assert r.status == 200
    await agent.aclose()
