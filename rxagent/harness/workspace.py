"""The workspace: the folder an agent works in, and the confinement every file tool goes through.

A :class:`Workspace` is a root folder and a choice: one folder per session below it
(``per_session=True``: ``root/<session>-<hash>``), or the root itself, shared by every session. The first
time a run asks for its folder (:meth:`Workspace.folder_for`) the folder is made and **recorded in the
session** (``state.extras["workspace"]``), so the session keeps it: a resumed session, in this process or
another, finds the same folder even if the workspace is set up with another root later.

**Confinement.** :meth:`Workspace.resolve` turns a path the model wrote into a :class:`WorkspacePath`, or
refuses it with :class:`PathRefused`:

- a path that is not text, has a NUL character, or is longer than the system allows (``PATH_MAX`` for the
  whole, ``NAME_MAX`` for a part);
- ``..`` in any position (``../x``, ``a/../b``, ``a/..``), even one that would stay inside;
- an absolute path outside the folder;
- a path whose canonical form (every symlink resolved, ``os.path.realpath``) is outside the folder: a
  symlink pointing out, a path through a symlinked folder that points out. A symlink that stays inside is
  followed.

The check is on the canonical path, and opening goes down that canonical path one part at a time from the
folder's own descriptor with ``O_NOFOLLOW``, so a folder swapped for a symlink between the check and the
open is refused too, never followed. Only regular files are opened: a device, a FIFO or a socket is
refused before anything opens it (and a FIFO raced in is opened non-blocking, then refused).

**Mounts.** :meth:`Workspace.mount` shows another folder, read-only, under a virtual prefix (the skills
mount each skill's folder as ``skills/<name>``): ``read``, ``list``, ``glob`` and ``grep`` reach it with
the same confinement (to the mounted folder), ``write`` and ``edit`` refuse it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from rxagent.context import RunContext, RuntimeContext, run_context_of
from rxagent.harness._ids import parent_session_of
from rxagent.state import DEFAULT_SESSION
from rxagent.tools import ToolContext

__all__ = [
    "NAME_MAX",
    "PATH_MAX",
    "WORKSPACE_KEY",
    "FileKind",
    "Mount",
    "PathRefused",
    "Workspace",
    "WorkspacePath",
]

WORKSPACE_KEY = "workspace"
"""The key of ``AgentState.extras`` the session's folder is recorded under: ``{"folder": "/abs/path"}``."""


def _limit(name: str, fallback: int) -> int:
    try:
        value = os.pathconf("/", name)
    except (OSError, ValueError, AttributeError):  # not POSIX, or the system does not say
        return fallback
    return value if value > 0 else fallback


PATH_MAX = _limit("PC_PATH_MAX", 4096)
"""The longest path the system opens, in bytes (4096 on Linux)."""
NAME_MAX = _limit("PC_NAME_MAX", 255)
"""The longest name of one file or folder, in bytes (255 on Linux)."""

_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
_MAX_DEPTH = 100
"""How deep :meth:`WorkspacePath.walk` goes below the folder it starts from."""


class PathRefused(PermissionError):
    """A path the file tools do not use: outside the workspace, through ``..``, too long, with a NUL
    character, a device or other special file, or read-only. The message says why, for the model."""


@dataclass(frozen=True, slots=True)
class Mount:
    """A folder shown read-only inside every workspace under a virtual ``prefix`` (``skills/pdf``).

    Attributes:
        prefix: the path it appears at, relative, ``/``-separated, without ``.`` or ``..``.
        folder: the canonical folder it shows.
        when: shown only in runs for which ``when(ctx)`` is true (``None``: always), e.g. once a skill was
            loaded in the session.
    """

    prefix: str
    folder: Path
    when: Callable[[RuntimeContext], bool] | None = None

    @property
    def parts(self) -> tuple[str, ...]:
        """The prefix's parts."""
        return tuple(self.prefix.split("/"))


