"""Images and documents in a session's log: inline bytes as standard base64, URLs as URLs, read back exactly.

Every test runs on each store of the conformance suite (memory, SQLite, PostgreSQL on a real server, the
delegating store). A second agent on the same store stands for another process: what it reads from the
log is what it sends its model. Bad inputs (media over the inline cap) are refused before anything is
saved: ``tests/agent/test_media_input.py``.
"""

from __future__ import annotations

import base64
import json

from rxagent import Agent, DocumentBlock, ImageBlock, ScriptedModel
from rxagent.context import RuntimeContext
from rxagent.events import RunStarted, event_from_json
from rxagent.operators import last_value
from rxagent.session import SessionStore
from tests.test_media import jpeg, pdf, png

ADA = RuntimeContext(user_id="ada", session_id="pictures")


async def test_media_round_trips_through_the_log(store: SessionStore) -> None:
    picture = png(32, 16) + b"\xfb\xff"  # bytes whose base64 holds "+" or "/"
    blocks = [
        "What do these show?",
        ImageBlock.from_bytes(picture, detail="high"),
        ImageBlock.from_url("https://example.com/photos/cat.jpg?size=2"),
        DocumentBlock.from_bytes(pdf(2), name="brief.pdf"),
        DocumentBlock.from_bytes("Notes: ünïcode.".encode(), "text/plain", name="notes.txt"),
        DocumentBlock.from_url("https://example.com/report.pdf"),
    ]
    first = Agent(ScriptedModel(["A picture and some papers."]), store=store)
    await last_value(first.stream_events(blocks, ADA, record=True))  # the run's events go to the log too
    asked = first.model
    assert isinstance(asked, ScriptedModel)
    sent = asked.requests[0].messages[0]

    model = ScriptedModel(["Still the same."])
    second = Agent(model, store=store)  # another process, as far as the log knows
    state = await second.sessions.state(ADA)
    assert state.messages[0] == sent
    assert await second.call(ImageBlock.from_bytes(jpeg(3, 3)), ADA)
    again = model.requests[0].messages
    assert again[0] == sent
    assert again[0].media[0].data == picture
    assert [m.role for m in again] == ["user", "assistant", "user"]

    [fact] = [f for f in await second.sessions.facts(ADA) if f.kind == "message" and '"image"' in f.payload][
        :1
    ]
    stored = json.loads(fact.payload)["message"]["content"]
    assert stored[1]["data"] == base64.b64encode(picture).decode()  # standard base64, not URL-safe
    assert stored[2] == {
        "type": "image",
        "media_type": "image/jpeg",
        "data": None,
        "url": "https://example.com/photos/cat.jpg?size=2",
        "detail": "auto",
    }
    assert stored[5]["url"] == "https://example.com/report.pdf"
    [started] = [
        f
        for f in await second.sessions.facts(ADA)
        if f.kind == "event" and '"type":"run_started"' in f.payload
    ]
    event = event_from_json(started.payload)
    assert isinstance(event, RunStarted)
    assert event.input == [sent]
