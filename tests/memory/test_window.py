"""The context window on its own: budget, eviction before compression, pairs, system part, reuse, errors."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from rxagent.events import ContextCompressed, ToolResultsEvicted
from rxagent.memory import (
    ChatTokenCounter,
    ContextBudgetExceeded,
    ContextWindow,
    ModelSummariser,
    TiktokenCounter,
    TruncatingSummariser,
)
from rxagent.memory.window import EVICTED_NOTE, STATE_KEY, SUMMARY_HEADER
from rxagent.messages import Msg, TextBlock, ToolResultBlock, ToolUseBlock
from rxagent.model.scripted import FunctionModel
from rxagent.requests import ChatRequest, ToolSchema
from rxagent.state import AgentState

from .conversations import (
    SYSTEM,
    assert_pairs_intact,
    context,
    exchange,
    filler,
    request_for,
    turn,
)


class RecordingSummariser:
    """The truncating summariser, recording the ids of every span it is asked to summarise."""

    def __init__(self, max_summary_tokens: int = 120) -> None:
        self.inner = TruncatingSummariser(max_summary_tokens=max_summary_tokens)
        self.spans: list[list[str]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def max_summary_tokens(self) -> int:
        return self.inner.max_summary_tokens

    async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
        self.spans.append([m.id for m in messages])
        return await self.inner.summarise(previous, messages)


def counted(request: ChatRequest) -> int:
    """The request's tokens, counted by a counter with no shared cache."""
    return TiktokenCounter().count_request(request)


async def test_a_request_that_fits_is_sent_unchanged() -> None:
    state = AgentState(messages=[*turn(1), *turn(2)])
    window = ContextWindow()
    request = request_for(state)
    assembly = await window.assemble(request, context(state))
    assert assembly.request.messages == request.messages
    assert all(a is b for a, b in zip(assembly.request.messages, request.messages, strict=True))
    assert assembly.events == ()
    assert assembly.tokens == counted(request)
    assert assembly.allowed == 12_000 - 1_000
    assert sum(assembly.breakdown.values()) == assembly.tokens


async def test_tool_schemas_alone_can_push_a_request_over_budget() -> None:
    state = AgentState(messages=[Msg.user("Hi")])
    big_tool = ToolSchema(
        "lookup",
        "Look things up. " + filler(400, "detail"),
        {"type": "object", "properties": {"q": {"type": "string", "description": filler(200, "more")}}},
    )
    without = request_for(state)
    with_tools = request_for(state, tools=[big_tool])
    window = ContextWindow(max_context_tokens=500, reply_reserve=100)
    assert (await window.assemble(without, context(state))).tokens < 400
    with pytest.raises(ContextBudgetExceeded) as caught:
        await window.assemble(with_tools, context(state))
    error = caught.value
    assert error.allowed == 400
    assert error.breakdown["tools"] == TiktokenCounter().count_tools([big_tool]) > 400
    assert error.needed == sum(error.breakdown.values()) == counted(with_tools)
    assert f"{error.needed:,} tokens but 400 are allowed" in str(error)


async def test_large_old_tool_results_are_evicted_before_anything_is_compressed() -> None:
    state = AgentState(messages=[*turn(1, size=1_500), *turn(2, size=1_500), *turn(3, size=50)])
    summariser = RecordingSummariser()
    window = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=1, summariser=summariser)
    request = request_for(state)
    assert counted(request) > 1_800
    assembly = await window.assemble(request, context(state))
    assert [type(e) for e in assembly.events] == [ToolResultsEvicted]
    assert summariser.spans == []  # eviction sufficed: nothing compressed
    evicted = assembly.events[0]
    assert isinstance(evicted, ToolResultsEvicted)
    # Oldest first, and no more than needed: the second large result still fits, in full.
    assert evicted.call_ids == ["call_1_0"]
    assert evicted.tools == ["fetch"]
    assert evicted.tokens_before == counted(request)
    assert evicted.tokens_after == assembly.tokens == counted(assembly.request) <= 1_800
    assert evicted.tokens_removed == evicted.tokens_before - evicted.tokens_after > 1_400
    [note] = [m for m in assembly.request.messages if m.id in evicted.message_ids]
    text = note.tool_results[0].text
    assert text == EVICTED_NOTE.format(name="fetch", tokens="1,501")
    assert "Call `fetch` again" in text
    kept = next(m for m in assembly.request.messages if m.role == "tool" and m.id not in evicted.message_ids)
    assert kept is state.messages[6]  # turn 2's result, untouched
    assert_pairs_intact(assembly.request.messages)