class Workspace:
    """The folder an agent works in: one per session below ``root``, or ``root`` shared by every session.

    Args:
        root: the folder (made when first used). Relative to the working directory of this moment.
        per_session: each session gets a folder of its own below ``root`` (``True``), or every session
            works in ``root`` itself (``False``).

    Example:
        >>> workspace = Workspace("work/", per_session=True)  # doctest: +SKIP
        >>> folder = workspace.folder_for(ctx)   # work/<session>-<hash>, recorded in the session
        >>> target = workspace.resolve("notes/todo.md", ctx)  # confined, or PathRefused
    """

    def __init__(self, root: str | os.PathLike[str], *, per_session: bool = True) -> None:
        text = os.fspath(root)
        if not isinstance(text, str) or not text or "\x00" in text:  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ValueError(f"a workspace root must be a folder's path, got {root!r}")
        self.root = Path(os.path.realpath(text))
        """The canonical root folder."""
        self.per_session = per_session
        """Whether each session has a folder of its own below :attr:`root`."""
        self._mounts: tuple[Mount, ...] = ()

    def __repr__(self) -> str:
        return f"Workspace({str(self.root)!r}, per_session={self.per_session})"

    # ---- the folder of a run -------------------------------------------------------------------------

    def folder_for(self, ctx: RuntimeContext | ToolContext[object]) -> Path:
        """The canonical folder the run of ``ctx`` works in, made if missing, and recorded in its session.

        ``ctx`` is a run's :class:`~rxagent.context.RunContext` (what middleware gets), a tool's
        :class:`~rxagent.tools.ToolContext`, or a caller's plain context (then nothing is recorded). A
        session that recorded a folder keeps it, whatever this workspace's root is now; otherwise the
        folder is :attr:`root` (shared) or ``root/<session>-<hash>`` (per session: the session id made
        safe for a file name, and a hash of the user and session ids, so two sessions never share one; a
        background task's session works in the folder of the session that started it).

        Call it on the event loop's thread: recording writes the session's state, which the run's
        recorder reads there.
        """
        runtime = ctx.runtime if isinstance(ctx, ToolContext) else ctx
        run = run_context_of(runtime)
        recorded = _recorded_folder(run)
        folder = recorded or self._folder_of(runtime)
        folder.mkdir(parents=True, exist_ok=True)
        folder = Path(os.path.realpath(folder))
        if run is not None and run.state is not None and recorded != folder:
            run.state.extras[WORKSPACE_KEY] = {"folder": str(folder)}
        return folder

    def _folder_of(self, ctx: RuntimeContext) -> Path:
        if not self.per_session:
            return self.root
        # A background task works in the folder of the session that started it (its files are the
        # parent's to read back), not in one of its own.
        session = parent_session_of(ctx.session_id or DEFAULT_SESSION)
        key = f"{ctx.user_id or ''}\x00{session}".encode()
        readable = _UNSAFE_NAME.sub("_", session).strip("._")[:48] or "session"
        return self.root / f"{readable}-{hashlib.sha256(key).hexdigest()[:10]}"

    # ---- mounts --------------------------------------------------------------------------------------

    def mount(
        self,
        prefix: str,
        folder: str | os.PathLike[str],
        *,
        when: Callable[[RuntimeContext], bool] | None = None,
    ) -> Mount:
        """Show ``folder`` read-only under ``prefix`` in every run's workspace (for which ``when(ctx)``).

        The file tools reach it as ``prefix/...`` (confined to ``folder``); ``write`` and ``edit`` refuse it.
        The mount hides whatever the workspace itself has at ``prefix``.

        Raises:
            ValueError: ``prefix`` is not a plain relative path (empty, absolute, ``.`` or ``..`` parts, a
                NUL character), is taken already, or ``folder`` is not a folder.
        """
        parts = [part for part in prefix.split("/") if part not in ("", ".")]
        if not parts or prefix.startswith("/") or ".." in parts or "\x00" in prefix:
            raise ValueError(f"a mount's prefix is a relative path without '..', got {prefix!r}")
        real = Path(os.path.realpath(folder))
        if not real.is_dir():
            raise ValueError(f"cannot mount {str(folder)!r}: it is not a folder")
        made = Mount("/".join(parts), real, when)
        if any(existing.prefix == made.prefix for existing in self._mounts):
            raise ValueError(f"something is mounted at {made.prefix!r} already")
        # Copy-on-write: runs in flight read the tuple they started with.
        self._mounts = (*self._mounts, made)
        return made

    @property
    def mounts(self) -> tuple[Mount, ...]:
        """Every mount, in the order they were made."""
        return self._mounts

    def mounts_for(self, ctx: RuntimeContext | ToolContext[object]) -> tuple[Mount, ...]:
        """The mounts the run of ``ctx`` sees."""
        runtime = ctx.runtime if isinstance(ctx, ToolContext) else ctx
        return tuple(m for m in self._mounts if m.when is None or m.when(runtime))

    # ---- confinement ---------------------------------------------------------------------------------

    def resolve(
        self, path: str, ctx: RuntimeContext | ToolContext[object], *, write: bool = False
    ) -> WorkspacePath:
        """The confined, canonical form of ``path`` (relative to the run's folder, or absolute inside it).

        Args:
            path: what the model wrote; ``""`` and ``"."`` name the folder itself.
            ctx: the run's (or the tool's) context, for its folder and mounts.
            write: the path is to be written: a mounted (read-only) path is refused.

        Raises:
            PathRefused: the path may not be used (see the module's list); nothing was touched.
        """
        folder = self.folder_for(ctx)
        parts = _checked_parts(path, folder)
        shown = "/".join(parts) or "."
        mounts = self.mounts_for(ctx)
        mounted = max(
            (m for m in mounts if parts[: len(m.parts)] == m.parts), key=lambda m: len(m.parts), default=None
        )
        base, below = (mounted.folder, parts[len(mounted.parts) :]) if mounted else (folder, parts)
        if mounted is not None and write:
            raise PathRefused(f"{shown!r} is read-only: {mounted.prefix}/ is mounted for reading only")
        real = os.path.realpath(os.path.join(base, *below)) if below else str(base)
        if not _inside(real, base):
            where = "the workspace" if mounted is None else f"{mounted.prefix}/"
            raise PathRefused(f"{shown!r} leads outside {where} (through a symlink): it is not used")
        canonical = Path(real).relative_to(base).parts
        nested = tuple(
            (m.prefix, m.folder)
            for m in mounts
            if m is not mounted and len(m.parts) > len(parts) and m.parts[: len(parts)] == parts
        )
        return WorkspacePath(shown, base, canonical, mounted is not None, nested)


