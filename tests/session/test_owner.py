"""Lease owners named after their process: telling that an owner of this machine is gone.

Real processes only: this test process, a child killed and reaped, a child killed and not reaped yet (a
zombie). Bad inputs tried: owner names that are not process owners (a name a user chose, the old
``host:pid:n`` form, a malformed one), an owner of another machine, a process id reused by a process that
started at another time, and a process id no process has.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import replace

import pytest

from rxagent.session import SessionKeeper
from rxagent.session.in_process import MemoryStore
from rxagent.session.owner import ProcessOwner, owner_gone, this_machine


@pytest.fixture
def me() -> ProcessOwner:
    owner = ProcessOwner.this_process(7)
    assert owner is not None, "this test machine has a /proc that tells processes apart"
    return owner


def test_an_owner_name_reads_back_as_the_owner_it_names(me: ProcessOwner) -> None:
    assert (me.pid, me.instance, me.machine) == (os.getpid(), 7, this_machine())
    assert ProcessOwner.parse(str(me)) == me
    assert str(me).startswith(f"{me.host}:{os.getpid()}:7@")


def test_a_keeper_is_named_after_its_process(me: ProcessOwner) -> None:
    named = ProcessOwner.parse(SessionKeeper(MemoryStore()).owner)
    assert named is not None
    assert (named.pid, named.machine, named.started) == (me.pid, me.machine, me.started)
    assert SessionKeeper(MemoryStore(), owner="my-service").owner == "my-service"


@pytest.mark.parametrize("name", ["my-service", "host:123:1", "host:123:1@zz.1:5", "", "@:1:2"])
def test_names_that_are_not_process_owners_are_never_judged_gone(name: str) -> None:
    assert ProcessOwner.parse(name) is None
    assert not owner_gone(name)


def test_a_live_process_is_not_gone(me: ProcessOwner) -> None:
    assert not me.gone()
    assert not owner_gone(str(me))


def test_a_reused_process_id_is_gone(me: ProcessOwner) -> None:
    # The id is this process's, but the owner's process started at another time: it ended long ago.
    assert replace(me, started=me.started - 1).gone()


def test_an_owner_of_another_machine_is_never_judged(me: ProcessOwner) -> None:
    elsewhere = replace(me, machine="0123456789abcdef.4026531836", pid=2**22 + 1)
    assert not elsewhere.gone()  # its pid is numbered in another space: nothing is known here


def test_a_killed_process_is_gone_before_and_after_it_is_reaped(me: ProcessOwner) -> None:
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        with open(f"/proc/{child.pid}/stat", "rb") as stat:
            started = int(stat.read().rsplit(b")", 1)[1].split()[19])
        owner = replace(me, pid=child.pid, started=started)
        assert not owner.gone()
        os.kill(child.pid, signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped: a zombie
        with open(f"/proc/{child.pid}/stat", "rb") as stat:
            assert stat.read().rsplit(b")", 1)[1].split()[0] == b"Z"
        assert owner.gone()
    finally:
        child.kill()
        child.wait()
    assert owner.gone()  # reaped: no such process


def test_a_process_id_no_process_has_is_gone(me: ProcessOwner) -> None:
    with open("/proc/sys/kernel/pid_max") as pid_max:
        unused = next(
            pid for pid in range(int(pid_max.read()) - 1, 1, -1) if not os.path.exists(f"/proc/{pid}")
        )
    assert replace(me, pid=unused).gone()
