"""The set-up scripts: ``main.sh`` runs the README's examples as the README says, and ``_venv.sh`` tells
what it is doing during the long first install, compiles llama.cpp for no particular CPU, checks once that
it runs (and compiles it again when it does not), installs the JavaScript clients the serve tests drive
(``npm ci``, once per lock), and stays silent and quick once installed.

No test sets anything up in the checkout: every script runs in a scratch copy of the project whose
``.venv/bin/python`` is a stand-in that logs how it was called and plays pip and the set-up's check of
llama.cpp (it fails loudly on any other call). Its "compile" prints build steps and then waits until the
test lets it finish, so a test sees the progress lines arrive while the install is still running. Its check
answers as the test tells it, in turn: runs, crashes (it kills itself with SIGSEGV), fails, finds a build
for one kind of CPU, or cannot run. Every script runs in a process group of its own, killed with everything
in it when the test ends, times out or is cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.model.openai_server import OpenAIServer, Reply, finish_chunk, text_chunk, tool_chunk

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60.0

BASELINE_X86 = (
    "-DGGML_NATIVE=OFF -DGGML_SSE42=ON -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON "
    "-DGGML_BMI2=ON -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF "
    "-DGGML_AMX_BF16=OFF"
)
CRASHED = "llama.cpp crashed (SIGSEGV) running the embedded model on this CPU"
REBUILDING = "removing pip's cached llama-cpp-python wheel and compiling it again with portable flags."
ONE_CPU = "llama.cpp runs here, but was compiled for one kind of CPU (AVX512, AMX_INT8 compiled in)"
RUNS = "llama.cpp runs on this CPU: the embedded model answered in 0.2 s\n"

FAKE_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for .venv/bin/python: logs each call; plays pip and the set-up's check of llama.cpp.
echo "$*" >> "$LOG"
case "$*" in
  "-c import llama_cpp") exit 1 ;;                            # not installed yet
  "-m pip cache list"*) [ -n "${CACHED_WHEEL:-}" ] && echo "/cache/llama_cpp_python-0.3.36.whl"; exit 0 ;;
  "-m pip cache remove llama_cpp_python" | "-m pip uninstall -qq -y llama-cpp-python") exit 0 ;;
  "-m pip install -v"*)
    echo "CMAKE_ARGS=$CMAKE_ARGS" >> "$LOG"
    echo "[1/3] Building C object ggml.c.o"
    echo "[2/3] Building CXX object llama.cpp.o"
    read -r _ < "$RELEASE"                                    # until the test lets the "compile" end
    exit "${PIP_STATUS:-0}" ;;
  "-m pip install -q"*) echo "CMAKE_ARGS=$CMAKE_ARGS" >> "$LOG"; exit 0 ;;
  "-m tests.notebook_runner"*) exit 0 ;;                     # scripts/notebooks.sh's last step
  "-m mkdocs "*) exit 0 ;;                                   # scripts/docs.sh's last step
  "-m rxagent.model.llama_check")
    # CHECKS: what each check finds, in turn ("crash,runs": the first crashes, the next ones run).
    IFS=, read -ra verdicts <<< "${CHECKS:-runs}"
    turn=$(grep -c '^-m rxagent.model.llama_check$' "$LOG")
    case "${verdicts[$((turn - 1))]:-runs}" in
      runs) echo "llama.cpp runs on this CPU: the embedded model answered in 0.2 s"; exit 0 ;;
      crash) echo "Fatal Python error: Segmentation fault" >&2; kill -SEGV $$ ;;
      fails) echo "llama.cpp failed: llama-cpp-python does not import"; exit 3 ;;
      cannot) echo "the check cannot run: model file not found: /nowhere.gguf"; exit 2 ;;
      one-cpu)
        echo "llama.cpp runs here, but was compiled for one kind of CPU (AVX512, AMX_INT8 compiled in)"
        exit 4 ;;
    esac ;;
esac
echo "the stand-in python was not expecting: $*" >&2
exit 99
"""


