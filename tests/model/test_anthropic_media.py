"""Images and documents on the Anthropic Messages wire, as the loopback server received them.

A PNG reaches the server as an ``image`` block whose ``source`` is ``base64`` (its bytes, its media type)
or ``url``; a PDF as a ``document`` block, ``base64`` or ``url``, titled with its name; a text document as
a ``document`` block with a ``text`` source: the shapes of Anthropic's vision and PDF guides, in the order
of the message's blocks. A prompt-cache mark lands on an image or a document that ends the last message.
Bad inputs tried, each refused before any request is made: an image in an assistant message, a PDF in the
leading system message (the top-level ``system`` is text only, so it would be dropped), and images for a
model whose capabilities say it takes none.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator

import pytest

from rxagent import Agent, DocumentBlock, ImageBlock, Msg
from rxagent.messages import TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model import ChatRequest, ModelCapabilities, PromptCache, UnsupportedContentError
from rxagent.model.anthropic import AnthropicModel
from rxagent.operators import fold_message
from tests.model.anthropic_server import AnthropicServer, make_model, reply, text_block
from tests.test_media import pdf, png

EPHEMERAL = {"type": "ephemeral"}


@pytest.fixture
async def anthropic() -> AsyncIterator[AnthropicServer]:
    async with AnthropicServer() as running:
        yield running


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


async def test_a_png_and_a_pdf_reach_the_wire_as_documented(anthropic: AnthropicServer) -> None:
    picture = png(16, 9)
    brief = pdf(2)
    anthropic.script(reply(text_block(0, "A square, and a brief.")))
    async with make_model(anthropic) as model:
        result = await Agent(model).call(
            [
                "Describe the picture, then summarise the brief.",
                ImageBlock.from_bytes(picture),
                DocumentBlock.from_bytes(brief, name="brief.pdf"),
            ]
        )
    assert result.text == "A square, and a brief."
    [request] = anthropic.requests
    assert request.path == "/v1/messages"
    [user] = request.body["messages"]
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Describe the picture, then summarise the brief."},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64(picture)}},
            {
                "type": "document",
                "source": {"type": "base64", "media_type": "application/pdf", "data": b64(brief)},
                "title": "brief.pdf",
            },
        ],
    }
    # What the server decodes is the very bytes given.
    assert base64.b64decode(user["content"][1]["source"]["data"]) == picture
    assert base64.b64decode(user["content"][2]["source"]["data"]) == brief


async def test_by_url_and_a_text_document(anthropic: AnthropicServer) -> None:
    message = Msg.user(
        [
            ImageBlock.from_url("https://example.com/cat.png", detail="low"),
            TextBlock(text="and"),
            DocumentBlock.from_url("https://example.com/report.pdf", name="Q3 report"),
            DocumentBlock.from_url("https://example.com/untitled.pdf"),
            DocumentBlock.from_bytes(b"line one\nline two", "text/plain", name="notes.txt"),
        ]
    )
    anthropic.script(reply(text_block(0, "ok")))
    async with make_model(anthropic) as model:
        await model.stream(ChatRequest((Msg.system("Be brief."), message))).pipe(fold_message())
    body = anthropic.requests[0].body
    assert body["system"] == [{"type": "text", "text": "Be brief."}]
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                # `detail` is OpenAI's: Anthropic's image block has no such field.
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.png"}},
                {"type": "text", "text": "and"},
                {
                    "type": "document",
                    "source": {"type": "url", "url": "https://example.com/report.pdf"},
                    "title": "Q3 report",
                },
                {"type": "document", "source": {"type": "url", "url": "https://example.com/untitled.pdf"}},
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "line one\nline two"},
                    "title": "notes.txt",
                },
            ],
        }
    ]


def test_media_travels_with_the_turn_it_belongs_to() -> None:
    # A user message with an image, after a tool round: the tool results lead the merged user turn, the
    # image keeps its place among the user's own blocks.
    picture = png(2, 2)
    request = ChatRequest(
        (
            Msg.user("Take a screenshot."),
            Msg(role="assistant", content=(ToolUseBlock(id="t1", name="shot", input={}),)),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id="t1", name="shot", output=(TextBlock(text="saved"),))
            ),
            Msg.user(["Here it is:", ImageBlock.from_bytes(picture)]),
        )
    )
    body = json.loads(AnthropicModel("claude-test", api_key_env=None).encode_request(request))
    assert [block["type"] for block in body["messages"][-1]["content"]] == ["tool_result", "text", "image"]


@pytest.mark.parametrize("last", ["image", "document"])
def test_the_cache_mark_lands_on_media_that_ends_the_last_message(last: str) -> None:
    media = ImageBlock.from_bytes(png(4, 4)) if last == "image" else DocumentBlock.from_bytes(pdf(1))
    request = ChatRequest((Msg.system("S"), Msg.user(["What is this?", media])))
    model = AnthropicModel("claude-test", api_key_env=None, cache=PromptCache())
    content = json.loads(model.encode_request(request))["messages"][-1]["content"]
    assert content[0] == {"type": "text", "text": "What is this?"}
    assert content[1]["type"] == last
    assert content[1]["cache_control"] == EPHEMERAL
    # The mark is the request's, not the message's: the next request moves it to its own last block.
    grown = ChatRequest((*request.messages, Msg.assistant("A grey square."), Msg.user("Thanks.")))
    messages = json.loads(model.encode_request(grown))["messages"]
    assert "cache_control" not in messages[0]["content"][1]
    assert messages[-1]["content"] == [{"type": "text", "text": "Thanks.", "cache_control": EPHEMERAL}]


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        (
            (Msg.user("Draw me a cat."), Msg(role="assistant", content=(ImageBlock.from_bytes(png(1, 1)),))),
            "the Anthropic Messages format carries images and documents in user messages only, and this "
            "message's role is 'assistant'",
        ),
        (
            (
                Msg(role="system", content=(TextBlock(text="Policy:"), DocumentBlock.from_bytes(pdf(1)))),
                Msg.user("Does it allow pets?"),
            ),
            "user messages only, and this message's role is 'system'",
        ),
        (
            (
                Msg.user("Hi"),
                Msg(role="system", content=(ImageBlock.from_url("https://example.com/logo.png"),)),
            ),
            "user messages only, and this message's role is 'system'",
        ),
    ],
)
async def test_media_outside_a_user_message_is_refused_before_a_request(
    anthropic: AnthropicServer, messages: tuple[Msg, ...], error: str
) -> None:
    async with make_model(anthropic) as model:
        with pytest.raises(UnsupportedContentError, match=error):
            await model.stream(ChatRequest(messages)).pipe(fold_message())
    assert anthropic.requests == []


async def test_a_model_without_documents_refuses_them_before_a_request(anthropic: AnthropicServer) -> None:
    request = ChatRequest((Msg.user(["Read:", DocumentBlock.from_bytes(pdf(1))]),))
    async with make_model(anthropic, capabilities=ModelCapabilities(documents=False)) as model:
        with pytest.raises(UnsupportedContentError) as refused:
            await model.stream(request).pipe(fold_message())
    assert str(refused.value).startswith(
        "model 'claude-test' does not take documents (AnthropicModel's capabilities.documents is False)"
    )
    assert anthropic.requests == []
