"""The set-up scripts: ``main.sh`` runs the README's examples as the README says, and ``_venv.sh`` tells
what it is doing during the long first install and stays silent and quick once installed.

``_venv.sh`` is tested in a scratch project whose ``.venv/bin/python`` is a stand-in that logs how it was
called and plays pip: its "compile" prints build steps and then waits until the test lets it finish, so
the test sees the progress lines arrive while the install is still running.
"""

from __future__ import annotations

import asyncio
import os
import queue
import shutil
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from tests.model.openai_server import OpenAIServer, Reply, finish_chunk, text_chunk, tool_chunk

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 60.0


async def test_the_readme_example_of_main_sh_calls_the_tool(server: OpenAIServer) -> None:
    # `bash scripts/main.sh "What time is it in Oslo?" --tools clock`, as the README has it, on a server
    # scripted to answer the forced step with a clock call (the installed .venv satisfies the set-up).
    server.script(
        Reply.sse(
            tool_chunk(0, "call_1", "clock", '{"timezone": "Europe/Oslo"}'), finish_chunk("tool_calls")
        ),
        Reply.sse(text_chunk("It is noon in Oslo."), finish_chunk("stop")),
    )
    process = await asyncio.create_subprocess_exec(
        "bash", str(ROOT / "scripts" / "main.sh"), "What time is it in Oslo?", "--tools", "clock",
        "--base-url", server.base_url, "--model", "m",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)

    assert process.returncode == 0, err.decode()
    first = server.requests[0].body
    assert first["tool_choice"] == "required"
    assert [t["function"]["name"] for t in first["tools"]] == ["clock"]
    assert "⚙ clock(" in out.decode()
    assert "installing" not in err.decode()  # the installed .venv was used as it is


async def test_main_sh_lets_the_model_choose_when_asked(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("Hello."), finish_chunk("stop")))
    process = await asyncio.create_subprocess_exec(
        "bash", str(ROOT / "scripts" / "main.sh"), "Hello", "--no-require-tool",
        "--base-url", server.base_url, "--model", "m",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )  # fmt: skip
    _, err = await asyncio.wait_for(process.communicate(), TIMEOUT_S)

    assert process.returncode == 0, err.decode()
    assert server.requests[0].body.get("tool_choice") in (None, "auto")


# ---- _venv.sh ----------------------------------------------------------------------------------------

FAKE_PYTHON = r"""#!/usr/bin/env bash
# A stand-in for .venv/bin/python: logs each call; plays pip.
echo "$*" >> "$LOG"
case "$*" in
  "-c import llama_cpp") exit 1 ;;                            # not installed yet
  "-m pip cache list"*) [ -n "${CACHED_WHEEL:-}" ] && echo "/cache/llama_cpp_python-0.3.36.whl"; exit 0 ;;
  "-m pip install -v"*)
    echo "[1/3] Building C object ggml.c.o"
    echo "[2/3] Building CXX object llama.cpp.o"
    read -r _ < "$RELEASE"                                    # until the test lets the "compile" end
    exit "${PIP_STATUS:-0}" ;;
  "-m pip install -q"*) exit 0 ;;
esac
"""


class Project:
    """A scratch copy of the set-up: ``pyproject.toml``, ``scripts/_venv.sh`` and a stand-in ``.venv``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "scripts").mkdir()
        shutil.copy(ROOT / "scripts" / "_venv.sh", root / "scripts" / "_venv.sh")
        shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
        python = root / ".venv" / "bin" / "python"
        python.parent.mkdir(parents=True)
        python.write_text(FAKE_PYTHON)
        python.chmod(python.stat().st_mode | stat.S_IEXEC)
        self.log = root / "calls.log"
        self.log.touch()
        self.release_fifo = root / "release"
        os.mkfifo(self.release_fifo)

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines()

    def set_up(self, extras: str, **env: str) -> SetUp:
        """Start ``source scripts/_venv.sh EXTRAS`` here."""
        return SetUp(
            subprocess.Popen(
                ["bash", "-c", f"source scripts/_venv.sh {extras}"],
                cwd=self.root,
                env={
                    **os.environ,
                    "LOG": str(self.log),
                    "RELEASE": str(self.release_fifo),
                    "RXAGENT_PROGRESS_EVERY": "0.1",
                    **env,
                },
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )

    def release(self) -> None:
        """Let the stand-in pip's "compile" end (fails if it never waits for that)."""

        def write() -> None:
            with self.release_fifo.open("w") as fifo:  # opens once the stand-in pip opens its end
                fifo.write("go\n")

        writer = threading.Thread(target=write, daemon=True)
        writer.start()
        writer.join(TIMEOUT_S)
        assert not writer.is_alive(), "the stand-in pip never waited to be released"


class SetUp:
    """A running set-up script whose stderr lines arrive on a queue, so every read has a deadline."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.said: list[str] = []
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
        """Wait for the end: exit code, stdout, and the stderr not read yet."""
        try:
            code = self.process.wait(timeout=TIMEOUT_S)
        finally:
            if self.process.poll() is None:
                self.process.kill()
        out = self.process.stdout.read() if self.process.stdout is not None else ""
        rest: list[str] = []
        while (line := self.lines.get(timeout=TIMEOUT_S)) is not None:
            rest.append(line)
        return code, out, "".join(rest)


def test_the_first_install_says_it_compiles_and_shows_progress(tmp_path: Path) -> None:
    project = Project(tmp_path)
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
    assert "[2/3] Building CXX object" in (tmp_path / ".venv" / "pip-install.log").read_text()
    assert any(call.startswith("-m pip install -v -e .[local]") for call in project.calls())
    assert list((tmp_path / ".venv").glob(".rxagent-installed-*-local"))


def test_once_installed_the_set_up_is_silent_and_calls_nothing(tmp_path: Path) -> None:
    project = Project(tmp_path)
    code, _, said = project.set_up("test", CACHED_WHEEL="1").finish()  # a cached wheel: no compile
    assert code == 0, said
    assert said == "installing rxagent[test] into .venv\n"
    calls = project.calls()

    for extras in ("test", "local"):  # the test extras include the local ones
        assert project.set_up(extras).finish() == (0, "", "")
    assert project.calls() == calls


def test_a_failed_compile_shows_the_end_of_the_log_and_fails(tmp_path: Path) -> None:
    project = Project(tmp_path)
    setting_up = project.set_up("local", PIP_STATUS="3")

    setting_up.read_until("compiles llama.cpp")
    project.release()
    code, _, rest = setting_up.finish()

    assert code == 3
    assert "[2/3] Building CXX object llama.cpp.o" in rest
    assert "the install failed (pip exited with 3); pip's whole output is in .venv/pip-install.log" in rest
    assert not list((tmp_path / ".venv").glob(".rxagent-installed-*"))  # the next run tries again
