"""``check_content``: a model that refuses images or documents refuses them before anything is sent, and a
request that repeats the conversation looks up each message's media once, not at every request.

Bad inputs tried: an image in the newest message of a long conversation (named by its position), a
document for a model that takes images only, and the same message object sent again after a refusal.
"""

from __future__ import annotations

import pytest

from rxagent import DocumentBlock, ImageBlock, Msg
from rxagent.model import ChatRequest, ModelCapabilities, UnsupportedContentError, check_content
from rxagent.model.scripted import ScriptedModel
from tests.test_media import pdf, png

NO_MEDIA = ModelCapabilities(images=False, documents=False)


@pytest.fixture
def media_lookups(monkeypatch: pytest.MonkeyPatch) -> list[Msg]:
    """Every message whose ``media`` is read, in order."""
    seen: list[Msg] = []
    media = Msg.media

    def counted(message: Msg) -> object:
        seen.append(message)
        return media.fget(message) if media.fget is not None else ()

    monkeypatch.setattr(Msg, "media", property(counted))
    return seen


def test_a_growing_conversation_reads_each_messages_media_once(media_lookups: list[Msg]) -> None:
    model = ScriptedModel([], capabilities=NO_MEDIA)
    history: tuple[Msg, ...] = ()
    for turn in range(20):
        history = (*history, Msg.user(f"question {turn}"), Msg.assistant(f"answer {turn}"))
        check_content(ChatRequest(history), model)
    assert len(media_lookups) == len(history) == 40
    assert {id(message) for message in media_lookups} == {id(message) for message in history}


def test_the_refused_block_is_named_by_its_place_even_when_it_comes_late(media_lookups: list[Msg]) -> None:
    model = ScriptedModel([], capabilities=ModelCapabilities(documents=False))
    history = tuple(Msg.user(f"question {turn}") for turn in range(10))
    check_content(ChatRequest(history), model)
    late = Msg.user(
        ["A picture, then a brief:", ImageBlock.from_bytes(png(2, 2)), DocumentBlock.from_bytes(pdf(1))]
    )
    for _attempt in range(2):  # refused again when sent again: the memo keeps the media, not a verdict
        with pytest.raises(
            UnsupportedContentError, match=r"does not take documents .* \(message 10 of the request\)"
        ):
            check_content(ChatRequest((*history, late)), model)
    assert len(media_lookups) == 11


def test_a_model_that_takes_media_reads_none(media_lookups: list[Msg]) -> None:
    model = ScriptedModel([])
    check_content(ChatRequest((Msg.user(["Look:", ImageBlock.from_bytes(png(2, 2))]),)), model)
    assert media_lookups == []
