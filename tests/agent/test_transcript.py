"""Transcript repair, whole and incremental: what a request sends for a damaged or growing history."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from rxagent.agent.transcript import MISSING_RESULT, RepairedHistory, repair_transcript
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from tests.examples import run_examples


def call(call_id: str) -> Msg:
    return Msg(role="assistant", content=(ToolUseBlock(id=call_id, name="add", input={"a": 1}),))


def results(*call_ids: str) -> Msg:
    return Msg.from_tool_results(
        *(ToolResultBlock(tool_use_id=i, name="add", output=(TextBlock(text="2"),)) for i in call_ids)
    )


def sent(messages: Sequence[Msg]) -> list[tuple[str, object]]:
    return [(m.role, m.content) for m in messages]


def whole(repaired: RepairedHistory, history: Sequence[Msg]) -> list[Msg]:
    prefix, rest = repaired.parts(history)
    return [*prefix, *rest]


def test_repaired_history_examples() -> None:
    assert run_examples(RepairedHistory).failed == 0


def test_a_growing_history_is_repaired_as_a_whole_one_would_be() -> None:
    repaired = RepairedHistory()
    history = [Msg.user("start"), call("lost"), Msg.user("and then?"), results("ghost")]
    for turn in range(10):
        assert sent(whole(repaired, history)) == sent(repair_transcript(history))
        history.append(call(f"c{turn}"))  # a call still running: answered as missing, for now
        assert whole(repaired, history)[-1].tool_results[0].text == MISSING_RESULT
        history.append(results(f"c{turn}"))
    assert sent(whole(repaired, history)) == sent(repair_transcript(history))


def test_an_edited_or_replaced_history_is_repaired_again() -> None:
    repaired = RepairedHistory()
    history = [Msg.user("start"), *(m for n in range(6) for m in (call(f"c{n}"), results(f"c{n}")))]
    whole(repaired, history)
    history[4] = Msg.user("edited deep inside the history")  # the answer to c1 replaced: c1 loses it
    assert sent(whole(repaired, history)) == sent(repair_transcript(history))
    assert whole(repaired, history)[4].tool_results[0].text == MISSING_RESULT
    shorter = history[:3]
    assert sent(whole(repaired, shorter)) == sent(repair_transcript(shorter))
    other = (Msg.user("another conversation"), call("x"))  # any sequence, not only a list
    assert sent(whole(repaired, other)) == sent(repair_transcript(other))
    assert sent(whole(repaired, [])) == []


def test_the_prefix_handed_out_is_not_changed_by_a_restart() -> None:
    repaired = RepairedHistory()
    history = [Msg.user("one"), Msg.assistant("two")]
    prefix, _ = repaired.parts(history)
    kept = list(prefix)
    repaired.parts([Msg.user("other")])
    assert prefix == kept


_STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("user"), st.integers(0, 3)),
        st.tuples(st.just("call"), st.integers(0, 3)),
        st.tuples(st.just("results"), st.integers(0, 3)),
        st.tuples(st.just("replace"), st.integers(0, 30)),
        st.tuples(st.just("truncate"), st.integers(0, 30)),
    ),
    max_size=40,
)


@settings(max_examples=200, deadline=None)
@given(_STEPS)
def test_incremental_repair_equals_a_whole_repair_at_every_step(steps: list[tuple[str, int]]) -> None:
    repaired = RepairedHistory()
    history: list[Msg] = []
    for kind, number in steps:
        if kind == "user":
            history.append(Msg.user(f"u{number}"))
        elif kind == "call":
            history.append(call(f"c{number}"))
        elif kind == "results":
            history.append(results(f"c{number}", f"c{(number + 1) % 4}"))
        elif kind == "replace" and history:
            history[number % len(history)] = Msg.user(f"r{number}")
        elif kind == "truncate":
            del history[number % (len(history) + 1) :]
        assert sent(whole(repaired, history)) == sent(repair_transcript(history))
