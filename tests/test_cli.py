"""The rxagent command line: what it prints, what it never lets through, and how it exits.

Most tests run the real command (``python -m rxagent``) in a subprocess against the loopback
OpenAI-compatible server (tests/model/openai_server.py), scripted to answer with text or with a tool
call, so what the command does with a tool call does not depend on what a model chooses. The ``llm`` tests
run it on the embedded model and check only what rxagent guarantees.

Every test has its own ``$XDG_DATA_HOME`` (tests/conftest.py), where the command keeps its sessions by
default, and its own ``$HOME`` (``own_home``): no command a test starts writes into the real home.

Bad inputs tried on ``respond`` and ``sessions``: an unknown session (and a store file that does not exist),
an unknown call id, a call answered already, two answers for one call, ``--result`` for a call that asks,
``--approve`` for an external call, ``--args`` that is not JSON, not an object, misplaced or given twice, or
refused by the tool's schema, an approval of a tool the command was not given, and no answer at all. On
every command: every kind of option value (numbers, durations, ports, URLs, files, folders, tool names,
``--ask`` globs that match no tool), a hostile file and a model that splits escape sequences across deltas,
a server that lists no model, several, or cannot be reached, and a session database that cannot be opened.
"""

from __future__ import annotations

import asyncio
import doctest
import importlib.metadata
import json
import os
import pty
import re
import select
import shlex
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import rxagent.cli as cli_module
from rxagent import ScriptedModel, ScriptedResponse, ScriptedToolCall
from rxagent.agent import ReActAgent
from rxagent.agent.grants import SESSION_RULES
from rxagent.cli import ExitCode, TerminalSafeStream, exit_code_for, main, terminal_safe
from rxagent.context import RuntimeContext
from rxagent.events import RunReason, event_from_json
from rxagent.session import SQLiteStore, default_db_path, store_file, store_name
from rxagent.tools import Toolkit, tool
from tests.examples import run_examples
from tests.model.openai_server import (
    OpenAIServer,
    Reply,
    Stall,
    finish_chunk,
    text_chunk,
    tool_chunk,
    usage_chunk,
)

RUN_TIMEOUT_S = 60.0
"""The longest any command here may take (they take about a second)."""
MODEL_RUN_TIMEOUT_S = 300.0
"""The longest a command on the embedded model may take: it generates up to ``--max-tokens`` per call on
the CPU, several calls a run, and the suite may share the machine's cores with other work."""


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty ``$HOME`` for every test's commands (run here or as a process, which inherits the
    environment), besides the ``$XDG_DATA_HOME`` of tests/conftest.py: nothing a command keeps under the
    home lands in the user's, or in another test's."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    return home


@dataclass(frozen=True)
class Completed:
    """What a finished command left behind."""

    code: int
    stdout: str
    stderr: str

    def events(self) -> list[dict[str, Any]]:
        """stdout as JSON lines (fails on a line that is not one)."""
        return [json.loads(line) for line in self.stdout.splitlines()]


def command_env(**overrides: str) -> dict[str, str]:
    """The environment of a command: ours, without colour or width settings, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "NO_COLOR", "COLUMNS", "TERM")}
    env["OPENAI_API_KEY"] = "sk-test"
    env.update(overrides)
    return env


async def start(*args: str, env: dict[str, str] | None = None) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "rxagent",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env or command_env(),
    )


async def finish(
    process: asyncio.subprocess.Process, stdin: str | None = None, *, timeout_s: float = RUN_TIMEOUT_S
) -> Completed:
    try:
        out, err = await asyncio.wait_for(
            process.communicate(stdin.encode() if stdin is not None else None), timeout_s
        )
    except TimeoutError:
        process.kill()
        await process.wait()
        pytest.fail(f"the command did not end within {timeout_s} s")
    assert process.returncode is not None
    return Completed(process.returncode, (out or b"").decode(), (err or b"").decode())


async def rxagent(
    *args: str, stdin: str = "", env: dict[str, str] | None = None, timeout_s: float = RUN_TIMEOUT_S
) -> Completed:
    """Run the command to its end with ``stdin`` piped in; fail the test if it takes over ``timeout_s``."""
    return await finish(await start(*args, env=env), stdin, timeout_s=timeout_s)


def on(server: OpenAIServer, *args: str) -> tuple[str, ...]:
    """``args`` plus the options that point the command at ``server``."""
    return (*args, "--base-url", server.base_url, "--model", "test-model")


def text_reply(*pieces: str) -> Reply:
    return Reply.sse(*(text_chunk(p) for p in pieces), finish_chunk("stop"), usage_chunk(11, 3))


def call_reply(name: str, arguments: dict[str, Any], call_id: str = "call_1") -> Reply:
    return Reply.sse(tool_chunk(0, call_id, name, json.dumps(arguments)), finish_chunk("tool_calls"))


# ---- help, usage errors -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "chat"])
def test_help_shows_defaults_exit_codes_and_the_tool_timeout(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main([command, "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps help to the terminal's width
    for default in ("(default: calculator,clock)", "(default: 30.0)", "(default: 4)", "(default: local)"):
        assert default in text
    assert "exit codes:" in text
    for code, words in [
        (0, "the run answered"),
        (1, "the run failed"),
        (2, "the command line was wrong"),
        (3, "the run ended without an answer"),
        (4, "the run waits for an approval or an external result"),
        (130, "Ctrl-C"),
    ]:
        assert f"{code} {words}" in text
    assert "A synchronous tool's thread cannot be stopped: it may run on in the background" in text


def arguments_by_command(help_text: str) -> dict[str, set[str]]:
    """The arguments ``rxagent --help`` lists for each command (``--[no-]x`` stands for both forms)."""
    section = help_text.split("arguments of each command")[1].split("\n\n")[0]
    listed: dict[str, set[str]] = {}
    names: list[str] = []
    for line in section.splitlines()[1:]:
        group = re.match(r"  (\w[\w, ]*): (.*)", line)
        if group:  # a group starts with its commands; its wrapped lines follow, indented
            names, line = group[1].split(", "), group[2]
        words = set(re.sub(r"--\[no-\]([\w-]+)", r"--\1 --no-\1", line).split())
        for name in names:
            listed.setdefault(name, set()).update(words)
    return listed


def test_help_lists_every_command_with_its_options(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # no option name broken across lines
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    text = capsys.readouterr().out
    listed = arguments_by_command(text)
    [commands] = re.findall(r"\{([\w,]+)\}", text.splitlines()[0])
    assert {"run", "chat", "serve"} <= set(commands.split(","))
    for command in commands.split(","):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        options = set(re.findall(r"(?<![\w-])--[a-z][\w-]*", capsys.readouterr().out)) - {"--help"}
        assert options, command
        assert options <= listed[command], (
            f"rxagent --help leaves out {command}'s {options - listed[command]}"
        )
    # The main options, by name: those a user looks for first.
    assert {"PROMPT", "--model", "--base-url", "--tools", "--ask", "--json", "--session", "--db"} <= listed[
        "run"
    ]
    assert {"--model", "--base-url", "--json", "--session", "--db"} <= listed["chat"]
    assert {"--host", "--port", "--token", "--db", "--lease-ttl", "--model", "--tools"} <= listed["serve"]
    assert "--version" in text


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out == f"rxagent {importlib.metadata.version('rxagent')}\n"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "hi", "--model", "gpt-x"], "--model NAME needs --base-url"),
        (["run", "hi", "--tools", "calculator,shell"], "unknown demo tool(s) ['shell']"),
        (
            ["run", "hi", "--tool-timeout", "0"],
            "argument --tool-timeout: must be a positive number of seconds",
        ),
        (
            ["run", "hi", "--tool-timeout", "soon"],
            "--tool-timeout: must be a positive number of seconds, not 'soon'",
        ),
        (
            ["run", "hi", "--tool-timeout", "inf"],
            "--tool-timeout: must be a positive number of seconds, not 'inf'",
        ),
        (
            ["run", "hi", "--tool-timeout", "nan"],
            "--tool-timeout: must be a positive number of seconds, not 'nan'",
        ),
        (
            ["run", "hi", "--max-iters", "0"],
            "argument --max-iters: must be a whole number 1 or more, not '0'",
        ),
        (
            ["chat", "--max-iters", "many"],
            "argument --max-iters: must be a whole number 1 or more, not 'many'",
        ),
        (["run", "hi", "--max-tokens", "-5"], "argument --max-tokens: must be a whole number 1 or more"),
        (["run", "hi", "--max-tokens", "2.5"], "argument --max-tokens: must be a whole number 1 or more"),
        (["serve", "--port", "70000"], "argument --port: must be a whole number between 0 and 65535"),
        (
            ["serve", "--port", "http"],
            "argument --port: must be a whole number between 0 and 65535, not 'http'",
        ),
        (["serve", "--gc-threshold", "-1"], "argument --gc-threshold: must be a whole number 0 or more"),
        (["serve", "--gc-threshold", "lots"], "argument --gc-threshold: must be a whole number 0 or more"),
        (["serve", "--lease-ttl", "0"], "argument --lease-ttl: must be a positive number of seconds"),
        (
            ["serve", "--lease-ttl", "1m"],
            "argument --lease-ttl: must be a positive number of seconds, not '1m'",
        ),
        (["serve", "--host", "0.0.0.0"], "needs a token"),
        (["run", "hi", "--base-url", "127.0.0.1:8080/v1"], "argument --base-url: must be an http(s) URL"),
        (["run", "hi", "--base-url", "ftp://host/v1"], "argument --base-url: must be an http(s) URL"),
        (["run", "hi", "--gguf", "/nowhere/model.gguf"], "argument --gguf: no file at '/nowhere/model.gguf'"),
        (["run", "hi", "--tools", "files", "--files-root", "/nowhere/at/all"], "is not a directory"),
        (["run", "hi", "--ask", "calc"], "--ask 'calc' matches none of the tools (calculator, clock)"),
        (["run", "hi", "--tools", "none", "--ask", "*"], "--ask '*' matches none of the tools (none"),
        (["run", "hi", "--json", "--json", "--bogus"], "unrecognized arguments: --bogus"),
        (["run", "hi", "--db", " "], "--db needs a SQLite file or a postgresql:// URL"),
        (["sessions", "--db", ""], "--db needs a SQLite file or a postgresql:// URL"),
        (
            ["respond", "s", "--approve", "c", "--args", "{"],
            "--args must be a JSON object, and it is not JSON",
        ),
        (
            ["respond", "s", "--approve", "c", "--max-iters", "-1"],
            "argument --max-iters: must be a whole number",
        ),
        (["walk"], "invalid choice: 'walk'"),
    ],
)
def test_a_wrong_command_line_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == ExitCode.USAGE == 2
    err = capsys.readouterr().err
    assert message in err
    # Said to a person: no exception class, no function name of ours, no traceback.
    assert not re.search(r"[A-Z]\w*(Error|Exception)\b|invalid _|Traceback", err), err


def test_every_reason_has_an_exit_code() -> None:
    reasons: dict[RunReason, int] = {
        "MODEL_STOP": 0,
        "MAX_ITERATIONS": 0,
        "TOOL_RETURN_DIRECT": 0,
        "STRUCTURED_OUTPUT": 0,
        "ERROR": 1,
        "NO_ANSWER": 3,
        "STOPPED": 3,
        "PERMISSION_ASKING": 4,
        "TOOL_SUSPENDED": 4,
        "INTERRUPTED": 130,
    }
    assert set(reasons) == set(RunReason.__args__)  # type: ignore[attr-defined]
    assert {reason: int(exit_code_for(reason)) for reason in reasons} == reasons


# ---- terminal safety --------------------------------------------------------------------------------

HOSTILE = (
    "[bold]Markup[/bold] [/bold] [blink red]ALERT[/] [link=https://evil.example]click[/link] :smile:\n"
    "\x1b[5mblink\x1b[0m \x1b[2J\x1b[H cleared \x1b]0;new title\x07 "
    "\x1b]8;;https://evil.example\x1b\\hyperlink\x1b]8;;\x1b\\ \x9b31mc1 red\x9b0m "
    "bell\x07 back\x08space \x1bcreset car\rriage \u202eesrever\n" + "long line " * 20 + "\n"
)
"""A file written to attack a terminal: rich markup, SGR blink, a screen clear, an OSC title, an OSC 8
hyperlink, 8-bit CSI, BEL, backspace, a full reset, a carriage return, a bidirectional override, and a
200-column line."""

SGR = re.compile(r"\x1b\[([0-9;]*)m")


def assert_terminal_safe(output: str) -> None:
    """``output`` holds none of the hostile controls; the only escapes in it are the command's colours."""
    for forbidden in ("\x1b]", "\x1b[2J", "\x1b[H", "\x1bc", "\x07", "\x08", "\x9b", "\r", "\u202e"):
        assert forbidden not in output, repr(forbidden)
    assert "\x1b" not in SGR.sub("", output)
    for parameters in SGR.findall(output):
        assert not {"5", "6"} & set(parameters.split(";")), f"blinking: {parameters!r}"


