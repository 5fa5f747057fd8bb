"""Who holds a session's lease, named so that a keeper on the same machine can tell the holder is gone.

A lease names its owner. A keeper's default owner is a :class:`ProcessOwner`, written
``host:pid:n@machine:started``: the host name and process id (for people reading it), the keeper's number
in its process, the *machine* — the kernel's boot id and the process-id namespace, which together say in
which space the process id is numbered — and the process's start time (clock ticks after boot, field 22
of ``/proc/PID/stat``).

A lease outlives its process when the process is killed: another owner would wait until it expires
(30 s by default). A keeper that finds a session held by an owner of *its own machine* whose process is
gone releases that lease at once instead (:meth:`ProcessOwner.gone`). The process is gone when
``/proc/PID`` does not exist, when it is a zombie (killed, not yet reaped by its parent), or when the
process under that id started at another time (the id was reused). Owners of other machines (another
host, another container's process-id namespace, the same host after a reboot) are never judged: their
leases expire as before. Where ``/proc`` cannot tell (not Linux, or a ``/proc`` of another namespace), a
keeper names itself ``host:pid:n`` and judges nobody.
"""

from __future__ import annotations

import functools
import os
import re
import socket
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ProcessOwner", "owner_gone", "this_machine"]

_PROC = Path("/proc")

_FORMAT = re.compile(r"(?P<host>.*):(?P<pid>\d+):(?P<n>\d+)@(?P<machine>[0-9a-f]+\.\d+):(?P<started>\d+)")


@dataclass(frozen=True, slots=True)
class ProcessOwner:
    """A lease owner that is a process on a known machine (see the module).

    Attributes:
        host: the host name (for people reading it: the machine decides).
        pid: the process id.
        instance: the keeper's number in its process.
        machine: the boot id and process-id namespace the pid is numbered in.
        started: the process's start time, in clock ticks after boot.
    """

    host: str
    pid: int
    instance: int
    machine: str
    started: int

    def __str__(self) -> str:
        return f"{self.host}:{self.pid}:{self.instance}@{self.machine}:{self.started}"

    @classmethod
    def parse(cls, owner: str) -> ProcessOwner | None:
        """The owner ``owner`` names, or ``None``: it is not a process owner (a name a user chose, or one
        written where ``/proc`` could not tell)."""
        match = _FORMAT.fullmatch(owner)
        if match is None:
            return None
        return cls(match["host"], int(match["pid"]), int(match["n"]), match["machine"], int(match["started"]))

    @classmethod
    def this_process(cls, instance: int) -> ProcessOwner | None:
        """This process as keeper number ``instance``, or ``None`` where ``/proc`` cannot tell."""
        machine = this_machine()
        if machine is None:
            return None
        pid = os.getpid()
        stat = _stat(pid)  # readable: this_machine() read it
        if stat is None:
            return None
        return cls(socket.gethostname(), pid, instance, machine, stat[1])

    def gone(self) -> bool:
        """Whether this owner's process is known to be gone: it ran on this machine, and its process
        ended, is a zombie, or its id now belongs to a process that started at another time. ``False``
        whenever that cannot be known (another machine, ``/proc`` unreadable)."""
        if self.machine != this_machine():
            return False
        try:
            stat = _stat(self.pid)
        except (OSError, ValueError, IndexError):  # not readable: nothing is known, so it is not gone
            return False
        if stat is None:
            return True
        state, started = stat
        return state in ("Z", "X", "x") or started != self.started


def owner_gone(owner: str) -> bool:
    """Whether the lease owner ``owner`` is a process of this machine that is gone (see
    :meth:`ProcessOwner.gone`); ``False`` for any other owner."""
    parsed = ProcessOwner.parse(owner)
    return parsed is not None and parsed.gone()


@functools.cache
def this_machine() -> str | None:
    """The boot id and process-id namespace this process's ids are numbered in (``None``: unknown)."""
    try:
        boot = (_PROC / "sys/kernel/random/boot_id").read_text().strip().replace("-", "")
        namespace = os.readlink(_PROC / "self/ns/pid")  # "pid:[4026531836]"
        # A /proc mounted for another namespace would name other processes: check it names this one.
        stat = _stat(os.getpid())
    except (OSError, ValueError, IndexError):
        return None
    inode = namespace.rpartition("[")[2].rstrip("]")
    if not re.fullmatch(r"[0-9a-f]{16,}", boot) or not inode.isdigit() or stat is None:
        return None
    return f"{boot[:16]}.{inode}"


def _stat(pid: int) -> tuple[str, int] | None:
    """Process ``pid``'s state letter and start time, or ``None``: no such process.

    Raises:
        OSError: ``/proc`` could not be read (other than the process being gone).
    """
    try:
        raw = (_PROC / str(pid) / "stat").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) is in parentheses and may hold anything, spaces and parentheses too.
    fields = raw[raw.rindex(b")") + 2 :].split()
    return fields[0].decode("ascii", "replace"), int(fields[19])