def _recorded_folder(run: RunContext[object] | None) -> Path | None:
    if run is None or run.state is None:
        return None
    recorded = run.state.extras.get(WORKSPACE_KEY)
    if isinstance(recorded, dict):
        folder = recorded.get("folder")
        if isinstance(folder, str) and folder.startswith("/") and "\x00" not in folder:
            return Path(folder)
    return None


def _inside(real: str, base: Path) -> bool:
    return real == str(base) or real.startswith(str(base).rstrip("/") + "/")


def _checked_parts(path: object, folder: Path) -> tuple[str, ...]:
    """``path``'s parts relative to ``folder``, after the checks that need no file system."""
    if not isinstance(path, str):
        raise PathRefused(f"a path must be text, got {type(path).__name__}")
    if "\x00" in path:
        raise PathRefused("a path cannot contain a NUL character")
    size = len(path.encode("utf-8", "surrogateescape"))
    if size >= PATH_MAX:
        raise PathRefused(f"the path is {size} bytes long; the system's limit is {PATH_MAX - 1}")
    raw = path.split("/")
    if ".." in raw:
        raise PathRefused(f"{path!r}: '..' is not allowed in a path; name the file from the workspace down")
    too_long = next((part for part in raw if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX), None)
    if too_long is not None:
        raise PathRefused(f"{path!r}: a name is longer than the system's limit of {NAME_MAX} bytes")
    parts = tuple(part for part in raw if part not in ("", "."))
    if path.startswith("/"):
        # An absolute path is used only when it names something inside the folder, as written.
        text = "/" + "/".join(parts)
        if not _inside(text, folder):
            raise PathRefused(f"{path!r} is outside the workspace; use a path relative to it")
        return Path(text).relative_to(folder).parts
    return parts