async def test_a_hostile_file_cannot_style_or_crash_the_terminal(
    server: OpenAIServer, tmp_path: Path
) -> None:
    (tmp_path / "hostile.txt").write_text(HOSTILE)
    server.script(
        call_reply("read_file", {"path": "hostile.txt"}),
        text_reply("It says: ", HOSTILE[:120], " [/bold]"),  # the model repeats it: model text is text too
    )

    done = await rxagent(
        *on(server, "run", "Read hostile.txt", "--tools", "files", "--files-root", str(tmp_path)),
        env=command_env(FORCE_COLOR="1"),
    )

    assert done.code == 0, done.stderr
    assert_terminal_safe(done.stdout)
    assert SGR.search(done.stdout), "FORCE_COLOR=1 colours the command's own labels"
    plain = SGR.sub("", done.stdout)
    # The markup is printed as the text it is, and the tool's output as what it says.
    assert (
        "[bold]Markup[/bold] [/bold] [blink red]ALERT[/] [link=https://evil.example]click[/link] :smile:"
        in (plain)
    )
    assert "  → ok: [bold]Markup" in plain
    shown = (
        "\n    blink  cleared  hyperlink c1 red bell\\x07 back\\x08space reset car\\rriage \\u202eesrever\n"
    )
    assert shown in plain
    # One line: nothing wraps at 80 columns when stdout is not a terminal.
    assert "\n    " + "long line " * 20 + "\nIt says: [bold]Markup" in plain
    assert plain.endswith("MODEL_STOP · 2 step(s) · 11 in / 3 out tokens\n")


async def test_without_colour_the_output_has_no_escapes_at_all(server: OpenAIServer, tmp_path: Path) -> None:
    (tmp_path / "hostile.txt").write_text(HOSTILE)
    server.script(call_reply("read_file", {"path": "hostile.txt"}), text_reply("Done."))

    done = await rxagent(*on(server, "run", "Read it", "--tools", "files", "--files-root", str(tmp_path)))

    assert done.code == 0, done.stderr
    assert "\x1b" not in done.stdout
    assert_terminal_safe(done.stderr)


async def test_a_tool_error_is_said_once(server: OpenAIServer, tmp_path: Path) -> None:
    server.script(call_reply("read_file", {"path": "missing.txt"}), text_reply("No such file."))

    done = await rxagent(*on(server, "run", "Read it", "--tools", "files", "--files-root", str(tmp_path)))

    assert done.code == 0, done.stderr
    assert "  → error: FileNotFoundError: no file 'missing.txt'; files here: none\n" in done.stdout
    assert "error: Error" not in done.stdout


@pytest.mark.parametrize(
    ("text", "safe"),
    [
        ("plain text, tabs\tand\nnewlines", "plain text, tabs\tand\nnewlines"),
        ("[bold]not markup[/]", "[bold]not markup[/]"),
        ("\x1b[31mred\x1b[0m", "red"),
        ("\x1b[38;2;255;0;0mtrue colour", "true colour"),
        ("\x1b]0;title\x07after", "after"),
        ("\x1b]8;;http://x\x1b\\link\x1b]8;;\x1b\\", "link"),
        ("\x1b]unterminated osc", ""),
        ("\x1bP1;2|data\x1b\\after", "after"),
        ("\x9b2J\x9d0;t\x9cafter", "after"),
        ("\x1b(0box\x1b(B", "box"),
        ("split \x1b", "split "),
        ("crlf\r\nlf", "crlf\nlf"),
        ("nul\x00 del\x7f c1\x85", "nul\\x00 del\\x7f c1\\x85"),
        ("\u202eabc\u2066", "\\u202eabc\\u2066"),
    ],
)
def test_terminal_safe_removes_sequences_and_shows_other_controls(text: str, safe: str) -> None:
    assert terminal_safe(text) == safe


def test_the_examples_in_the_docstrings_run() -> None:
    results = doctest.testmod(cli_module)
    assert results.attempted >= 4
    assert results.failed == 0


def sanitized(pieces: list[str]) -> list[str]:
    """What a :class:`TerminalSafeStream` gives for each piece, then at the end."""
    stream = TerminalSafeStream()
    return [stream.feed(piece) for piece in pieces] + [stream.end()]


