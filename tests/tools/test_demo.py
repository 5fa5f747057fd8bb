"""The demo tools: exact arithmetic only, a clock, and a file reader that cannot leave its directory."""

from __future__ import annotations

import re
from concurrent.futures import Future
from pathlib import Path
from threading import Thread

import pytest

from rxagent import Msg
from rxagent.agent import ReActAgent
from rxagent.context import RuntimeContext
from rxagent.messages import ToolUseBlock
from rxagent.model.scripted import ScriptedModel
from rxagent.session import SQLiteStore
from rxagent.session.recorder import fact, message_fact
from rxagent.tools import Toolkit
from rxagent.tools.demo import MAX_RESULT_DIGITS, FileReader, calculator, clock, demo_tools

KEY = (None, "sums")


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("17 * 23", "391"),
        ("(2 + 3) ** 2", "25"),
        ("7 / 2", "3.5"),
        ("7 // 2", "3"),
        ("-4 + 10 % 3", "-3"),
        ("2^10", "1024"),
    ],
)
def test_calculator_evaluates_arithmetic(expression: str, value: str) -> None:
    assert calculator(expression) == value


@pytest.mark.parametrize(
    "expression", ["__import__('os').system('true')", "a + 1", "1 +", "'x' * 3", "True + 1", "2 << 3"]
)
def test_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each refusal has its own message
        calculator(expression)


@pytest.mark.parametrize(
    ("expression", "why"),
    [
        ("((9**999)**999)**999", "would have about 9.52e+05 digits"),
        ("9 ** 9 ** 9", "would have about 3.7e+08 digits"),
        ("7**7**7**7", "digits"),
        ("2 ** 100000", "would have about 3.01e+04 digits"),
        ("(9**999) * (9**999)", f"more than {MAX_RESULT_DIGITS} digits"),
        ("10.0 ** 400", "too large"),
        ("(10 ** 500) / 3", "too large"),
        ("(-8) ** 0.5", "not a real number"),
    ],
)
def test_calculator_refuses_huge_results_before_computing_them(expression: str, why: str) -> None:
    # Run in a daemon thread with a deadline, so a regression fails here instead of hanging the suite.
    outcome: Future[str] = Future()

    def evaluate() -> None:
        try:
            outcome.set_result(calculator(expression))
        except Exception as error:
            outcome.set_exception(error)

    Thread(target=evaluate, daemon=True).start()
    with pytest.raises(ValueError, match=re.escape(why)):
        outcome.result(timeout=10)


def test_calculator_keeps_large_results_within_the_limit() -> None:
    assert len(calculator("9 ** 999")) == 954
    assert calculator("(-1) ** (10 ** 100)") == "1"
    assert calculator("0 ** 123456789") == "0"


def test_clock_knows_time_zones_and_refuses_unknown_ones() -> None:
    assert clock("Europe/Oslo").endswith(("CET", "CEST"))
    with pytest.raises(ValueError, match="unknown time zone"):
        clock("Mars/Olympus")


def test_file_reader_stays_inside_its_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    (tmp_path.parent / "secret.txt").write_text("no")
    reader = FileReader(tmp_path, max_bytes=3)
    assert reader.read_file("notes.txt") == "hel\n[… cut off]"
    with pytest.raises(PermissionError):
        reader.read_file("../secret.txt")
    with pytest.raises(PermissionError):
        reader.read_file(str(tmp_path.parent / "secret.txt"))
    with pytest.raises(FileNotFoundError, match=r"files here: notes\.txt"):
        reader.read_file("missing.txt")
    (tmp_path / "link").symlink_to(tmp_path.parent / "secret.txt")
    with pytest.raises(PermissionError):
        reader.read_file("link")


def test_demo_tools_by_name(tmp_path: Path) -> None:
    assert [t.name for t in demo_tools(["calculator", "clock", "files"], files_root=tmp_path)] == [
        "calculator",
        "clock",
        "read_file",
    ]
    with pytest.raises(ValueError, match="unknown demo tool"):
        demo_tools(["shell"])


def test_file_reader_reads_no_more_than_it_keeps(tmp_path: Path) -> None:
    # An 8 GiB sparse file: reading it whole would take minutes and the memory; the reader takes 11 bytes.
    with (tmp_path / "huge.bin").open("wb") as file:
        file.truncate(8 * 1024**3)
    assert FileReader(tmp_path, max_bytes=10).read_file("huge.bin") == "\x00" * 10 + "\n[… cut off]"


async def test_the_demo_tools_are_read_only_so_a_crash_inside_one_never_strands_its_session(
    tmp_path: Path,
) -> None:
    assert all(t.traits.read_only for t in demo_tools(["calculator", "clock", "files"], files_root=tmp_path))
    # A log as a process killed inside the calculator leaves it: the call dispatched, no result.
    store = SQLiteStore(tmp_path / "sessions.db")
    call = ToolUseBlock(id="c1", name="calculator", input={"expression": "6 * 7"}, raw_arguments="")
    lease = await store.acquire(KEY, "the process that died", 60)
    assert lease is not None
    await store.append(
        lease,
        [
            fact("run_started", {"run_id": "run_1", "turn_id": "turn_1"}, "run_1"),
            message_fact("message", Msg.user("What is 6 * 7?"), "run_1"),
            message_fact("message", Msg.model_validate({"role": "assistant", "content": [call]}), "run_1"),
            fact("tool_dispatched", {"call": call.model_dump(mode="json")}, "run_1"),
        ],
    )
    await store.release(lease)
    agent = ReActAgent(ScriptedModel(["42."]), Toolkit(demo_tools(["calculator"])), store=store)
    ctx = RuntimeContext(session_id=KEY[1])

    result = await agent.call(None, ctx)  # nobody is asked: running it again changes nothing

    assert result.text == "42."
    state = await agent.sessions.state(ctx)
    assert [r.text for m in state.messages for r in m.tool_results] == ["42"]
    await agent.aclose()
    await store.aclose()
