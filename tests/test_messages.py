"""Messages: construction, views, exact JSON round trips, and the memos of what is derived from them."""

from __future__ import annotations

import gc
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from rxagent.messages import (
    ConversationMemo,
    MessageMemo,
    MessageTotals,
    Msg,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from tests.examples import run_examples


def conversation() -> list[Msg]:
    call = ToolUseBlock(id="c1", name="add", input={"a": 1, "b": [2, {"x": None}]}, raw_arguments="{...}")
    broken = ToolUseBlock(id="c2", name="add", raw_arguments='{"a": ', state="invalid", error="not JSON")
    return [
        Msg.system("You add numbers."),
        Msg.user("1 + 2?", name="ada", metadata={"tags": ["x"]}),
        Msg(role="assistant", content=(ThinkingBlock(thinking="easy", signature="sig"), call, broken)),
        Msg.from_tool_results(
            ToolResultBlock(tool_use_id="c1", name="add", output=(TextBlock(text="3"),)),
            ToolResultBlock(
                tool_use_id="c2", name="add", output=(TextBlock(text="bad args"),), status="error"
            ),
        ),
        Msg.assistant("3"),
    ]


@pytest.mark.parametrize("msg", conversation(), ids=lambda m: m.role)
def test_msg_json_round_trip_is_exact(msg: Msg) -> None:
    again = Msg.model_validate_json(msg.model_dump_json())
    assert again == msg
    assert again.model_dump_json() == msg.model_dump_json()
    assert type(again.content) is tuple


def test_msg_views() -> None:
    _, user, assistant, results, final = conversation()
    assert user.text == "1 + 2?"
    assert assistant.thinking == "easy"
    assert assistant.text == ""
    assert not assistant.has_answer_text
    assert [c.id for c in assistant.tool_calls] == ["c1", "c2"]
    assert [r.status for r in results.tool_results] == ["ok", "error"]
    assert results.tool_results[0].text == "3"
    assert final.has_answer_text
    assert not Msg.assistant("  \n").has_answer_text


def test_msg_is_immutable_and_ids_are_unique() -> None:
    msg = Msg.user("hi")
    with pytest.raises(ValidationError):
        msg.role = "assistant"  # type: ignore[misc]
    assert Msg.user("hi").id != msg.id
    changed = msg.model_copy(update={"name": "bob"})
    assert changed.name == "bob"
    assert msg.name is None


def test_msg_rejects_unknown_block_types_and_fields() -> None:
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        Msg.model_validate({"role": "user", "content": [{"type": "video", "url": "x"}]})
    with pytest.raises(ValidationError, match="Extra inputs"):
        Msg.model_validate({"role": "user", "content": [{"type": "text", "text": "a", "bold": True}]})
    with pytest.raises(ValidationError):
        Msg.model_validate({"role": "robot"})


# ---- memos over messages: what the model clients and token counters cache ---------------------------


def test_a_memo_computes_each_message_once_and_looks_up_the_rest_in_order() -> None:
    memo: MessageMemo[int] = MessageMemo()
    computed: list[str] = []

    def measure(msg: Msg) -> int:
        computed.append(msg.text)
        return len(msg.text)

    first, second, third = Msg.user("a"), Msg.user("bb"), Msg.user("ccc")
    assert memo.get_all([first, second], measure) == [1, 2]
    assert memo.get_all([third, first, third, second], measure) == [3, 1, 3, 2]  # repeats come back too
    assert memo.get(second, measure) == 2
    assert computed == ["a", "bb", "ccc"]
    assert memo.get_all([], measure) == []


def test_a_memo_forgets_a_message_that_is_gone() -> None:
    memo: MessageMemo[int] = MessageMemo()
    message = Msg.user("short-lived")
    memo.get_all([message], lambda m: 1)
    key = id(message)
    assert key in memo
    del message
    gc.collect()
    assert key not in memo
    assert len(memo) == 0


def test_totals_of_a_growing_conversation_look_at_only_what_is_new(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []
    looked_up: list[int] = []  # messages looked up one by one, per request
    get_all = MessageMemo.get_all

    def counting_get_all(
        memo: MessageMemo[int], messages: Sequence[Msg], compute: Callable[[Msg], int]
    ) -> list[int]:
        looked_up.append(len(messages))
        return get_all(memo, messages, compute)

    def measure(msg: Msg) -> int:
        measured.append(msg.text)
        return len(msg.text)

    monkeypatch.setattr(MessageMemo, "get_all", counting_get_all)
    totals = MessageTotals(measure)
    history = [Msg.system("sys"), Msg.user("hello")]
    assert totals.total(tuple(history)) == 8
    for turn in range(20):
        history.append(Msg.assistant(f"answer {turn}"))
        closing = Msg.system("closing")  # a new object per request, after the history
        measured.clear()
        looked_up.clear()
        assert totals.total((*history, closing)) == sum(len(m.text) for m in history) + 7
        assert measured == [f"answer {turn}", "closing"]  # nothing of the history before
        assert looked_up == [2]
    measured.clear()
    looked_up.clear()
    assert totals.total(history) == sum(len(m.text) for m in history)  # a list, without the closing
    assert (measured, looked_up) == ([], [0])


def test_totals_of_an_empty_request_are_zero() -> None:
    totals = MessageTotals(lambda m: 1)
    assert totals.total(()) == 0
    assert totals.total([]) == 0


def test_conversations_that_share_a_first_message_are_still_summed_right() -> None:
    # A module-level system prompt opening every conversation: the record switches between them.
    system = Msg.system("shared")
    totals = MessageTotals(lambda m: len(m.text))
    first = [system, Msg.user("one")]
    second = [system, Msg.user("second one")]
    for turn in range(5):
        first.append(Msg.assistant(f"a{turn}"))
        second.append(Msg.assistant(f"bb{turn}"))
        assert totals.total(tuple(first)) == sum(len(m.text) for m in first)
        assert totals.total(tuple(second)) == sum(len(m.text) for m in second)


def test_a_conversation_record_goes_with_its_first_message() -> None:
    memo: ConversationMemo[str] = ConversationMemo()
    request = (Msg.system("sys"), Msg.user("hi"))
    memo.record(request, "state")
    assert memo.resume((*request, Msg.assistant("hello"))) == (2, "state")
    assert memo.resume((Msg.system("sys"), request[1])) == (0, None)  # an equal first message is another
    memo.record((), "ignored")
    assert memo.resume(()) == (0, None)
    del request
    gc.collect()
    assert len(memo) == 0


def test_totals_examples() -> None:
    assert run_examples(MessageTotals).failed == 0


_OPERATIONS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.sampled_from(["user", "assistant"]), st.text(max_size=8)),
        st.tuples(st.just("replace"), st.integers(0, 50), st.text(max_size=8)),
        st.tuples(st.just("copy"), st.integers(0, 50)),
        st.tuples(st.just("truncate"), st.integers(0, 50)),
        st.tuples(st.just("restart"), st.text(max_size=8)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(_OPERATIONS, st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_totals_equal_a_full_sum_whatever_the_history_does(
    operations: list[tuple[Any, ...]], closings: list[int]
) -> None:
    totals = MessageTotals(lambda m: len(m.text) + 1)
    history = [Msg.system("start"), Msg.user("first")]
    for operation, closing in zip(operations, closings, strict=False):
        kind, argument = operation[0], operation[1]
        if kind == "append":
            history.append(Msg(role=operation[1], content=(TextBlock(text=operation[2]),)))
        elif kind == "replace":  # an edited or evicted message, anywhere after the first
            history[1 + argument % (len(history) - 1)] = Msg.user(operation[2])
        elif kind == "copy":  # an equal copy (a reloaded message) in place of the object
            index = argument % len(history)
            history[index] = history[index].model_copy()
        elif kind == "truncate":
            del history[2 + argument % (len(history) - 1) :]
        else:
            history[0] = Msg.system(argument)
        request = (*history, *(Msg.system(f"closing {n}") for n in range(closing)))
        assert totals.total(request) == sum(len(m.text) + 1 for m in request)


def test_a_memo_keeps_one_object_per_message_for_the_collector() -> None:
    # What every message of every conversation costs the garbage collector's walks, per memo.
    memo: MessageMemo[int] = MessageMemo()
    messages = [Msg.user(f"m{n}") for n in range(200)]
    gc.collect()
    before = len(gc.get_objects())
    memo.get_all(messages, lambda m: len(m.text))
    assert len(gc.get_objects()) - before <= 200 + 2
    conversations: ConversationMemo[int] = ConversationMemo()
    firsts = [Msg.system(f"s{n}") for n in range(50)]
    gc.collect()
    before = len(gc.get_objects())
    for first in firsts:
        conversations.record((first, messages[0]), 1)
    assert len(gc.get_objects()) - before <= 3 * 50 + 2  # a reference, the record, the rest of the request