@pytest.mark.parametrize(
    ("pieces", "shown"),
    [
        (["red \x1b", "[31mtext"], ["red ", "text", ""]),  # a CSI split after ESC
        (["red \x1b[", "31mtext"], ["red ", "text", ""]),  # after [
        (["\x1b[38;2;25", "5;0;0mtrue colour"], ["", "true colour", ""]),  # inside its parameters
        (["\x1b[1", ";", "5", "m", "blink"], ["", "", "", "", "blink", ""]),  # a byte at a time
        (["\x1b]0;new ti", "tle\x07after"], ["", "after", ""]),  # an OSC title ended by BEL
        (["\x1b]0;title\x1b", "\\after"], ["", "after", ""]),  # ... by ST, split inside ST
        (["\x1b]0;ti", "tle\x1b\\after"], ["", "after", ""]),
        (  # an OSC 8 hyperlink, split in its URL and in its closing sequence
            ["see \x1b]8;;https://ev", "il.example\x1b\\link\x1b]8", ";;\x1b\\ done"],
            ["see ", "link", " done", ""],
        ),
        (["\x1bP1;2|da", "ta\x1b\\after"], ["", "after", ""]),  # a DCS string
        (["\x9b3", "1mc1 red"], ["", "c1 red", ""]),  # 8-bit CSI
        (["text\x1b"], ["text", ""]),  # a lone ESC at the very end of the stream
        (["text\x1b]0;never ended"], ["text", ""]),  # an OSC the stream never ends
        (["line\r", "\nnext\r"], ["line", "\nnext", "\\r"]),  # CRLF split; a CR at the end shows
        (["a [b", "] c; d", " [0m;"], ["a [b", "] c; d", " [0m;", ""]),  # [ and ; are only text
        (["bell\x07 ", "nul\x00"], ["bell\\x07 ", "nul\\x00", ""]),  # lone controls show at once
    ],
)
def test_a_stream_removes_sequences_split_across_pieces(pieces: list[str], shown: list[str]) -> None:
    assert sanitized(pieces) == shown
    assert "".join(shown) == terminal_safe("".join(pieces))


def test_a_stream_starts_afresh_after_its_end() -> None:
    stream = TerminalSafeStream()
    assert stream.feed("one\x1b[3") == "one"
    assert stream.end() == ""
    assert stream.feed("1mtwo") == "1mtwo"  # not the end of the sequence that ended with the stream


# Characters that start, continue and end sequences, mixed with text: every sequence and split is likely.
TERMINAL_TEXT = st.text(
    st.sampled_from(list("ab [];\\0m1P_X^(~@/\n\r\t\x07\x00\x1b\x9c\x9b\x9d\x90\x98\x9e\x9f\u202e"))
)


@given(st.lists(TERMINAL_TEXT, max_size=12))
def test_however_a_text_is_split_the_stream_shows_what_terminal_safe_shows(pieces: list[str]) -> None:
    assert "".join(sanitized(pieces)) == terminal_safe("".join(pieces))


async def test_a_sequence_split_across_deltas_leaves_no_remnant_on_screen(server: OpenAIServer) -> None:
    server.script(
        text_reply(
            "Hello \x1b", "[1mbold\x1b]0;new ti", "tle\x07 and \x1b]8;;https://evil.exa", "mple\x1b\\link"
        )
    )

    done = await rxagent(*on(server, "run", "hi", "--tools", "none"), env=command_env(FORCE_COLOR="1"))

    assert done.code == 0, done.stderr
    assert_terminal_safe(done.stdout)
    assert SGR.sub("", done.stdout).startswith("Hello bold and link\n")


# ---- JSON lines and exit codes ----------------------------------------------------------------------


async def test_run_json_prints_only_events_ending_with_the_result(server: OpenAIServer) -> None:
    server.script(text_reply("Hel", "lo"))

    done = await rxagent(*on(server, "run", "hi", "--tools", "none", "--json"))

    assert done.code == ExitCode.ANSWER == 0, done.stderr
    events = done.events()
    assert events[0]["type"] == "run_started"
    assert "".join(e["text"] for e in events if e["type"] == "text_delta") == "Hello"
    assert [e["node"] for e in events if e["type"] == "step_started"] == ["Start", "Reason", "Finish"]
    assert events[-1]["type"] == "agent_result"
    assert events[-1]["reason"] == "MODEL_STOP"
    assert event_from_json(done.stdout.splitlines()[-1]).type == "agent_result"
    assert done.stdout.endswith("\n")


async def test_a_reader_that_goes_away_is_not_an_error() -> None:
    # `rxagent run … --json | head -n 1`: the model keeps streaming after the reader has gone.
    from aiohttp import web

    reader_gone = asyncio.Event()

    async def completions(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write(text_chunk("first"))
        await reader_gone.wait()
        for piece in ("more ", "and more"):
            await response.write(text_chunk(piece))
        await response.write(finish_chunk("stop"))
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    read_end, write_end = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "rxagent", "run", "hi", "--tools", "none", "--json",
            "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m",
            stdout=write_end, stderr=asyncio.subprocess.PIPE, env=command_env(),
        )  # fmt: skip
        os.close(write_end)
        with os.fdopen(read_end, "rb") as stdout:
            first = await asyncio.wait_for(asyncio.to_thread(stdout.readline), RUN_TIMEOUT_S)
        reader_gone.set()
        done = await finish(process)
    finally:
        await runner.cleanup()

    assert json.loads(first)["type"] == "run_started"
    assert done.code == 0, done.stderr
    assert "BrokenPipe" not in done.stderr
    assert "Traceback" not in done.stderr


async def test_a_failed_run_exits_with_the_error_code_and_one_line_on_stderr(server: OpenAIServer) -> None:
    server.script(Reply.json({"error": {"message": "the model is not loaded"}}, status=400))

    done = await rxagent(*on(server, "run", "hi", "--tools", "none", "--json"))

    assert done.code == ExitCode.ERROR == 1
    events = done.events()  # stdout still holds nothing but JSON lines
    assert events[0]["type"] == "run_started"
    assert [e["error_type"] for e in events if e["type"] == "error"] == ["ModelHTTPError"]
    assert events[-1]["type"] == "agent_result"  # a failed run ends with its result too
    assert events[-1]["reason"] == "ERROR"
    assert "the model is not loaded" in events[-1]["detail"]
    errors = [line for line in done.stderr.splitlines() if line.startswith("rxagent: ModelHTTPError")]
    assert len(errors) == 1, done.stderr
    assert "the model is not loaded" in errors[0]


async def test_a_failed_run_is_reported_once_in_text_mode(server: OpenAIServer) -> None:
    server.script(Reply.json({"error": {"message": "the model is not loaded"}}, status=400))

    done = await rxagent(*on(server, "run", "hi", "--tools", "none"))

    assert done.code == ExitCode.ERROR
    assert (done.stdout + done.stderr).count("the model is not loaded") == 1, done.stdout + done.stderr
    assert done.stderr.startswith("rxagent: ModelHTTPError: HTTP 400")
    assert done.stdout == "ERROR · 1 step(s) · 0 in / 0 out tokens\n"


async def test_a_run_waiting_for_approval_exits_with_the_waiting_code(server: OpenAIServer) -> None:
    server.script(call_reply("calculator", {"expression": "2 + 2"}))

    done = await rxagent(*on(server, "run", "2 + 2?", "--tools", "calculator", "--ask", "calc*", "--json"))

    assert done.code == ExitCode.WAITING == 4, done.stderr
    events = done.events()
    assert [e["call"]["name"] for e in events if e["type"] == "tool_permission_asked"] == ["calculator"]
    assert not [e for e in events if e["type"] == "tool_result"]  # nothing ran
    assert events[-1]["type"] == "agent_result"
    assert events[-1]["reason"] == "PERMISSION_ASKING"
    assert [call["name"] for call in events[-1]["pending"]] == ["calculator"]


async def test_a_run_without_an_answer_exits_with_the_no_answer_code(server: OpenAIServer) -> None:
    server.script(Reply.sse(finish_chunk("stop")), Reply.sse(finish_chunk("stop")))  # twice no text

    done = await rxagent(*on(server, "run", "hi", "--tools", "none", "--json"))

    assert done.code == ExitCode.NO_ANSWER == 3, done.stderr
    assert done.events()[-1]["reason"] == "NO_ANSWER"