REAL_CHECK_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for .venv/bin/python that plays pip, but runs the set-up's check with the real interpreter.
echo "$*" >> "$LOG"
case "$*" in
  "-m rxagent.model.llama_check") exec "$REAL_PYTHON" "$@" ;;
  "-c import llama_cpp") exit 1 ;;
  "-m pip cache list"*) echo "/cache/llama_cpp_python-0.3.36.whl"; exit 0 ;;
  "-m pip install -q"*) exit 0 ;;
esac
echo "the stand-in python was not expecting: $*" >&2
exit 99
"""


def script_env(**extra: str) -> dict[str, str]:
    """This environment, without a ``CMAKE_ARGS`` that ``scripts/test.sh`` exported (the set-up would take
    it for the user's own), plus ``extra``."""
    env = {key: value for key, value in os.environ.items() if key != "CMAKE_ARGS"}
    return {**env, **extra}


@contextlib.asynccontextmanager
async def script_process(
    *args: str, cwd: Path, env: dict[str, str]
) -> AsyncIterator[asyncio.subprocess.Process]:
    """A script running in a process group of its own; leaving the block kills the group unless the
    script has ended (a timeout, a failed assertion, a cancelled test leave nothing behind)."""
    process = await asyncio.create_subprocess_exec(
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        # Only while the leader is unreaped: until then its id, the group's, cannot be anyone else's.
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()


async def finish(process: asyncio.subprocess.Process) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of ``process``; TimeoutError after TIMEOUT_S."""
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


def has_ended(pid: int) -> bool:
    """Whether process ``pid`` ends within TIMEOUT_S (a pidfd turns readable when it does: no polling)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], TIMEOUT_S)
        return bool(readable)
    finally:
        os.close(pidfd)


