"""fold_message: chunks → the assistant message, with tool calls assembled robustly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest
import reactivex
from reactivex import operators as ops

from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolUseBlock
from rxagent.model.types import ChatChunk, ToolCallDelta, Usage
from rxagent.operators import fold_message, from_async_iterable
from rxagent.operators._fold_message import MessageFold


async def fold(chunks: Sequence[ChatChunk]) -> Msg:
    return await reactivex.from_iterable(chunks).pipe(fold_message())


def call(index: int, *, id: str | None = None, name: str | None = None, args: str = "") -> ChatChunk:
    return ChatChunk(tool_calls=(ToolCallDelta(index=index, id=id, name=name, arguments=args),))


async def test_fold_message_completes_with_text_thinking_usage_and_finish_reason() -> None:
    msg = await fold(
        [
            ChatChunk(thinking="Let me "),
            ChatChunk(thinking="think."),
            ChatChunk(text="Hel"),
            ChatChunk(text="lo"),
            ChatChunk(finish_reason="stop"),
            ChatChunk(usage=Usage(input_tokens=12, output_tokens=5)),
        ]
    )
    assert msg.role == "assistant"
    assert msg.content == (ThinkingBlock(thinking="Let me think."), TextBlock(text="Hello"))
    assert msg.metadata == {
        "finish_reason": "stop",
        "usage": {"input_tokens": 12, "output_tokens": 5, "cache_read_tokens": 0, "reasoning_tokens": 0},
    }
    assert Msg.model_validate_json(msg.model_dump_json()) == msg


async def test_fold_message_keeps_the_answering_model_a_chunk_names() -> None:
    msg = await fold([ChatChunk(text="Hi", model="small"), ChatChunk(finish_reason="stop")])
    assert msg.metadata == {"finish_reason": "stop", "model": "small"}
    assert "model" not in (await fold([ChatChunk(text="Hi")])).metadata  # no chunk named one


async def test_fold_message_assembles_fragments_keyed_by_index() -> None:
    msg = await fold(
        [
            call(0, id="call_a", name="add", args='{"a": '),
            call(1, id="call_b", name="mul", args='{"x"'),
            call(0, args="1, "),
            call(1, args=": 2}"),
            call(0, args='"b": 2}'),
            ChatChunk(finish_reason="tool_calls"),
        ]
    )
    assert msg.tool_calls == (
        ToolUseBlock(id="call_a", name="add", input={"a": 1, "b": 2}, raw_arguments='{"a": 1, "b": 2}'),
        ToolUseBlock(id="call_b", name="mul", input={"x": 2}, raw_arguments='{"x": 2}'),
    )


async def test_fold_message_never_merges_two_calls_that_reuse_an_index() -> None:
    # A provider streaming two parallel calls interleaved, both at index 0, told apart only by id.
    msg = await fold(
        [
            call(0, id="c1", name="weather", args='{"city": '),
            call(0, id="c2", name="weather", args='{"city": '),
            call(0, id="c1", args='"Oslo"}'),
            call(0, id="c2", args='"Lima"}'),
        ]
    )
    assert [(c.id, c.input) for c in msg.tool_calls] == [("c1", {"city": "Oslo"}), ("c2", {"city": "Lima"})]


async def test_fold_message_sequential_calls_at_the_same_index_with_new_ids() -> None:
    msg = await fold([call(0, id="c1", name="a", args="{}"), call(0, id="c2", name="b", args='{"k": 1}')])
    assert [(c.id, c.name, c.input) for c in msg.tool_calls] == [("c1", "a", {}), ("c2", "b", {"k": 1})]


async def test_fold_message_tolerates_id_and_name_repeated_on_every_fragment() -> None:
    msg = await fold([call(0, id="c1", name="echo", args=part) for part in ['{"t', 'ext": ', '"hi"}']])
    assert msg.tool_calls == (
        ToolUseBlock(id="c1", name="echo", input={"text": "hi"}, raw_arguments='{"text": "hi"}'),
    )


async def test_fold_message_joins_a_name_streamed_in_pieces() -> None:
    msg = await fold([call(0, id="c1", name="get_"), call(0, name="weather", args="{}")])
    assert msg.tool_calls[0].name == "get_weather"


async def test_fold_message_generates_a_stable_id_when_the_provider_sends_none() -> None:
    chunks = [call(0, name="noop", args="{"), call(0, args="}")]
    snapshots = await reactivex.from_iterable(chunks).pipe(fold_message(snapshots=True), ops.to_list())
    ids = {m.tool_calls[0].id for m in snapshots}
    assert len(ids) == 1
    assert next(iter(ids)).startswith("call_")
    assert len({m.id for m in snapshots}) == 1


async def test_fold_message_adopts_an_id_that_arrives_after_the_first_fragment() -> None:
    msg = await fold([call(0, name="f", args='{"a"'), call(0, id="late", args=": 1}")])
    assert [(c.id, c.input) for c in msg.tool_calls] == [("late", {"a": 1})]


async def test_fold_message_marks_half_json_invalid_never_empty_dict() -> None:
    msg = await fold([call(0, id="c1", name="search", args='{"query": "ca')])
    (block,) = msg.tool_calls
    assert block.state == "invalid"
    assert block.input is None
    assert block.raw_arguments == '{"query": "ca'
    assert block.error is not None
    assert "not valid JSON" in block.error


async def test_fold_message_marks_truncation_by_token_limit() -> None:
    msg = await fold([call(0, id="c1", name="search", args='{"q": '), ChatChunk(finish_reason="length")])
    assert msg.tool_calls[0].state == "invalid"
    assert "token limit" in (msg.tool_calls[0].error or "")
    empty = await fold([call(0, id="c1", name="search"), ChatChunk(finish_reason="length")])
    assert empty.tool_calls[0].state == "invalid"


@pytest.mark.parametrize(
    ("raw", "kind"), [("[1, 2]", "list"), ('"text"', "str"), ("3", "int"), ("null", "NoneType")]
)
async def test_fold_message_rejects_non_object_arguments(raw: str, kind: str) -> None:
    msg = await fold([call(0, id="c1", name="f", args=raw)])
    (block,) = msg.tool_calls
    assert block.state == "invalid"
    assert block.error == f"the tool call's arguments must be a JSON object, got {kind}"


async def test_fold_message_empty_arguments_mean_no_arguments() -> None:
    msg = await fold([call(0, id="c1", name="now"), ChatChunk(finish_reason="tool_calls")])
    assert msg.tool_calls[0].state == "complete"
    assert msg.tool_calls[0].input == {}


async def test_fold_message_call_without_a_name_is_invalid() -> None:
    msg = await fold([call(0, id="c1", args="{}")])
    assert msg.tool_calls[0].state == "invalid"
    assert "without a tool name" in (msg.tool_calls[0].error or "")


async def test_fold_message_usage_reports_are_cumulative() -> None:
    msg = await fold(
        [
            ChatChunk(text="a", usage=Usage(input_tokens=10)),
            ChatChunk(text="b", usage=Usage(input_tokens=10, output_tokens=1)),
            ChatChunk(usage=Usage(input_tokens=10, output_tokens=2, reasoning_tokens=1)),
        ]
    )
    assert msg.metadata["usage"] == {
        "input_tokens": 10,
        "output_tokens": 2,
        "cache_read_tokens": 0,
        "reasoning_tokens": 1,
    }


async def test_fold_message_snapshots_show_streaming_calls() -> None:
    chunks = [ChatChunk(text="On it. "), call(0, id="c1", name="f", args='{"a"'), call(0, args=": 1}")]
    msgs = await reactivex.from_iterable(chunks).pipe(fold_message(snapshots=True), ops.to_list())
    assert [m.text for m in msgs] == ["On it. "] * 4
    assert msgs[1].tool_calls[0].state == "streaming"
    assert msgs[1].tool_calls[0].raw_arguments == '{"a"'
    assert msgs[-1].tool_calls[0].state == "complete"
    assert msgs[-1].tool_calls[0].input == {"a": 1}


async def test_fold_message_empty_stream_gives_an_empty_message() -> None:
    msg = await fold([])
    assert msg.role == "assistant"
    assert msg.content == ()
    assert not msg.has_answer_text


async def test_fold_message_errors_pass_through_without_a_message() -> None:
    source = reactivex.concat(reactivex.of(ChatChunk(text="partial")), reactivex.throw(ValueError("boom")))
    seen: list[Msg] = []
    with pytest.raises(ValueError, match="boom"):
        await source.pipe(fold_message(), ops.do_action(seen.append))
    assert seen == []


async def test_fold_message_cancel_disposes_upstream() -> None:
    closed = asyncio.Event()
    fifth = asyncio.Event()
    pulled = 0

    async def chunks() -> AsyncIterator[ChatChunk]:
        nonlocal pulled
        try:
            while True:
                pulled += 1
                if pulled == 5:
                    fifth.set()
                yield ChatChunk(text="x")
                await asyncio.sleep(0)
        finally:
            closed.set()

    subscription = from_async_iterable(chunks).pipe(fold_message()).subscribe()
    await asyncio.wait_for(fifth.wait(), 1)
    subscription.dispose()
    await asyncio.wait_for(closed.wait(), 1)
    stopped_at = pulled
    await asyncio.sleep(0)
    assert pulled == stopped_at


async def test_fold_message_resubscribe_is_cold() -> None:
    folded = reactivex.from_iterable([ChatChunk(text="a"), ChatChunk(text="b")]).pipe(fold_message())
    first, second = await folded, await folded
    assert first.text == second.text == "ab"
    assert first.id != second.id


def _fold_time(fragments: int) -> float:
    chunks = [call(0, id="c1", name="write", args='{"body": "')]
    chunks += [call(0, args="x") for _ in range(fragments)]
    chunks.append(call(0, args='"}'))
    best = float("inf")
    for _ in range(5):  # CPU time, the best of five: other processes on a busy machine barely move it
        fold = MessageFold()
        start = time.process_time()
        for chunk in chunks:
            fold.add(chunk)
        msg = fold.message()
        best = min(best, time.process_time() - start)
        assert msg.tool_calls[0].input == {"body": "x" * fragments}
    return best


def test_fold_message_joins_fragments_in_linear_time() -> None:
    # 200 000 one-character fragments; four times as many must cost about four times as much.
    small, large = _fold_time(50_000), _fold_time(200_000)
    assert large / small < 8, f"4x fragments cost {large / small:.1f}x"


async def test_fold_message_keeps_each_signed_thinking_block_and_each_withheld_one_in_order() -> None:
    msg = await fold(
        [
            ChatChunk(thinking="First, "),
            ChatChunk(thinking="add."),
            ChatChunk(thinking_signature="sig-1"),
            ChatChunk(redacted_thinking="EncryptedBlob=="),
            ChatChunk(thinking="Then check."),
            ChatChunk(thinking_signature="sig-2"),
            ChatChunk(text="5"),
            ChatChunk(finish_reason="stop"),
        ]
    )
    assert msg.content == (
        ThinkingBlock(thinking="First, add.", signature="sig-1"),
        ThinkingBlock(thinking="", redacted_data="EncryptedBlob=="),
        ThinkingBlock(thinking="Then check.", signature="sig-2"),
        TextBlock(text="5"),
    )
    assert msg.thinking == "First, add.Then check."
    assert Msg.model_validate_json(msg.model_dump_json()) == msg


async def test_fold_message_thinking_left_open_after_a_signed_block_stays_unsigned() -> None:
    msg = await fold(
        [
            ChatChunk(thinking="signed", thinking_signature="sig"),
            ChatChunk(thinking="cut off"),
            ChatChunk(finish_reason="length"),
        ]
    )
    assert msg.content == (
        ThinkingBlock(thinking="signed", signature="sig"),
        ThinkingBlock(thinking="cut off"),
    )


async def test_fold_message_keeps_the_largest_cache_write_count() -> None:
    msg = await fold(
        [
            ChatChunk(usage=Usage(input_tokens=40, cache_read_tokens=10, cache_write_tokens=25)),
            ChatChunk(
                usage=Usage(input_tokens=40, output_tokens=7, cache_read_tokens=10, cache_write_tokens=25)
            ),
        ]
    )
    assert msg.metadata["usage"] == {
        "input_tokens": 40,
        "output_tokens": 7,
        "cache_read_tokens": 10,
        "reasoning_tokens": 0,
        "cache_write_tokens": 25,
    }
    usage = Usage.from_json(msg.metadata["usage"])
    assert usage == Usage(40, 7, 10, 0, 25)
    assert usage + usage == Usage(80, 14, 20, 0, 50)