async def test_compression_comes_after_eviction_and_only_when_eviction_is_not_enough() -> None:
    old_turns = [t for i in range(1, 6) for t in turn(i, size=1_000, user_words=300)]
    state = AgentState(messages=[*old_turns, *turn(6, size=50)])
    summariser = RecordingSummariser()
    window = ContextWindow(max_context_tokens=1_500, reply_reserve=200, recent_turns=1, summariser=summariser)
    assembly = await window.assemble(request_for(state), context(state))
    kinds = [type(e) for e in assembly.events]
    assert kinds == [ToolResultsEvicted, ContextCompressed]
    compressed = assembly.events[1]
    assert isinstance(compressed, ContextCompressed)
    assert compressed.tokens_before == assembly.events[0].tokens_after  # type: ignore[union-attr]
    assert compressed.tokens_after == assembly.tokens == counted(assembly.request) <= 1_300
    assert compressed.summariser == "recording"
    assert len(summariser.spans) == 1
    assert summariser.spans[0] == [m.id for m in state.messages[: compressed.messages]]
    summary = assembly.request.messages[1]
    assert summary.role == "system"
    assert summary.text.startswith(SUMMARY_HEADER)
    # The truncating summary keeps the newest lines: the last compressed turn's answer among them.
    assert f"Answer {compressed.messages // 4}." in summary.text
    assert_pairs_intact(assembly.request.messages)


async def test_fit_false_applies_the_kept_summary_and_counts_but_compresses_nothing() -> None:
    state = AgentState(messages=[t for i in range(1, 8) for t in turn(i, size=300)])
    window = ContextWindow(
        max_context_tokens=2_000, reply_reserve=200, recent_turns=1, evict_over_tokens=10_000
    )
    with pytest.raises(ContextBudgetExceeded, match=r"Nothing was evicted or compressed \(fit=False\)"):
        await window.assemble(request_for(state), context(state), fit=False)
    assert state.extras == {}  # nothing decided
    fitted = await window.assemble(request_for(state), context(state))  # now it compresses
    assert [type(e) for e in fitted.events] == [ContextCompressed]
    again = await window.assemble(request_for(state), context(state), fit=False)
    assert again.events == ()
    assert again.request.messages == fitted.request.messages  # the kept summary applies
    assert again.tokens == fitted.tokens <= 1_800


async def test_a_smaller_context_for_one_request_compresses_further() -> None:
    state = AgentState(messages=[t for i in range(1, 8) for t in turn(i, size=300)])
    window = ContextWindow(
        max_context_tokens=6_000, reply_reserve=200, recent_turns=1, evict_over_tokens=10_000
    )
    roomy = await window.assemble(request_for(state), context(state))
    assert roomy.events == ()
    tight = await window.assemble(request_for(state), context(state), max_context_tokens=1_200)
    assert [type(e) for e in tight.events] == [ContextCompressed]
    assert tight.allowed == 1_000
    assert tight.tokens == counted(tight.request) <= 1_000
    with pytest.raises(ContextBudgetExceeded, match="max_context_tokens 100 minus 200"):
        await window.assemble(request_for(state), context(state), max_context_tokens=100)


async def test_the_recent_turns_are_kept_in_full_while_older_ones_give_way() -> None:
    state = AgentState(messages=[t for i in range(1, 9) for t in turn(i, size=400)])
    window = ContextWindow(max_context_tokens=2_500, reply_reserve=200, recent_turns=2)
    assembly = await window.assemble(request_for(state), context(state))
    recent = state.messages[-2 * 4 :]  # two turns of four messages
    sent = assembly.request.messages
    assert all(a is b for a, b in zip(sent[-8:], recent, strict=True))
    assert assembly.tokens <= 2_300