def group_members(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (from ``/proc/<pid>/stat``: pid (comm) state ppid pgrp …)."""
    members: list[int] = []
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            if int(stat_file.read_text().rsplit(")", 1)[1].split()[2]) == pgid:
                members.append(int(stat_file.parent.name))
    return members


def executable(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


class Project:
    """A scratch copy of the set-up: ``pyproject.toml``, ``scripts/`` and a stand-in ``.venv``.

    ``.venv/bin/rxagent`` is the real command line of this checkout (``python -m rxagent``); Chromium and
    bubblewrap, which the ``test`` extras want, are stand-ins too, so the set-up never reaches for apt.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "scripts").mkdir()
        for script in ("_venv.sh", "main.sh"):
            shutil.copy(ROOT / "scripts" / script, root / "scripts" / script)
        shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
        executable(root / ".venv" / "bin" / "python", FAKE_PYTHON)
        executable(
            root / ".venv" / "bin" / "rxagent", f'#!/bin/sh\nexec "{sys.executable}" -m rxagent "$@"\n'
        )
        self.chromium = root / "stand-ins" / "chromium"
        executable(self.chromium, "#!/bin/sh\nexit 0\n")
        self.bwrap = root / "stand-ins" / "bwrap"
        executable(self.bwrap, "#!/bin/sh\nexit 0\n")
        self.log = root / "calls.log"
        self.log.touch()
        self.release_fifo = root / "release"
        os.mkfifo(self.release_fifo)
        self.running: list[subprocess.Popen[str]] = []

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()

    def cmake_args(self) -> list[str]:
        """The CMAKE_ARGS of each install, in turn."""
        return [call.removeprefix("CMAKE_ARGS=") for call in self.calls() if call.startswith("CMAKE_ARGS=")]

    def checked(self) -> bool:
        return bool(list((self.root / ".venv").glob(".rxagent-installed-*-llama-checked")))

    def env(self, **env: str) -> dict[str, str]:
        return script_env(
            LOG=str(self.log),
            RELEASE=str(self.release_fifo),
            RXAGENT_PROGRESS_EVERY="0.1",
            RXAGENT_CHROMIUM=str(self.chromium),
            RXAGENT_BWRAP=str(self.bwrap),
            PYTHONPATH=str(ROOT),
            **env,
        )

    def on_machine(self, machine: str) -> None:
        """Make ``uname -m`` say ``machine`` to the scripts (a stand-in first on their PATH)."""
        executable(self.root / "stand-ins" / "uname", f"#!/bin/sh\necho {machine}\n")

    def set_up(self, extras: str, **env: str) -> SetUp:
        """Start ``source scripts/_venv.sh EXTRAS`` here."""
        environment = self.env(**env)
        environment["PATH"] = f"{self.root / 'stand-ins'}{os.pathsep}{environment['PATH']}"
        process = subprocess.Popen(
            ["bash", "-c", f"source scripts/_venv.sh {extras}"],
            cwd=self.root,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.running.append(process)
        return SetUp(process)

    def release(self) -> None:
        """Let the stand-in pip's "compile" end (fails if it never waits for that)."""

        def write() -> None:
            with self.release_fifo.open("w") as fifo:  # opens once the stand-in pip opens its end
                fifo.write("go\n")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(TIMEOUT_S)
        assert not writer.is_alive(), "the stand-in pip never waited to be released"

    def close(self) -> None:
        """Kill what is still running, with its process group."""
        for process in self.running:
            if process.poll() is None:  # unreaped: the group's id is still its own
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()


@pytest.fixture
def project(tmp_path: Path) -> Iterator[Project]:
    scratch = Project(tmp_path)
    try:
        yield scratch
    finally:
        scratch.close()


class SetUp:
    """A running set-up script whose stderr lines arrive on a queue, so every read has a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line)
        self.lines.put(None)

    def read_until(self, text: str) -> list[str]:
        """stderr lines up to the first that contains ``text``."""
        lines: list[str] = []
        while True:
            try:
                line = self.lines.get(timeout=TIMEOUT_S)
            except queue.Empty:
                pytest.fail(f"nothing for {TIMEOUT_S} s while waiting for {text!r}: {lines}")
            if line is None:
                pytest.fail(f"the set-up ended without printing {text!r}: {lines}")
            lines.append(line)
            if text in line:
                return lines

    def finish(self) -> tuple[int, str, str]:
        """Wait for the end: exit code, stdout, and the stderr not read yet (the project's teardown kills a
        set-up that outlives TIMEOUT_S, with its process group)."""
        code = self.process.wait(timeout=TIMEOUT_S)
        out = self.process.stdout.read() if self.process.stdout is not None else ""
        rest: list[str] = []
        while (line := self.lines.get(timeout=TIMEOUT_S)) is not None:
            rest.append(line)
        return code, out, "".join(rest)


# ---- main.sh -----------------------------------------------------------------------------------------


async def installed(project: Project) -> None:
    """Bring the scratch project to "installed and checked", through the set-up itself; then clear the log."""
    async with script_process(
        "bash", "-c", "source scripts/_venv.sh local", cwd=project.root, env=project.env(CACHED_WHEEL="1")
    ) as process:
        code, _, err = await finish(process)
    assert code == 0, err
    assert project.checked()
    project.log.write_text("")


async def test_the_readme_example_of_main_sh_calls_the_tool(project: Project, server: OpenAIServer) -> None:
    # `bash scripts/main.sh "What time is it in Oslo?" --tools clock`, as the README has it, on a server
    # scripted to answer the forced step with a clock call (the installed .venv satisfies the set-up).
    await installed(project)
    server.script(
        Reply.sse(
            tool_chunk(0, "call_1", "clock", '{"timezone": "Europe/Oslo"}'), finish_chunk("tool_calls")
        ),
        Reply.sse(text_chunk("It is noon in Oslo."), finish_chunk("stop")),
    )
    async with script_process(
        "bash", "scripts/main.sh", "What time is it in Oslo?", "--tools", "clock",
        "--base-url", server.base_url, "--model", "m",
        cwd=project.root, env=project.env(OPENAI_API_KEY="sk-test"),
    ) as process:  # fmt: skip
        code, out, err = await finish(process)

    assert code == 0, err
    first = server.requests[0].body
    assert first["tool_choice"] == "required"
    assert [t["function"]["name"] for t in first["tools"]] == ["clock"]
    assert "⚙ clock(" in out
    assert "installing" not in err
    assert project.calls() == []  # the installed .venv was used as it is: no pip, no check


async def test_main_sh_lets_the_model_choose_when_asked(project: Project, server: OpenAIServer) -> None:
    await installed(project)
    server.script(Reply.sse(text_chunk("Hello."), finish_chunk("stop")))
    async with script_process(
        "bash", "scripts/main.sh", "Hello", "--no-require-tool",
        "--base-url", server.base_url, "--model", "m",
        cwd=project.root, env=project.env(OPENAI_API_KEY="sk-test"),
    ) as process:  # fmt: skip
        code, _, err = await finish(process)

    assert code == 0, err
    assert server.requests[0].body.get("tool_choice") in (None, "auto")
    assert project.calls() == []


# ---- no process left behind --------------------------------------------------------------------------

LINGERING = ("bash", "-c", "sleep 300 & echo $!; wait")
"""A script whose child would outlive it: prints the child's id, then waits for it."""


async def run_lingering(cwd: Path, started: asyncio.Future[list[int]], wait_s: float) -> None:
    """Run LINGERING; once its child is known, give ``started`` both ids and wait ``wait_s`` for the end."""
    async with script_process(*LINGERING, cwd=cwd, env=script_env()) as process:
        assert process.stdout is not None
        started.set_result([process.pid, int(await process.stdout.readline())])
        await asyncio.wait_for(process.wait(), wait_s)  # it never ends by itself


async def test_a_script_that_times_out_is_killed_with_its_children(tmp_path: Path) -> None:
    started: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
    with pytest.raises(TimeoutError):
        await run_lingering(tmp_path, started, 0.05)

    assert all(has_ended(pid) for pid in started.result())


async def test_a_cancelled_script_is_killed_with_its_children(tmp_path: Path) -> None:
    started: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
    task = asyncio.create_task(run_lingering(tmp_path, started, TIMEOUT_S))
    ids = await asyncio.wait_for(asyncio.shield(started), TIMEOUT_S)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert all(has_ended(pid) for pid in ids)


def test_a_set_up_left_running_is_killed_with_its_children(project: Project) -> None:
    setting_up = project.set_up("local")  # its stand-in pip waits to be released: never, here
    setting_up.read_until("still installing")
    group = group_members(setting_up.process.pid)
    assert len(group) >= 3  # the set-up, its progress ticker, the stand-in pip

    project.close()  # what the fixture does when a test fails or times out

    assert setting_up.process.returncode == -signal.SIGKILL
    assert all(has_ended(pid) for pid in group)


# ---- _venv.sh: the install ---------------------------------------------------------------------------


def test_the_first_install_says_it_compiles_and_shows_progress(project: Project) -> None:
    setting_up = project.set_up("local")

    announced = setting_up.read_until("still installing")
    progress = announced[-1:] + setting_up.read_until("build step [2/3]")
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 0, rest
    first = announced[0]
    assert "compiles llama.cpp" in first
    assert "about 8 minutes on 2 cores" in first
    assert ".venv/pip-install.log" in first
    assert progress[0].startswith("  still installing: 0 min ")
    assert progress[-1].rstrip().endswith(", build step [2/3]")
    assert rest.startswith("installed in 0 min ")
    assert rest.endswith(f"\n{RUNS}")  # then llama.cpp is checked: one line
    assert "[2/3] Building CXX object" in (project.root / ".venv" / "pip-install.log").read_text()
    assert any(call.startswith("-m pip install -v -e .[local]") for call in project.calls())
    assert project.calls()[-1] == "-m rxagent.model.llama_check"
    assert list((project.root / ".venv").glob(".rxagent-installed-*-local"))
    assert project.checked()


def test_once_installed_the_set_up_is_silent_and_calls_nothing(project: Project) -> None:
    code, _, said = project.set_up("test", CACHED_WHEEL="1").finish()  # a cached wheel: no compile
    assert code == 0, said
    assert said == f"installing rxagent[test] into .venv\n{RUNS}"
    calls = project.calls()

    for extras in ("test", "local"):  # the test extras include the local ones
        assert project.set_up(extras).finish() == (0, "", "")
    assert project.calls() == calls


def test_the_test_set_up_installs_the_missing_test_programs_with_apt(project: Project) -> None:
    # Chromium (the browser tests) is there, bubblewrap (the sandbox tests) is not; the set-up runs as root.
    executable(project.root / "stand-ins" / "apt-get", '#!/bin/sh\necho "apt-get $*" >> "$LOG"\n')
    executable(project.root / "stand-ins" / "id", "#!/bin/sh\necho 0\n")
    project.bwrap.unlink()

    code, _, said = project.set_up("test", CACHED_WHEEL="1").finish()

    assert code == 0, said
    assert "installing bubblewrap (apt) for the browser and sandbox tests\n" in said
    apt = [call for call in project.calls() if call.startswith("apt-get")]
    assert apt == ["apt-get update -qq", "apt-get install -y -qq --no-install-recommends bubblewrap"]


NPM = """#!/bin/sh
# A stand-in for npm: logs where and how it was called; `ci` makes node_modules (or fails, when told to).
echo "npm $* in ${PWD#"$PROJECT"/}" >> "$LOG"
[ -n "${NPM_FAILS:-}" ] && { echo "npm ERR! 404 Not Found - ai@7.0.173" >&2; exit 1; }
mkdir -p node_modules
"""


def test_the_test_set_up_installs_each_javascript_client_with_npm_ci_once_per_lock(project: Project) -> None:
    client = project.root / "tests" / "serve" / "js_client"
    client.mkdir(parents=True)
    (client / "package-lock.json").write_text('{"lockfileVersion": 3}\n')
    executable(project.root / "stand-ins" / "npm", NPM)

    code, _, said = project.set_up("test", CACHED_WHEEL="1", PROJECT=str(project.root)).finish()
    assert code == 0, said
    assert "installing tests/serve/js_client's JavaScript packages (npm ci)\n" in said
    npm = ["npm ci --no-audit --no-fund --ignore-scripts --loglevel=error in tests/serve/js_client"]
    assert [c for c in project.calls() if c.startswith("npm")] == npm

    assert project.set_up("test", PROJECT=str(project.root)).finish() == (0, "", "")  # installed: quiet
    (client / "package-lock.json").write_text('{"lockfileVersion": 3, "packages": {}}\n')  # a new pin
    code, _, said = project.set_up("test", PROJECT=str(project.root)).finish()
    assert code == 0, said
    assert [c for c in project.calls() if c.startswith("npm")] == npm * 2


def test_a_javascript_client_that_cannot_be_installed_is_reported_and_the_set_up_goes_on(
    project: Project,
) -> None:
    client = project.root / "tests" / "serve" / "js_client"
    client.mkdir(parents=True)
    (client / "package-lock.json").write_text("{}\n")
    executable(project.root / "stand-ins" / "npm", NPM)

    code, _, said = project.set_up(
        "test", CACHED_WHEEL="1", PROJECT=str(project.root), NPM_FAILS="1"
    ).finish()
    assert code == 0, said
    assert "npm ERR! 404 Not Found - ai@7.0.173\n" in said
    assert "could not install tests/serve/js_client's packages (see .venv/npm-install.log)" in said
    assert not list(client.glob("node_modules/.rxagent-*"))  # not stamped: the next set-up tries again


def test_an_install_never_checked_is_checked_once(project: Project) -> None:
    # A .venv installed by a set-up older than the check: installed, never checked.
    assert project.set_up("local", CACHED_WHEEL="1").finish()[0] == 0
    for stamp in (project.root / ".venv").glob(".rxagent-installed-*-llama-checked"):
        stamp.unlink()
    project.log.write_text("")

    assert project.set_up("local").finish() == (0, "", RUNS)
    assert project.calls() == ["-m rxagent.model.llama_check"]
    assert project.set_up("local").finish() == (0, "", "")


def test_extras_without_llama_cpp_are_not_checked(project: Project) -> None:
    assert project.set_up("mcp").finish() == (0, "", "installing rxagent[mcp] into .venv\n")
    assert "-m rxagent.model.llama_check" not in project.calls()


def test_a_failed_compile_shows_the_end_of_the_log_and_fails(project: Project) -> None:
    setting_up = project.set_up("local", PIP_STATUS="3")

    setting_up.read_until("compiles llama.cpp")
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 3
    assert "[2/3] Building CXX object llama.cpp.o" in rest
    assert "the install failed (pip exited with 3); pip's whole output is in .venv/pip-install.log" in rest
    assert not list((project.root / ".venv").glob(".rxagent-installed-*"))  # the next run tries again
    assert "-m rxagent.model.llama_check" not in project.calls()


# ---- _venv.sh: the compile flags ---------------------------------------------------------------------


def test_llama_cpp_is_compiled_for_the_x86_64_baseline_not_for_this_cpu(project: Project) -> None:
    project.on_machine("x86_64")
    setting_up = project.set_up("local")
    setting_up.read_until("compiles llama.cpp")
    project.release()
    assert setting_up.finish()[0] == 0

    [flags] = project.cmake_args()
    assert BASELINE_X86 in flags  # AVX2, FMA, F16C, BMI2 on; AVX-512, AVX-VNNI, AMX off
    assert "march=native" not in flags
    assert "GGML_NATIVE=ON" not in flags
    assert "-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF" in flags


def test_on_other_machines_only_the_native_build_is_turned_off(project: Project) -> None:
    project.on_machine("aarch64")
    setting_up = project.set_up("local")
    setting_up.read_until("compiles llama.cpp")
    project.release()
    assert setting_up.finish()[0] == 0

    [flags] = project.cmake_args()
    assert flags.endswith("-DLLAMA_BUILD_SERVER=OFF -DGGML_NATIVE=OFF")
    assert "AVX" not in flags
    assert "SSE" not in flags


def test_your_cmake_args_come_after_the_portable_ones(project: Project) -> None:
    project.on_machine("x86_64")
    setting_up = project.set_up("local", CMAKE_ARGS="-DGGML_NATIVE=ON -DGGML_CUDA=ON")
    setting_up.read_until("compiles llama.cpp")
    project.release()
    assert setting_up.finish()[0] == 0

    [flags] = project.cmake_args()
    assert flags.startswith("-DLLAMA_BUILD_EXAMPLES=OFF")
    assert flags.endswith(f"{BASELINE_X86} -DGGML_NATIVE=ON -DGGML_CUDA=ON")  # cmake keeps the last value


# ---- _venv.sh: the check of llama.cpp ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("found", "says"),
    [
        ("crash", CRASHED),
        ("fails", "llama.cpp failed: llama-cpp-python does not import (details in .venv/llama-check.log)"),
        ("one-cpu", ONE_CPU),
    ],
)
def test_a_wheel_that_does_not_suit_this_cpu_is_compiled_again(
    project: Project, found: str, says: str
) -> None:
    # pip's cache holds the wheel (built earlier, for another CPU): the install takes it without compiling.
    project.on_machine("x86_64")
    setting_up = project.set_up("local", CACHED_WHEEL="1", CHECKS=f"{found},runs")

    said = setting_up.read_until("compiles llama.cpp")
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 0, rest
    assert said[:2] == ["installing rxagent[local] into .venv\n", f"{says}: {REBUILDING}\n"]
    assert rest.endswith(RUNS)
    assert "Segmentation fault" not in "".join(said) + rest  # bash's own line is kept out
    assert [call for call in project.calls() if not call.startswith("CMAKE_ARGS=")] == [
        "-c import llama_cpp",
        "-m pip cache list llama_cpp_python* --format=abspath",
        "-m pip install -q -e .[local]",
        "-m rxagent.model.llama_check",
        "-m pip cache remove llama_cpp_python",
        "-m pip uninstall -qq -y llama-cpp-python",
        "-m pip install -v -e .[local]",
        "-m rxagent.model.llama_check",
    ]
    assert BASELINE_X86 in project.cmake_args()[-1]
    assert project.checked()


