"""The file tools: ``read``, ``write``, ``edit``, ``list``, ``glob`` and ``grep``, all confined to the run's
workspace (:mod:`rxagent.harness.workspace` says how).

==========  ====================================================================================
tool        what it does
==========  ====================================================================================
``read``    numbered lines of a text file, from ``offset`` (lines skipped), at most ``limit``
``write``   a whole text file, atomically: a crash leaves the old content or the new, never a mix
``edit``    replaces an exact text that occurs once (or every one, ``replace_all``); answers a diff
``list``    what a folder holds
``glob``    files whose path matches a pattern (``**/*.py``)
``grep``    lines matching a regular expression, as ``path:line: text``
==========  ====================================================================================

Every refusal is an exception whose message tells the model what to do instead (the executor gives it back
as the call's error result): a path outside the workspace or otherwise refused
(:class:`~rxagent.harness.workspace.PathRefused`), a missing file (``FileNotFoundError``), a folder where a
file was expected (``IsADirectoryError``) or the reverse (``NotADirectoryError``), a binary or too large
file, an edit whose old text is missing or not unique (``ValueError``). A refused call changes nothing.

What they read and write is capped (:class:`FileLimits`): a read stops at ``max_read_bytes`` and says how
to read on; a write or an edit whose result is over ``max_write_bytes`` is refused; ``list``, ``glob`` and
``grep`` give at most ``max_results`` lines and say how many they left out. Binary files (a NUL byte, or
bytes that are not UTF-8) are refused by ``read`` and ``edit`` and skipped by ``grep``.

**Atomic writes** (:func:`atomic_write`): the content goes to a new temporary file in the same folder,
which is flushed to disk (``fsync``) and then renamed over the target (``os.replace``, atomic on POSIX),
and the folder is flushed so the rename survives a power cut. A process killed at any point leaves the
target whole, old or new; at worst a ``.rxagent-*.tmp`` file is left beside it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import io
import os
import re
import secrets
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Annotated

from pydantic import Field

from rxagent.harness._part import HarnessPart
from rxagent.harness.workspace import PathRefused, Workspace, WorkspacePath
from rxagent.tools import Tool, ToolContext, tool

__all__ = ["FileLimits", "FileTools", "atomic_write", "files_part"]

_SNIFF = 8192
"""Bytes looked at for a NUL byte to tell a binary file."""

_INSTRUCTIONS = (
    "You work in a folder of your own, the workspace. The file tools take paths relative to it "
    "(no '..'; absolute paths only inside it): read (numbered lines, with offset and limit), write (a "
    "whole file), edit (replace an exact text that occurs once; read the file first), list, glob "
    "('**/*.py') and grep (a regular expression)."
)


@dataclass(frozen=True, slots=True)
class FileLimits:
    """How much the file tools read, write and list.

    Attributes:
        max_read_bytes: the most a ``read`` returns; it then says which ``offset`` reads on.
        max_write_bytes: the largest file ``write`` and ``edit`` produce (and ``edit`` reads).
        max_line_chars: longer lines are cut in what ``read`` and ``grep`` show.
        max_results: the most lines ``list``, ``glob`` and ``grep`` give.
        max_file_bytes: larger files are not searched by ``grep``.
        max_scanned_files: ``glob`` and ``grep`` stop after looking at this many files (and say so).
    """

    max_read_bytes: int = 100_000
    max_write_bytes: int = 1_000_000
    max_line_chars: int = 2000
    max_results: int = 200
    max_file_bytes: int = 10_000_000
    max_scanned_files: int = 20_000

    def __post_init__(self) -> None:
        for name in self.__slots__:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"FileLimits.{name} must be a positive integer, got {value!r}")


def atomic_write(
    folder: int | str | os.PathLike[str], name: str, chunks: Iterable[bytes], *, mode: int | None = None
) -> int:
    """Write ``chunks`` as the whole content of file ``name`` in ``folder``, atomically; returns the size.

    Args:
        folder: an open folder's descriptor (kept open), or its path.
        name: the file's name in it (a plain name, no ``/``).
        chunks: the content, in pieces (an iterator is consumed as it is written).
        mode: the new file's permission bits (default: ``0o666`` less the umask; give the old file's to
            keep them).

    A temporary file in the same folder receives the content, is flushed to disk and renamed over ``name``;
    the folder is then flushed. Killed at any point, the process leaves ``name`` with its old content or the
    new, never a mix; the temporary file is removed when writing fails (a killed process may leave it).

    Raises:
        OSError: writing failed; ``name`` is unchanged.
    """
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"atomic_write takes a plain file name, got {name!r}")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    descriptor = folder if isinstance(folder, int) else os.open(folder, flags)
    try:
        temporary = f".rxagent-{secrets.token_hex(8)}.tmp"
        creating = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        opened = os.open(temporary, creating, 0o666, dir_fd=descriptor)
        size = 0
        try:
            with os.fdopen(opened, "wb") as file:
                for chunk in chunks:
                    file.write(chunk)
                    size += len(chunk)
                file.flush()
                if mode is not None:
                    os.fchmod(file.fileno(), mode)
                os.fsync(file.fileno())
            os.replace(temporary, name, src_dir_fd=descriptor, dst_dir_fd=descriptor)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=descriptor)
            raise
        os.fsync(descriptor)  # the rename itself, on disk
        return size
    finally:
        if not isinstance(folder, int):
            os.close(descriptor)


class FileTools:
    """The six file tools of one :class:`~rxagent.harness.workspace.Workspace` (see the module).

    Each is a bound ``@tool`` method: ``FileTools(workspace).read`` is the ``read`` tool; :attr:`tools` lists
    the six, and :func:`files_part` makes them a harness part.
    """

    def __init__(self, workspace: Workspace, limits: FileLimits | None = None) -> None:
        self.workspace = workspace
        self.limits = limits or FileLimits()

    @property
    def tools(self) -> tuple[Tool, ...]:
        """The six tools, bound to this instance: read, write, edit, list, glob, grep."""
        return (self.read, self.write, self.edit, self.list_folder, self.glob, self.grep)

    # ---- read ----------------------------------------------------------------------------------------

    @tool(name="read", read_only=True, concurrency_safe=True)
    async def read(
        self,
        path: Annotated[str, Field(description="the file, relative to the workspace")],
        context: ToolContext,
        offset: Annotated[int, Field(ge=0, description="lines to skip from the start")] = 0,
        limit: Annotated[int, Field(ge=1, description="the most lines to return")] = 2000,
    ) -> str:
        """Read a text file of the workspace: its lines, numbered from 1, from ``offset`` on.

        Long files are cut; the answer then says which offset reads on.
        """
        target = self.workspace.resolve(path, context)
        return await asyncio.to_thread(self._read, target, offset, limit)

    def _read(self, target: WorkspacePath, offset: int, limit: int) -> str:
        limits = self.limits
        shown: list[str] = []
        size = 0
        more = False
        number = 0
        with target.open_file() as file:
            _refuse_binary(target, file)
            for number, (raw, cut) in enumerate(_lines(file, limits.max_line_chars * 4), start=1):
                if number <= offset:
                    continue
                if len(shown) >= limit:
                    more = True
                    break
                if b"\x00" in raw:
                    raise ValueError(f"{target.shown} is a binary file: the file tools read text only")
                text = _decoded(target, raw, cut).rstrip("\r\n")
                cut = cut or len(text) > limits.max_line_chars
                line = f"{number:>6}\t{text[: limits.max_line_chars]}" + (" […line cut]" if cut else "")
                size += len(line.encode()) + 1
                if size > limits.max_read_bytes and shown:
                    more = True
                    break
                shown.append(line)
        if not shown:
            if number == 0:
                return f"({target.shown} is empty)"
            return f"({target.shown} has {number} lines; offset={offset} is past its end)"
        if more:
            next_offset = offset + len(shown)
            shown.append(f"[… more lines follow: read on with offset={next_offset}]")
        return "\n".join(shown)

    # ---- write and edit ------------------------------------------------------------------------------

    @tool(name="write", idempotent=True)
    async def write(
        self,
        path: Annotated[str, Field(description="the file, relative to the workspace")],
        content: Annotated[str, Field(description="the whole new content of the file")],
        context: ToolContext,
    ) -> str:
        """Write a whole text file of the workspace (made, with its folders, if missing; replaced if there).

        The write is atomic: the file ends with its old content or the new, never half of it.
        """
        target = self.workspace.resolve(path, context, write=True)
        data = self._encoded(target, content)
        return await asyncio.to_thread(self._write, target, data)

    def _write(self, target: WorkspacePath, data: bytes) -> str:
        folder, name = target.open_parent(create=True)
        try:
            status = target.check_file(folder, name, missing_ok=True)
            atomic_write(folder, name, [data], mode=None if status is None else stat.S_IMODE(status.st_mode))
        finally:
            os.close(folder)
        lines = data.count(b"\n") + (0 if data.endswith(b"\n") or not data else 1)
        how = "a new file" if status is None else "replaced"
        return f"Wrote {lines} lines ({len(data)} bytes) to {target.shown} ({how})."

    @tool(name="edit")
    async def edit(
        self,
        path: Annotated[str, Field(description="the file, relative to the workspace")],
        old_text: Annotated[str, Field(description="the exact text to replace, as the file has it")],
        new_text: Annotated[str, Field(description="what replaces it")],
        context: ToolContext,
        replace_all: Annotated[bool, Field(description="replace every occurrence, not only one")] = False,
    ) -> str:
        """Replace an exact text in a file of the workspace; answers the change as a unified diff.

        The old text must occur exactly once (include surrounding lines to make it unique), unless
        ``replace_all`` is set. Nothing changes when the edit is refused.
        """
        target = self.workspace.resolve(path, context, write=True)
        if not old_text:
            raise ValueError("old_text is empty: give the exact text to replace (use write for a new file)")
        if old_text == new_text:
            raise ValueError("old_text and new_text are the same: there is nothing to change")
        self._encoded(target, new_text)
        return await asyncio.to_thread(self._edit, target, old_text, new_text, replace_all)

    def _edit(self, target: WorkspacePath, old: str, new: str, replace_all: bool) -> str:
        limit = self.limits.max_write_bytes
        folder, name = target.open_parent()
        try:
            try:
                status = target.check_file(folder, name)
            except FileNotFoundError:
                raise FileNotFoundError(
                    f"there is no file {target.shown!r} to edit: use write to make it, or list to see "
                    "the files"
                ) from None
            assert status is not None
            if status.st_size > limit:
                raise ValueError(
                    f"{target.shown} is {status.st_size} bytes, over the {limit}-byte limit of edit; "
                    "it was not changed"
                )
            with target.open_in(folder, name) as file:
                _refuse_binary(target, file)
                data = file.read(limit + 1)
            if b"\x00" in data:
                raise ValueError(f"{target.shown} is a binary file: the file tools read text only")
            text = _decoded(target, data, False)
            count = text.count(old)
            if count == 0:
                raise ValueError(
                    f"old_text was not found in {target.shown}; nothing was changed. Read the file and copy "
                    "the text exactly, with its whitespace and line breaks (without the line numbers)."
                )
            if count > 1 and not replace_all:
                raise ValueError(
                    f"old_text occurs {count} times in {target.shown}; nothing was changed. Include more of "
                    "the surrounding lines so that it occurs once, or set replace_all to replace every one."
                )
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            encoded = self._encoded(target, updated)
            atomic_write(folder, name, [encoded], mode=stat.S_IMODE(status.st_mode))
        finally:
            os.close(folder)
        diff = "".join(
            difflib.unified_diff(
                text.splitlines(keepends=True),
                updated.splitlines(keepends=True),
                f"a/{target.shown}",
                f"b/{target.shown}",
            )
        )
        cap = self.limits.max_read_bytes
        if len(diff) > cap:
            diff = diff[:cap] + "\n[… diff cut]"
        times = "1 occurrence" if count == 1 else f"{count} occurrences"
        return f"Replaced {times} in {target.shown}:\n{diff}"

    def _encoded(self, target: WorkspacePath, text: str) -> bytes:
        if "\x00" in text:
            raise ValueError(
                f"the text for {target.shown} has a NUL character: the file tools write text only"
            )
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                f"the text for {target.shown} cannot be encoded as UTF-8 (it has a lone surrogate)"
            ) from None
        if len(data) > self.limits.max_write_bytes:
            raise ValueError(
                f"the content for {target.shown} would be {len(data)} bytes, over the limit of "
                f"{self.limits.max_write_bytes}; nothing was written. Split it into several files."
            )
        return data

    # ---- list, glob, grep ----------------------------------------------------------------------------

    @tool(name="list", read_only=True, concurrency_safe=True)
    async def list_folder(
        self,
        context: ToolContext,
        path: Annotated[str, Field(description="the folder, relative to the workspace")] = ".",
    ) -> str:
        """List what a folder of the workspace holds: folders end with '/', files show their size."""
        target = self.workspace.resolve(path, context)
        return await asyncio.to_thread(self._list, target)

    def _list(self, target: WorkspacePath) -> str:
        entries: dict[str, str] = {}
        try:
            folder = _open_searched(target)
        except FileNotFoundError:
            if not target.mounts:
                raise
            folder = None
        if folder is not None:
            try:
                with os.scandir(folder) as listed:
                    for entry in listed:
                        entries[entry.name] = _describe(entry)
            finally:
                os.close(folder)
        depth = 0 if target.shown == "." else target.shown.count("/") + 1
        for prefix, _ in target.mounts:
            entries[prefix.split("/")[depth]] = "/ (read-only)"
        if not entries:
            return f"({target.shown} is empty)"
        names = sorted(entries)
        lines = [f"{name}{entries[name]}" for name in names[: self.limits.max_results]]
        return "\n".join(lines) + _left_out(len(names), len(lines))

    @tool(name="glob", read_only=True, concurrency_safe=True)
    async def glob(
        self,
        pattern: Annotated[str, Field(description="a glob such as '**/*.py' or 'docs/*.md'")],
        context: ToolContext,
        path: Annotated[str, Field(description="the folder to search, relative to the workspace")] = ".",
    ) -> str:
        """Find the files of the workspace whose path (below ``path``) matches a glob pattern.

        ``*`` matches within a name, ``**`` any number of folders, ``?`` one character. Paths are given
        relative to the workspace.
        """
        matcher = _glob_regex(pattern)
        target = self.workspace.resolve(path, context)
        return await asyncio.to_thread(self._glob, target, matcher)

    def _glob(self, target: WorkspacePath, matcher: re.Pattern[str]) -> str:
        found: list[str] = []
        scanned = False
        for relative, _, _, stopped in self._files(target):
            scanned = scanned or stopped
            if relative is not None and matcher.fullmatch(relative):
                found.append(_joined(target.shown, relative))
        if not found:
            return f"No file below {target.shown} matches." + _stopped(scanned, self.limits)
        found.sort()
        shown = found[: self.limits.max_results]
        return "\n".join(shown) + _left_out(len(found), len(shown)) + _stopped(scanned, self.limits)

    @tool(name="grep", read_only=True, concurrency_safe=True)
    async def grep(
        self,
        pattern: Annotated[str, Field(description="a regular expression (Python syntax)")],
        context: ToolContext,
        path: Annotated[str, Field(description="a file or folder, relative to the workspace")] = ".",
        glob: Annotated[str | None, Field(description="search only files matching this glob")] = None,
        ignore_case: Annotated[bool, Field(description="match regardless of case")] = False,
    ) -> str:
        """Search the text files of the workspace for lines matching a regular expression.

        Answers ``path:line: text`` per match. Binary files, symlinks and very large files are skipped.
        """
        try:
            regex = re.compile(pattern, re.IGNORECASE if ignore_case else 0)
        except re.error as error:
            raise ValueError(f"the pattern is not a valid regular expression: {error}") from None
        matcher = _glob_regex(glob) if glob is not None else None
        target = self.workspace.resolve(path, context)
        return await asyncio.to_thread(self._grep, target, regex, matcher)

    def _grep(self, target: WorkspacePath, regex: re.Pattern[str], matcher: re.Pattern[str] | None) -> str:
        limits = self.limits
        found: list[str] = []
        total = 0
        scanned = False
        for relative, folder, name, stopped in self._files(target):
            scanned = scanned or stopped
            if relative is None or folder is None:
                continue
            if matcher is not None and relative and not matcher.fullmatch(relative):
                continue
            shown = _joined(target.shown, relative) if relative else target.shown
            for number, line in _searchable_lines(folder, name, limits):
                if regex.search(line):
                    total += 1
                    if len(found) < limits.max_results:
                        found.append(f"{shown}:{number}: {line[: limits.max_line_chars]}")
        if not found:
            return f"No line below {target.shown} matches /{regex.pattern}/." + _stopped(scanned, limits)
        return "\n".join(found) + _left_out(total, len(found)) + _stopped(scanned, limits)

    def _files(self, target: WorkspacePath) -> Iterator[tuple[str | None, int | None, str, bool]]:
        """Every regular file below ``target`` (or ``target`` itself when it is a file), mounts included:
        ``(path relative to target, folder descriptor, name, stopped)``; a last ``(None, None, "", True)``
        says the scan stopped at ``max_scanned_files``."""
        if target.parts and target.kind() == "file":
            folder, name = target.open_parent()
            try:
                target.check_file(folder, name)
                yield "", folder, name, False
            finally:
                os.close(folder)
            return
        trees: list[tuple[str, WorkspacePath]] = []
        try:
            opened = _open_searched(target)
        except FileNotFoundError:
            if not target.mounts:
                raise
        else:
            os.close(opened)
            trees.append(("", target))
        depth = 0 if target.shown == "." else target.shown.count("/") + 1
        for prefix, mounted in target.mounts:
            below = "/".join(prefix.split("/")[depth:]) + "/"
            trees.append((below, WorkspacePath(prefix, mounted, (), read_only=True)))
        count = 0
        for below, tree in trees:
            folder = tree.open_folder()
            try:
                for relative, descriptor, name in tree.walk(folder):
                    count += 1
                    if count > self.limits.max_scanned_files:
                        yield None, None, "", True
                        return
                    yield below + relative, descriptor, name, False
            finally:
                os.close(folder)


def files_part(workspace: Workspace, limits: FileLimits | None = None) -> HarnessPart:
    """The file tools of ``workspace`` as a harness part named ``files``, with a line of instructions."""
    return HarnessPart("files", tools=FileTools(workspace, limits).tools, instructions=_INSTRUCTIONS)


# ---- helpers of one tool or two ------------------------------------------------------------------------


def _lines(file: io.BufferedReader, cap: int) -> Iterator[tuple[bytes, bool]]:
    """The file's lines, each at most ``cap`` bytes; ``cut`` says a line was longer (its rest is read
    past only when the next line is asked for, so stopping after a line never reads a huge one whole)."""
    rest = False
    while True:
        if rest:
            while (more := file.readline(65536)) and not more.endswith(b"\n"):
                pass
            if not more:
                return
        line = file.readline(cap)
        if not line:
            return
        rest = len(line) == cap and not line.endswith(b"\n")
        if rest and file.peek(1)[:1] == b"\n":  # exactly ``cap`` bytes long: only its line break is left
            file.read(1)
            rest = False
        yield line, rest and file.peek(1)[:1] != b""


def _refuse_binary(target: WorkspacePath, file: io.BufferedReader) -> None:
    if b"\x00" in file.peek(_SNIFF)[:_SNIFF]:
        raise ValueError(f"{target.shown} is a binary file: the file tools read text only")


def _decoded(target: WorkspacePath, data: bytes, cut: bool) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        if cut and error.start >= len(data) - 3:  # a character split where the line was cut
            return data[: error.start].decode("utf-8", "replace")
        raise ValueError(
            f"{target.shown} is not UTF-8 text (a binary file?): the file tools read text only"
        ) from None


def _searchable_lines(folder: int, name: str, limits: FileLimits) -> Iterator[tuple[int, str]]:
    """The lines of a text file for ``grep``: nothing for a file that is special, too large or binary."""
    try:
        opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return
    status = os.fstat(opened)
    if not stat.S_ISREG(status.st_mode) or status.st_size > limits.max_file_bytes:
        os.close(opened)
        return
    os.set_blocking(opened, True)
    with os.fdopen(opened, "rb") as file:
        if b"\x00" in file.peek(_SNIFF)[:_SNIFF]:
            return
        for number, (raw, _) in enumerate(_lines(file, limits.max_line_chars * 4), start=1):
            if b"\x00" in raw:
                return
            yield number, raw.decode("utf-8", "replace").rstrip("\r\n")


def _open_searched(target: WorkspacePath) -> int:
    try:
        return target.open_folder()
    except NotADirectoryError:
        raise NotADirectoryError(f"{target.shown} is a file, not a folder: use read to see it") from None
    except FileNotFoundError:
        raise FileNotFoundError(f"there is no folder {target.shown!r}: use list to see the folders") from None


def _describe(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return " (symlink)"
        if entry.is_dir(follow_symlinks=False):
            return "/"
        if entry.is_file(follow_symlinks=False):
            return f"  ({entry.stat(follow_symlinks=False).st_size} bytes)"
    except OSError:  # gone meanwhile
        return " (gone)"
    return " (device or special file)"


def _glob_regex(pattern: object) -> re.Pattern[str]:
    """A glob (``*``, ``**``, ``?``, ``[...]``) as a regular expression over ``/``-separated paths."""
    if not isinstance(pattern, str) or not pattern:
        raise ValueError("a glob pattern is text such as '**/*.py'")
    if "\x00" in pattern:
        raise PathRefused("a glob pattern cannot contain a NUL character")
    parts = pattern.split("/")
    if pattern.startswith("/") or ".." in parts:
        raise PathRefused(f"{pattern!r}: a glob is relative to the searched folder, without '..'")
    regex = ""
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            regex += ".*" if last else "(?:[^/]*/)*"
            continue
        regex += _glob_part(part) + ("" if last else "/")
    return re.compile(regex)


def _glob_part(part: str) -> str:
    out = ""
    index = 0
    while index < len(part):
        char = part[index]
        if char == "*":
            out += "[^/]*"
        elif char == "?":
            out += "[^/]"
        elif char == "[" and (end := part.find("]", index + 2)) != -1:
            inside = part[index + 1 : end]
            negated = inside.startswith("!")
            inside = inside[1:] if negated else inside
            out += "[" + ("^" if negated else "") + inside.replace("\\", "\\\\") + "]"
            index = end
        else:
            out += re.escape(char)
        index += 1
    return out


def _joined(base: str, relative: str) -> str:
    return relative if base == "." else f"{base}/{relative}"


def _left_out(total: int, shown: int) -> str:
    return f"\n[… {total - shown} more not shown]" if total > shown else ""


def _stopped(stopped: bool, limits: FileLimits) -> str:
    if not stopped:
        return ""
    return f"\n[the search stopped after {limits.max_scanned_files} files: narrow it with path]"
