"""map_concurrent's progress: counts of arrived, running, done and failed items, drawn by a display that is
made per subscription and closed exactly once (complete, error, cancel), and the tqdm bar that draws them.

The counts are checked step by step with inner streams the test drives by hand (``Inners``); the tqdm
bar is read back from the text it writes to a terminal (a ``StringIO`` or stderr).

Bad inputs tried: progress options that are neither a bool, a label nor a factory (``3``, ``None``); a
bar asked for without tqdm installed (an ``ImportError`` when the operator is built, saying what to
install); a display that raises; an ``is_failure`` that raises.
"""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import textwrap

import pytest
import reactivex
from reactivex.subject import Subject

from rxagent.operators import ProgressCounts, TqdmProgress, map_concurrent, sync_of, to_list
from tests.operators.test_map_concurrent import Inners
from tests.streams import ProgressLog, expect


def failing(item: str) -> bool:
    return item.startswith("x")


async def next_turn() -> None:
    """Let the loop run what is due now (the display's first drawing is scheduled for the next turn)."""
    await asyncio.sleep(0)


async def test_progress_completes_with_every_count_as_it_changed() -> None:
    inners, log = Inners(), ProgressLog()
    source: Subject[str] = Subject()
    seen = expect(source.pipe(map_concurrent(inners.project, 2, progress=log, is_failure=failing)))
    display = log.only
    assert display.counts == []
    await next_turn()
    assert display.counts == [ProgressCounts(0, 0, 0, 0, False)]  # drawn from the turn after subscribing
    for key in "abc":
        source.on_next(key)
    assert display.last == ProgressCounts(total=3, running=2, done=0, failed=0, inputs_done=False)
    assert display.last.waiting == 1
    inners.finish("a", "a1")
    assert display.last == ProgressCounts(total=3, running=2, done=1, failed=0, inputs_done=False)
    inners.finish("b", "x-b")  # an item the fan-out counts as a failure
    source.on_completed()
    assert display.last == ProgressCounts(total=3, running=1, done=1, failed=1, inputs_done=True)
    assert display.closes == 0
    inners.finish("c", "c1")
    await seen
    assert seen.items == ["a1", "x-b", "c1"]
    assert display.last == ProgressCounts(total=3, running=0, done=2, failed=1, inputs_done=True)
    assert display.last.finished == 3
    assert display.closes == 1
    assert max(c.running for c in display.counts) == 2


async def test_progress_of_a_list_source_starts_with_its_whole_length() -> None:
    inners, log = Inners(), ProgressLog()
    seen = expect(reactivex.from_iterable("abcde").pipe(map_concurrent(inners.project, 2, progress=log)))
    await next_turn()
    # a source that emits at subscription is counted first and drawn after: the first drawing has it all
    assert log.only.counts == [ProgressCounts(total=5, running=2, done=0, failed=0, inputs_done=True)]
    for key in "abcde":
        inners.finish(key, key)
    await seen
    assert log.only.last == ProgressCounts(5, 0, 5, 0, True)
    assert log.only.closes == 1


async def test_progress_of_synchronous_streams_closes_with_the_final_counts() -> None:
    log = ProgressLog()
    squares = await to_list(reactivex.from_iterable(range(20)).pipe(map_concurrent(sync_of, 4, progress=log)))
    assert squares == list(range(20))
    # everything ended during subscription: one drawing, the final one, then closed
    assert log.only.counts == [ProgressCounts(20, 0, 20, 0, True)]
    assert log.only.closes == 1


async def test_progress_errors_count_the_failed_stream_and_close_the_display() -> None:
    inners, log = Inners(), ProgressLog()
    seen = expect(reactivex.from_iterable("abc").pipe(map_concurrent(inners.project, 2, progress=log)))
    inners.fail("a", OSError("gone"))
    await seen
    assert isinstance(seen.error, OSError)
    assert inners.disposed == ["b"]
    # a failed, b was cancelled with the stream (no longer running), c never started
    assert log.only.last == ProgressCounts(total=3, running=0, done=0, failed=1, inputs_done=True)
    assert log.only.last.waiting == 2
    assert log.only.closes == 1


async def test_progress_cancel_closes_the_display_once_with_nothing_running() -> None:
    inners, log = Inners(), ProgressLog()
    seen = expect(reactivex.from_iterable("abcd").pipe(map_concurrent(inners.project, 2, progress=log)))
    inners.finish("a", "a1")
    seen.dispose()
    seen.dispose()
    assert sorted(inners.disposed) == ["b", "c"]
    assert log.only.last == ProgressCounts(total=4, running=0, done=1, failed=0, inputs_done=True)
    assert log.only.closes == 1
    assert seen.outcome is None


async def test_progress_disposed_before_its_first_drawing_leaves_no_drawing_scheduled() -> None:
    inners, log = Inners(), ProgressLog()
    seen = expect(reactivex.from_iterable("ab").pipe(map_concurrent(inners.project, 2, progress=log)))
    seen.dispose()
    await next_turn()  # the first drawing was due now: it was cancelled with the subscription
    assert log.only.counts == [ProgressCounts(total=2, running=0, done=0, failed=0, inputs_done=True)]
    assert log.only.closes == 1


