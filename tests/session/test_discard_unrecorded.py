"""``Recorder.discard_unrecorded``: the state goes back to what the log (with the recorder's queue) has.

What a run that must keep nothing half-done relies on (the harness's context budget): changes made since
the recorder last looked are dropped, whatever field they touched, and what was recorded stays.
"""

from __future__ import annotations

from pathlib import Path

from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.session import Projection, Recorder, SQLiteStore
from rxagent.state import PendingCall

KEY = (None, "s1")


async def test_changes_since_the_last_record_are_dropped_and_recorded_ones_stay(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    lease = await store.acquire(KEY, "test", 30.0)
    assert lease is not None
    projection = Projection()
    recorder = Recorder(store, lease, projection)
    state = projection.state
    call = ToolUseBlock(id="c1", name="lookup", input={"q": "x"})
    asked = Msg(role="assistant", content=(call,))
    state.messages += [Msg.user("Look it up."), asked]
    state.extras["plan"] = {"step": 1}
    await recorder.flush()
    recorded = state.model_copy(deep=True)
    head = await store.head(KEY)

    # A run changes every field, and none of it is recorded yet...
    state.messages.append(Msg.user("And more."))
    state.messages[1] = asked.model_copy(update={"content": (TextBlock(text="edited"),)})
    state.pending.append(PendingCall(call=call, kind="ask", reason="why"))
    state.partial_results.append(
        ToolResultBlock(tool_use_id="c1", name="lookup", output=(TextBlock(text="r"),))
    )
    state.extras["plan"] = {"step": 2}
    state.extras["summary"] = "half done"
    state.active_groups = ["admin"]
    recorder.discard_unrecorded()
    assert state == recorded
    assert state.messages[1] is asked  # the recorded objects themselves

    await recorder.flush()
    assert await store.head(KEY) == head  # nothing left to write
    await store.release(lease)
    await store.aclose()


async def test_what_is_queued_for_the_log_counts_as_recorded(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    lease = await store.acquire(KEY, "test", 30.0)
    assert lease is not None
    projection = Projection()
    recorder = Recorder(store, lease, projection)
    projection.state.messages.append(Msg.user("Hi."))
    recorder.note("run_started", {"run_id": "r1"})  # looks at the state: the message is queued before it
    projection.state.messages.append(Msg.user("Dropped."))
    recorder.discard_unrecorded()
    await recorder.flush()
    kinds = [(f.kind, f.payload) for f in await store.read(KEY)]
    assert [k for k, _ in kinds] == ["message", "run_started"]
    assert "Dropped." not in "".join(p for _, p in kinds)
    assert [m.text for m in projection.state.messages] == ["Hi."]
    await store.release(lease)
    await store.aclose()
