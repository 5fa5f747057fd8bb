"""Messages: construction, views, and exact JSON round trips."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from rxagent.messages import Msg, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock


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