async def test_ctrl_c_interrupts_the_run_which_ends_interrupted(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("Once upon"), Stall()))  # the model streams, then hangs
    process = await start(*on(server, "run", "Tell me a story", "--tools", "none", "--json"))
    assert process.stdout is not None

    seen: list[dict[str, Any]] = []
    while not any(e["type"] == "text_delta" for e in seen):  # wait until the model is streaming
        line = await asyncio.wait_for(process.stdout.readline(), RUN_TIMEOUT_S)
        assert line, "the command ended before the model streamed"
        seen.append(json.loads(line))
    process.send_signal(signal.SIGINT)
    done = await finish(process)

    assert done.code == ExitCode.INTERRUPTED == 130, done.stderr
    events = seen + done.events()
    assert events[-1]["type"] == "agent_result"
    assert events[-1]["reason"] == "INTERRUPTED"
    assert "interrupting the run" in done.stderr
    assert "Traceback" not in done.stderr
    await asyncio.wait_for(server.disconnected.wait(), RUN_TIMEOUT_S)  # the model call was closed


# ---- chat ---------------------------------------------------------------------------------------------


async def test_chat_with_piped_input_prints_answers_on_their_own_lines(server: OpenAIServer) -> None:
    server.script(text_reply("Hello", " there."), text_reply("You said: again."))

    done = await rxagent(*on(server, "chat", "--tools", "none"), stdin="hi\nagain\n")

    assert done.code == 0, done.stderr
    assert done.stdout == (
        "Hello there.\n"
        "MODEL_STOP · 1 step(s) · 11 in / 3 out tokens\n"
        "You said: again.\n"
        "MODEL_STOP · 1 step(s) · 11 in / 3 out tokens\n"
    )
    assert "you>" not in done.stdout + done.stderr  # no prompt for a pipe
    # One session: the second request carries the first exchange.
    second = [m["content"] for m in server.requests[1].body["messages"]]
    assert second[-3:] == ["hi", "Hello there.", "again"]


class Terminal:
    """The far end of a pseudo-terminal the command runs in: read what it shows, type into it.

    Reads block, so a test calls them through ``asyncio.to_thread``: the loopback server shares the loop.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.shown = ""

    def read_until(self, text: str) -> str:
        """What the terminal showed up to and including ``text`` (fails after ``RUN_TIMEOUT_S``)."""
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while text not in self.shown:
            ready, _, _ = select.select([self.fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"the terminal never showed {text!r}; it showed {self.shown!r}"
            try:
                self.shown += os.read(self.fd, 4096).decode(errors="replace")
            except OSError:  # the command closed the terminal
                pytest.fail(f"the command ended before it showed {text!r}; it showed {self.shown!r}")
        upto = self.shown.index(text) + len(text)
        seen, self.shown = self.shown[:upto], self.shown[upto:]
        return seen

    def type(self, text: str) -> None:
        os.write(self.fd, text.encode())


async def test_chat_in_a_terminal_prompts_and_ctrl_c_at_the_prompt_quits(server: OpenAIServer) -> None:
    server.script(text_reply("Hello."))
    controller, terminal_end = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rxagent", *on(server, "chat", "--tools", "none"),
        stdin=terminal_end, stdout=terminal_end, stderr=terminal_end, env=command_env(TERM="dumb"),
    )  # fmt: skip
    os.close(terminal_end)
    terminal = Terminal(controller)
    try:
        await asyncio.to_thread(terminal.read_until, "you> ")
        terminal.type("hi\n")
        answered = await asyncio.to_thread(terminal.read_until, "you> ")
        assert "Hello." in answered
        assert re.search(r"MODEL_STOP · 1 step\(s\) · 11 in / 3 out tokens\S*\r?\n", answered)
        process.send_signal(signal.SIGINT)
        code = await asyncio.wait_for(process.wait(), RUN_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(controller)
    assert code == ExitCode.INTERRUPTED


async def test_chat_json_keeps_stdout_to_json_lines(server: OpenAIServer) -> None:
    server.script(text_reply("One."), text_reply("Two."))

    done = await rxagent(*on(server, "chat", "--tools", "none", "--json"), stdin="first\nsecond")

    assert done.code == 0, done.stderr
    events = done.events()
    assert [e["reason"] for e in events if e["type"] == "agent_result"] == ["MODEL_STOP", "MODEL_STOP"]
    assert events[-1]["type"] == "agent_result"
    assert done.stdout.endswith("}\n")
    assert "you>" not in done.stdout


async def test_chat_ends_at_an_empty_line_or_the_end_of_input(server: OpenAIServer) -> None:
    done = await rxagent(*on(server, "chat", "--tools", "none"), stdin="")
    assert (done.code, done.stdout) == (0, "")
    done = await rxagent(*on(server, "chat", "--tools", "none"), stdin="\nnever sent\n")
    assert (done.code, done.stdout) == (0, "")
    assert server.requests == []


@pytest.mark.parametrize(
    ("answer", "status", "output"), [("y", "ok", "4"), ("n", "denied", "the user said no")]
)
async def test_chat_asks_before_a_call_that_needs_approval(
    server: OpenAIServer, answer: str, status: str, output: str
) -> None:
    server.script(call_reply("calculator", {"expression": "2 + 2"}), text_reply("Done."))

    done = await rxagent(
        *on(server, "chat", "--tools", "calculator", "--ask", "calculator", "--json"),
        stdin=f"What is 2 + 2?\n{answer}\n",
    )

    assert done.code == 0, done.stderr
    assert 'allow calculator({"expression": "2 + 2"})? [y/N/a(lways)] ' in done.stderr
    events = done.events()
    assert [e["reason"] for e in events if e["type"] == "agent_result"] == ["PERMISSION_ASKING", "MODEL_STOP"]
    # The decision's result is the first message the second run completes (the model sees it next).
    resumed = events[[e["type"] for e in events].index("agent_result") + 1 :]
    [tool_message] = [e["message"] for e in resumed if e["type"] == "message_completed"][:1]
    [result] = tool_message["content"]
    assert (result["type"], result["status"]) == ("tool_result", status)
    assert output in json.dumps(result["output"])


async def test_always_in_chat_runs_the_call_and_the_tools_later_calls_without_asking(
    server: OpenAIServer,
) -> None:
    server.script(
        call_reply("calculator", {"expression": "2 + 2"}),
        text_reply("Four."),
        call_reply("calculator", {"expression": "3 * 3"}, "call_2"),
        text_reply("Nine."),
    )

    done = await rxagent(
        *on(server, "chat", "--tools", "calculator", "--ask", "calculator", "--json"),
        stdin="What is 2 + 2?\na\nAnd 3 * 3?\n",
    )

    assert done.code == 0, done.stderr
    assert done.stderr.count("? [y/N/a(lways)] ") == 1  # asked about the first call only
    events = done.events()
    reasons = [e["reason"] for e in events if e["type"] == "agent_result"]
    assert reasons == ["PERMISSION_ASKING", "MODEL_STOP", "MODEL_STOP"]
    results = [e["result"] for e in events if e["type"] == "tool_result"]
    assert [(r["tool_use_id"], r["status"]) for r in results] == [("call_1", "ok"), ("call_2", "ok")]


async def test_ctrl_c_in_chat_ends_the_turn_and_the_chat_goes_on(server: OpenAIServer) -> None:
    server.script(Reply.sse(text_chunk("Once upon"), Stall()), text_reply("Fine."))
    process = await start(*on(server, "chat", "--tools", "none", "--json"))
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(b"Tell me a story\n")
    await process.stdin.drain()

    seen: list[dict[str, Any]] = []
    while not any(e["type"] == "text_delta" for e in seen):
        line = await asyncio.wait_for(process.stdout.readline(), RUN_TIMEOUT_S)
        assert line, "the command ended before the model streamed"
        seen.append(json.loads(line))
    process.send_signal(signal.SIGINT)
    while seen[-1]["type"] != "agent_result":
        line = await asyncio.wait_for(process.stdout.readline(), RUN_TIMEOUT_S)
        assert line, "the command ended without a result"
        seen.append(json.loads(line))
    done = await finish(process, "Are you there?\n")

    assert seen[-1]["reason"] == "INTERRUPTED"
    assert done.code == 0, done.stderr  # the last run answered
    assert done.events()[-1]["reason"] == "MODEL_STOP"
    # The interrupted turn was saved: the next request carries it.
    contents = [m["content"] for m in server.requests[1].body["messages"] if m["role"] == "user"]
    assert contents[-2:] == ["Tell me a story", "Are you there?"]


# ---- tools that would hang the run --------------------------------------------------------------------


async def test_a_huge_calculation_returns_at_once_with_an_error_result(server: OpenAIServer) -> None:
    server.script(call_reply("calculator", {"expression": "((9**999)**999)**999"}), text_reply("Too big."))

    done = await rxagent(*on(server, "run", "Compute it", "--tools", "calculator", "--json"))

    assert done.code == 0, done.stderr
    [result] = [e["result"] for e in done.events() if e["type"] == "tool_result"]
    assert result["status"] == "error"
    assert "digits (the limit is 1000)" in json.dumps(result["output"])


@contextmanager
def serving(*replies: Reply) -> Iterator[str]:
    """The loopback server in a thread of its own (for a test that runs ``main`` in this one); its URL."""
    ready = threading.Event()
    found: list[tuple[asyncio.AbstractEventLoop, asyncio.Event, str]] = []

    async def serve() -> None:
        async with OpenAIServer() as server:
            server.script(*replies)
            stop = asyncio.Event()
            found.append((asyncio.get_running_loop(), stop, server.base_url))
            ready.set()
            await stop.wait()

    thread = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10)
    loop, stop, url = found[0]
    try:
        yield url
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(10)


def test_a_tool_past_the_timeout_ends_with_an_error_and_the_command_returns(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from rxagent.tools import tool

    release = threading.Event()

    @tool
    def stuck() -> str:
        """A synchronous tool that cannot be stopped until the test lets it go."""
        release.wait(RUN_TIMEOUT_S)
        return "finally"

    # The demo tools have nothing slow left (the calculator refuses first), so give the command one.
    monkeypatch.setattr("rxagent.cli.demo_tools", lambda names, files_root: [stuck])
    codes: list[int] = []
    with serving(call_reply("stuck", {}), text_reply("It timed out.")) as url:
        command = threading.Thread(
            target=lambda: codes.append(
                main(["run", "go", "--base-url", url, "--model", "m", "--tool-timeout", "0.2", "--json"])
            )
        )
        command.start()
        command.join(RUN_TIMEOUT_S)
    try:
        assert not command.is_alive(), "the command waited for the stuck tool"
        assert not release.is_set()  # the tool's thread is still running
        assert codes == [0]
        lines = capsys.readouterr().out.splitlines()
        [result] = [e.result for e in map(event_from_json, lines) if e.type == "tool_result"]
        assert (result.status, result.text) == ("error", "Tool 'stuck' timed out after 0.2 s.")
    finally:
        release.set()


# ---- errors before a run -------------------------------------------------------------------------------


def test_a_missing_model_file_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RXAGENT_GGUF", "/nowhere/model.gguf")  # --gguf is checked as the line is read
    assert main(["run", "hi"]) == ExitCode.ERROR
    assert "MissingModelError: model file not found: /nowhere/model.gguf" in capsys.readouterr().err


def test_a_missing_extra_is_a_clear_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "llama_cpp", None)
    assert main(["run", "hi"]) == ExitCode.ERROR
    assert "pip install 'rxagent[local]'" in capsys.readouterr().err


def test_an_unreachable_server_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "hi", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--tools", "none"]) == 1
    err = capsys.readouterr().err
    assert "Cannot connect to host 127.0.0.1:9" in err
    assert "gave up after 4 attempts" in err


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections: bound by this socket, which never listens."""
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        yield unused.getsockname()[1]