@pytest.mark.llm
def test_the_set_up_accepts_the_real_build_of_this_checkout(project: Project) -> None:
    # The real check (the embedded model, one token) through the set-up; only pip is a stand-in.
    executable(project.root / ".venv" / "bin" / "python", REAL_CHECK_PYTHON)
    code, _, said = project.set_up("local", REAL_PYTHON=sys.executable).finish()

    assert code == 0, said
    assert re.fullmatch(
        r"installing rxagent\[local\] into \.venv\n"
        r"llama\.cpp runs on this CPU: the embedded model answered in \d+\.\d s\n",
        said,
    )
    assert project.checked()
    assert "CPU : " in (project.root / ".venv" / "llama-check.log").read_text()


def test_a_rebuild_that_crashes_too_says_what_to_run_and_fails(project: Project) -> None:
    project.on_machine("x86_64")
    setting_up = project.set_up("local", CACHED_WHEEL="1", CHECKS="crash,crash")

    setting_up.read_until(REBUILDING)
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 1
    assert rest.splitlines()[-4:] == [
        f"{CRASHED}, even compiled with portable flags.",
        "To see where: .venv/bin/python -X faulthandler -m rxagent.model.llama_check",
        "If this CPU lacks AVX2 (older than Intel Haswell or AMD Excavator), compile for x86-64-v2:",
        "  CMAKE_ARGS='-DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF' "
        "bash scripts/main.sh",
    ]
    assert not project.checked()  # the next set-up checks again
    assert "Fatal Python error" in (project.root / ".venv" / "llama-check.log").read_text()


