"""Every file tool refuses every path that could leave the workspace, and changes nothing when it does.

The refused forms (the issue's list): an absolute path outside; ``..`` leading, in the middle, trailing
(even when it would stay inside); a symlink pointing out; a path through a symlinked folder that points
out (and that folder itself); a NUL character; a path over ``PATH_MAX``; a name over ``NAME_MAX``; a
device file, a FIFO and a socket inside the workspace. Each is tried on ``read``, ``write``, ``edit``,
``list``, ``glob`` and ``grep``: each raises :class:`PathRefused` (which the executor gives the model as
an error result), the secret outside is neither shown nor changed, and nothing new appears outside.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from pydantic import JsonValue

from rxagent.harness import FileTools, PathRefused, Workspace
from rxagent.harness.workspace import NAME_MAX, PATH_MAX
from rxagent.tools import Tool, ToolContext
from tests.harness.conftest import SECRET, call, make_special

Form = Callable[[Path, Path], str]
"""Sets up a refused form in ``(folder, outside)`` and gives the path argument that names it."""


def _symlink_out(folder: Path, outside: Path) -> str:
    (folder / "link.txt").symlink_to(outside / "secret.txt")
    return "link.txt"


def _through_symlinked_folder(folder: Path, outside: Path) -> str:
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    return "linked/secret.txt"


def _symlinked_folder(folder: Path, outside: Path) -> str:
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    return "linked"


def _special(kind: str) -> Form:
    def make(folder: Path, outside: Path) -> str:
        make_special(kind, folder / "special")
        return "special"

    return make


FORMS: dict[str, Form] = {
    "absolute outside": lambda folder, outside: str(outside / "secret.txt"),
    "absolute root": lambda folder, outside: "/etc/passwd",
    "leading ..": lambda folder, outside: "../../outside/secret.txt",
    "middle ..": lambda folder, outside: "notes/../../../outside/secret.txt",
    ".. that stays inside": lambda folder, outside: "notes/../notes/a.txt",
    "trailing ..": lambda folder, outside: "notes/..",
    "absolute with ..": lambda folder, outside: f"{folder}/../../outside/secret.txt",
    "symlink pointing out": _symlink_out,
    "through a symlinked folder": _through_symlinked_folder,
    "a symlinked folder": _symlinked_folder,
    "NUL byte": lambda folder, outside: "notes/a.txt\x00.md",
    "over PATH_MAX": lambda folder, outside: "d/" * (PATH_MAX // 2 + 1) + "a.txt",
    "name over NAME_MAX": lambda folder, outside: "x" * (NAME_MAX + 1),
    "device file": _special("device"),
    "FIFO": _special("fifo"),
    "socket": _special("socket"),
}

TOOLS: dict[str, Callable[[FileTools], tuple[Tool, dict[str, JsonValue]]]] = {
    "read": lambda files: (files.read, {}),
    "write": lambda files: (files.write, {"content": "overwritten"}),
    "edit": lambda files: (files.edit, {"old_text": "the secret", "new_text": "overwritten"}),
    "list": lambda files: (files.list_folder, {}),
    "glob": lambda files: (files.glob, {"pattern": "**"}),
    "grep": lambda files: (files.grep, {"pattern": "secret"}),
}


def _snapshot(place: Path) -> dict[str, bytes]:
    return {str(p.relative_to(place)): p.read_bytes() for p in sorted(place.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("tool_name", list(TOOLS))
async def test_each_file_tool_refuses_each_way_out(
    tool_name: str,
    form: str,
    files: FileTools,
    folder: Path,
    outside: Path,
    tmp_path: Path,
    context: ToolContext[object],
) -> None:
    (folder / "notes").mkdir()
    (folder / "notes" / "a.txt").write_text("inside\n")
    path = FORMS[form](folder, outside)
    tool, arguments = TOOLS[tool_name](files)
    before = _snapshot(tmp_path)

    with pytest.raises(PathRefused) as refused:
        await call(tool, context, path=path, **arguments)

    message = str(refused.value)
    assert SECRET.strip() not in message
    assert _snapshot(tmp_path) == before  # nothing written anywhere, inside or out
    assert (outside / "secret.txt").read_text() == SECRET


async def test_a_symlink_that_stays_inside_is_followed(
    files: FileTools, folder: Path, context: ToolContext[object]
) -> None:
    (folder / "real").mkdir()
    (folder / "real" / "a.txt").write_text("inside\n")
    (folder / "alias").symlink_to(folder / "real", target_is_directory=True)

    assert "inside" in await call(files.read, context, path="alias/a.txt")
    assert "inside" in await call(files.read, context, path=str(folder / "real" / "a.txt"))


async def test_a_search_leaves_out_what_it_must_not_open(
    files: FileTools, folder: Path, outside: Path, context: ToolContext[object]
) -> None:
    # A FIFO would block a plain open forever; a symlink out would show the secret.
    (folder / "a.txt").write_text("a secret of the workspace\n")
    (folder / "link.txt").symlink_to(outside / "secret.txt")
    (folder / "linked").symlink_to(outside, target_is_directory=True)
    make_special("fifo", folder / "fifo")
    make_special("socket", folder / "socket")

    found = await call(files.grep, context, pattern="secret")
    listed = await call(files.glob, context, pattern="**")

    assert found == "a.txt:1: a secret of the workspace"
    assert listed == "a.txt"


async def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_followed(
    files: FileTools, workspace: Workspace, folder: Path, outside: Path, context: ToolContext[object]
) -> None:
    # The race the canonical check alone would lose: checked as a folder, opened as a symlink out.
    (folder / "notes").mkdir()
    (folder / "notes" / "secret.txt").write_text("inside\n")
    checked = workspace.resolve("notes/secret.txt", context, write=True)
    (folder / "notes" / "secret.txt").unlink()
    (folder / "notes").rmdir()
    (folder / "notes").symlink_to(outside, target_is_directory=True)

    with pytest.raises(PathRefused, match="symlink"):
        checked.open_file()
    with pytest.raises(PathRefused, match="symlink"):
        checked.open_parent(create=True)
    assert (outside / "secret.txt").read_text() == SECRET


def test_the_limits_are_the_systems() -> None:
    assert (os.pathconf("/", "PC_PATH_MAX"), os.pathconf("/", "PC_NAME_MAX")) == (PATH_MAX, NAME_MAX)
