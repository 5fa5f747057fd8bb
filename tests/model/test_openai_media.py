"""Images and documents on the chat-completions wire, as the loopback server received them.

A PNG reaches the server as an ``image_url`` part with a ``data:`` URL (or the image's own http(s) URL),
a PDF as a ``file`` part with ``file_data``, in the order of the message's blocks, next to text parts, as
OpenAI documents them. Bad inputs tried, each refused before any request is made: a PDF by URL (the
format takes only a file's bytes), an image in an assistant message, and images for a model whose
capabilities say it takes none.
"""

from __future__ import annotations

import base64

import pytest

from rxagent import Agent, DocumentBlock, ImageBlock, Msg
from rxagent.messages import TextBlock
from rxagent.model import ChatRequest, ModelCapabilities, UnsupportedContentError
from rxagent.operators import fold_message
from tests.model.openai_server import DONE, OpenAIServer, Reply, finish_chunk, make_model, text_chunk
from tests.test_media import pdf, png

OK = Reply.sse(text_chunk("A square."), finish_chunk(), DONE)


async def test_a_png_and_a_pdf_reach_the_wire_as_documented(server: OpenAIServer) -> None:
    picture = png(16, 9)
    brief = pdf(2)
    server.script(OK)
    async with make_model(server) as model:
        agent = Agent(model)
        result = await agent.call(
            [
                "Describe the picture, then summarise the brief.",
                ImageBlock.from_bytes(picture),
                DocumentBlock.from_bytes(brief, name="brief.pdf"),
            ]
        )
    assert result.text == "A square."
    [request] = server.requests
    [user] = request.body["messages"]
    assert user == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Describe the picture, then summarise the brief."},
            {
                "type": "image_url",
                "image_url": {"url": "data:image/png;base64," + base64.b64encode(picture).decode()},
            },
            {
                "type": "file",
                "file": {
                    "filename": "brief.pdf",
                    "file_data": "data:application/pdf;base64," + base64.b64encode(brief).decode(),
                },
            },
        ],
    }
    # What the server decodes is the very bytes given.
    assert base64.b64decode(user["content"][1]["image_url"]["url"].split(",", 1)[1]) == picture
    assert base64.b64decode(user["content"][2]["file"]["file_data"].split(",", 1)[1]) == brief


async def test_an_image_by_url_its_detail_and_a_text_document(server: OpenAIServer) -> None:
    message = Msg.user(
        [
            ImageBlock.from_url("https://example.com/cat.png", detail="low"),
            TextBlock(text="and"),
            ImageBlock.from_bytes(png(1, 1), detail="high"),
            DocumentBlock.from_bytes(b"line one\nline two", "text/plain", name="notes.txt"),
            DocumentBlock.from_bytes(pdf(1)),
        ],
        name="ada",
    )
    server.script(OK)
    async with make_model(server) as model:
        await model.stream(ChatRequest((Msg.system("Be brief."), message))).pipe(fold_message())
    system, user = server.requests[0].body["messages"]
    assert system == {"role": "system", "content": "Be brief."}
    assert user["name"] == "ada"
    parts = user["content"]
    assert parts[0] == {
        "type": "image_url",
        "image_url": {"url": "https://example.com/cat.png", "detail": "low"},
    }
    assert parts[1] == {"type": "text", "text": "and"}
    assert parts[2]["image_url"]["detail"] == "high"
    assert parts[3] == {"type": "text", "text": "notes.txt:\nline one\nline two"}
    assert parts[4]["file"]["filename"] == "document.pdf"  # the API wants a name with file_data


async def test_text_only_messages_still_send_plain_string_content(server: OpenAIServer) -> None:
    server.script(OK)
    async with make_model(server) as model:
        await model.stream(ChatRequest((Msg.user(["one", "two"]),))).pipe(fold_message())
    assert server.requests[0].body["messages"] == [{"role": "user", "content": "onetwo"}]


@pytest.mark.parametrize(
    ("message", "error"),
    [
        (
            Msg.user(["Read:", DocumentBlock.from_url("https://example.com/report.pdf")]),
            "the chat-completions format takes a PDF's bytes, not its URL",
        ),
        (
            Msg(role="assistant", content=(ImageBlock.from_bytes(png(1, 1)),)),
            "in user messages only, and this message's role is 'assistant'",
        ),
    ],
)
async def test_what_the_format_cannot_carry_is_refused_before_a_request(
    server: OpenAIServer, message: Msg, error: str
) -> None:
    async with make_model(server) as model:
        with pytest.raises(UnsupportedContentError, match=error):
            await model.stream(ChatRequest((message,))).pipe(fold_message())
    assert server.requests == []


async def test_a_model_without_images_refuses_them_before_a_request(server: OpenAIServer) -> None:
    request = ChatRequest((Msg.user(["Look:", ImageBlock.from_bytes(png(2, 2))]),))
    async with make_model(server, capabilities=ModelCapabilities(images=False)) as model:
        with pytest.raises(UnsupportedContentError) as refused:
            await model.stream(request).pipe(fold_message())
    assert str(refused.value) == (
        "model 'test-model' does not take images (OpenAIChatModel's capabilities.images is False), and this "
        "is image/png image (message 0 of the request); nothing was sent: use a model that takes them, or "
        "leave them out"
    )
    assert server.requests == []