def one_line(err: str, *, plain: bool = True) -> str:
    """``err``'s only line (fails if there are more): an error said once, as a sentence, no traceback;
    ``plain``: and not one class name (a transport's reason may quote aiohttp's)."""
    [line] = err.splitlines()
    assert line.startswith("rxagent: ")
    assert "Traceback" not in line
    assert not plain or not re.search(r"[A-Z]\w*(Error|Exception)\b", line), line
    return line


async def test_without_a_model_name_the_servers_only_model_is_used_and_several_are_a_usage_error(
    server: OpenAIServer,
) -> None:
    server.list_models("only-model")
    server.script(text_reply("Hi."))

    done = await rxagent("run", "hi", "--tools", "none", "--json", "--base-url", server.base_url)

    assert done.code == 0, done.stderr
    listing, completion = server.requests
    assert (listing.path, completion.path) == ("/v1/models", "/v1/chat/completions")
    assert listing.headers["Authorization"] == completion.headers["Authorization"] == "Bearer sk-test"
    assert completion.body["model"] == "only-model"

    server.list_models("small-model", "large-model")
    done = await rxagent("run", "hi", "--tools", "none", "--base-url", server.base_url)

    assert done.code == ExitCode.USAGE == 2
    assert (
        f"{server.base_url} serves 2 models: pass --model with one of small-model, large-model" in done.stderr
    )
    assert [r.path for r in server.requests[2:]] == ["/v1/models"]  # the model was never called


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ("none", "/models lists no model: pass --model NAME"),
        ("404", "/models which model to use (HTTP 404 from "),
        ("not a list", "is not a model list"),
        ("unreachable", "which model to use (ClientConnectorError: Cannot connect to host"),
    ],
)
async def test_without_a_model_name_a_server_that_names_none_is_said_in_one_line(
    server: OpenAIServer, answer: str, message: str
) -> None:
    if answer == "none":
        server.list_models()
    elif answer == "not a list":
        server.model_list = Reply.json({"models": ["a"]})
    with closed_port() as port:
        url = f"http://127.0.0.1:{port}/v1" if answer == "unreachable" else server.base_url

        done = await rxagent("run", "hi", "--tools", "none", "--json", "--base-url", url)

    assert done.code == ExitCode.ERROR == 1
    assert message in one_line(done.stderr, plain=answer != "unreachable")
    assert done.stdout == ""
    assert "pass --model NAME" in done.stderr
    assert not [r for r in server.requests if r.path == "/v1/chat/completions"]


async def test_without_a_model_name_credentials_in_the_base_url_are_never_shown(server: OpenAIServer) -> None:
    url = server.base_url.replace("http://", "http://me:hunter2@")
    server.list_models("a", "b")
    several = await rxagent("run", "hi", "--tools", "none", "--base-url", url)
    server.model_list = Reply.error(401, "who are you?")
    refused = await rxagent("run", "hi", "--tools", "none", "--base-url", url)

    assert (several.code, refused.code) == (2, 1)
    assert "me:**********@" in several.stderr
    assert "me:**********@" in one_line(refused.stderr)
    assert "hunter2" not in several.stderr + refused.stderr
    assert (
        server.requests[0].headers["Authorization"] == "Bearer sk-test"
    )  # and the URL's in Proxy-Authorization
    assert server.requests[0].headers["Proxy-Authorization"].startswith("Basic ")