FileKind = Literal["file", "folder", "missing", "special"]
"""What a path names: a regular file, a folder, nothing, or a device, FIFO, socket or dangling link."""


@dataclass(frozen=True, slots=True)
class WorkspacePath:
    """A path the file tools may use, confined and canonical (from :meth:`Workspace.resolve`).

    Its ``open_*`` methods go down :attr:`parts` from :attr:`base`'s own descriptor with ``O_NOFOLLOW``,
    so a symlink swapped in after the check is refused rather than followed.

    Attributes:
        shown: the path as the model names it (``"."``: the folder itself).
        base: the canonical folder it is confined to (the run's folder, or a mount's).
        parts: its canonical parts below :attr:`base` (no symlink among them when it was resolved).
        read_only: it is inside a mount.
        mounts: the mounts below it, as ``(shown prefix, folder)`` (what ``list``, ``glob`` and ``grep``
            of a folder show besides its own contents).
    """

    shown: str
    base: Path
    parts: tuple[str, ...]
    read_only: bool = False
    mounts: tuple[tuple[str, Path], ...] = ()

    @property
    def real(self) -> Path:
        """The canonical absolute path."""
        return self.base.joinpath(*self.parts)

    def kind(self) -> FileKind:
        """What the path names now (without following a symlink)."""
        try:
            mode = os.lstat(self.real).st_mode
        except FileNotFoundError:
            return "missing"
        except NotADirectoryError:
            return "missing"
        if stat.S_ISREG(mode):
            return "file"
        return "folder" if stat.S_ISDIR(mode) else "special"

    def open_folder(self, *, create: bool = False) -> int:
        """A descriptor of the path as a folder (the caller closes it); ``create`` makes missing folders.

        Raises:
            FileNotFoundError: it does not exist (and ``create`` is false).
            NotADirectoryError: it, or a folder on its way, is a file.
            PathRefused: it, or a folder on its way, is a symlink, a device or another special file.
        """
        descriptor = os.open(self.base, _DIRECTORY_FLAGS)
        try:
            for part in self.parts:
                child = self._open_part(descriptor, part, create=create)
                os.close(descriptor)
                descriptor = child
        except BaseException:
            os.close(descriptor)
            raise
        return descriptor

    def _open_part(self, descriptor: int, part: str, *, create: bool) -> int:
        try:
            return os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
        except FileNotFoundError:
            if not create:
                missing = f"{self.shown!r} does not exist (there is no {part!r} on its way)"
                raise FileNotFoundError(missing) from None
            with contextlib.suppress(FileExistsError):
                os.mkdir(part, 0o777, dir_fd=descriptor)
            with contextlib.suppress(OSError):
                return os.open(part, _DIRECTORY_FLAGS, dir_fd=descriptor)
        except OSError:
            pass  # a symlink (ELOOP) or a file (ENOTDIR): told apart below
        mode = os.stat(part, dir_fd=descriptor, follow_symlinks=False).st_mode
        if stat.S_ISREG(mode):
            raise NotADirectoryError(f"{self.shown!r}: {part!r} is a file, not a folder")
        if stat.S_ISLNK(mode):
            raise PathRefused(f"{self.shown!r}: {part!r} became a symlink while it was opened; not followed")
        raise PathRefused(f"{self.shown!r}: {part!r} is a device or special file, not a folder")

    def open_parent(self, *, create: bool = False) -> tuple[int, str]:
        """A descriptor of the folder holding the path, and the path's last name (the caller closes it).

        Raises:
            IsADirectoryError: the path is the folder itself (of the workspace, or of a mount).
            PathRefused: a folder on its way is a symlink or special file.
            FileNotFoundError, NotADirectoryError: as for :meth:`open_folder`.
        """
        if not self.parts:
            raise IsADirectoryError(f"{self.shown!r} is a folder, not a file: use list to see what it holds")
        parent = WorkspacePath(self.shown, self.base, self.parts[:-1], self.read_only)
        return parent.open_folder(create=create), self.parts[-1]

    def open_file(self) -> io.BufferedReader:
        """The path's regular file, open for reading in binary (the caller closes it).

        Raises:
            FileNotFoundError: nothing is there.
            IsADirectoryError: it is a folder.
            PathRefused: it is a device, FIFO, socket or symlink, or a folder on its way is one.
        """
        descriptor, name = self.open_parent()
        try:
            return self.open_in(descriptor, name)
        finally:
            os.close(descriptor)

    def open_in(self, folder: int, name: str) -> io.BufferedReader:
        """The regular file ``name`` of the open ``folder`` (this path's parent), open for reading in binary.

        Raises:
            FileNotFoundError, IsADirectoryError, PathRefused: as for :meth:`open_file`.
        """
        self.check_file(folder, name)
        try:
            # Non-blocking: a FIFO raced in after the check does not hang the open (and is refused below).
            opened = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
        except OSError as error:
            raise PathRefused(f"{self.shown!r} cannot be opened as a file: {error.strerror}") from None
        if not stat.S_ISREG(os.fstat(opened).st_mode):
            os.close(opened)
            raise PathRefused(f"{self.shown!r} is not a regular file")
        os.set_blocking(opened, True)
        return os.fdopen(opened, "rb")

    def check_file(self, folder: int, name: str, *, missing_ok: bool = False) -> os.stat_result | None:
        """The status of ``name`` in the open ``folder`` when it is a regular file (``None``: nothing is
        there and ``missing_ok``).

        Raises:
            FileNotFoundError: nothing is there.
            IsADirectoryError: it is a folder.
            PathRefused: it is a device, FIFO, socket or symlink.
        """
        try:
            status = os.stat(name, dir_fd=folder, follow_symlinks=False)
        except FileNotFoundError:
            if missing_ok:
                return None
            raise FileNotFoundError(f"there is no file {self.shown!r}") from None
        mode = status.st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(f"{self.shown!r} is a folder, not a file: use list to see what it holds")
        if stat.S_ISLNK(mode):
            raise PathRefused(f"{self.shown!r} became a symlink while it was opened: it is not followed")
        if not stat.S_ISREG(mode):
            raise PathRefused(f"{self.shown!r} is a device or special file: only regular files are used")
        return status

    def walk(self, folder: int) -> Iterator[tuple[str, int, str]]:
        """Every regular file below the open ``folder`` (this path's), depth first in name order:
        ``(path relative to this one, descriptor of its folder, name)``; the descriptor is valid until the
        next item. Symlinks and special files are left out, and so are folders more than 100 levels down.

        Folders are opened one level at a time with ``O_NOFOLLOW`` (one descriptor per level held), so a
        folder swapped for a symlink during the walk is left out, never followed.
        """
        stack: list[tuple[str, int, list[str]]] = []  # (prefix, descriptor, folders still to visit)
        try:
            current: tuple[str, int] | None = ("", os.dup(folder))
            while current is not None:
                prefix, descriptor = current
                stack.append((prefix, descriptor, []))  # held before anything is yielded: closed on exit
                with os.scandir(descriptor) as entries:
                    listed = sorted(entries, key=lambda e: e.name)
                folders: list[str] = []
                for entry in listed:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.name)
                    elif entry.is_file(follow_symlinks=False):
                        yield prefix + entry.name, descriptor, entry.name
                if len(stack) <= _MAX_DEPTH:
                    stack[-1] = (prefix, descriptor, folders[::-1])
                current = None
                while stack and current is None:
                    prefix, descriptor, waiting = stack[-1]
                    if not waiting:
                        os.close(descriptor)
                        stack.pop()
                        continue
                    name = waiting.pop()
                    with contextlib.suppress(OSError):  # gone, or swapped for a symlink: left out
                        current = (f"{prefix}{name}/", os.open(name, _DIRECTORY_FLAGS, dir_fd=descriptor))
        finally:
            for _, descriptor, _ in stack:
                os.close(descriptor)
