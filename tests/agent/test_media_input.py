"""Images and documents as an agent's input: how they are given, and what the doors refuse.

``agent.call(["What is in this picture?", ImageBlock.from_path(...)])`` makes one user message of the
text and media parts next to each other. Bad inputs tried, each refused before anything is saved (the
model is not called and the session's log stays empty): an image over the agent's inline cap (through
``call``, a message, ``sessions.add_messages`` and a session handle's ``steer`` and ``submit``), an image
or a document for a model whose capabilities refuse it, a part that is neither text, media, a message nor
an answer, and a negative cap.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rxagent import Agent, AgentOptions, DocumentBlock, ImageBlock, Msg, ScriptedModel
from rxagent.agent import InvalidInputError
from rxagent.context import RuntimeContext
from rxagent.messages import TextBlock
from rxagent.model.types import ModelCapabilities
from rxagent.session import SQLiteStore
from tests.test_media import pdf, png

ADA = RuntimeContext(session_id="s1")


async def test_text_and_an_image_make_one_user_message() -> None:
    model = ScriptedModel(["A grey square."])
    agent = Agent(model)
    picture = ImageBlock.from_bytes(png(4, 4))
    result = await agent.call(["What is in this picture?", picture], ADA)
    assert result.text == "A grey square."
    [sent] = model.requests[0].messages
    assert sent.role == "user"
    assert sent.content == (TextBlock(text="What is in this picture?"), picture)
    state = await agent.sessions.state(ADA)
    assert state.messages[0] == sent


async def test_parts_next_to_each_other_make_one_message_each_run_of_them() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model)
    brief = DocumentBlock.from_bytes(pdf(2), name="brief.pdf")
    picture = ImageBlock.from_url("https://example.com/cat.png")
    await agent.call([picture, "First this.", Msg.system("Be brief."), "Then", brief], ADA)
    sent = model.requests[0].messages
    assert [m.role for m in sent] == ["user", "system", "user"]
    assert [b.type for b in sent[0].content] == ["image", "text"]
    assert [b.type for b in sent[2].content] == ["text", "document"]


async def test_media_over_the_inline_cap_is_refused_before_anything_is_saved(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")
    model = ScriptedModel(["never"])
    agent = Agent(model, options=AgentOptions(max_inline_media_bytes=500), store=store)
    big = ImageBlock.from_bytes(png(200, 200))  # over 500 bytes
    assert (big.size or 0) > 500
    try:
        with pytest.raises(InvalidInputError) as refused:
            await agent.call(["Look:", big], ADA)
        assert refused.value.where == "input[0:2].content[1]"
        assert refused.value.problem == (
            f"the image holds {big.size:,} bytes inline, more than the 500 bytes a session's log keeps "
            "inline (AgentOptions.max_inline_media_bytes): send it by URL (from_url) or raise the cap"
        )
        with pytest.raises(InvalidInputError, match=re.escape(r"input.content[0]")):
            await agent.call(Msg.user([big]), ADA)
        with pytest.raises(InvalidInputError, match=re.escape("messages[1].content[0]")):
            await agent.sessions.add_messages(ADA, [Msg.user("fine"), Msg.user([big])])
        handle = agent.session(ADA)
        with pytest.raises(InvalidInputError, match=re.escape("message.content[0]")):
            handle.steer(Msg.user([big]))
        with pytest.raises(InvalidInputError, match=re.escape("input[0:1].content[0]")):
            handle.submit([big])
        assert model.requests == []
        assert (await agent.sessions.state(ADA)).messages == []
        assert await store.head((None, "s1")) == 0
        # By URL it is stored as its URL, whatever its size; under the cap it is kept inline.
        small = ImageBlock.from_bytes(png(1, 1))
        await agent.call(["Look:", ImageBlock.from_url("https://example.com/huge.png"), small], ADA)
        assert len(model.requests) == 1
    finally:
        await agent.aclose()
        await store.aclose()


async def test_a_raised_cap_lets_larger_media_in() -> None:
    model = ScriptedModel(["ok"])
    big = ImageBlock.from_bytes(png(200, 200))
    agent = Agent(model, options=AgentOptions(max_inline_media_bytes=(big.size or 0)))
    assert (await agent.call(["Look:", big])).text == "ok"


async def test_media_the_model_does_not_take_is_refused_at_the_door() -> None:
    model = ScriptedModel(["never"], capabilities=ModelCapabilities(images=False))
    agent = Agent(model)
    with pytest.raises(InvalidInputError) as refused:
        await agent.call(["Look:", ImageBlock.from_bytes(png(2, 2))], ADA)
    assert str(refused.value) == (
        "input[0:2].content[1]: model 'scripted' does not take images (ScriptedModel's "
        "capabilities.images is False), and this is image/png image: use a model that takes them"
    )
    assert model.requests == []
    assert (await agent.sessions.state(ADA)).messages == []
    # Documents it does take.
    assert (await agent.call(["Read:", DocumentBlock.from_bytes(pdf(1))], ADA)).text == "never"


async def test_a_part_of_no_known_kind_is_refused_by_name() -> None:
    agent = Agent(ScriptedModel(["never"]))
    with pytest.raises(TypeError, match=re.escape("input[1] is bytes: agent input must be text, images")):
        await agent.call(["Look:", png(2, 2)])  # type: ignore[list-item]


def test_the_cap_must_not_be_negative() -> None:
    with pytest.raises(ValueError, match="max_inline_media_bytes must be >= 0"):
        AgentOptions(max_inline_media_bytes=-1)


async def test_the_default_cap_is_20_mib() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model)
    at_cap = ImageBlock.from_bytes(png(1, 1).ljust(20 * 1024 * 1024, b"\0"))  # trailing bytes: still a PNG
    assert (await agent.call(["Look:", at_cap], ADA)).text == "ok"
    over = ImageBlock.from_bytes(png(1, 1).ljust(21 * 1024 * 1024, b"\0"))
    with pytest.raises(InvalidInputError) as refused:
        await agent.call(["Look:", over], ADA)
    assert refused.value.problem.startswith(
        "the image holds 21.0 MiB (22,020,096 bytes) inline, more than the 20.0 MiB (20,971,520 bytes)"
    )
    assert len(model.requests) == 1


async def test_an_image_alone_is_a_user_message() -> None:
    model = ScriptedModel(["ok"], capabilities=ModelCapabilities(images=False))
    agent = Agent(model)
    picture = ImageBlock.from_bytes(png(2, 2))
    refusal = re.escape("input.content[0]: model 'scripted' does not take")
    with pytest.raises(InvalidInputError, match=refusal):
        await agent.call(picture)
    taking = ScriptedModel(["ok"])
    await Agent(taking).call(picture)
    assert taking.requests[0].messages[0].content == (picture,)
