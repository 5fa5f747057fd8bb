"""The file tools do what they say inside the workspace, within their limits, and refuse bad input plainly.

Bad inputs tried: wrong argument types (a number for a path, text for an offset, a negative offset, a
zero limit), a missing file, a folder where a file was expected and a file where a folder was, a binary
file (NUL bytes, bytes that are not UTF-8), content with a NUL character or a lone surrogate, content over
the write limit, an edit whose old text is missing, ambiguous, empty or equal to the new text, an invalid
regular expression, a glob with ``..``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rxagent.agent import Agent
from rxagent.context import RuntimeContext
from rxagent.harness import FileLimits, FileTools, PathRefused, Workspace, files_part
from rxagent.model.scripted import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.tools import ToolArgumentError, ToolContext, Toolkit
from tests.harness.conftest import call

# ---- read ----------------------------------------------------------------------------------------------


async def test_read_numbers_lines_from_an_offset_up_to_a_limit(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "a.txt").write_text("".join(f"line {n}\n" for n in range(1, 11)))

    assert await call(files.read, context, path="a.txt", offset=2, limit=3) == (
        "     3\tline 3\n     4\tline 4\n     5\tline 5\n[… more lines follow: read on with offset=5]"
    )
    assert (await call(files.read, context, path="a.txt", offset=8)).splitlines() == [
        "     9\tline 9",
        "    10\tline 10",
    ]
    assert (
        await call(files.read, context, path="a.txt", offset=10)
        == "(a.txt has 10 lines; offset=10 is past its end)"
    )
    (folder / "empty.txt").write_text("")
    assert await call(files.read, context, path="empty.txt") == "(empty.txt is empty)"


async def test_read_stops_at_its_byte_cap_and_says_where_to_read_on(
    workspace: Workspace, folder: Path, context: ToolContext[object]
) -> None:
    files = FileTools(workspace, FileLimits(max_read_bytes=100, max_line_chars=10))
    (folder / "big.txt").write_text("".join(f"{n:08d}\n" for n in range(1000)) + "x" * 50 + "\n")

    first = await call(files.read, context, path="big.txt")
    assert first.splitlines()[-1] == "[… more lines follow: read on with offset=6]"
    assert len(first.encode()) < 200
    last = await call(files.read, context, path="big.txt", offset=1000)
    assert last == "  1001\txxxxxxxxxx […line cut]"


async def test_read_reads_no_more_of_a_huge_file_than_it_shows(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    # 8 GiB on two lines, the second sparse: reading it whole would take minutes; the read takes a cap.
    with (folder / "huge.txt").open("wb") as file:
        file.write(b"start\n" + b"text " * 2000)
        file.seek(8 * 1024**3)
        file.write(b"\n")
    shown = await call(files.read, context, path="huge.txt", limit=1)
    assert shown == "     1\tstart\n[… more lines follow: read on with offset=1]"


@pytest.mark.parametrize(
    "content", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", b"text\n" * 3000 + b"\x00\x01", b"caf\xe9\n"]
)
async def test_read_and_edit_refuse_binary_files(
    content: bytes, files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "image.png").write_bytes(content)
    with pytest.raises(ValueError, match="text only"):
        await call(files.read, context, path="image.png", limit=5000)
    with pytest.raises(ValueError, match="text only"):
        await call(files.edit, context, path="image.png", old_text="text", new_text="x")
    assert (folder / "image.png").read_bytes() == content


# ---- write ---------------------------------------------------------------------------------------------


async def test_write_makes_folders_replaces_whole_files_and_keeps_their_mode(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    said = await call(files.write, context, path="deep/er/notes.md", content="one\ntwo\n")
    assert said == "Wrote 2 lines (8 bytes) to deep/er/notes.md (a new file)."
    target = folder / "deep" / "er" / "notes.md"
    target.chmod(0o640)

    said = await call(files.write, context, path="deep/er/notes.md", content="three")
    assert said == "Wrote 1 lines (5 bytes) to deep/er/notes.md (replaced)."
    assert target.read_text() == "three"
    assert target.stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in target.parent.iterdir()) == ["notes.md"]  # no temporary file left


@pytest.mark.parametrize(
    ("content", "why"),
    [("a\x00b", "NUL character"), ("\udc80", "lone surrogate"), ("x" * 101, "over the limit of 100")],
)
async def test_write_refuses_what_it_cannot_write_and_leaves_the_file(
    content: str, why: str, workspace: Workspace, folder: Path, context: ToolContext[object]
) -> None:
    files = FileTools(workspace, FileLimits(max_write_bytes=100))
    (folder / "a.txt").write_text("old\n")
    with pytest.raises(ValueError, match=why):
        await call(files.write, context, path="a.txt", content=content)
    with pytest.raises(ValueError, match=why):
        await call(files.edit, context, path="a.txt", old_text="old", new_text=content)
    assert (folder / "a.txt").read_text() == "old\n"


# ---- edit ----------------------------------------------------------------------------------------------


async def test_edit_replaces_a_unique_text_and_answers_a_diff(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "app.py").write_text("def greet():\n    return 'hello'\n")

    said = await call(files.edit, context, path="app.py", old_text="'hello'", new_text="'hi'")

    assert (folder / "app.py").read_text() == "def greet():\n    return 'hi'\n"
    assert said == (
        "Replaced 1 occurrence in app.py:\n"
        "--- a/app.py\n+++ b/app.py\n@@ -1,2 +1,2 @@\n def greet():\n-    return 'hello'\n+    return 'hi'\n"
    )


@pytest.mark.parametrize(
    ("old", "new", "why"),
    [
        ("goodbye", "x", "old_text was not found in app.py; nothing was changed"),
        ("hello", "x", "old_text occurs 2 times in app.py; nothing was changed"),
        ("", "x", "old_text is empty"),
        ("hello", "hello", "the same"),
    ],
)
async def test_edit_refuses_a_missing_or_ambiguous_target_and_leaves_the_file(
    old: str, new: str, why: str, files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    original = "hello\nworld\nhello\n"
    (folder / "app.py").write_text(original)
    before = (folder / "app.py").stat()

    with pytest.raises(ValueError, match=why):
        await call(files.edit, context, path="app.py", old_text=old, new_text=new)

    after = (folder / "app.py").stat()
    assert (folder / "app.py").read_text() == original
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)


async def test_edit_replaces_every_occurrence_when_asked(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "app.py").write_text("hello\nworld\nhello\n")
    said = await call(files.edit, context, path="app.py", old_text="hello", new_text="bye", replace_all=True)
    assert said.startswith("Replaced 2 occurrences in app.py:\n")
    assert (folder / "app.py").read_text() == "bye\nworld\nbye\n"


# ---- list, glob, grep ----------------------------------------------------------------------------------


async def test_list_glob_and_grep_find_what_the_workspace_holds(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "src" / "pkg").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("import pkg\nprint('Hello')\n")
    (folder / "src" / "pkg" / "__init__.py").write_text("HELLO = 1\n")
    (folder / "README.md").write_text("hello\n")

    assert await call(files.list_folder, context) == "README.md  (6 bytes)\nsrc/"
    assert await call(files.list_folder, context, path="src") == "main.py  (26 bytes)\npkg/"
    assert await call(files.glob, context, pattern="**/*.py") == "src/main.py\nsrc/pkg/__init__.py"
    assert await call(files.glob, context, pattern="*.py", path="src") == "src/main.py"
    assert await call(files.glob, context, pattern="src/p?g/*.py") == "src/pkg/__init__.py"
    assert await call(files.glob, context, pattern="*.[mr]d") == "README.md"
    assert await call(files.grep, context, pattern="hello", ignore_case=True, glob="**/*.py") == (
        "src/main.py:2: print('Hello')\nsrc/pkg/__init__.py:1: HELLO = 1"
    )
    assert await call(files.grep, context, pattern="^hello", path="README.md") == "README.md:1: hello"
    assert await call(files.grep, context, pattern="absent") == "No line below . matches /absent/."
    assert await call(files.glob, context, pattern="*.rs") == "No file below . matches."


async def test_list_glob_and_grep_cap_their_results(
    workspace: Workspace, folder: Path, context: ToolContext[object]
) -> None:
    files = FileTools(workspace, FileLimits(max_results=3, max_scanned_files=8))
    for n in range(5):
        (folder / f"f{n}.txt").write_text("match\nmatch\n")

    assert await call(files.list_folder, context) == (
        "f0.txt  (12 bytes)\nf1.txt  (12 bytes)\nf2.txt  (12 bytes)\n[… 2 more not shown]"
    )
    assert await call(files.glob, context, pattern="*.txt") == "f0.txt\nf1.txt\nf2.txt\n[… 2 more not shown]"
    assert await call(files.grep, context, pattern="match") == (
        "f0.txt:1: match\nf0.txt:2: match\nf1.txt:1: match\n[… 7 more not shown]"
    )
    for n in range(5, 10):
        (folder / f"f{n}.txt").write_text("match\n")
    assert (await call(files.glob, context, pattern="*.txt")).endswith(
        "[… 5 more not shown]\n[the search stopped after 8 files: narrow it with path]"
    )


async def test_searches_refuse_a_bad_pattern(files: FileTools, context: ToolContext[object]) -> None:
    with pytest.raises(ValueError, match="not a valid regular expression"):
        await call(files.grep, context, pattern="(unclosed")
    with pytest.raises(PathRefused, match=r"without '\.\.'"):
        await call(files.glob, context, pattern="../*")
    with pytest.raises(PathRefused, match=r"without '\.\.'"):
        await call(files.grep, context, pattern="x", glob="/etc/*")


# ---- what the model reads when it gets something wrong -------------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "says"),
    [
        ("read", {"path": 5}, "path: 5 is not of type 'string'"),
        ("read", {"path": "a.txt", "offset": "soon"}, "offset: 'soon' is not of type 'integer'"),
        ("read", {"path": "a.txt", "offset": -1}, "offset: -1 is less than the minimum of 0"),
        ("read", {"path": "a.txt", "limit": 0}, "limit: 0 is less than the minimum of 1"),
        ("write", {"path": "a.txt"}, "content: is required but missing"),
        ("edit", {"path": "a.txt", "old_text": ["x"], "new_text": "y"}, "old_text: ['x'] is not of type"),
        ("grep", {"pattern": "x", "ignore_case": "maybe"}, "ignore_case: 'maybe' is not of type 'boolean'"),
        ("list", {"path": {"folder": "docs"}}, "path: {'folder': 'docs'} is not of type 'string'"),
        ("glob", {"path": "docs"}, "pattern: is required but missing"),
    ],
)
def test_wrong_argument_types_are_refused_with_what_to_fix(
    tool: str, arguments: dict[str, object], says: str, files: FileTools
) -> None:
    found = next(t for t in files.tools if t.name == tool)
    with pytest.raises(ToolArgumentError) as refused:
        found.prepare(arguments)
    assert says in str(refused.value)
    assert str(refused.value).endswith("Fix the arguments and call the tool again.")


async def test_the_model_reads_plain_refusals_it_can_act_on(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "work")
    calls = [
        ScriptedToolCall("read", {"path": "missing.txt"}, id="c1"),
        ScriptedToolCall("read", {"path": "docs"}, id="c2"),
        ScriptedToolCall("list", {"path": "docs/a.txt"}, id="c3"),
        ScriptedToolCall("edit", {"path": "nothing.txt", "old_text": "a", "new_text": "b"}, id="c4"),
        ScriptedToolCall("read", {"path": "/etc/passwd"}, id="c5"),
        ScriptedToolCall("write", {"path": 7, "content": "x"}, id="c6"),
    ]
    model = ScriptedModel([ScriptedResponse(tool_calls=calls), "I see."])
    agent = Agent(model, Toolkit(files_part(workspace).tools))
    ctx = RuntimeContext(session_id="s1")
    (workspace.folder_for(ctx) / "docs").mkdir()
    (workspace.folder_for(ctx) / "docs" / "a.txt").write_text("a\n")

    await agent.call("Look around.", ctx)

    state = await agent.sessions.state(ctx)
    results = {r.tool_use_id: r for m in state.messages for r in m.tool_results}
    assert all(r.status == "error" for r in results.values())
    texts = {call_id: r.text for call_id, r in results.items()}
    assert texts["c1"] == "Error: FileNotFoundError: there is no file 'missing.txt'"
    assert (
        texts["c2"]
        == "Error: IsADirectoryError: 'docs' is a folder, not a file: use list to see what it holds"
    )
    assert texts["c3"] == "Error: NotADirectoryError: docs/a.txt is a file, not a folder: use read to see it"
    assert texts["c4"] == (
        "Error: FileNotFoundError: there is no file 'nothing.txt' to edit: use write to make it, or list to "
        "see the files"
    )
    assert texts["c5"] == (
        "Error: PathRefused: '/etc/passwd' is outside the workspace; use a path relative to it"
    )
    assert "path: 7 is not of type 'string'" in texts["c6"]
    await agent.aclose()


def test_limits_must_be_positive_integers() -> None:
    with pytest.raises(ValueError, match="max_results must be a positive integer"):
        FileLimits(max_results=0)