async def test_the_system_part_is_never_touched() -> None:
    closing = Msg.system("You have used all steps. Summarise.")
    state = AgentState(messages=[t for i in range(1, 6) for t in turn(i, size=800)])
    window = ContextWindow(max_context_tokens=1_500, reply_reserve=100, recent_turns=1)
    request = request_for(state, trailing=[closing])
    assembly = await window.assemble(request, context(state))
    sent = assembly.request.messages
    assert sent[0] is SYSTEM
    assert sent[-1] is closing
    assert assembly.events  # the window did change the middle
    assert assembly.breakdown["system"] == TiktokenCounter().count_message(
        SYSTEM
    ) + TiktokenCounter().count_message(closing)


async def test_the_stored_history_never_changes() -> None:
    state = AgentState(messages=[t for i in range(1, 6) for t in turn(i, size=800)])
    before = list(state.messages)
    snapshot = [m.model_dump_json() for m in state.messages]
    window = ContextWindow(max_context_tokens=1_500, reply_reserve=100, recent_turns=1)
    await window.assemble(request_for(state), context(state))
    assert state.messages == before
    assert all(a is b for a, b in zip(state.messages, before, strict=True))
    assert [m.model_dump_json() for m in state.messages] == snapshot


async def test_a_summary_is_written_once_and_reused_on_later_requests() -> None:
    summariser = RecordingSummariser()
    window = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=2, summariser=summariser)
    state = AgentState()
    compressions = 0
    for i in range(1, 25):
        state.messages.extend(turn(i, size=300))
        assembly = await window.assemble(request_for(state), context(state))
        compressions += sum(isinstance(e, ContextCompressed) for e in assembly.events)
        assert assembly.tokens == counted(assembly.request) <= 1_800
    assert compressions == len(summariser.spans) >= 2
    assert len(summariser.spans) < 24 / 2  # hysteresis: not on every request
    flat = [i for span in summariser.spans for i in span]
    assert len(flat) == len(set(flat))  # no message was summarised twice
    assert flat == [m.id for m in state.messages[: len(flat)]]  # spans are consecutive from the start
    stored = state.extras[STATE_KEY]
    assert isinstance(stored, dict)
    assert stored["covered"] == len(flat)


async def test_a_new_window_reuses_the_summary_stored_in_the_session_state() -> None:
    summariser = RecordingSummariser()
    state = AgentState(messages=[t for i in range(1, 10) for t in turn(i, size=300, user_words=200)])
    first = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=2, summariser=summariser)
    assembly = await first.assemble(request_for(state), context(state))
    assert len(summariser.spans) == 1
    # Another process: the state went through JSON, the window has no cache.
    reloaded = AgentState.model_validate_json(state.model_dump_json())
    reloaded.messages.append(Msg.user("one more"))
    second = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=2, summariser=summariser)
    again = await second.assemble(request_for(reloaded), context(reloaded))
    assert len(summariser.spans) == 1
    assert again.events == ()
    assert again.request.messages[1].text == assembly.request.messages[1].text  # the same summary
    assert again.tokens == counted(again.request)


async def test_a_changed_history_drops_a_summary_that_no_longer_applies() -> None:
    summariser = RecordingSummariser()
    state = AgentState(messages=[t for i in range(1, 10) for t in turn(i, size=300, user_words=200)])
    window = ContextWindow(max_context_tokens=2_000, reply_reserve=200, recent_turns=2, summariser=summariser)
    await window.assemble(request_for(state), context(state))
    assert len(summariser.spans) == 1
    state.messages[:4] = turn(99, size=10)  # someone rewrote the start of the history
    assembly = await window.assemble(request_for(state), context(state))
    assert assembly.tokens == counted(assembly.request) <= 1_800
    assert len(summariser.spans) == 2
    assert summariser.spans[-1][0] == state.messages[0].id  # summarised again, from the new start


