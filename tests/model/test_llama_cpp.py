"""LlamaCppModel with the real embedded model (SmolLM2-135M-Instruct, Q4_1) on llama.cpp.

One model object serves the whole module (the loaded weights are shared per process anyway). Generation
is greedy (temperature 0), but llama.cpp built for another CPU computes slightly other logits, so what the
135M model freely chooses (its words, whether it calls a tool when it may, when it stops) differs between
machines. These tests check only what rxagent guarantees whatever the model chooses: the shape of what
comes out (deltas, finish reason, usage), that grammars hold (a forced call is a well-formed call of an
offered tool; structured output fits its schema), budgets and lifecycle. Where a test needs the model to
write at least so many tokens, a grammar makes it (a string of a fixed length), rather than a prompt.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import json
import re
from collections.abc import Callable
from typing import Annotated, Any, Literal

import pytest
import reactivex
from jsonschema import Draft202012Validator
from pydantic import BaseModel, Field
from reactivex import operators as ops

from rxagent.agent.inputs import InvalidInputError
from rxagent.agent.react import AgentOptions, ReActAgent
from rxagent.messages import DocumentBlock, ImageBlock, Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.errors import UnsupportedContentError
from rxagent.model.gguf import MODEL_PATH_ENV, MissingModelError
from rxagent.model.llama_cpp import LlamaCppModel, bounded_strings, tool_call_schema
from rxagent.model.types import ChatChunk, ChatRequest, ForceTool, JsonSchemaFormat, ToolChoice, ToolSchema
from rxagent.operators import fold_message, to_list
from rxagent.tools import FunctionTool, tool
from tests.streams import expect
from tests.test_media import pdf, png

pytestmark = pytest.mark.llm


@pytest.fixture(scope="module")
def model() -> LlamaCppModel:
    return LlamaCppModel(n_ctx=2048)


@tool
def get_weather(
    city: Annotated[str, Field(max_length=24)], unit: Literal["celsius", "fahrenheit"] = "celsius"
) -> str:
    """The current weather in a city.

    Args:
        city: the city's name.
        unit: the temperature unit.
    """
    return f"sunny in {city}"


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: the first number.
        b: the second number.
    """
    return a + b


TOOLS: dict[str, FunctionTool] = {"get_weather": get_weather, "add": add}
SCHEMAS = tuple(t.schema() for t in TOOLS.values())


def ask(text: str, **options: Any) -> ChatRequest:
    """A one-message request."""
    return ChatRequest((Msg.user(text),), **options)


def text_of(chunks: list[ChatChunk]) -> str:
    return "".join(chunk.text for chunk in chunks)


def at_least(model: LlamaCppModel, tokens: int) -> JsonSchemaFormat:
    """Structured output the model cannot end before it wrote ``tokens`` tokens: a JSON string of that
    many digits. No token of the vocabulary holds two digits (checked here), so each digit takes a token of
    its own, and the grammar allows nothing shorter."""
    assert digits_per_token(model) == 1
    return JsonSchemaFormat(name="digits", schema={"type": "string", "pattern": f"^[0-9]{{{tokens}}}$"})


@functools.cache
def digits_per_token(model: LlamaCppModel) -> int:
    """The most digits any one token of ``model``'s vocabulary holds."""
    llama = model.llama
    return max(sum(byte in b"0123456789" for byte in llama.detokenize([t])) for t in range(llama.n_vocab()))


def assert_valid_call(name: str, arguments: dict[str, Any] | None) -> None:
    """``arguments`` is a valid call of tool ``name``: by its JSON schema, and by the tool itself."""
    assert name in TOOLS
    assert isinstance(arguments, dict)
    Draft202012Validator(dict(TOOLS[name].schema().parameters)).validate(arguments)
    TOOLS[name].prepare(arguments)


# ---- streaming -------------------------------------------------------------------------------------


