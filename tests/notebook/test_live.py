"""The live run view: what the output area shows while and after a run, and how often it is redrawn.

Every test drives the throttle on a clock it controls and a timer it fires itself, so nothing here waits
on the wall clock.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable

import pytest
import reactivex
from reactivex import operators as ops

from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.events import AgentEvent, AgentResult
from rxagent.model.scripted import FunctionModel
from rxagent.model.types import ChatRequest
from rxagent.notebook import Frame, RunView, Throttle, live
from rxagent.tools import Permissions, ToolContext, Toolkit, tool

from .html_check import assert_safe


class Recorder:
    """A display target that keeps every frame drawn into it."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []

    def update(self, obj: Frame, /) -> None:
        self.frames.append(obj)

    @property
    def last(self) -> Frame:
        return self.frames[-1]


class StepClock:
    """A clock that moves ``step`` seconds every time it is read."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class Timers:
    """A ``call_later`` whose timers fire only when the test says so."""

    def __init__(self) -> None:
        self.scheduled: list[tuple[float, Callable[[], None], Handle]] = []

    def __call__(self, delay: float, callback: Callable[[], None]) -> Handle:
        handle = Handle()
        self.scheduled.append((delay, callback, handle))
        return handle

    def live(self) -> list[tuple[float, Callable[[], None], Handle]]:
        return [entry for entry in self.scheduled if not entry[2].cancelled]

    def fire(self) -> None:
        (_, callback, handle), *_ = self.live()
        handle.cancelled = True
        callback()


class Handle:
    def __init__(self) -> None:
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True


def digits(count: int) -> str:
    return "".join(str(i % 10) for i in range(count))


async def test_a_10_000_delta_stream_is_drawn_a_bounded_number_of_times_and_ends_right() -> None:
    answer = digits(10_000)
    agent = ReActAgent(ScriptedModel([ScriptedResponse(text=answer, chunk_size=1)]))
    target, clock, timers = Recorder(), StepClock(0.001), Timers()

    result = await live(
        agent.stream_events("count"), interval=0.1, clock=clock, call_later=timers, target=target
    )

    assert isinstance(result, AgentResult)
    assert result.text == answer
    # the deltas, plus: run started, three steps started (Start, Reason, Finish), two phases, model call
    # started and finished, message, result
    events = 10_000 + 10
    assert clock.now == pytest.approx(events * 0.001)  # the throttle reads the clock once per event
    # the first event draws, then one draw per 0.1 s of clock at most, plus the first and the last frame
    assert len(target.frames) <= 2 + 1 + math.ceil(clock.now / 0.1)
    assert len(target.frames) >= clock.now / 0.1 - 1  # and it did redraw all along the stream
    streaming = [f for f in target.frames[1:-1] if "▍" in f.text]
    assert streaming
    assert all(answer.startswith(f.text.split("\n")[-1][11:-1]) for f in streaming)
    final = target.last
    assert final.text.splitlines()[0].startswith("✓ finished · MODEL_STOP · 10,010 events")
    assert f"assistant: {answer}" in final.text
    assert "▍" not in final.text
    assert "AgentResult MODEL_STOP" in final.text
    assert answer in assert_safe(final.html).text
    assert not timers.live()  # no redraw left pending


async def test_on_a_clock_that_stands_still_the_stream_is_drawn_once_then_at_the_end() -> None:
    agent = ReActAgent(ScriptedModel([ScriptedResponse(text=digits(10_000), chunk_size=1)]))
    target, timers = Recorder(), Timers()

    await live(agent.stream_events("count"), clock=lambda: 0.0, call_later=timers, target=target)

    assert len(target.frames) == 3  # the empty view, the first event, the final frame
    assert len(timers.scheduled) == 1  # one timer for all the changes that came too soon
    assert timers.scheduled[0][0] == pytest.approx(0.1)
    assert timers.scheduled[0][2].cancelled


async def test_a_quiet_stream_is_redrawn_when_the_interval_ends_showing_a_running_tool() -> None:
    started, release = asyncio.Event(), asyncio.Event()

    @tool
    async def fetch(url: str, ctx: ToolContext) -> str:
        """Fetch a page."""
        ctx.progress("connecting", fraction=0.25)
        started.set()
        await release.wait()
        return "<html>"

    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("fetch", {"url": "https://x"}, id="f1")]), "Fetched."]
    )
    agent = ReActAgent(model, Toolkit([fetch]))
    target, timers = Recorder(), Timers()
    task = asyncio.ensure_future(
        live(agent.stream_events("get x"), clock=lambda: 5.0, call_later=timers, target=target)
    )
    await asyncio.wait_for(started.wait(), 5)
    await asyncio.sleep(0)  # let the progress event through the bridge
    drawn = len(target.frames)
    timers.fire()  # the interval ends while the tool runs: no event came, the pending change is drawn

    assert len(target.frames) == drawn + 1
    assert '⚙ fetch({"url": "https://x"})  [running · 25% connecting]' in target.last.text
    assert "● running · Act · tool executing, iteration 1" in target.last.text  # the step, its phase
    release.set()
    result = await asyncio.wait_for(task, 5)
    assert result.text == "Fetched."
    assert "[ok · " in target.last.text
    assert "assistant: Fetched." in target.last.text


async def test_a_call_waiting_for_approval_shows_as_such_and_the_result_says_how_to_decide() -> None:
    @tool
    def refund(order: str) -> str:
        """Refund an order."""
        return "refunded"

    agent = ReActAgent(
        ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("refund", {"order": "A-1"}, id="r1")])]),
        Toolkit([refund]),
        permissions=Permissions().ask("refund", reason="refunds need a human"),
    )
    target = Recorder()
    result = await live(agent.stream_events("refund A-1"), target=target, call_later=Timers())
    assert result.reason == "PERMISSION_ASKING"
    assert "[awaiting approval · refunds need a human]" in target.last.text
    assert 'waiting: refund({"order": "A-1"}) [r1]' in target.last.text


async def test_a_failed_run_leaves_its_error_in_the_area_and_raises_it() -> None:
    agent = ReActAgent(
        ScriptedModel([ScriptedResponse(text="Half an ans", error=ValueError("boom"), error_after=2)])
    )
    target, timers = Recorder(), Timers()
    with pytest.raises(ValueError, match="boom"):
        await live(agent.stream_events("hi"), target=target, call_later=timers)
    assert target.last.text.startswith("✗ failed")
    assert "ValueError: boom" in target.last.text
    assert not timers.live()


async def test_cancelling_the_cell_disposes_the_run_and_says_so() -> None:
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def respond(request: ChatRequest) -> str:
        if request.messages[-1].text == "again":  # the second run, after the cancel
            return "second answer"
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "never"

    agent = ReActAgent(FunctionModel(respond))
    target, timers = Recorder(), Timers()
    task = asyncio.ensure_future(live(agent.stream_events("hi"), target=target, call_later=timers))
    await asyncio.wait_for(entered.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(cancelled.wait(), 5)  # the model call was cancelled
    assert target.last.text.startswith("■ cancelled")
    assert not timers.live()
    # the session was released (keeping the cancelled run's input): the next run on it starts at once
    second = await asyncio.wait_for(agent.call("again"), 5)
    assert second.text == "second answer"
    assert [m.text for m in (await agent.sessions.state()).messages] == ["hi", "again", "second answer"]


async def test_a_stream_without_a_result_is_an_error_after_drawing_what_came() -> None:
    agent = ReActAgent(ScriptedModel(["hello"]))
    only_events: reactivex.Observable[AgentEvent] = agent.stream_events("hi").pipe(
        ops.filter(lambda e: not isinstance(e, AgentResult))
    )
    target = Recorder()
    with pytest.raises(LookupError, match="without an AgentResult"):
        await live(only_events, target=target, call_later=Timers())
    assert "assistant: hello" in target.last.text


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"interval": -1.0}, "interval"),
        ({"interval": math.nan}, "interval"),
        ({"interval": math.inf}, "interval"),
        ({"max_buffer": 0}, "max_buffer"),
    ],
)
async def test_bad_settings_are_refused_before_the_run_starts(
    arguments: dict[str, float], message: str
) -> None:
    model = ScriptedModel(["unused"])
    agent = ReActAgent(model)
    target = Recorder()
    with pytest.raises(ValueError, match=message):
        await live(agent.stream_events("hi"), target=target, **arguments)  # type: ignore[arg-type]
    assert model.requests == []
    assert target.frames == []  # nothing drawn either


def test_the_throttle_draws_at_most_once_per_interval_and_flushes_the_last_change() -> None:
    drawn: list[float] = []
    now = [0.0]
    timers = Timers()
    throttle = Throttle(lambda: drawn.append(now[0]), interval=1.0, clock=lambda: now[0], call_later=timers)
    for moment in (0.0, 0.2, 0.5, 0.9, 1.0, 1.5):
        now[0] = moment
        throttle.changed()
    assert drawn == [0.0, 1.0]
    assert [delay for delay, _, _ in timers.scheduled] == [pytest.approx(0.8), pytest.approx(0.5)]
    assert [h.cancelled for _, _, h in timers.scheduled] == [True, False]
    now[0] = 1.6
    throttle.flush()
    assert drawn == [0.0, 1.0, 1.6]
    assert throttle.draws == 3
    assert not timers.live()
    throttle.flush()  # nothing pending: no drawing
    assert throttle.draws == 3


def test_a_zero_interval_draws_every_change_and_close_cancels_the_timer() -> None:
    drawn: list[int] = []
    every = Throttle(lambda: drawn.append(1), interval=0.0, clock=lambda: 0.0, call_later=Timers())
    for _ in range(5):
        every.changed()
    assert len(drawn) == 5
    timers = Timers()
    throttle = Throttle(lambda: drawn.append(2), interval=1.0, clock=lambda: 0.0, call_later=timers)
    throttle.changed()
    throttle.changed()
    throttle.close()
    assert timers.scheduled[0][2].cancelled
    throttle.flush()  # closed: the pending change is dropped
    assert drawn.count(2) == 1


async def test_a_run_view_fed_by_hand_shows_two_runs_of_a_session_in_one_transcript() -> None:
    from IPython.core.interactiveshell import InteractiveShell

    from rxagent.operators import to_list

    agent = ReActAgent(ScriptedModel(["first answer", "second answer"]))
    view = RunView()
    assert view.outcome == "running"
    assert view.text().startswith("● running · 0 events")
    for prompt in ("one", "two"):
        for event in await to_list(agent.stream_events(prompt)):
            view.add(event)
    view.finish("finished")
    assert view.text().splitlines()[1:] == [
        "user: one",
        "assistant: first answer",
        "user: two",
        "assistant: second answer",
        f"AgentResult MODEL_STOP · 1 iteration(s) · 1 model call(s) · {view.usage.total_tokens:,} tokens "
        f"({view.usage.input_tokens:,} in, {view.usage.output_tokens:,} out)",
    ]
    bundle, _ = InteractiveShell.instance().display_formatter.format(view)
    assert bundle["text/plain"] == view.text()
    assert assert_safe(bundle["text/html"]).text.count("answer") == 2


async def test_a_custom_steps_notes_show_in_the_live_view() -> None:
    from rxagent.agent.loop import RunState
    from rxagent.agent.recipes import Review, Verdict, function_reviewer, reviewing

    @tool
    def delete(path: str) -> str:
        """Delete a file."""
        return "deleted"

    async def reviewer(review: Review, run: RunState) -> dict[str, Verdict]:
        return {call.id: Verdict(approve=False, reason="never delete") for call in review.calls}

    model = ScriptedModel(
        [ScriptedResponse(tool_calls=[ScriptedToolCall("delete", {"path": "/etc"}, id="d1")]), "I did not."]
    )
    agent = ReActAgent(model, Toolkit([delete]), steps=reviewing(function_reviewer(reviewer)))
    target = Recorder()
    result = await live(agent.stream_events("delete /etc"), target=target, call_later=Timers())
    assert result.text == "I did not."
    notes = [line for line in target.last.text.splitlines() if line.startswith("reviewer: ")]
    assert notes == ["reviewer: rejected delete"]
    assert '⚙ delete({"path": "/etc"})  [denied]' in target.last.text