async def test_malformed_stored_decisions_are_ignored() -> None:
    for junk in (
        {"version": 1, "covered": "many"},
        [1, 2],
        "text",
        {"version": 99},
        {"version": 1, "covered": 5},
    ):
        state = AgentState(messages=turn(1), extras={STATE_KEY: junk})
        assembly = await ContextWindow().assemble(request_for(state), context(state))
        assert assembly.request.messages[1:] == tuple(state.messages)


async def test_the_error_when_even_the_latest_exchange_does_not_fit() -> None:
    state = AgentState(messages=[Msg.user("read it"), *exchange("c1", 3_000)])
    window = ContextWindow(max_context_tokens=2_000, reply_reserve=500)
    with pytest.raises(ContextBudgetExceeded) as caught:
        await window.assemble(request_for(state), context(state))
    error = caught.value
    assert error.allowed == 1_500
    assert error.max_context_tokens == 2_000
    assert error.reserve == 500
    assert error.needed > error.allowed
    assert error.breakdown["history"] > 3_000  # the latest result is never evicted
    assert set(error.breakdown) == {
        "system",
        "tools",
        "response_format",
        "reply_priming",
        "summary",
        "memories",
        "history",
    }
    assert "minus 500 reserved for the reply" in str(error)


async def test_a_request_max_tokens_larger_than_the_reserve_raises_the_reserve() -> None:
    state = AgentState(messages=turn(1))
    window = ContextWindow(max_context_tokens=4_000, reply_reserve=100)
    assembly = await window.assemble(request_for(state, max_tokens=3_000), context(state))
    assert assembly.allowed == 1_000


async def test_a_failing_summariser_fails_the_request_and_keeps_only_what_was_finished() -> None:
    class Failing:
        name = "failing"
        max_summary_tokens = 50

        async def summarise(self, previous: str | None, messages: Sequence[Msg]) -> str:
            raise RuntimeError("the summarising model is down")

    old_turns = [t for i in range(1, 6) for t in turn(i, size=1_000, user_words=300)]
    state = AgentState(messages=[*old_turns, *turn(6, size=50)])
    window = ContextWindow(max_context_tokens=1_500, reply_reserve=200, recent_turns=1, summariser=Failing())
    with pytest.raises(RuntimeError, match="down"):
        await window.assemble(request_for(state), context(state))
    stored = state.extras[STATE_KEY]
    assert isinstance(stored, dict)
    assert stored["covered"] == 0
    assert stored["summary"] is None
    assert stored["evicted"] == sorted(m.id for m in old_turns if m.role == "tool")
    working = ContextWindow(max_context_tokens=1_500, reply_reserve=200, recent_turns=1)
    assembly = await working.assemble(request_for(state), context(state))
    assert [type(e) for e in assembly.events] == [ContextCompressed]  # the evictions were already decided
    assert assembly.tokens == counted(assembly.request) <= 1_300


async def test_a_reply_budget_as_large_as_the_context_leaves_nothing_and_says_so() -> None:
    state = AgentState(messages=[Msg.user("Hi")])
    window = ContextWindow(max_context_tokens=1_000, reply_reserve=100)
    with pytest.raises(ContextBudgetExceeded, match="but 0 are allowed") as caught:
        await window.assemble(request_for(state, max_tokens=5_000), context(state))
    assert caught.value.reserve == 5_000


async def test_requests_without_history_pass_through() -> None:
    for messages in ((SYSTEM,), (SYSTEM, Msg.system("Another rule.")), ()):
        request = ChatRequest(messages=messages)
        state = AgentState()
        assembly = await ContextWindow().assemble(request, context(state))
        assert assembly.request.messages == messages
        assert assembly.tokens == counted(request)
        assert assembly.breakdown["history"] == 0


async def test_a_window_without_session_state_still_fits_the_request() -> None:
    from rxagent.context import RunContext

    state = AgentState(messages=[t for i in range(1, 6) for t in turn(i, size=800)])
    window = ContextWindow(max_context_tokens=1_500, reply_reserve=100, recent_turns=1)
    assembly = await window.assemble(
        request_for(state), RunContext(run_id="r", session_id="none", state=None)
    )
    assert assembly.tokens == counted(assembly.request) <= 1_400
    assert state.extras == {}