async def test_stream_emits_text_deltas_then_finish_reason_then_usage(model: LlamaCppModel) -> None:
    request = ask("Write a long story about a brave little cat.", max_tokens=12)

    seen = await expect(model.stream(request))

    assert seen.completed, seen.error
    *deltas, finish, usage = seen.items
    assert all(chunk.text and chunk.finish_reason is None and chunk.usage is None for chunk in deltas)
    assert finish.text == ""
    assert finish.usage is None
    assert finish.finish_reason in ("stop", "length")  # the model may stop on its own before the limit
    assert usage.usage is not None
    assert (usage.text, usage.finish_reason) == ("", None)
    assert usage.usage.input_tokens == model.count_request(request)
    assert usage.usage.output_tokens <= 12
    if finish.finish_reason == "length":
        assert usage.usage.output_tokens == 12
    message = await reactivex.from_iterable(seen.items).pipe(fold_message())
    assert message.text == text_of(deltas)
    assert message.metadata["finish_reason"] == finish.finish_reason
    assert message.metadata["usage"]["output_tokens"] == usage.usage.output_tokens


async def test_max_tokens_ends_a_longer_answer_with_length(model: LlamaCppModel) -> None:
    request = ask("Write anything.", max_tokens=12, response_format=at_least(model, 100))

    seen = await expect(model.stream(request))

    assert seen.completed, seen.error
    *deltas, finish, usage = seen.items
    assert deltas
    assert finish.finish_reason == "length"
    assert usage.usage is not None
    assert usage.usage.output_tokens == 12
    message = await reactivex.from_iterable(seen.items).pipe(fold_message())
    assert message.metadata["finish_reason"] == "length"
    assert message.metadata["usage"]["output_tokens"] == 12


async def test_output_tokens_count_tokens_not_text_pieces(model: LlamaCppModel) -> None:
    # Each of these characters takes several tokens, which llama.cpp hands out as one piece; the grammar
    # makes the model write exactly them.
    request = ask(
        "Say hello in Chinese.",
        response_format=JsonSchemaFormat(
            name="greeting", schema={"type": "string", "pattern": "^你好世界😀$"}
        ),
        max_tokens=64,
    )

    # The premise: no single token of this model's vocabulary is the emoji, so it takes several tokens
    # whatever the model does, and llama.cpp hands them out as one piece.
    llama = model.llama
    emoji = "😀".encode()
    assert all(llama.detokenize([token]) != emoji for token in range(llama.n_vocab()))

    chunks = await to_list(model.stream(request))

    pieces = [chunk.text for chunk in chunks if chunk.text]
    usage = chunks[-1].usage
    assert usage is not None
    assert json.loads("".join(pieces)) == "你好世界😀"
    assert usage.output_tokens > len(pieces)
    # The answer's tokens are the ones that follow the prompt in the model's context.
    answer = list(llama.input_ids[usage.input_tokens : usage.input_tokens + usage.output_tokens])
    assert llama.detokenize(answer).decode("utf-8") == "".join(pieces)


# ---- cancellation and sharing ----------------------------------------------------------------------


async def test_dispose_mid_generation_ends_the_worker_and_frees_the_model(model: LlamaCppModel) -> None:
    max_tokens = 200
    received: list[ChatChunk] = []
    some_arrived = asyncio.Event()

    def on_next(chunk: ChatChunk) -> None:
        received.append(chunk)
        if len(received) >= 5:
            some_arrived.set()

    # The grammar asks for more than max_tokens, so the model cannot stop before the dispose does.
    request = ask("Write anything.", max_tokens=max_tokens, response_format=at_least(model, 2 * max_tokens))
    subscription = model.stream(request).subscribe(on_next)
    worker = model.last_worker
    assert worker is not None
    await asyncio.wait_for(some_arrived.wait(), timeout=60)
    subscription.dispose()
    at_dispose = len(received)

    worker.join(timeout=10)

    assert not worker.is_alive()
    # Generation itself stopped (not just the delivery): few tokens followed the prompt in the context.
    assert model.llama.n_tokens - model.count_request(request) < max_tokens // 2
    again = await expect(model.stream(ask("Say hi.", max_tokens=8)))
    assert again.completed, again.error
    assert again.items[-2].finish_reason in ("stop", "length")
    assert again.items[-1].usage is not None
    # Whatever the worker handed over before it stopped was dropped: nothing arrived after the dispose.
    assert len(received) == at_dispose < max_tokens
    assert all(chunk.finish_reason is None and chunk.usage is None for chunk in received)