def test_what_to_run_names_your_cmake_args_and_the_test_script(project: Project) -> None:
    project.on_machine("aarch64")
    setting_up = project.set_up("test", CACHED_WHEEL="1", CHECKS="crash,crash", CMAKE_ARGS="-DGGML_LTO=ON")

    setting_up.read_until(REBUILDING)
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 1
    assert rest.splitlines()[-3:] == [
        f"{CRASHED}, even compiled with portable flags.",
        "To see where: .venv/bin/python -X faulthandler -m rxagent.model.llama_check",
        "Your CMAKE_ARGS (-DGGML_LTO=ON) were part of that build; without them: env -u CMAKE_ARGS "
        "bash scripts/test.sh",
    ]


def test_a_build_for_one_cpu_is_kept_when_your_cmake_args_asked_for_it(project: Project) -> None:
    code, _, said = project.set_up(
        "local", CACHED_WHEEL="1", CHECKS="one-cpu", CMAKE_ARGS="-DGGML_NATIVE=ON"
    ).finish()

    assert code == 0, said
    assert said == (f"installing rxagent[local] into .venv\n{ONE_CPU}\n")
    assert "-m pip cache remove llama_cpp_python" not in project.calls()
    assert project.checked()


def test_a_check_that_cannot_run_fails_without_a_rebuild(project: Project) -> None:
    code, _, said = project.set_up("local", CACHED_WHEEL="1", CHECKS="cannot").finish()

    assert code == 1
    assert said.endswith(
        "the set-up's check of the embedded model could not run (exit status 2): "
        "the check cannot run: model file not found: /nowhere.gguf\n"
    )
    assert "-m pip cache remove llama_cpp_python" not in project.calls()
    assert not project.checked()