async def test_appending_a_message_counts_only_that_message() -> None:
    class Counting(ChatTokenCounter):
        def __init__(self) -> None:
            inner = TiktokenCounter()
            super().__init__(inner.count_text, name="counting")
            self.messages: list[str] = []

        def count_message(self, message: Msg) -> int:
            self.messages.append(message.id)
            return super().count_message(message)

    counter = Counting()
    window = ContextWindow(counter=counter, max_context_tokens=3_000, reply_reserve=200, recent_turns=2)
    state = AgentState(messages=[t for i in range(1, 30) for t in turn(i, size=200)])
    await window.assemble(request_for(state), context(state))
    counter.messages.clear()
    new = Msg.user("and one more thing")
    state.messages.append(new)
    await window.assemble(request_for(state), context(state))
    history_ids = {m.id for m in state.messages}
    assert [i for i in counter.messages if i in history_ids] == [new.id]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"max_context_tokens": 0}, "reply_reserve < max_context_tokens"),
        ({"max_context_tokens": 100, "reply_reserve": 100}, "reply_reserve < max_context_tokens"),
        ({"reply_reserve": -1}, "0 <= reply_reserve"),
        ({"recent_turns": -1}, "must be >= 0"),
        ({"evict_over_tokens": -5}, "must be >= 0"),
        ({"compress_target": 0.0}, "compress_target"),
        ({"compress_target": 1.5}, "compress_target"),
        ({"max_sessions": 0}, "max_sessions"),
    ],
)
def test_bad_settings_are_refused(options: dict[str, float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ContextWindow(**options)  # type: ignore[arg-type]


# ---- the model summariser ---------------------------------------------------------------------------------


async def test_the_model_summariser_calls_the_model_within_its_own_budget() -> None:
    model = FunctionModel(lambda request: f"summary #{len(model.requests)}")
    summariser = ModelSummariser(model, max_summary_tokens=100, max_input_tokens=1_200)
    messages = [t for i in range(1, 11) for t in turn(i, size=600)]
    text = await summariser.summarise("earlier summary", messages)
    # Ten results of 600 tokens (cut to 1 500 characters each) do not fit one 1 200-token call.
    assert len(model.requests) >= 3
    assert text == f"summary #{len(model.requests)}"
    counter = TiktokenCounter()
    for request in model.requests:
        assert request.max_tokens == 100
        assert request.temperature == 0.0
        assert request.tools == ()
        assert counter.count_request(request) <= 1_200
    assert "earlier summary" in model.requests[0].messages[1].text
    assert "summary #1" in model.requests[1].messages[1].text  # each chunk folds into the previous summary
    assert summariser.name == "model:function"


async def test_the_model_summariser_falls_back_to_lines_when_the_model_says_nothing() -> None:
    summariser = ModelSummariser(FunctionModel(lambda request: "   "), max_summary_tokens=80)
    text = await summariser.summarise(None, [Msg.user("Remember the code 4242"), Msg.assistant("Noted.")])
    assert text == "User: Remember the code 4242\nAssistant: Noted."


def test_the_model_summariser_refuses_a_budget_without_room() -> None:
    with pytest.raises(ValueError, match="leaves"):
        ModelSummariser(FunctionModel(lambda request: "x"), max_summary_tokens=300, max_input_tokens=350)


async def test_the_window_summarises_with_the_model_once_per_span() -> None:
    model = FunctionModel(lambda request: "The user asked questions 1 to 5; answers were given.")
    window = ContextWindow(
        max_context_tokens=2_000,
        reply_reserve=200,
        recent_turns=2,
        summariser=ModelSummariser(model, max_summary_tokens=60, max_input_tokens=2_000),
    )
    state = AgentState(messages=[t for i in range(1, 8) for t in turn(i, size=300, user_words=200)])
    assembly = await window.assemble(request_for(state), context(state))
    calls = len(model.requests)
    assert calls >= 1
    assert "questions 1 to 5" in assembly.request.messages[1].text
    for i in range(3):
        state.messages.append(Msg.user(f"short follow-up {i}"))
        assembly = await window.assemble(request_for(state), context(state))
        assert assembly.tokens <= 1_800
    assert len(model.requests) == calls


# ---- the property: pairs never split, always under budget or a clear error ------------------------------

sizes = st.integers(min_value=0, max_value=500)


@st.composite
def histories(draw: st.DrawFn) -> list[Msg]:
    messages: list[Msg] = []
    for t in range(draw(st.integers(min_value=1, max_value=7))):
        messages.append(Msg.user(f"turn {t} " + filler(draw(st.integers(0, 80)), "ask")))
        for r in range(draw(st.integers(min_value=0, max_value=3))):
            calls = [
                ToolUseBlock(id=f"c{t}_{r}_{k}", name=f"tool{k}", input={"k": k})
                for k in range(draw(st.integers(min_value=1, max_value=3)))
            ]
            text = draw(st.sampled_from(["", "Let me look."]))
            content = (TextBlock(text=text), *calls) if text else tuple(calls)
            messages.append(Msg(role="assistant", content=content))
            results = [
                ToolResultBlock(
                    tool_use_id=c.id,
                    name=c.name,
                    output=(TextBlock(text=filler(draw(sizes))),),
                    status=draw(st.sampled_from(["ok", "ok", "error"])),
                )
                for c in calls
            ]
            messages.append(Msg.from_tool_results(*results))
            if draw(st.booleans()) and draw(st.booleans()):
                messages.append(Msg.system("Change strategy.", metadata={"rxagent": "repeat_guard"}))
        if draw(st.booleans()):
            messages.append(Msg.assistant("Answer " + filler(draw(st.integers(0, 60)), "so")))
    return messages


def points(messages: Sequence[Msg]) -> list[int]:
    """Lengths at which an agent could send the history (never right after an unanswered call)."""
    return [n for n in range(1, len(messages) + 1) if not messages[n - 1].tool_calls]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=histories(),
    max_context=st.integers(min_value=300, max_value=4_000),
    recent_turns=st.integers(min_value=0, max_value=4),
    evict_over=st.integers(min_value=20, max_value=400),
    with_tools=st.booleans(),
)
def test_assembly_never_splits_a_tool_pair_and_fits_or_says_why(
    history: list[Msg], max_context: int, recent_turns: int, evict_over: int, with_tools: bool
) -> None:
    import asyncio

    tools = [ToolSchema("tool0", "The first tool.")] if with_tools else []
    window = ContextWindow(
        max_context_tokens=max_context,
        reply_reserve=50,
        recent_turns=recent_turns,
        evict_over_tokens=evict_over,
        summariser=TruncatingSummariser(max_summary_tokens=60),
    )
    state = AgentState()
    original: list[Msg] = []

    async def grow() -> None:
        done = 0
        for n in points(history):
            state.messages.extend(history[done:n])
            original.extend(history[done:n])
            done = n
            request = request_for(state, tools=tools)
            failure: ContextBudgetExceeded | None = None
            try:
                assembly = await window.assemble(request, context(state))
            except ContextBudgetExceeded as error:
                failure = error
            if failure is not None:
                event("context_budget_exceeded")
                assert failure.needed > failure.allowed == max_context - 50
                assert sum(failure.breakdown.values()) == failure.needed
                continue
            for happened in assembly.events:
                event(happened.type)  # hypothesis statistics: how often each path runs
            sent = assembly.request.messages
            assert sent[0] is SYSTEM
            assert_pairs_intact(sent)
            assert assembly.tokens == counted(assembly.request) <= max_context - 50
            # The history part is a suffix of the history, message for message (evicted ones keep their id).
            tail = [m for m in sent[1:] if m.metadata.get("rxagent") != "context_summary"]
            assert [m.id for m in tail] == [m.id for m in state.messages[len(state.messages) - len(tail) :]]
            assert state.messages == original  # the stored history is never changed

    asyncio.run(grow())
