"""Uncertain calls over HTTP: a session a dead server left with a side effect of unknown outcome is named
as such (``state: "uncertain"``, the calls listed), refuses new work with 409 saying how to go on, and is
reconciled through the session API (``POST …/reconcile``) or AG-UI (``resume`` entries), after which a run
carries on from the outcomes.

The log is written as a process killed inside the tool leaves it (tests/session/test_crash.py and
tests/serve/test_crash_serve.py kill real processes).

Bad inputs tried: a run, a steer and an AG-UI message while the call is uncertain; reconcile bodies with no
``outcomes``, an empty list, an unknown outcome, an ``output`` that is not a string, a retry with an output,
an unknown call id, the same call twice, an outcome for a session with nothing uncertain, and one that
leaves an uncertain call out; an AG-UI resume payload of the wrong shape.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rxagent import Msg, ScriptedModel
from rxagent.agent import ReActAgent
from rxagent.messages import ToolUseBlock
from rxagent.session import SessionStore, SQLiteStore
from rxagent.session.recorder import LOST_RUN, fact, message_fact
from rxagent.tools import Toolkit, tool
from tests.serve.conftest import is_result_of, serving

SESSION = "orders"
KEY = (None, SESSION)


def refunds(ran: list[str]) -> Toolkit:
    @tool
    def refund(order: str) -> str:
        """Refund an order (running it twice refunds twice).

        Args:
            order: the order.
        """
        ran.append(order)
        return f"refunded {order}"

    @tool(read_only=True)
    def balance(order: str) -> str:
        """An order's balance.

        Args:
            order: the order.
        """
        return f"{order}: 0"

    return Toolkit([refund, balance])


REFUND = ToolUseBlock(id="r1", name="refund", input={"order": "A-1"}, raw_arguments='{"order": "A-1"}')
BALANCE = ToolUseBlock(id="b1", name="balance", input={"order": "A-1"}, raw_arguments='{"order": "A-1"}')


async def killed_inside_the_refund(store: SessionStore) -> None:
    """The log a server killed while ``refund`` (and the read-only ``balance``) ran leaves."""
    lease = await store.acquire(KEY, "the server that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            fact("turn_started", {"turn_id": "turn_1"}, "run_1"),
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            message_fact("message", Msg.user("Refund A-1."), "run_1"),
            message_fact(
                "message", Msg.model_validate({"role": "assistant", "content": [REFUND, BALANCE]}), "run_1"
            ),
            fact("tool_dispatched", {"call": REFUND.model_dump(mode="json")}, "run_1"),
            fact("tool_dispatched", {"call": BALANCE.model_dump(mode="json")}, "run_1"),
        ],
    )
    await store.release(lease)


@pytest.fixture
async def store(tmp_path: Path) -> Any:
    made = SQLiteStore(tmp_path / "sessions.db")
    await killed_inside_the_refund(made)
    yield made
    await made.aclose()


async def test_the_session_api_names_the_uncertain_call_refuses_new_work_and_carries_on_once_reconciled(
    store: SQLiteStore,
) -> None:
    ran: list[str] = []
    model = ScriptedModel(["A-1 is refunded."])
    async with serving(ReActAgent(model, refunds(ran), store=store)) as live:
        status, session = await live.get(f"/api/sessions/{SESSION}")
        assert status == 200
        assert session["status"]["state"] == "uncertain"
        # Only the call a run will not repeat by itself: the read-only one is run again without asking.
        assert [c["id"] for c in session["status"]["uncertain"]] == ["r1"]
        assert session["status"]["uncertain"][0]["input"] == {"order": "A-1"}

        for path, body in [("runs", {"input": "and B-2?"}), ("steer", {"message": "hurry"})]:
            status, refused = await live.post(f"/api/sessions/{SESSION}/{path}", body)
            assert status == 409, path
            assert "refund (r1)" in refused["error"]
            assert "POST /api/sessions/{id}/reconcile" in refused["error"]
            assert [c["id"] for c in refused["uncertain"]] == ["r1"]

        reconcile = f"/api/sessions/{SESSION}/reconcile"
        for body, code, message in [
            ({}, 400, "missing field(s): 'outcomes'"),
            ({"outcomes": []}, 400, "at least one entry"),
            ({"outcomes": [{"call_id": "r1", "outcome": "maybe"}]}, 400, "'succeeded', 'failed' or 'retry'"),
            (
                {"outcomes": [{"call_id": "r1", "outcome": "failed", "output": 3}]},
                400,
                "'output' must be a string",
            ),
            ({"outcomes": [{"call_id": "r1", "outcome": "retry", "output": "x"}]}, 400, "has no 'output'"),
            (
                {"outcomes": [{"call_id": "r1", "outcome": "retry"}, {"call_id": "zz", "outcome": "failed"}]},
                409,
                "no uncertain call with id 'zz'",
            ),
            (
                {"outcomes": [{"call_id": "r1", "outcome": "retry"}, {"call_id": "r1", "outcome": "failed"}]},
                409,
                "reconciled twice",
            ),
        ]:
            status, refused = await live.post(reconcile, body)
            assert (status, message in refused["error"]) == (code, True), (body, refused)
        assert [f.kind for f in await store.read(KEY)][-1] == "tool_dispatched"  # nothing was recorded

        # One at a time: the read-only call first (recorded; the session still runs nothing).
        status, answer = await live.post(reconcile, {"outcomes": [{"call_id": "b1", "outcome": "retry"}]})
        assert (status, answer["run_id"], [c["id"] for c in answer["uncertain"]]) == (200, None, ["r1"])
        # It was done (the operator checked the payment system): its result is what the model sees.
        status, answer = await live.post(
            reconcile, {"outcomes": [{"call_id": "r1", "outcome": "succeeded", "output": "refunded A-1"}]}
        )
        assert status == 202
        async with live.sse(f"/api/sessions/{SESSION}/feed") as feed:
            await feed.until(is_result_of(answer["run_id"]))

        assert ran == []  # the refund did not run again
        results = [(r.tool_use_id, r.text) for r in model.requests[0].messages[-1].tool_results]
        assert results == [("r1", "refunded A-1"), ("b1", "A-1: 0")]  # the read-only call ran again
        _, session = await live.get(f"/api/sessions/{SESSION}")
        assert (session["status"]["state"], session["status"]["uncertain"]) == ("idle", [])
        status, refused = await live.post(reconcile, {"outcomes": [{"call_id": "r1", "outcome": "failed"}]})
        assert (status, "uncertain: none" in refused["error"]) == (409, True)

    facts = await store.read(KEY)
    # The dead server's run was recorded as ended by the reconciliation, before anything else.
    assert [(f.kind, f.data()) for f in facts[6:8]] == [
        ("run_failed", {"run_id": "run_1", "error": LOST_RUN}),
        ("reconciled", {"call_id": "b1", "outcome": "retry", "output": ""}),
    ]
    reconciled = [f.data() for f in facts if f.kind == "reconciled"]
    assert reconciled[1] == {"call_id": "r1", "outcome": "succeeded", "output": "refunded A-1"}
    assert [f.kind for f in facts].count("run_failed") == 1


async def test_a_call_reconciled_as_to_run_again_runs_once(store: SQLiteStore) -> None:
    ran: list[str] = []
    model = ScriptedModel(["A-1 is refunded."])
    async with serving(ReActAgent(model, refunds(ran), store=store)) as live:
        status, answer = await live.post(
            f"/api/sessions/{SESSION}/reconcile", {"outcomes": [{"call_id": "r1", "outcome": "retry"}]}
        )
        assert status == 202
        async with live.sse(f"/api/sessions/{SESSION}/feed") as feed:
            await feed.until(is_result_of(answer["run_id"]))
    assert ran == ["A-1"]


async def test_agui_refuses_a_thread_with_an_uncertain_call_until_resume_entries_settle_it(
    store: SQLiteStore,
) -> None:
    ran: list[str] = []
    model = ScriptedModel(["A-1 is refunded; B-2 next."])
    message = {"id": "m2", "role": "user", "content": "Now B-2."}
    async with serving(ReActAgent(model, refunds(ran), store=store)) as live:
        run_input: dict[str, Any] = {"threadId": SESSION, "runId": "x1", "messages": [message]}
        status, refused = await live.post("/ag-ui", run_input)
        assert status == 409
        assert "refund (r1)" in refused["error"]
        assert "resume entries" in refused["error"]
        assert [c["id"] for c in refused["uncertain"]] == ["r1"]

        bad = {
            **run_input,
            "resume": [{"interruptId": "r1", "status": "resolved", "payload": {"outcome": 1}}],
        }
        status, refused = await live.post("/ag-ui", bad)
        assert (status, "the payload must be" in refused["error"]) == (400, True)
        assert [f.kind for f in await store.read(KEY)][-1] == "tool_dispatched"  # nothing was recorded

        resumed = {
            **run_input,
            "resume": [{"interruptId": "r1", "status": "resolved", "payload": {"outcome": "retry"}}],
        }
        async with live.sse("/ag-ui", json=resumed) as stream:
            events = [e.json() for e in await stream.rest()]
    assert events[-1]["type"] == "RUN_FINISHED"
    assert events[-1]["outcome"]["type"] == "success"
    assert ran == ["A-1"]  # run again once, as the resume said; then the new message
    assert model.requests[0].messages[-1].text == "Now B-2."