async def test_two_concurrent_streams_both_complete_taking_turns(model: LlamaCppModel) -> None:
    order: list[str] = []
    first = expect(
        model.stream(ask("Name three colours.", max_tokens=16, response_format=at_least(model, 32))).pipe(
            ops.do_action(lambda _: order.append("a"))
        )
    )
    second = expect(
        model.stream(ask("Name three animals.", max_tokens=16, response_format=at_least(model, 32))).pipe(
            ops.do_action(lambda _: order.append("b"))
        )
    )

    await asyncio.wait_for(first, timeout=60)
    await asyncio.wait_for(second, timeout=60)

    for seen in (first, second):
        assert seen.completed, seen.error
        assert text_of(seen.items)  # the grammar made each write 16 tokens
        usage = seen.items[-1].usage
        assert usage is not None
        assert usage.output_tokens == 16
    # One generation at a time: all of one stream's chunks, then all of the other's.
    assert [name for name, _ in itertools.groupby(order)] in (["a", "b"], ["b", "a"])


# ---- tools ----------------------------------------------------------------------------------------


def assert_call_of_an_offered_tool(message: Msg, forced: str | None = None) -> None:
    """``message`` is one call of an offered tool (``forced``, if given) that the tool accepts, or, if
    ``max_tokens`` cut it off, a call marked invalid (never run), never text.

    The grammar allows only well-formed calls, but how long the model makes one (spaces, ``\\u``
    escapes in a string) is its choice, so a cut is possible; rxagent's guarantee covers both cases.
    """
    assert message.text == ""
    (call,) = message.tool_calls
    if message.metadata["finish_reason"] == "length":
        assert call.state == "invalid"
        assert call.error
        return
    assert message.metadata["finish_reason"] == "tool_calls"
    assert (call.state, call.error) == ("complete", None)
    if forced is not None:
        assert call.name == forced
    assert_valid_call(call.name, call.input)


@pytest.mark.parametrize(
    "choice",
    [ForceTool("get_weather"), ForceTool("add"), "required"],
    ids=["force-get_weather", "force-add", "required"],
)
async def test_forced_tool_choice_gives_a_valid_call(model: LlamaCppModel, choice: ToolChoice) -> None:
    request = ask("What is the weather in Paris?", tools=SCHEMAS, tool_choice=choice, max_tokens=256)

    message = await model.stream(request).pipe(fold_message())

    assert_call_of_an_offered_tool(message, choice.name if isinstance(choice, ForceTool) else None)


def assert_text_or_valid_call(message: Msg) -> None:
    """``message`` is a plain answer or a call (see :func:`assert_call_of_an_offered_tool`), never a mix
    and never JSON passed off as text. The grammar's answer starts with a visible character other than
    ``{``, so an answer is never blank."""
    if message.tool_calls:
        assert_call_of_an_offered_tool(message)
    else:
        assert message.text.strip()
        assert not message.text.lstrip().startswith("{")
        assert message.metadata["finish_reason"] in ("stop", "length")


def after_an_example_call(question: str) -> tuple[Msg, ...]:
    """A conversation in which the assistant answered a weather question with a call, then ``question``."""
    call = ToolUseBlock(
        id="call_1", name="get_weather", input={"city": "Oslo"}, raw_arguments='{"city": "Oslo"}'
    )
    result = ToolResultBlock(tool_use_id="call_1", name="get_weather", output=(TextBlock(text="sunny"),))
    return (
        Msg.user("What is the weather in Oslo?"),
        Msg(role="assistant", content=(call,)),
        Msg(role="tool", content=(result,)),
        Msg.assistant("It is sunny in Oslo."),
        Msg.user(question),
    )


# Whether the model answers or calls under "auto" is its free choice (it differs between machines), so
# these only check that either way the output is well-formed.
@pytest.mark.parametrize(
    "messages",
    [
        (Msg.user("What is the weather in Paris?"),),
        (Msg.user("What is 2 + 3?"),),
        (Msg.user("Hello!"),),
        (Msg.user("Tell me a joke."),),
        after_an_example_call("And in Rome?"),
        after_an_example_call("What is 2 + 3?"),
        after_an_example_call("What is the weather in Berlin?"),
    ],
    ids=["weather", "sum", "greeting", "joke", "example-then-weather", "example-then-sum", "example-berlin"],
)
async def test_auto_tool_choice_gives_text_or_a_valid_call(
    model: LlamaCppModel, messages: tuple[Msg, ...]
) -> None:
    request = ChatRequest(messages, tools=SCHEMAS, tool_choice="auto", max_tokens=256)

    message = await model.stream(request).pipe(fold_message())

    assert_text_or_valid_call(message)


