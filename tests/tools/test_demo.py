"""The demo tools: exact arithmetic only, a clock, and a file reader that cannot leave its directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from rxagent.tools.demo import FileReader, calculator, clock, demo_tools


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
    "expression", ["__import__('os').system('true')", "a + 1", "2 ** 100000", "1 +", "'x' * 3", "True + 1"]
)
def test_calculator_refuses_anything_but_arithmetic(expression: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each refusal has its own message
        calculator(expression)


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
