"""Images and documents on the OpenAI Responses wire, as the loopback server received them.

A user message with media is one input message whose ``content`` is a list of parts, in the order of its
blocks, as OpenAI documents them: text as ``input_text``, a PNG as ``input_image`` with a ``data:`` URL (or
its own URL) and its ``detail``, a PDF as ``input_file`` with ``filename`` and ``file_data`` (or
``file_url``), a text document as ``input_text``. Text-only messages keep their plain string content. Bad
inputs tried, each refused before any request is made: an image in an assistant message, a document in
the leading system message (``instructions`` is text only, so it would be dropped), and images for a
model whose capabilities say it takes none.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from rxagent import Agent, DocumentBlock, ImageBlock, Msg
from rxagent.messages import TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model import ChatRequest, ModelCapabilities, UnsupportedContentError
from rxagent.operators import fold_message
from tests.model.openai_server import OpenAIServer
from tests.model.responses_server import ResponseStream, make_responses_model
from tests.test_media import pdf, png


def data_url(media_type: str, data: bytes) -> str:
    return f"data:{media_type};base64,{base64.b64encode(data).decode()}"


async def received(server: OpenAIServer, request: ChatRequest) -> dict[str, Any]:
    """The body the server received for ``request``."""
    server.script(ResponseStream().text("ok").completed())
    async with make_responses_model(server) as model:
        await model.stream(request).pipe(fold_message())
    return server.requests[-1].body


async def test_a_png_and_a_pdf_reach_the_wire_as_documented(server: OpenAIServer) -> None:
    picture = png(16, 9)
    brief = pdf(2)
    server.script(ResponseStream().text("A square, and a brief.").completed())
    async with make_responses_model(server) as model:
        result = await Agent(model).call(
            [
                "Describe the picture, then summarise the brief.",
                ImageBlock.from_bytes(picture),
                DocumentBlock.from_bytes(brief, name="brief.pdf"),
            ]
        )
    assert result.text == "A square, and a brief."
    [request] = server.requests
    assert request.path == "/v1/responses"
    assert request.body["input"] == [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Describe the picture, then summarise the brief."},
                {"type": "input_image", "image_url": data_url("image/png", picture), "detail": "auto"},
                {
                    "type": "input_file",
                    "filename": "brief.pdf",
                    "file_data": data_url("application/pdf", brief),
                },
            ],
        }
    ]
    # What the server decodes is the very bytes given.
    parts = request.body["input"][0]["content"]
    assert base64.b64decode(parts[1]["image_url"].split(",", 1)[1]) == picture
    assert base64.b64decode(parts[2]["file_data"].split(",", 1)[1]) == brief


async def test_by_url_detail_a_text_document_and_an_unnamed_pdf(server: OpenAIServer) -> None:
    message = Msg.user(
        [
            ImageBlock.from_url("https://example.com/cat.png", detail="low"),
            "and ",
            "this",
            ImageBlock.from_bytes(png(1, 1), detail="high"),
            DocumentBlock.from_url("https://example.com/report.pdf"),
            DocumentBlock.from_bytes(b"line one\nline two", "text/plain", name="notes.txt"),
            DocumentBlock.from_bytes(pdf(1)),
        ]
    )
    body = await received(server, ChatRequest((Msg.system("Be brief."), message)))
    assert body["instructions"] == "Be brief."
    [item] = body["input"]
    parts = item["content"]
    assert parts[0] == {"type": "input_image", "image_url": "https://example.com/cat.png", "detail": "low"}
    assert parts[1] == {
        "type": "input_text",
        "text": "and this",
    }  # adjacent text is one part, as without media
    assert parts[2]["detail"] == "high"
    assert parts[3] == {"type": "input_file", "file_url": "https://example.com/report.pdf"}
    assert parts[4] == {"type": "input_text", "text": "notes.txt:\nline one\nline two"}
    assert parts[5]["filename"] == "document.pdf"  # the API wants a name with file_data
    assert len(parts) == 6


async def test_text_only_messages_keep_string_content_beside_media_turns(server: OpenAIServer) -> None:
    request = ChatRequest(
        (
            Msg.user(["What is this?", ImageBlock.from_bytes(png(2, 2))]),
            Msg(
                role="assistant", content=(ToolUseBlock(id="c1", name="zoom", input={}, raw_arguments="{}"),)
            ),
            Msg.from_tool_results(
                ToolResultBlock(tool_use_id="c1", name="zoom", output=(TextBlock(text="a grey square"),))
            ),
            Msg.user("And now?"),
        )
    )
    body = await received(server, request)
    first, call, output, last = body["input"]
    assert [part["type"] for part in first["content"]] == ["input_text", "input_image"]
    assert call["type"] == "function_call"
    assert output == {"type": "function_call_output", "call_id": "c1", "output": "a grey square"}
    assert last == {"role": "user", "content": "And now?"}


@pytest.mark.parametrize(
    ("messages", "error"),
    [
        (
            (Msg.user("Draw me a cat."), Msg(role="assistant", content=(ImageBlock.from_bytes(png(1, 1)),))),
            "the OpenAI Responses format carries images and documents in user messages only, and this "
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
            (Msg.user("Hi"), Msg(role="system", content=(ImageBlock.from_url("https://example.com/a.png"),))),
            "user messages only, and this message's role is 'system'",
        ),
    ],
)
async def test_media_outside_a_user_message_is_refused_before_a_request(
    server: OpenAIServer, messages: tuple[Msg, ...], error: str
) -> None:
    async with make_responses_model(server) as model:
        with pytest.raises(UnsupportedContentError, match=error):
            await model.stream(ChatRequest(messages)).pipe(fold_message())
    assert server.requests == []


async def test_a_model_without_images_refuses_them_before_a_request(server: OpenAIServer) -> None:
    request = ChatRequest((Msg.user(["Look:", ImageBlock.from_bytes(png(2, 2))]),))
    async with make_responses_model(server, capabilities=ModelCapabilities(images=False)) as model:
        with pytest.raises(UnsupportedContentError) as refused:
            await model.stream(request).pipe(fold_message())
    assert str(refused.value).startswith(
        "model 'test-model' does not take images (OpenAIResponsesModel's capabilities.images is False)"
    )
    assert server.requests == []