# ---- structured output -----------------------------------------------------------------------------


class Review(BaseModel):
    """The verdict on a product review."""

    sentiment: Literal["positive", "negative", "neutral"]
    stars: int = Field(ge=1, le=5)


@pytest.mark.parametrize(
    "review", ["Great phone, I love it.", "Terrible, it broke after a day.", "It is ok, I guess."]
)
async def test_structured_output_into_a_pydantic_model(model: LlamaCppModel, review: str) -> None:
    # No retries: the grammar alone must make the first answer valid (the star bounds included).
    options = AgentOptions(max_tokens=96, temperature=0.0, structured_retries=0)
    agent = ReActAgent(model, output_type=Review, options=options)

    result = await agent.call(f"Rate this review: {review!r}")

    assert result.reason == "STRUCTURED_OUTPUT"
    assert result.structured_error is None
    assert isinstance(result.structured, Review)
    assert 1 <= result.structured.stars <= 5
    assert result.iterations == 1


async def test_integer_bounds_hold_in_json_output(model: LlamaCppModel) -> None:
    schema = {
        "type": "object",
        "properties": {
            "dozen": {"type": "integer", "minimum": 7, "maximum": 9},
            "odd": {"type": "integer", "exclusiveMinimum": 100, "exclusiveMaximum": 103},
        },
        "required": ["dozen", "odd"],
    }
    for prompt in ("How many eggs are in a dozen?", "Pick numbers.", "Give me 12 and 500."):
        request = ask(prompt, response_format=JsonSchemaFormat(name="numbers", schema=schema), max_tokens=64)

        message = await model.stream(request).pipe(fold_message())

        value = json.loads(message.text)
        assert 7 <= value["dozen"] <= 9
        assert value["odd"] in (101, 102)


# ---- token counting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "",
        "Hello, world!",
        "  leading and trailing spaces  ",
        "line one\nline two\ttabbed",
        "naïve café, déjà vu — Übermaß",
        "你好，世界",
        "emoji 😀🎉 and flags 🇫🇷",
        "<|im_start|>user\nHi<|im_end|>",
    ],
)
def test_count_text_is_the_model_tokenizer(model: LlamaCppModel, text: str) -> None:
    expected = len(model.llama.tokenize(text.encode(), add_bos=False, special=True))

    assert model.count_text(text) == expected


def test_count_text_counts_special_tokens_as_one(model: LlamaCppModel) -> None:
    assert model.count_text("") == 0
    assert model.count_text("<|im_end|>") == 1


@pytest.mark.parametrize(
    "request_",
    [
        ask("Hi!", max_tokens=4),
        ChatRequest((Msg.system("Be brief."), Msg.user("Hi! 😀")), max_tokens=4),
        ChatRequest(
            (Msg.system("Be brief."), Msg.user("Weather in Paris?")),
            tools=SCHEMAS,
            tool_choice="auto",
            max_tokens=4,
        ),
    ],
    ids=["user", "system-and-unicode", "tools"],
)
async def test_usage_input_tokens_equal_count_request(model: LlamaCppModel, request_: ChatRequest) -> None:
    chunks = await to_list(model.stream(request_))

    usage = chunks[-1].usage
    assert usage is not None
    assert usage.input_tokens == model.count_request(request_)
    assert usage.input_tokens == model.count_text(model.prompt(request_))


# ---- grammar helpers (pure) ------------------------------------------------------------------------


def test_bounded_strings_bounds_free_strings_only() -> None:
    schema = {
        "type": "object",
        "properties": {
            "free": {"type": "string"},
            "short": {"type": "string", "minLength": 3},
            "choice": {"type": "string", "enum": ["a", "b"]},
            "fixed": {"type": "string", "const": "x"},
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "limited": {"type": "string", "maxLength": 5},
            "day": {"type": "string", "format": "date"},
            "count": {"type": "integer"},
        },
    }

    bounded = bounded_strings(schema, 50)

    properties = bounded["properties"]
    assert properties["free"] == {"type": "string", "maxLength": 50, "minLength": 1}
    assert properties["short"] == {"type": "string", "minLength": 3, "maxLength": 50}
    for name in ("choice", "fixed", "code", "limited", "day", "count"):
        assert properties[name] == schema["properties"][name]
    assert schema["properties"]["free"] == {"type": "string"}  # the input is not modified