async def test_progress_resubscribe_is_cold() -> None:
    log = ProgressLog()
    stream = reactivex.of(1, 2).pipe(map_concurrent(sync_of, 2, progress=log))
    assert await to_list(stream) == await to_list(stream) == [1, 2]
    assert [d.counts for d in log.displays] == [[ProgressCounts(2, 0, 2, 0, True)]] * 2
    assert [d.closes for d in log.displays] == [1, 1]


async def test_a_display_that_raises_fails_the_stream_and_is_not_called_again() -> None:
    inners = Inners()
    calls: list[ProgressCounts] = []

    class Broken:
        def update(self, counts: ProgressCounts, /) -> None:
            calls.append(counts)
            if counts.done:
                raise ValueError("the widget is gone")

        def close(self) -> None:
            raise AssertionError("a broken display is not closed")

    seen = expect(reactivex.from_iterable("abc").pipe(map_concurrent(inners.project, 2, progress=Broken)))
    await next_turn()
    inners.finish("a", "a1")
    await seen
    assert isinstance(seen.error, ValueError)
    assert seen.items == ["a1"]
    assert inners.disposed == ["b"]  # the fan-out stopped: what ran was cancelled
    assert len(calls) == 2


async def test_an_is_failure_that_raises_fails_the_stream() -> None:
    inners, log = Inners(), ProgressLog()

    def broken(item: str) -> bool:
        raise KeyError(item)

    seen = expect(reactivex.of("a").pipe(map_concurrent(inners.project, 1, progress=log, is_failure=broken)))
    inners.subjects["a"].on_next("a1")
    await seen
    assert isinstance(seen.error, KeyError)
    assert log.only.closes == 1


async def test_a_tqdm_bar_shows_the_final_counts_in_a_terminal(capsys: pytest.CaptureFixture[str]) -> None:
    inners = Inners()
    stream = reactivex.from_iterable([f"q{i}" for i in range(20)]).pipe(
        map_concurrent(inners.project, 4, progress="questions", is_failure=failing, unit="q")
    )
    seen = expect(stream)
    for i in range(20):
        inners.finish(f"q{i}", "x" if i == 7 else "fine")
    await seen
    bar = capsys.readouterr().err.split("\r")[-1]
    assert bar.startswith("questions: 100%")
    assert "20/20" in bar
    assert "done=19, failed=1, running=0" in bar


async def test_a_tqdm_bar_gets_its_length_when_streamed_inputs_complete() -> None:
    inners = Inners()
    terminal = io.StringIO()
    made: list[TqdmProgress] = []

    def bar() -> TqdmProgress:
        made.append(TqdmProgress("jobs", file=terminal, mininterval=0))
        return made[-1]

    source: Subject[str] = Subject()
    seen = expect(source.pipe(map_concurrent(inners.project, 2, progress=bar)))
    await next_turn()
    source.on_next("a")
    source.on_next("b")
    inners.finish("a", "a1")
    [display] = made
    assert display.bar.total is None  # more may come: no length yet
    assert display.bar.n == 1
    source.on_completed()
    assert display.bar.total == 2
    assert display.bar.n == 1
    inners.finish("b", "b1")
    await seen
    assert display.bar.n == 2
    assert "jobs: 100%" in terminal.getvalue().split("\r")[-1]
    assert "2/2" in terminal.getvalue().split("\r")[-1]


def test_bad_progress_options_are_refused_when_the_operator_is_built() -> None:
    for bad in (3, None, 1.5):
        with pytest.raises(TypeError, match="progress must be True, False, a label or a factory"):
            map_concurrent(sync_of, 2, progress=bad)  # type: ignore[arg-type]


def test_a_bar_without_tqdm_is_a_clear_error_when_the_operator_is_built(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "tqdm", None)  # as if it were not installed
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    for option in (True, "questions"):
        with pytest.raises(ImportError, match=r"pip install 'rxagent\[notebook\]'"):
            map_concurrent(sync_of, 2, progress=option)
    with pytest.raises(ImportError, match="tqdm"):
        TqdmProgress()
    map_concurrent(sync_of, 2)  # no bar asked for: no tqdm needed
    map_concurrent(sync_of, 2, progress=ProgressLog())


def test_rxagent_imports_and_fans_out_without_tqdm() -> None:
    script = textwrap.dedent(
        """
        import asyncio, sys
        sys.modules["tqdm"] = None  # not installed
        import reactivex
        import rxagent, rxagent.agent, rxagent.notebook, rxagent.operators
        from rxagent import ReActAgent, ScriptedModel

        agent = ReActAgent(ScriptedModel(["fine"]))
        outcomes = asyncio.run(rxagent.operators.to_list(reactivex.of("q").pipe(agent.map_runs())))
        print(outcomes[0].text)
        try:
            agent.map_runs(progress=True)
        except ImportError as error:
            print(error)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    answer, error = done.stdout.splitlines()
    assert answer == "fine"
    assert error.startswith("progress=True draws a bar with tqdm, which is not installed")