async def test_a_session_database_that_cannot_be_reached_stops_run_before_it_starts(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    with closed_port() as port:
        for db, message in [
            (
                f"postgresql://postgres@127.0.0.1:{port}/rx",
                f"cannot connect to the PostgreSQL session store at 127.0.0.1:{port}/rx",
            ),
            (str(tmp_path / "a-file" / "sessions.db"), f"{tmp_path / 'a-file'} is not a folder"),
        ]:
            done = await rxagent(
                "run", "hi", "--json", "--base-url", "http://127.0.0.1:9/v1", "--model", "m", "--db", db
            )

            assert done.code == ExitCode.ERROR == 1, done.stderr
            assert message in one_line(done.stderr), done.stderr
            assert done.stdout == ""  # no run started: no events


# ---- the embedded model ----------------------------------------------------------------------------------


@pytest.mark.llm
async def test_run_on_the_embedded_model_streams_json_lines_and_exits_by_its_reason() -> None:
    done = await rxagent(
        "run", "What is 17 * 23? Use the calculator.", "--tools", "calculator", "--require-tool",
        "--max-iters", "2", "--json", timeout_s=MODEL_RUN_TIMEOUT_S,
    )  # fmt: skip

    events = [event_from_json(line) for line in done.stdout.splitlines()]
    assert events[0].type == "run_started"
    result = events[-1]
    assert result.type == "agent_result"
    assert done.code == exit_code_for(result.reason), done.stderr
    # --require-tool forces the first step to call a tool, and the grammar makes the call well-formed.
    calls = [e.call for e in events if e.type == "tool_call_completed"]
    assert calls[0].name == "calculator"
    assert calls[0].state == "complete"
    results = [e.result for e in events if e.type == "tool_result"]
    assert results[0].tool_use_id == calls[0].id


@pytest.mark.llm
async def test_run_on_the_embedded_model_shows_the_tool_call_and_the_outcome() -> None:
    done = await rxagent(
        "run", "What is 17 * 23?", "--tools", "calculator", "--require-tool", "--max-iters", "2",
        timeout_s=MODEL_RUN_TIMEOUT_S,
    )  # fmt: skip

    assert done.code in {int(code) for code in ExitCode}, done.stderr
    assert "⚙ calculator(" in done.stdout
    assert re.search(r"^  → (ok|error): ", done.stdout, re.MULTILINE)
    assert re.search(r"^[A-Z_]+ · \d+ step\(s\) · \d+ in / \d+ out tokens", done.stdout, re.MULTILINE)
    assert done.stdout.endswith("\n")


async def test_a_session_in_a_database_continues_across_invocations(
    server: OpenAIServer, tmp_path: Path
) -> None:
    db = str(tmp_path / "sessions.db")

    def sent(request: int) -> list[str]:
        return [m["content"] for m in server.requests[request].body["messages"] if m["role"] != "system"]

    server.script(text_reply("Nice to meet you, Ada."), text_reply("Your name is Ada."))
    first = await rxagent(*on(server, "run", "My name is Ada.", "--session", "ada", "--db", db, "--json"))
    assert first.code == 0, first.stderr
    second = await rxagent(*on(server, "run", "What is my name?", "--session", "ada", "--db", db, "--json"))
    assert second.code == 0, second.stderr
    assert sent(1) == ["My name is Ada.", "Nice to meet you, Ada.", "What is my name?"]
    other = await rxagent(*on(server, "run", "Who am I?", "--session", "bob", "--db", db, "--json"))
    assert other.code == 1  # the server has no third reply scripted: the point is what was sent
    assert sent(2) == ["Who am I?"]


# ---- sessions: the default store, calls that wait, `sessions` and `respond` -----------------------------

ASK = ("--tools", "calculator", "--ask", "calc*")
"""A calculator whose calls wait for an approval."""


def default_db() -> Path:
    """Where the command keeps sessions in this test (conftest gives each test its own $XDG_DATA_HOME)."""
    return Path(os.environ["XDG_DATA_HOME"]) / "rxagent" / "sessions.db"


def advised(stderr: str) -> list[str]:
    """The arguments of the first `rxagent respond …` command ``stderr`` says to run."""
    found = re.search(r"run `rxagent (respond [^`]*)`", stderr)
    assert found, stderr
    return shlex.split(found.group(1))


async def head_of(db: Path, session: str) -> int:
    """How many facts the SQLite file ``db`` holds for ``session``."""
    store = SQLiteStore(db)
    try:
        return await store.head((None, session))
    finally:
        await store.aclose()


async def in_process(capsys: pytest.CaptureFixture[str], *argv: str) -> Completed:
    """``main(argv)`` in a thread of its own (the loopback server keeps this loop), with what it printed."""

    def call() -> int:
        try:
            return main(list(argv))
        except SystemExit as exited:  # a usage error; raised on this loop it would stop the loop
            return int(exited.code or 0)

    code = await asyncio.to_thread(call)
    out, err = capsys.readouterr()
    return Completed(code, out, err)


async def waiting_session(server: OpenAIServer, *options: str) -> tuple[Completed, list[str]]:
    """A run stopped by a calculator call that waits for approval; what it printed and the command it
    says answers the call."""
    server.script(call_reply("calculator", {"expression": "2 + 2"}))
    waiting = await rxagent(*on(server, "run", "What is 2 + 2?", *ASK, *options))
    assert waiting.code == ExitCode.WAITING, waiting.stderr
    return waiting, advised(waiting.stderr)


def test_the_command_keeps_sessions_in_the_users_data_folder_and_the_help_says_where(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert default_db_path() == default_db()
    for command in ("run", "chat", "sessions", "respond", "serve"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, even at hyphens
        assert f"(default:{default_db()})" in text, command
        assert "$XDG_DATA_HOME/rxagent,else~/.local/share/rxagent" in text
    for documented in (default_db_path, store_file, store_name):
        assert run_examples(documented) == (0, 1)
    # Without $XDG_DATA_HOME (or with a relative one, which the XDG specification says to ignore): the home.
    monkeypatch.setenv("HOME", str(tmp_path))
    for value in (None, "relative/data"):
        if value is None:
            monkeypatch.delenv("XDG_DATA_HOME")
        else:
            monkeypatch.setenv("XDG_DATA_HOME", value)
        assert default_db_path() == tmp_path / ".local" / "share" / "rxagent" / "sessions.db"


async def test_a_run_lands_in_the_default_sqlite_file_and_sessions_lists_it(server: OpenAIServer) -> None:
    server.script(text_reply("Hello, Ada."), text_reply("Hello again."))
    assert not default_db().parent.exists()

    first = await rxagent(*on(server, "run", "Hi, I am Ada.\nSecond line.", "--tools", "none"))
    later = await rxagent(*on(server, "run", "Hello?", "--tools", "none", "--session", "named", "--json"))

    assert (first.code, later.code) == (0, 0), first.stderr + later.stderr
    assert default_db().is_file()
    assert default_db().parent.stat().st_mode & 0o777 == 0o700  # conversations: the owner's alone
    listed = await rxagent("sessions", "--json")
    assert listed.code == 0, listed.stderr
    rows = listed.events()
    assert [(r["state"], r["messages"], r["first_input"]) for r in rows] == [
        ("idle", 2, "Hello?"),
        ("idle", 2, "Hi, I am Ada."),
    ]
    generated = rows[1]["session_id"]
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", generated)  # a new session per run, named by its time
    server.script(text_reply("Hidden?"))
    hostile = await rxagent(
        *on(server, "run", "\x1b]0;title\x07hi", "--tools", "none", "--session", "a\x1b[2Jb")
    )
    assert hostile.code == 0, hostile.stderr
    table = await rxagent("sessions")
    assert_terminal_safe(table.stdout)
    assert re.search(r"^ab  .*  idle +2 +hi$", table.stdout, re.MULTILINE)
    shown = await rxagent("sessions", "a\x1b[2Jb")
    assert_terminal_safe(shown.stdout)
    assert shown.stdout.startswith("session 'ab': idle")
    assert table.stdout.splitlines()[0].split() == [
        "SESSION",
        "UPDATED",
        "STATE",
        "MESSAGES",
        "FIRST",
        "INPUT",
    ]
    assert re.search(rf"^{generated}  \S+ \S+  idle +2 +Hi, I am Ada\.$", table.stdout, re.MULTILINE)


async def test_a_run_without_a_home_for_data_lands_in_the_home(server: OpenAIServer, tmp_path: Path) -> None:
    server.script(text_reply("Hi."))
    env = {k: v for k, v in command_env(HOME=str(tmp_path)).items() if k != "XDG_DATA_HOME"}

    done = await rxagent(*on(server, "run", "hi", "--tools", "none"), env=env)

    assert done.code == 0, done.stderr
    assert (tmp_path / ".local" / "share" / "rxagent" / "sessions.db").is_file()
    assert not default_db().parent.exists()


async def test_serve_keeps_sessions_in_the_default_file_and_says_so(server: OpenAIServer) -> None:
    process = await start(*on(server, "serve", "--port", "0", "--tools", "none"))
    assert process.stdout is not None
    assert process.stderr is not None
    first = (await asyncio.wait_for(process.stdout.readline(), RUN_TIMEOUT_S)).decode()
    assert first.startswith("listening on http://127.0.0.1:")
    said = ""
    while "sessions are kept in" not in said:
        line = (await asyncio.wait_for(process.stderr.readline(), RUN_TIMEOUT_S)).decode()
        assert line, "the server ended without saying where its sessions are"
        said = line
    process.send_signal(signal.SIGTERM)
    done = await finish(process)

    assert done.code == 0, done.stderr
    assert said.rstrip().endswith(f"rxagent.serve: sessions are kept in {default_db()}")
    assert default_db().is_file()


def test_a_postgresql_store_is_named_without_its_password() -> None:
    url = "postgresql://ada:s3cret@db.example:5433/agents?sslmode=require&password=s3cret"
    assert store_name(url) == (
        "postgresql://ada:**********@db.example:5433/agents?sslmode=require&password=**********"
    )
    assert (store_name(":memory:"), store_name("sqlite:////tmp/s.db")) == ("memory", "/tmp/s.db")


async def test_db_memory_leaves_no_file(server: OpenAIServer) -> None:
    server.script(text_reply("Hi."), call_reply("calculator", {"expression": "2 + 2"}))

    done = await rxagent(*on(server, "run", "hi", "--tools", "none", "--db", ":memory:"))
    waiting = await rxagent(*on(server, "run", "2 + 2?", *ASK, "--db", ":memory:"))

    assert done.code == 0, done.stderr
    assert waiting.code == ExitCode.WAITING
    assert "kept in memory only (--db :memory:), and ends with this command" in waiting.stderr
    assert not default_db().parent.exists()
    listed = await rxagent("sessions")  # reading creates nothing either
    assert (listed.code, listed.stdout) == (0, f"no sessions yet in {default_db()}\n")
    assert not default_db().parent.exists()


async def test_respond_approve_runs_the_call_and_carries_the_run_on(server: OpenAIServer) -> None:
    waiting, command = await waiting_session(server)
    session = command[1]

    # The command that stopped says, in one sentence, which command answers the call: with the options
    # that make the same agent (the model, the tools, the approvals), and nothing else.
    assert (
        f"rxagent: session {session!r} waits for an answer to call call_1 "
        f'(calculator {{"expression": "2 + 2"}}): run `rxagent respond {session} --approve call_1 '
    ) in waiting.stderr
    assert "` or `--deny call_1`" in waiting.stderr
    assert command[2:] == [
        "--approve", "call_1", "--model", "test-model", "--base-url", server.base_url,
        "--tools", "calculator", "--ask", "calc*",
    ]  # fmt: skip
    server.script(text_reply("It is 4."))
    done = await rxagent(*command, "--json")

    assert done.code == ExitCode.ANSWER, done.stderr
    events = done.events()  # streamed as `run --json` streams: JSON lines only, the result last
    assert {e["session_id"] for e in events} == {session}
    [result] = [e["result"] for e in events if e["type"] == "tool_result"]
    assert (result["status"], result["output"][0]["text"]) == ("ok", "4")
    assert events[-1]["type"] == "agent_result"
    assert events[-1]["reason"] == "MODEL_STOP"
    assert server.requests[-1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "4",
    }
    shown = await rxagent("sessions", session)
    assert f"session {session!r}: idle · 4 message(s)" in shown.stdout
    assert "waiting:" not in shown.stdout


async def test_the_command_it_names_never_shows_a_password(server: OpenAIServer) -> None:
    server.script(call_reply("calculator", {"expression": "2 + 2"}))
    base_url = server.base_url.replace("http://", "http://ada:hunter2@")

    waiting = await rxagent("run", "2 + 2?", *ASK, "--base-url", base_url, "--model", "test-model")

    assert waiting.code == ExitCode.WAITING, waiting.stderr
    assert "hunter2" not in waiting.stderr
    command = advised(waiting.stderr)
    assert command[command.index("--base-url") + 1] == base_url.replace("hunter2", "**********")


async def test_respond_deny_never_runs_the_call(server: OpenAIServer) -> None:
    _, command = await waiting_session(server)
    command[2] = "--deny"
    server.script(text_reply("As you wish."))

    done = await rxagent(*command, "--json")

    assert done.code == ExitCode.ANSWER, done.stderr
    events = done.events()
    assert not [e for e in events if e["type"] == "tool_execution_started"]
    # The denial is an outcome like any other: one tool_result event, before the tool message.
    [told] = [e for e in events if e["type"] == "tool_result"]
    assert (told["result"]["tool_use_id"], told["result"]["status"]) == ("call_1", "denied")
    # The denial is the first message the run completes: the tool's result, which the model sees next.
    tool_message = next(e["message"] for e in events if e["type"] == "message_completed")
    [result] = tool_message["content"]
    assert (result["status"], result["output"][0]["text"]) == (
        "denied",
        "The user denied this call: the user said no.",
    )
    assert events[-1]["reason"] == "MODEL_STOP"
    assert server.requests[-1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "The user denied this call: the user said no.",
    }


async def test_two_respond_commands_at_once_take_one_answer_and_refuse_the_other_in_a_sentence(
    server: OpenAIServer,
) -> None:
    _, approve = await waiting_session(server)
    deny = list(approve)
    deny[2] = "--deny"
    server.script(text_reply("Done."))  # one run carries on: the one whose answer is taken

    approved, denied = await asyncio.gather(rxagent(*approve), rxagent(*deny))

    assert sorted([approved.code, denied.code]) == [ExitCode.ANSWER, ExitCode.USAGE], (approved, denied)
    refused, taken = (denied, "approved") if denied.code == ExitCode.USAGE else (approved, "denied")
    assert f"rxagent: tool call 'call_1' was answered already: {taken} by run run_" in refused.stderr
    assert "Traceback" not in refused.stderr
    assert "AnswerTakenError" not in refused.stderr  # a sentence, not an exception's name
    assert len(server.requests) == 2  # the asking run's model call, and the taken answer's


async def test_respond_with_edited_arguments_runs_them_and_refuses_what_the_schema_refuses(
    server: OpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "sessions.db"
    _, command = await waiting_session(server, "--session", "edit", "--db", str(db))
    recorded = await head_of(db, "edit")

    for wrong in ('{"expression": ["2", "+", "2"]}', '{"expression": "1", "shell": "rm -rf /"}', "{}"):
        refused = await rxagent(*command, "--args", wrong)
        assert refused.code == ExitCode.USAGE == 2, refused.stderr
        assert "rxagent: call 'call_1': the edited arguments were refused: " in refused.stderr
        assert refused.stdout == ""
    assert await head_of(db, "edit") == recorded  # nothing recorded
    assert len(server.requests) == 1

    server.script(text_reply("It is 9."))
    done = await rxagent(*command, "--args", '{"expression": "3 * 3"}', "--json")

    assert done.code == 0, done.stderr
    [result] = [e["result"] for e in done.events() if e["type"] == "tool_result"]
    assert result["output"][0]["text"] == "9"
    shown = json.loads((await rxagent("sessions", "edit", "--db", str(db), "--json")).stdout)
    [call] = shown["messages"][1]["content"]  # the history keeps the call as it ran
    assert call["input"] == {"expression": "3 * 3"}


async def test_respond_always_runs_the_call_then_the_tools_next_calls_unasked_and_the_rule_is_in_the_log(
    server: OpenAIServer, tmp_path: Path
) -> None:
    db = tmp_path / "sessions.db"
    _, command = await waiting_session(server, "--session", "grant", "--db", str(db))
    command[2] = "--always"
    server.script(text_reply("It is 4."))
    done = await rxagent(*command)
    assert done.code == ExitCode.ANSWER, done.stderr

    # The same session's next run: the calculator's call runs without asking, under the same --ask.
    server.script(call_reply("calculator", {"expression": "3 * 3"}, "call_2"), text_reply("It is 9."))
    again = await rxagent(*on(server, "run", "And 3 * 3?", *ASK, "--session", "grant", "--db", str(db)))
    assert again.code == ExitCode.ANSWER, again.stderr
    assert server.requests[-1].body["messages"][-1] == {
        "role": "tool",
        "tool_call_id": "call_2",
        "content": "9",
    }

    store = SQLiteStore(db)
    try:
        facts = [(f.kind, f.data()) for f in await store.read((None, "grant"))]
    finally:
        await store.aclose()
    [decision] = [d for kind, d in facts if kind == "decision"]
    assert decision == {
        "call_id": "call_1",
        "kind": "approval",
        "reason": "",
        "arguments": None,
        "always": True,
    }
    rule = {"decision": "allow", "tool": "calculator", "call_id": "call_1", "reason": ""}
    assert [d for kind, d in facts if kind == "extras"][-1] == {"extras": {SESSION_RULES: [rule]}}

    # --always with a call that is not waiting records nothing, as --approve.
    head = await head_of(db, "grant")
    refused = await rxagent(*command[:3], "call_9", *command[4:])
    assert refused.code == ExitCode.USAGE, refused.stderr
    assert "session 'grant' has no call 'call_9'" in refused.stderr
    assert await head_of(db, "grant") == head


async def test_respond_result_answers_an_external_call_a_program_left_waiting(
    server: OpenAIServer, tmp_path: Path
) -> None:
    # The demo tools have no external tool, so a Python program with one leaves the session waiting in the
    # same store; the command line answers it.
    db = tmp_path / "sessions.db"

    @tool(external=True)
    def sign(document: str) -> str:
        """A person signs the document elsewhere.

        Args:
            document: what to sign.
        """
        raise AssertionError("an external tool does not run here")

    model = ScriptedModel([ScriptedResponse(tool_calls=[ScriptedToolCall("sign", {"document": "lease"})])])
    agent = ReActAgent(model, Toolkit([sign]), store=str(db))
    try:
        suspended = await agent.call("Get the lease signed.", RuntimeContext(session_id="lease"))
    finally:
        await agent.aclose()
    assert suspended.reason == "TOOL_SUSPENDED"

    shown = await rxagent("sessions", "lease", "--db", str(db))
    assert '  call_1  sign {"document": "lease"}  waits for its external result\n' in shown.stdout
    assert "run `rxagent respond lease --result call_1 TEXT`" in shown.stdout
    refused = await rxagent(*on(server, "respond", "lease", "--approve", "call_1", "--db", str(db)))
    assert refused.code == 2
    assert "call 'call_1' is an external tool's: give its result with --result call_1 TEXT" in refused.stderr

    server.script(text_reply("Signed."))
    done = await rxagent(
        *on(
            server,
            "respond",
            "lease",
            "--result",
            "call_1",
            "signed by Ada",
            "--tools",
            "none",
            "--db",
            str(db),
        )
    )

    assert done.code == 0, done.stderr
    assert done.stdout.endswith("Signed.\nMODEL_STOP · 1 step(s) · 11 in / 3 out tokens\n")
    assert server.requests[-1].body["messages"][-1]["content"] == "signed by Ada"


async def test_sessions_shows_a_waiting_session_and_what_answers_it(server: OpenAIServer) -> None:
    await waiting_session(server, "--session", "show-me")

    shown = await rxagent("sessions", "show-me")
    as_json = await rxagent("sessions", "show-me", "--json")

    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert re.fullmatch(
        r"session 'show-me': waiting for approval · 2 message\(s\) · updated \S+ \S+", lines[0]
    )
    assert lines[1:6] == [
        "user: What is 2 + 2?",
        "assistant:",
        '  ⚙ calculator({"expression": "2 + 2"})',
        "waiting:",
        '  call_1  calculator {"expression": "2 + 2"}  asks for approval (--ask calc*)',
    ]
    assert "run `rxagent respond show-me --approve call_1` or `--deny call_1`" in lines[6]
    session = json.loads(as_json.stdout)
    assert (session["session_id"], session["state"]) == ("show-me", "waiting_for_approval")
    [pending] = session["waiting"]
    assert (pending["kind"], pending["call"]["id"], pending["call"]["input"]) == (
        "ask", "call_1", {"expression": "2 + 2"}
    )  # fmt: skip
    assert [m["role"] for m in session["messages"]] == ["user", "assistant"]
    listed = await rxagent("sessions")
    assert re.search(r"^show-me  .* waiting for approval  2 +What is 2 \+ 2\?$", listed.stdout, re.MULTILINE)


async def test_run_and_piped_chat_on_a_waiting_session_say_what_to_run(server: OpenAIServer) -> None:
    _, command = await waiting_session(server, "--session", "w")
    asked = len(server.requests)

    again = await rxagent(*on(server, "run", "Hello?", *ASK, "--session", "w"))
    chat = await rxagent(*on(server, "chat", *ASK, "--session", "w"), stdin="y\nHello?\n")

    for done in (again, chat):
        assert done.code == ExitCode.WAITING, done.stderr
        assert advised(done.stderr) == command
        assert "PendingToolCallsError" not in done.stderr
        assert done.stdout == ""
    assert len(server.requests) == asked  # nothing was sent to the model, and nothing was answered
    assert "waiting for approval" in (await rxagent("sessions", "w")).stdout


async def test_chat_in_a_terminal_asks_about_waiting_calls_first(server: OpenAIServer) -> None:
    await waiting_session(server, "--session", "t")
    server.script(text_reply("It is 4."))
    controller, terminal_end = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rxagent", *on(server, "chat", *ASK, "--session", "t"),
        stdin=terminal_end, stdout=terminal_end, stderr=terminal_end, env=command_env(TERM="dumb"),
    )  # fmt: skip
    os.close(terminal_end)
    terminal = Terminal(controller)
    try:
        asked = await asyncio.to_thread(terminal.read_until, "? [y/N/a(lways)] ")
        assert 'allow calculator({"expression": "2 + 2"})? [y/N/a(lways)] ' in asked
        assert "you> " not in asked  # the calls come before any new input
        terminal.type("y\n")
        answered = await asyncio.to_thread(terminal.read_until, "you> ")
        assert "→ ok: 4" in answered
        assert "It is 4." in answered
        terminal.type("\x04")  # end of input
        code = await asyncio.wait_for(process.wait(), RUN_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(controller)
    assert code == 0
    assert server.requests[-1].body["messages"][-1]["content"] == "4"


async def test_a_chat_says_its_session_and_chat_session_goes_on_with_it(server: OpenAIServer) -> None:
    server.script(text_reply("Hello, Ada."), text_reply("You are Ada."))
    controller, terminal_end = pty.openpty()
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "rxagent", *on(server, "chat", "--tools", "none"),
        stdin=terminal_end, stdout=terminal_end, stderr=terminal_end, env=command_env(TERM="dumb"),
    )  # fmt: skip
    os.close(terminal_end)
    terminal = Terminal(controller)
    try:
        await asyncio.to_thread(terminal.read_until, "you> ")
        terminal.type("I am Ada.\n")
        await asyncio.to_thread(terminal.read_until, "you> ")
        terminal.type("\x04")  # end of input
        said = await asyncio.to_thread(terminal.read_until, "goes on with it")
        code = await asyncio.wait_for(process.wait(), RUN_TIMEOUT_S)
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        os.close(controller)
    assert code == 0
    found = re.search(r"this chat is session '([^']+)': `rxagent chat --session (\S+)` goes on with it", said)
    assert found, said
    assert found.group(1) == found.group(2)

    done = await rxagent(
        *on(server, "chat", "--tools", "none", "--session", found.group(1)), stdin="Who am I?\n"
    )

    assert done.code == 0, done.stderr
    assert "goes on with it" not in done.stderr  # a named session needs no reminder, and a pipe none
    sent = [m["content"] for m in server.requests[1].body["messages"] if m["role"] != "system"]
    assert sent == ["I am Ada.", "Hello, Ada.", "Who am I?"]


async def test_wrong_answers_are_refused_with_a_sentence_and_record_nothing(
    server: OpenAIServer, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = str(tmp_path / "sessions.db")
    _, command = await waiting_session(server, "--session", "s", "--db", db)
    recorded = await head_of(Path(db), "s")
    respond = [*command[:2], *command[4:]]  # `respond s` and the run's options, without an answer

    async def refused(*answer: str) -> str:
        done = await in_process(capsys, *respond, *answer)
        assert done.code == ExitCode.USAGE, (answer, done.stderr)
        assert done.stdout == ""
        assert await head_of(Path(db), "s") == recorded, answer
        return " ".join(done.stderr.split())

    assert "respond needs an answer: --approve CALL_ID" in await refused()
    assert "session 's' has no call 'call_9' (the calls it waits on: call_1)" in await refused(
        "--approve", "call_9"
    )
    assert (
        "call 'call_1' asks for approval: answer it with --approve call_1 or --deny call_1"
        in await refused("--result", "call_1", "4")
    )
    assert "two answers for tool call 'call_1'" in await refused("--approve", "call_1", "--deny", "call_1")
    assert "--args must be a JSON object, and it is not JSON: Expecting value" in await refused(
        "--approve", "call_1", "--args", "expression=2"
    )
    assert "--args must be a JSON object such as" in await refused("--approve", "call_1", "--args", "[1]")
    assert "not a list" in await refused("--approve", "call_1", "--args", '["2 + 2"]')
    assert "--args comes right after the --approve CALL_ID" in await refused("--args", "{}")
    assert "--args comes right after the --approve CALL_ID" in await refused(
        "--deny", "call_1", "--args", "{}"
    )
    assert "--args given twice for call 'call_1'" in await refused(
        "--approve", "call_1", "--args", "{}", "--args", "{}"
    )
    # Without the calculator, the run's --ask 'calc*' matches no tool: said first, as a usage error too.
    assert "--ask 'calc*' matches none of the tools (clock)" in await refused(
        "--approve", "call_1", "--tools", "clock"
    )
    without_ask = [word for word in respond if word not in ASK]
    done = await in_process(capsys, *without_ask, "--approve", "call_1", "--tools", "clock")
    assert done.code == ExitCode.USAGE, done.stderr
    assert "the tool 'calculator', which this command was not given" in " ".join(done.stderr.split())
    assert await head_of(Path(db), "s") == recorded
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    on_server = ("--base-url", server.base_url, "--model", "m")  # not the embedded model (not an llm test)
    unknown = await in_process(capsys, "respond", "nobody", "--approve", "call_1", "--db", db, *on_server)
    assert (unknown.code, unknown.stderr) == (
        2,
        f"rxagent: no session 'nobody' in {db} (`rxagent sessions` lists them)\n",
    )
    unknown = await in_process(capsys, "sessions", "nobody", "--db", db)
    assert (unknown.code, unknown.stderr) == (
        2,
        f"rxagent: no session 'nobody' in {db} (`rxagent sessions` lists them)\n",
    )
    nowhere = await in_process(
        capsys, "respond", "s", "--approve", "call_1", "--db", str(tmp_path / "none.db"), *on_server
    )
    assert nowhere.code == 2
    assert not (tmp_path / "none.db").exists()  # answering creates no store
    assert len(server.requests) == 1

    # Answered once, the call is answered: a second answer is refused, and so is approving it again.
    server.script(text_reply("It is 4."))
    assert (await in_process(capsys, *respond, "--approve", "call_1")).code == 0
    recorded = await head_of(Path(db), "s")
    assert "tool call 'call_1' was answered already: approved by run run_" in await refused(
        "--deny", "call_1"
    )