def test_bounded_strings_reaches_nested_schemas() -> None:
    schema = {
        "type": "array",
        "items": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"s": {"type": "string"}}}]},
        "$defs": {"Name": {"type": "string"}},
    }

    bounded = bounded_strings(schema, 8)

    free = {"type": "string", "maxLength": 8, "minLength": 1}
    assert bounded["items"]["anyOf"][0] == free
    assert bounded["items"]["anyOf"][1]["properties"]["s"] == free
    assert bounded["$defs"]["Name"] == free
    assert bounded_strings("not a schema", 8) == "not a schema"


def test_tool_call_schema_of_one_tool() -> None:
    tool_schema = ToolSchema(
        "lookup", "Look a word up.", {"type": "object", "properties": {"w": {"type": "string"}}}
    )

    schema = tool_call_schema([tool_schema])

    assert schema == {
        "type": "object",
        "properties": {
            "name": {"const": "lookup"},
            "arguments": {"type": "object", "properties": {"w": {"type": "string"}}},
        },
        "required": ["name", "arguments"],
        "additionalProperties": False,
    }
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"name": "lookup", "arguments": {"w": "cat"}})
    assert not validator.is_valid({"name": "other", "arguments": {}})
    assert not validator.is_valid({"name": "lookup"})


def test_tool_call_schema_of_several_tools_is_one_of_them() -> None:
    schema = tool_call_schema(SCHEMAS)

    assert [option["properties"]["name"] for option in schema["oneOf"]] == [
        {"const": "get_weather"},
        {"const": "add"},
    ]
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"name": "add", "arguments": {"a": 1, "b": 2}})
    assert validator.is_valid({"name": "get_weather", "arguments": {"city": "Oslo"}})
    assert not validator.is_valid({"name": "add", "arguments": {"city": "Oslo"}})


# ---- configuration errors --------------------------------------------------------------------------


def test_missing_model_file_raises_missing_model_error() -> None:
    with pytest.raises(
        MissingModelError, match=re.escape("model file not found: /nonexistent.gguf")
    ) as raised:
        LlamaCppModel("/nonexistent.gguf")

    assert isinstance(raised.value, FileNotFoundError)


def test_missing_model_file_from_the_environment_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(MODEL_PATH_ENV, "/nowhere/model.gguf")

    with pytest.raises(MissingModelError, match=re.escape("model file not found: /nowhere/model.gguf")):
        LlamaCppModel()


# ---- images and documents: refused before anything is generated ----------------------------------------


@pytest.mark.parametrize(
    ("block", "what"),
    [
        (
            lambda: ImageBlock.from_bytes(png(4, 4)),
            "does not take images (LlamaCppModel's capabilities.images",
        ),
        (lambda: DocumentBlock.from_bytes(pdf(1)), "does not take documents (LlamaCppModel's capabilities"),
    ],
)
async def test_the_embedded_model_refuses_a_png_and_a_pdf_before_it_generates(
    block: Callable[[], ImageBlock | DocumentBlock], what: str
) -> None:
    embedded = LlamaCppModel(n_ctx=512)
    assert (embedded.capabilities.images, embedded.capabilities.documents) == (False, False)
    request = ChatRequest((Msg.user(["What is this?", block()]),))
    with pytest.raises(UnsupportedContentError, match=re.escape(what)) as refused:
        await embedded.stream(request).pipe(fold_message())
    assert "nothing was sent" in str(refused.value)
    assert embedded.last_worker is None  # no generation thread was started


async def test_an_agent_on_the_embedded_model_refuses_them_before_saving_anything() -> None:
    agent = ReActAgent(LlamaCppModel(n_ctx=512))
    with pytest.raises(InvalidInputError, match=re.escape("input[0:2].content[1]: model")):
        await agent.call(["What is this?", ImageBlock.from_bytes(png(4, 4))])
    with pytest.raises(InvalidInputError, match="does not take documents"):
        await agent.call(["Summarise:", DocumentBlock.from_bytes(pdf(1))])
    assert (await agent.sessions.state()).messages == []
