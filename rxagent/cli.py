"""The ``rxagent`` command line: run an agent on the embedded model (or any OpenAI-compatible server).

``rxagent run "PROMPT"`` streams the answer, with tool calls and their results shown as they happen;
``rxagent chat`` is the same in a loop over the lines of standard input (one session, so it remembers);
``--json`` prints the event stream as JSON lines for other programs, and nothing else on standard output.
``python -m rxagent`` is the same command.

``--workspace DIR`` builds the agent with :class:`rxagent.harness.Harness`: it works in DIR with the file
tools and a todo list; ``--skills``, ``--shell`` (whose calls ask as ``--ask`` does) and ``--budget`` add the
other parts. Without ``--workspace`` they are usage errors, and the agent is the plain one.

Sessions live in one SQLite file in the user's data folder (:func:`~rxagent.session.default_db_path`;
``--db`` picks another store, ``--db :memory:`` none that outlives the command). ``run`` and ``chat`` start
a new session unless given ``--session NAME``; ``rxagent sessions`` lists and shows them, and a run that
stops for an approval or an external result says which ``rxagent respond`` command answers it (see
:mod:`rxagent.cli_sessions`).

What a model or a tool wrote is printed as plain text: never read as markup, and with terminal control
sequences removed (:func:`terminal_safe`), so a file the agent reads cannot style, relink or clear the
terminal. The exit code says how the run ended (:class:`ExitCode`).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import importlib.metadata
import json
import logging
import math
import os
import re
import signal
import sys
import textwrap
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import replace
from enum import IntEnum
from fnmatch import fnmatchcase
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rxagent.agent import AgentInput, AgentOptions, AnswerTakenError, ReActAgent, RunControl, ToolDecision
from rxagent.agent.middleware import AnyMiddleware
from rxagent.agent.sessions import session_key
from rxagent.cli_sessions import (
    DENIED,
    add_answer_options,
    answer_advice,
    list_sessions,
    make_default_folder,
    missing_file,
    new_session_name,
    refuse_answers,
    show_session,
    unknown_session,
    waiting_calls,
)
from rxagent.context import RuntimeContext
from rxagent.events import (
    AgentEvent,
    AgentResult,
    ErrorEvent,
    RetryScheduled,
    RunReason,
    TextDelta,
    ToolCallCompleted,
    ToolPermissionAsked,
    ToolResult,
    ToolSuspended,
    event_to_json,
)
from rxagent.messages import ToolUseBlock
from rxagent.model.types import ChatModel, ForceTool, ToolChoice
from rxagent.operators import to_async_iterator
from rxagent.redaction import mask_url
from rxagent.session import MemoryStore, check_store
from rxagent.session.open import default_db_path, store_name
from rxagent.state import PendingCall
from rxagent.tools.demo import demo_tools
from rxagent.tools.permissions import Permissions
from rxagent.tools.toolkit import Toolkit

if TYPE_CHECKING:
    from rich.console import Console

    from rxagent.harness import Harness
    from rxagent.serve import ServeSettings
    from rxagent.tools import Tool

__all__ = ["ExitCode", "TerminalSafeStream", "exit_code_for", "main", "terminal_safe"]

_SYSTEM = "You are a helpful assistant. Use a tool when it helps; answer briefly."
_DEFAULT_TOOL_TIMEOUT_S = 30.0


class ExitCode(IntEnum):
    """How ``rxagent`` ends. ``chat`` ends with the code of its last run (``ANSWER`` if none ran)."""

    ANSWER = 0
    """The run answered: ``MODEL_STOP``, ``MAX_ITERATIONS``, ``TOOL_RETURN_DIRECT``, ``STRUCTURED_OUTPUT``."""
    ERROR = 1
    """The run failed (an error, or reason ``ERROR``), or the command could not start it."""
    USAGE = 2
    """The command line was wrong (argparse's code)."""
    NO_ANSWER = 3
    """The run ended without an answer: ``NO_ANSWER``, ``STOPPED``."""
    WAITING = 4
    """The run waits for an approval or an external result: ``PERMISSION_ASKING``, ``TOOL_SUSPENDED``."""
    INTERRUPTED = 130
    """Ctrl-C: the run ended ``INTERRUPTED`` (or the command was stopped at once by a second Ctrl-C)."""


_EXIT_CODES: dict[RunReason, ExitCode] = {
    "MODEL_STOP": ExitCode.ANSWER,
    "MAX_ITERATIONS": ExitCode.ANSWER,
    "TOOL_RETURN_DIRECT": ExitCode.ANSWER,
    "STRUCTURED_OUTPUT": ExitCode.ANSWER,
    "ERROR": ExitCode.ERROR,
    "NO_ANSWER": ExitCode.NO_ANSWER,
    "STOPPED": ExitCode.NO_ANSWER,
    "PERMISSION_ASKING": ExitCode.WAITING,
    "TOOL_SUSPENDED": ExitCode.WAITING,
    "INTERRUPTED": ExitCode.INTERRUPTED,
}


def exit_code_for(reason: RunReason) -> ExitCode:
    """The exit code of a run that ended with ``reason`` (see :class:`ExitCode`)."""
    return _EXIT_CODES[reason]


_EPILOG = f"""\
exit codes:
  {ExitCode.ANSWER:<4} the run answered (MODEL_STOP, MAX_ITERATIONS, TOOL_RETURN_DIRECT, STRUCTURED_OUTPUT)
  {ExitCode.ERROR:<4} the run failed (an error, or reason ERROR), or could not start
  {ExitCode.USAGE:<4} the command line was wrong
  {ExitCode.NO_ANSWER:<4} the run ended without an answer (NO_ANSWER, STOPPED)
  {ExitCode.WAITING:<4} the run waits for an approval or an external result
       (PERMISSION_ASKING, TOOL_SUSPENDED)
  {ExitCode.INTERRUPTED:<4} Ctrl-C: the run ends INTERRUPTED and its session is saved
       (a second Ctrl-C quits at once)
`chat` exits with the code of its last run; Ctrl-C there ends the running turn and the chat goes on.

tool timeout: a tool still running after --tool-timeout seconds gets an error result and the run goes on,
on time. A synchronous tool's thread cannot be stopped: it may run on in the background until the command
exits (which does not wait for it).
"""


# ---- terminal-safe text ------------------------------------------------------------------------------

_ESCAPE_SEQUENCE = re.compile(
    r"""
      \x1b\[ [0-?]* [ -/]* [@-~]?            # CSI: colours, cursor moves, screen clears
    | \x1b\] [^\x07\x1b\x9c]* (?:\x07|\x1b\\|\x9c)?   # OSC: titles, hyperlinks (to BEL or ST)
    | \x1b [PX^_] [^\x1b\x9c]* (?:\x1b\\|\x9c)?      # DCS, SOS, PM, APC strings
    | \x1b [ -/]* [0-~]?                     # any other escape (charset switches, resets, ...)
    | \x9b [0-?]* [ -/]* [@-~]?              # 8-bit CSI
    | \x9d [^\x07\x9c]* (?:\x07|\x9c)?       # 8-bit OSC
    | [\x90\x98\x9e\x9f] [^\x9c]* \x9c?      # 8-bit DCS, SOS, PM, APC
    """,
    re.VERBOSE,
)
# Every other C0 and C1 control but tab and newline, DEL, and the bidirectional overrides that can make
# text read differently from what it is.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def terminal_safe(text: str) -> str:
    """``text`` made safe to print to a terminal: it can neither style nor control it.

    Escape sequences (ANSI colours and blinking, cursor moves, screen clears, OSC titles and hyperlinks,
    DCS strings, and their 8-bit forms) are removed; any other control character (C0 and C1 but tab and
    newline, DEL, bidirectional overrides) is shown as a visible escape such as ``\\x07``; ``\\r\\n``
    becomes ``\\n``. Markup such as ``[bold]`` is left as the text it is (the command never reads markup).

    Example:
        >>> terminal_safe("\\x1b[5mALERT\\x1b[0m \\x1b]8;;http://x\\x07link\\x1b]8;;\\x07 bell\\x07")
        'ALERT link bell\\\\x07'
    """
    return _strip(text.replace("\r\n", "\n"))


def _strip(text: str) -> str:
    """:func:`terminal_safe` of text whose ``\\r\\n`` are already ``\\n``."""
    return _show_controls(_ESCAPE_SEQUENCE.sub("", text))


def _show_controls(text: str) -> str:
    return _CONTROL.sub(lambda match: ascii(match.group())[1:-1], text)


# Where a sequence ends can depend on what comes after it: a CSI or another escape ends at its final byte,
# a string (OSC, DCS, SOS, PM, APC) at its terminator. Until then the stream holds it back; what decides
# how it goes on is its introducer and, in a CSI or another escape, whether an intermediate byte came (then
# no parameter byte may follow). A string's body is removed whatever follows, so it is not kept: a
# sequence left open for a long stream costs a few characters, not the stream.
_INTRODUCER = re.compile(r"\x1b[\[\]PX^_]?|[\x90\x98\x9b\x9d\x9e\x9f]")
_FINAL_BYTES = {"\x1b[": ("@", "~"), "\x9b": ("@", "~"), "\x1b": ("0", "~")}
_TERMINATORS = {
    "\x1b]": ("\x07", "\x1b\\", "\x9c"),
    "\x9d": ("\x07", "\x9c"),
    **dict.fromkeys(("\x1bP", "\x1bX", "\x1b^", "\x1b_"), ("\x1b\\", "\x9c")),
    **dict.fromkeys(("\x90", "\x98", "\x9e", "\x9f"), ("\x9c",)),
}


def _still_open(sequence: str) -> str | None:
    """What to hold of ``sequence``, a match of ``_ESCAPE_SEQUENCE`` at the end of the text so far: the
    part that decides how it goes on, or ``None`` when it is complete (nothing that follows changes it)."""
    introducer = _INTRODUCER.match(sequence)
    assert introducer is not None  # every alternative of _ESCAPE_SEQUENCE starts with one
    opener, rest = introducer.group(), sequence[introducer.end() :]
    final = _FINAL_BYTES.get(opener)
    if final is None:
        return None if rest.endswith(_TERMINATORS[opener]) else opener
    last = rest[-1:]
    if last and final[0] <= last <= final[1]:
        return None
    return opener + last if " " <= last <= "/" else opener


class TerminalSafeStream:
    """:func:`terminal_safe` over text that arrives in pieces (a model's deltas): the pieces it returns,
    joined, are ``terminal_safe`` of the pieces it was fed, joined, however the text was split.

    An escape sequence split across two pieces is removed whole: the stream holds back an incomplete
    sequence at the end of a piece (and a ``\\r`` that a ``\\n`` may follow) until the next piece says
    how it ends, or until :meth:`end`, where an incomplete one is removed as ``terminal_safe`` removes it.
    Ordinary text, ``[`` and ``;`` included, is never held.

    Example:
        >>> stream = TerminalSafeStream()
        >>> [stream.feed(piece) for piece in ("a \\x1b", "[1mbold\\x1b]0;ti", "tle\\x07 done\\x1b")]
        ['a ', 'bold', ' done']
        >>> stream.end()
        ''
    """

    def __init__(self) -> None:
        self._held = ""
        """Normalised text (``\\r\\n`` made ``\\n``) not shown yet: an open escape sequence, or ``""``."""
        self._cr = False
        """The last piece ended with ``\\r``, not yet normalised (the next may start with ``\\n``)."""

    def feed(self, text: str) -> str:
        """The safe text of ``text`` that can be shown now (possibly ``""``)."""
        if self._cr:
            text = "\r" + text
        self._cr = text.endswith("\r")
        if self._cr:
            text = text[:-1]
        text = self._held + text.replace("\r\n", "\n")
        self._held = ""
        kept: list[str] = []
        shown = 0
        for match in _ESCAPE_SEQUENCE.finditer(text):
            kept.append(text[shown : match.start()])
            shown = match.end()
            if shown == len(text):
                self._held = _still_open(match.group()) or ""
        kept.append(text[shown:])
        return _show_controls("".join(kept))

    def end(self) -> str:
        """The rest at the end of the stream (an open sequence is removed); the stream starts afresh."""
        text = self._held + ("\r" if self._cr else "")
        self._held, self._cr = "", False
        return _strip(text)


# ---- the command line --------------------------------------------------------------------------------


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (where it has one) and keeps the epilog's lines as written."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help = action.help or ""
        if action.default in (None, False, [], argparse.SUPPRESS) or "%(default)" in help:
            return help
        return f"{help} (default: %(default)s)"


# The option types say what is wrong in a sentence (argparse would name the function: "invalid _port value").


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {text!r}")
    return value


def _whole_number(text: str, least: int, most: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < least or (most is not None and value > most):
        wanted = f"between {least} and {most}" if most is not None else f"{least} or more"
        raise argparse.ArgumentTypeError(f"must be a whole number {wanted}, not {text!r}")
    return value


def _positive(text: str) -> int:
    return _whole_number(text, 1)


def _http_url(text: str) -> str:
    parts = urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise argparse.ArgumentTypeError(
            f"must be an http(s) URL such as http://127.0.0.1:8080/v1, not {mask_url(text)!r}"
        )
    return text


def _file(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no file at {text!r}")
    return text


def _folder(text: str) -> str:
    """An existing folder, as an absolute path (so the `respond` command a run names works from anywhere).
    A missing one is refused rather than made: a typo would otherwise become a new tree."""
    path = Path(text) if text and "\x00" not in text else None
    if path is None or not path.is_dir():
        problem = (
            f"{text!r} is not a folder" if path is not None and path.exists() else f"no folder at {text!r}"
        )
        raise argparse.ArgumentTypeError(f"{problem}: give a folder that exists (make it first)")
    return os.path.abspath(text)


def _version() -> str:
    try:
        return f"rxagent {importlib.metadata.version('rxagent')}"
    except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "rxagent (version unknown: the package is not installed)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="rxagent",
        description="Run an rxagent agent from the terminal.",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=_version(), help="print the version and exit")
    commands = parser.add_subparsers(dest="command", required=True)
    storage = argparse.ArgumentParser(add_help=False)
    storage.add_argument(
        "--db",
        default=os.environ.get("RXAGENT_DB") or str(default_db_path()),
        metavar="PATH_OR_URL",
        help="where sessions live: a SQLite file (created if missing), postgresql://…, or :memory: (kept "
        "only while the command runs); the default is $RXAGENT_DB, else sessions.db in the user's data "
        "folder ($XDG_DATA_HOME/rxagent, else ~/.local/share/rxagent)",
    )
    common = argparse.ArgumentParser(add_help=False, parents=[storage])
    common.add_argument(
        "--model",
        default="local",
        help="'local' (the embedded GGUF) or a model name on --base-url (there, 'local' takes the one "
        "model the server lists)",
    )
    common.add_argument(
        "--base-url", type=_http_url, help="an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1"
    )
    common.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    common.add_argument(
        "--gguf", type=_file, help="a GGUF file for --model local (default: $RXAGENT_GGUF, else SmolLM2)"
    )
    common.add_argument(
        "--tools", default="calculator,clock", help="demo tools: calculator,clock,files (or 'none')"
    )
    common.add_argument("--files-root", default=".", help="the only directory the 'files' tool may read")
    common.add_argument(
        "--ask",
        action="append",
        default=[],
        metavar="GLOB",
        help="calls of tools matching GLOB need your approval: `chat` asks, `run` stops with exit code "
        f"{ExitCode.WAITING} (repeatable)",
    )
    common.add_argument("--system", default=_SYSTEM, help="the system prompt")
    common.add_argument(
        "--max-iters", type=_positive, default=4, help="reasoning steps before the summarising turn"
    )
    common.add_argument(
        "--max-tokens", type=_positive, default=256, help="answer length limit per model call"
    )
    common.add_argument(
        "--tool-timeout",
        type=_seconds,
        default=_DEFAULT_TOOL_TIMEOUT_S,
        metavar="SECONDS",
        help="a tool still running after this gets an error result and the run goes on (a synchronous "
        "tool's thread may run on in the background)",
    )
    common.add_argument(
        "--require-tool",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="make the first step call a tool",
    )
    common.add_argument(
        "--first-tool",
        metavar="NAME",
        help="make the first step call the tool NAME (a well-formed call: the embedded model's grammar "
        "allows nothing else)",
    )
    common.add_argument(
        "--workspace",
        type=_folder,
        metavar="DIR",
        help="work in DIR, a folder that exists: file tools (read, write, edit, list, glob, grep) that "
        "cannot leave it, and a todo list kept in the session",
    )
    common.add_argument(
        "--workspace-per-session",
        action="store_true",
        help="with --workspace: each session works in a folder of its own below DIR (made when first used)",
    )
    common.add_argument(
        "--skills",
        action="append",
        default=[],
        metavar="DIR",
        help="a folder of skills, each a sub-folder with a SKILL.md: the system prompt lists their names "
        "and descriptions, use_skill loads one (repeatable; needs --workspace)",
    )
    common.add_argument(
        "--shell",
        action="store_true",
        help="a shell tool whose every command needs your approval (`chat` asks, `run` stops with exit code "
        f"{ExitCode.WAITING}), run in the workspace under bubblewrap: the system read-only, no network "
        "(needs --workspace)",
    )
    common.add_argument(
        "--shell-unsandboxed",
        action="store_true",
        help="with --shell, where bubblewrap is not installed: run commands without a sandbox, with this "
        "command's rights and network",
    )
    common.add_argument(
        "--budget",
        type=_positive,
        metavar="TOKENS",
        help="the model's context: every request (system prompt, messages, tool schemas) and the reply fit "
        "in it; a large tool result goes to a file of the workspace, and a request still too large is "
        "compressed and retried once (more than --max-tokens; needs --workspace)",
    )
    events_json = argparse.ArgumentParser(add_help=False)
    events_json.add_argument(
        "--json", action="store_true", help="print every event as a JSON line, and nothing else, on stdout"
    )
    one_session = argparse.ArgumentParser(add_help=False, parents=[events_json])
    one_session.add_argument(
        "--session",
        metavar="NAME",
        help="continue this session (default: a new one; `rxagent sessions` lists them)",
    )
    run = commands.add_parser(
        "run",
        parents=[common, one_session],
        help="answer one prompt",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    run.add_argument("prompt")
    commands.add_parser(
        "chat",
        parents=[common, one_session],
        help="chat over the lines of stdin (an empty line or end of input quits)",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    sessions = commands.add_parser(
        "sessions",
        parents=[storage],
        help="list the stored sessions, or show one: where it stands, its messages, the calls it waits on",
        formatter_class=_HelpFormatter,
    )
    sessions.add_argument(
        "session", nargs="?", metavar="SESSION", help="show this session (default: list all)"
    )
    sessions.add_argument(
        "--json",
        action="store_true",
        help="one JSON object a line: a summary per session, or the whole session shown",
    )
    respond = commands.add_parser(
        "respond",
        parents=[common, events_json],
        help="answer the calls a session waits on (approve, deny, give a result) and carry its run on",
        description="Answer the calls SESSION waits on, then carry its run on, shown as `run` shows it "
        "(same --json, same exit codes). The answers are checked first: a call that is not waiting, the "
        "wrong kind of answer, or --args the tool's schema refuses end the command with exit code "
        f"{ExitCode.USAGE} and record nothing. Give it the model and tool options the run had (the command "
        f"that stopped said which); a denied call's result tells the model '{DENIED}'.",
        epilog=_EPILOG,
        formatter_class=_HelpFormatter,
    )
    respond.add_argument("session", metavar="SESSION", help="the session to answer")
    add_answer_options(respond)
    serve = commands.add_parser(
        "serve",
        parents=[common],
        help="serve the agent's sessions on HTTP: the session API, its live feed, and AG-UI",
        description="Serve the agent's sessions on HTTP (needs the extra: pip install 'rxagent[serve]'). "
        "Prints 'listening on http://HOST:PORT' first on stdout; Ctrl-C or SIGTERM stops it cleanly "
        "(running runs are interrupted and saved). Several servers may share one --db postgresql://… "
        "(or one SQLite file on one host): each serves every session, a client on any of them follows "
        "runs the others execute, and runs on one session never overlap.",
        formatter_class=_HelpFormatter,
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="the interface to listen on (off loopback: --token)"
    )
    serve.add_argument("--port", type=_port, default=8765, help="the port (0 picks a free one)")
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="every request must carry the token this file holds (its first line; else $RXAGENT_TOKEN; "
        "required off loopback and behind a proxy)",
    )
    serve.add_argument(
        "--token",
        help="the token itself: every user of this machine sees it in `ps` (prefer --token-file or "
        "$RXAGENT_TOKEN)",
    )
    serve.add_argument(
        "--trusted-proxy",
        dest="trusted_proxies",
        action="append",
        default=[],
        metavar="ADDRESSES",
        help="a reverse proxy's address or network (repeatable, or comma-separated): from it alone, "
        "X-Forwarded-Proto, -Host and -For say a request's scheme, host and client (needs a token)",
    )
    serve.add_argument(
        "--forwarded-allow-ips",
        dest="trusted_proxies",
        action="append",
        metavar="ADDRESSES",
        help="the same as --trusted-proxy (the name uvicorn and gunicorn give it)",
    )
    serve.add_argument(
        "--gc-threshold",
        type=_count,
        default=SERVE_GC_THRESHOLD,
        metavar="N",
        help="the cyclic garbage collector's first threshold while serving (0: Python's own, 700); many "
        "runs at once keep many objects alive, which the default makes the collector walk again and again",
    )
    serve.add_argument(
        "--log-json",
        action="store_true",
        help="log lines on stderr as JSON objects, with the trace, run and session ids of the run they "
        "are about",
    )
    serve.add_argument(
        "--otel",
        action="store_true",
        help="OpenTelemetry spans of every run (GenAI conventions) on the global tracer provider: run "
        "under `opentelemetry-instrument`, or set a provider up before calling rxagent.cli.main; needs "
        "the extra rxagent[otel]",
    )
    serve.add_argument(
        "--lease-ttl",
        type=_seconds,
        default=30.0,
        metavar="SECONDS",
        help="how long a run's hold on its session lasts unrenewed (renewed every third of it): when "
        "several servers share one --db and one dies mid-run, the others take its sessions over this long "
        "after",
    )
    serve.add_argument(
        "--allow-origin",
        dest="allow_origins",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="let pages of this origin (http://localhost:5173) call the server from the browser (CORS; "
        "repeatable); they still need the token, sent as 'Authorization: Bearer …'",
    )
    serve.add_argument(
        "--cancel-on-disconnect",
        action="store_true",
        help="an AG-UI client that goes away before its run ends interrupts the run (a request may say "
        "otherwise with forwardedProps.cancelOnDisconnect); by default the run goes on",
    )
    parser.epilog = f"{_options_by_command(commands.choices)}\n{_EPILOG}"
    return parser


def _count(text: str) -> int:
    return _whole_number(text, 0)


def _port(text: str) -> int:
    return _whole_number(text, 0, 65535)


def _options_by_command(commands: dict[str, argparse.ArgumentParser]) -> str:
    """Every command's arguments for ``rxagent --help``, each group under the commands that take it."""
    takers: dict[str, list[str]] = {}
    for name, command in commands.items():
        for action in command._actions:  # pyright: ignore[reportPrivateUsage]  # argparse has no public list
            if action.help != argparse.SUPPRESS and "--help" not in action.option_strings:
                takers.setdefault(_argument_text(action), []).append(name)
    groups: dict[tuple[str, ...], list[str]] = {}
    for argument, names in takers.items():
        groups.setdefault(tuple(names), []).append(argument)
    lines = ["arguments of each command (`rxagent COMMAND --help` says what each does, and its default):"]
    for names, arguments in groups.items():
        # No-break spaces keep an option and its value's name on one line.
        text = "  ".join(argument.replace(" ", "\N{NO-BREAK SPACE}") for argument in arguments)
        wrapped = textwrap.wrap(
            text,
            104,
            initial_indent=f"  {', '.join(names)}: ",
            subsequent_indent="      ",
            break_on_hyphens=False,
        )
        lines += [line.replace("\N{NO-BREAK SPACE}", " ") for line in wrapped]
    return "\n".join(lines) + "\n"


def _argument_text(action: argparse.Action) -> str:
    """``PROMPT``, ``--json``, ``--[no-]require-tool``, ``--port PORT``."""
    if not action.option_strings:
        return str(action.metavar or action.dest).upper()
    option = max(action.option_strings, key=len)
    if isinstance(action, argparse.BooleanOptionalAction):
        return option.replace("--no-", "--[no-]", 1)
    if action.nargs == 0:
        return option
    metavar = action.metavar or action.dest.upper()
    return f"{option} {' '.join(metavar) if isinstance(metavar, tuple) else metavar}"


def _model(args: argparse.Namespace) -> ChatModel:
    if args.base_url:
        from rxagent.model.openai import OpenAIChatModel

        name = "default" if args.model == "local" else args.model
        return OpenAIChatModel(name, base_url=args.base_url, api_key_env=args.api_key_env)
    from rxagent.model.llama_cpp import LlamaCppModel

    return LlamaCppModel(args.gguf, max_tokens=args.max_tokens)


def _tool_names(args: argparse.Namespace) -> list[str]:
    return [] if args.tools in ("", "none") else [n.strip() for n in args.tools.split(",") if n.strip()]


def _harness(parser: argparse.ArgumentParser, args: argparse.Namespace) -> Harness | None:
    """The harness ``--workspace`` asks for (``None``: none), its options checked; a wrong one is a usage
    error in a sentence."""
    if args.workspace is None:
        given = [
            flag
            for flag, value in (
                ("--workspace-per-session", args.workspace_per_session),
                ("--skills", args.skills),
                ("--shell", args.shell),
                ("--shell-unsandboxed", args.shell_unsandboxed),
                ("--budget", args.budget is not None),
            )
            if value
        ]
        if given:
            parser.error(f"{', '.join(given)} {'needs' if len(given) == 1 else 'need'} --workspace DIR")
        return None
    if args.shell_unsandboxed and not args.shell:
        parser.error("--shell-unsandboxed needs --shell")
    if args.budget is not None and args.budget <= args.max_tokens:
        parser.error(
            f"--budget {args.budget} leaves no room for a request: the reply's {args.max_tokens} tokens "
            "(--max-tokens) must fit in it too"
        )
    from rxagent.harness import ContextBudget, Harness, Shell, ShellUnavailableError, SkillError, Workspace

    budget = None
    if args.budget is not None:
        room = args.budget - args.max_tokens
        # A result over a quarter of the room a request has (2 000 tokens at most, the budget's default)
        # goes to a file, so that one result never crowds out the conversation.
        budget = ContextBudget(
            args.budget, reply_reserve=args.max_tokens, evict_over_tokens=max(1, min(2_000, room // 4))
        )
    shell = Shell(timeout=args.tool_timeout, unsandboxed=args.shell_unsandboxed) if args.shell else False
    try:
        return Harness(
            workspace=Workspace(args.workspace, per_session=args.workspace_per_session),
            shell=shell,
            skills=args.skills,
            budget=budget,
        )
    except SkillError as error:
        parser.error(f"--skills: {error}")
    except ShellUnavailableError as error:
        parser.error(f"--shell: {error} (here, that is --shell-unsandboxed)")


def _every_tool_name(tools: list[Tool], harness: Harness | None) -> tuple[str, ...]:
    """The names of the tools the agent gets: the demo tools, then the harness's."""
    if harness is None:
        return Toolkit(tools).names
    from rxagent.harness import compose_parts

    return Toolkit([*tools, *compose_parts(harness.parts).tools]).names


def _first_tool_choice(
    args: argparse.Namespace, tools: list[Tool], harness: Harness | None
) -> ToolChoice | None:
    """The first step's tool choice: ``--first-tool NAME`` forces that tool, ``--require-tool`` any tool."""
    if args.first_tool:
        return ForceTool(args.first_tool)
    return "required" if args.require_tool and (tools or harness is not None) else None


def _agent(
    args: argparse.Namespace, model: ChatModel, tools: list[Tool], harness: Harness | None
) -> ReActAgent:
    options = AgentOptions(
        max_iters=args.max_iters,
        max_tokens=args.max_tokens,
        tool_timeout=args.tool_timeout,
        first_tool_choice=_first_tool_choice(args, tools, harness),
    )
    lease_ttl: float | None = getattr(args, "lease_ttl", None)  # serve's option
    if lease_ttl is not None:
        options = replace(options, lease_ttl=lease_ttl)
    permissions = Permissions()
    for pattern in args.ask:
        permissions = permissions.ask(pattern, reason=f"--ask {pattern}")
    middleware: list[AnyMiddleware] = []
    if getattr(args, "otel", False):
        from rxagent.telemetry import Telemetry

        middleware.append(Telemetry())
    make_default_folder(args.db)
    if harness is not None:
        return harness.agent(
            model,
            tools,
            system_prompt=args.system,
            name="rxagent-cli",
            options=options,
            permissions=permissions,
            middleware=middleware,
            store=args.db,
        )
    return ReActAgent(
        model,
        Toolkit(tools),
        system_prompt=args.system,
        name="rxagent-cli",
        options=options,
        permissions=permissions,
        middleware=middleware,
        store=args.db,
    )


# ---- showing a run -----------------------------------------------------------------------------------


def _call_text(call: ToolUseBlock) -> str:
    arguments = call.raw_arguments if call.input is None else json.dumps(call.input, ensure_ascii=False)
    return f"{call.name}({terminal_safe(arguments)})"


class _Output(ABC):
    """Where a run's events and the command's notes go."""

    @abstractmethod
    def show(self, event: AgentEvent) -> None:
        """Show one event of the run."""

    def note(self, text: str) -> None:
        """A note for the person at the terminal (always on stderr)."""
        print(f"rxagent: {terminal_safe(text)}", file=sys.stderr, flush=True)

    def failed(self, error: BaseException, result: AgentResult | None) -> None:
        """The run's stream failed with ``error`` (after ``result``, if the run emitted one)."""
        self.note(f"{type(error).__name__}: {error}")


class _JsonLines(_Output):
    """Every event as one JSON line on stdout; notes and errors on stderr."""

    def show(self, event: AgentEvent) -> None:
        sys.stdout.write(event_to_json(event) + "\n")
        sys.stdout.flush()


class _Display(_Output):
    """A run as it happens, for people: the streamed answer, each tool call and its result, the outcome.

    Model and tool text is printed as text (never as markup) through :func:`terminal_safe`; only the
    command's own labels are styled, and only when the console does colour. Lines are never wrapped by
    the command (a terminal wraps them itself; a file or a pipe gets them whole).
    """

    def __init__(self, console: Console) -> None:
        from rich.text import Text

        self.console = console
        self.at_line_start = True
        self._text = Text  # rich loads only for this display, not for --json
        self._answer = TerminalSafeStream()  # a sequence split across two deltas is removed whole

    def _print_answer(self, text: str) -> None:
        if text:
            self.console.print(self._text(text), end="")
            self.at_line_start = text.endswith("\n")

    def _end_answer(self) -> None:
        """The streamed text ends here: show what the stream held back (a ``\\r``, say)."""
        self._print_answer(self._answer.end())

    def _line(self, *parts: str | tuple[str, str]) -> None:
        self._end_answer()
        if not self.at_line_start:
            self.console.print()
        self.console.print(self._text.assemble(*parts))
        self.at_line_start = True

    def show(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self._print_answer(self._answer.feed(event.text))
        elif isinstance(event, ToolCallCompleted):
            self._line(("⚙ ", "bold cyan"), (_call_text(event.call), "cyan"))
        elif isinstance(event, ToolPermissionAsked):
            self._line(
                ("? ", "bold yellow"), _call_text(event.call), (f" needs approval ({event.reason})", "yellow")
            )
        elif isinstance(event, ToolSuspended):
            self._line(
                ("⏸ ", "bold yellow"), _call_text(event.call), (" waits for an external result", "yellow")
            )
        elif isinstance(event, ToolResult):
            result = event.result
            text = result.text.rstrip("\n")
            if result.status != "ok":
                text = text.removeprefix("Error: ")  # the status already says so
            style = "green" if result.status == "ok" else "red"
            self._line((f"  → {result.status}: ", style), terminal_safe(text).replace("\n", "\n    "))
        elif isinstance(event, RetryScheduled):
            self.note(f"retrying in {event.delay_s:.1f}s: {event.error}")
        elif isinstance(event, ErrorEvent):
            self.note(f"{event.error_type}: {event.message}")
        elif isinstance(event, AgentResult):
            usage = event.usage
            summary = (
                f"{event.reason} · {event.iterations} step(s) · {usage.input_tokens} in / "
                f"{usage.output_tokens} out tokens"
            )
            if event.detail and event.reason != "ERROR":  # an error's ErrorEvent has said it already
                summary += f" · {event.detail}"
            self._line((terminal_safe(summary), "dim"))

    def note(self, text: str) -> None:
        if not self.at_line_start:  # end the streamed line first, so the note stands on its own
            self.console.print()
            self.at_line_start = True
        super().note(text)

    def failed(self, error: BaseException, result: AgentResult | None) -> None:
        self._end_answer()
        if result is not None and result.reason == "ERROR":
            return  # its ErrorEvent and result line already said it
        super().failed(error, result)


# ---- running ----------------------------------------------------------------------------------------


class _DaemonThreads(ThreadPoolExecutor):
    """The command's default executor: each call in a daemon thread of its own.

    A synchronous tool that outlives its timeout keeps running in its thread. With the standard pool,
    ``asyncio.run`` and the interpreter wait for that thread at exit, so the command would hang after the
    run had ended on time; daemon threads let it exit. Also runs the blocking reads of stdin.
    """

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future: Future[Any] = Future()

        def work() -> None:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as error:
                future.set_exception(error)

        threading.Thread(target=work, name="rxagent-cli-worker", daemon=True).start()
        return future

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """Nothing to wait for: the threads are daemons."""


@contextmanager
def _ctrl_c_interrupts(control: RunControl, output: _Output) -> Generator[None]:
    """While the block runs, Ctrl-C interrupts the run (it ends ``INTERRUPTED`` and is saved); a second
    Ctrl-C stops the command at once."""
    loop = asyncio.get_running_loop()
    presses = 0

    def on_ctrl_c() -> None:
        nonlocal presses
        presses += 1
        if presses > 1:
            raise KeyboardInterrupt
        output.note("interrupting the run (Ctrl-C again to quit at once)")
        control.interrupt()

    previous = signal.getsignal(signal.SIGINT)
    try:
        loop.add_signal_handler(signal.SIGINT, on_ctrl_c)
    except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no such signals here
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        signal.signal(signal.SIGINT, previous)


async def _run_once(
    agent: ReActAgent, input: AgentInput, ctx: RuntimeContext, output: _Output
) -> tuple[ExitCode, AgentResult | None]:
    """One run, shown as it happens; its exit code and its result (``None`` if it emitted none)."""
    control = RunControl()
    result: AgentResult | None = None
    with _ctrl_c_interrupts(control, output):
        try:
            async for event in to_async_iterator(agent.stream_events(input, ctx, control=control)):
                output.show(event)
                if isinstance(event, AgentResult):
                    result = event
        except BrokenPipeError:  # the reader of stdout went away: not the run's failure
            # Leaving the loop cancelled the run, which records its end in the background: wait for that
            # (the session's next turn starts once it is done) before the command closes the store.
            await agent.keeper.settled(session_key(ctx))
            raise
        except AnswerTakenError as taken:  # refused as it took the session: another answer came first
            output.note(str(taken))
            return ExitCode.USAGE, None
        except Exception as error:
            # A failed run may end with an AgentResult (reason ERROR) before its error, or with the error
            # alone: either way the run failed.
            output.failed(error, result)
            return ExitCode.ERROR, result
    if result is None:
        output.note("the run ended without a result")
        return ExitCode.ERROR, None
    return exit_code_for(result.reason), result


class _Prompter:
    """Reads the lines of stdin; shows a prompt only to a person (a terminal), and never on a JSON stdout."""

    def __init__(self, json_lines: bool) -> None:
        self.interactive = sys.stdin.isatty()
        self.json_lines = json_lines

    async def line(self, prompt: str, *, always: bool = False) -> str | None:
        """The next line (``None`` at the end of input). ``always`` shows the prompt to piped input too."""
        if self.interactive and not self.json_lines:
            shown_by_input = prompt  # on the terminal, where line editing knows where the text starts
        else:
            shown_by_input = ""
            if self.interactive or always:
                sys.stderr.write(prompt)
                sys.stderr.flush()
        try:
            return await asyncio.to_thread(input, shown_by_input)
        except EOFError:
            return None


async def _chat(
    agent: ReActAgent, ctx: RuntimeContext, output: _Output, json_lines: bool, advice: _Advice
) -> ExitCode:
    """Runs over the lines of stdin on one session. Calls the session already waits on come first: a
    person on a terminal is asked about them; piped input (meant for the model) is not read as answers,
    and an external call's result is not typed here, so then the chat says what answers them and ends with
    :attr:`ExitCode.WAITING`."""
    prompter = _Prompter(json_lines)
    code = ExitCode.ANSWER
    waiting = waiting_calls(await agent.sessions.state(ctx))
    if waiting and (not prompter.interactive or any(p.kind != "ask" for p in waiting)):
        output.note(advice(waiting))
        return ExitCode.WAITING
    asking = [p.call for p in waiting]
    while True:
        if asking:
            decisions = await _decide(prompter, asking)
            if decisions is None:  # the input ended before every call had an answer
                output.note(advice(waiting_calls(await agent.sessions.state(ctx))))
                return ExitCode.WAITING
            code, result = await _run_once(agent, decisions, ctx, output)
        else:
            line = await prompter.line("you> ")
            if line is None or not line.strip():
                return code
            code, result = await _run_once(agent, line, ctx, output)
        asking = list(result.pending) if result is not None and result.reason == "PERMISSION_ASKING" else []


async def _decide(prompter: _Prompter, calls: Sequence[ToolUseBlock]) -> list[ToolDecision] | None:
    """Ask about each call in turn: allow it (``y``), refuse it (anything else), or allow it and the tool's
    later calls in this session without asking (``a``: the rule the session's log keeps, as ``respond
    --always``; the tool's other calls asked about here are then answered by it). ``None``: the input
    ended first."""
    decisions: list[ToolDecision] = []
    allowed: set[str] = set()
    for call in calls:
        if call.name in allowed:  # the rule answered just now approves it with the others (agent.grants)
            continue
        answer = await prompter.line(f"allow {_call_text(call)}? [y/N/a(lways)] ", always=True)
        if answer is None:
            return None
        said = answer.strip().lower()
        always = said in ("a", "always")
        allow = always or said in ("y", "yes")
        decisions.append(ToolDecision(call.id, allow=allow, reason="" if allow else DENIED, always=always))
        if always:
            allowed.add(call.name)
    return decisions


async def _main(args: argparse.Namespace, tools: list[Tool], harness: Harness | None) -> ExitCode:
    from rich.console import Console

    asyncio.get_running_loop().set_default_executor(_DaemonThreads())
    model = _model(args)
    agent: ReActAgent | None = None
    try:
        with _said_plainly():
            agent = _agent(args, model, tools, harness)
            await check_store(agent.store)
        output: _Output = (
            _JsonLines()
            if args.json
            else _Display(Console(highlight=False, markup=False, emoji=False, soft_wrap=True))
        )
        return await _on_session(args, agent, output)
    finally:
        if agent is not None:
            await agent.aclose()
        close: Any = getattr(model, "aclose", None)
        if close is not None:
            await close()


async def _sessions(args: argparse.Namespace) -> ExitCode:
    """``rxagent sessions [SESSION]``: list the store's sessions, or show one."""
    if args.session is None:
        await list_sessions(args.db, json_lines=args.json)
        return ExitCode.ANSWER
    if not await show_session(args.db, args.session, json_lines=args.json):
        print(f"rxagent: {terminal_safe(unknown_session(args.db, args.session))}", file=sys.stderr)
        return ExitCode.USAGE
    return ExitCode.ANSWER


_Advice = Callable[[Sequence[PendingCall]], str]
"""Says what answers the calls a session waits on (see :func:`rxagent.cli_sessions.answer_advice`)."""


async def _on_session(args: argparse.Namespace, agent: ReActAgent, output: _Output) -> ExitCode:
    """``run``, ``chat`` or ``respond`` on the session ``--session`` (or ``respond``'s SESSION) names, a new
    one when none is named. A command that ends with calls waiting says what answers them."""
    named: str | None = args.session
    session = named or await new_session_name(agent.store)
    ctx = RuntimeContext(session_id=session)

    def advice(waiting: Sequence[PendingCall]) -> str:
        if isinstance(agent.store, MemoryStore):
            return (
                f"{answer_advice(session, waiting)}; but this session was kept in memory only (--db "
                f"{args.db}), and ends with this command: give a --db to answer it later"
            )
        return answer_advice(session, waiting, _agent_options(args))

    if args.command == "chat":
        code = await _chat(agent, ctx, output, args.json, advice)
        if named is None and _Prompter(args.json).interactive and not isinstance(agent.store, MemoryStore):
            output.note(
                f"this chat is session {session!r}: `rxagent chat --session {session}` goes on with it"
            )
        return code
    if args.command == "respond":
        refused = await refuse_answers(agent, ctx, args.answers, args.db)
        if refused is not None:
            output.note(refused)
            return ExitCode.USAGE
        code, _ = await _run_once(agent, args.answers, ctx, output)
    else:
        waiting = waiting_calls(await agent.sessions.state(ctx))
        if waiting:  # new text would be refused: say what answers the calls first
            output.note(advice(waiting))
            return ExitCode.WAITING
        code, _ = await _run_once(agent, args.prompt, ctx, output)
    if code == ExitCode.WAITING:
        output.note(advice(waiting_calls(await agent.sessions.state(ctx))))
    return code


def _agent_options(args: argparse.Namespace) -> list[str]:
    """The options of this command that ``rxagent respond`` needs to run the same agent on the same store:
    those not at their defaults, as command-line words (a URL's credentials masked: they are never shown)."""
    defaults = vars(_parser().parse_args(["respond", "-", "--deny", "-"]))
    words: list[str] = []
    for dest, default in defaults.items():
        value = getattr(args, dest, default)
        if dest in ("command", "session", "json", "answers") or value == default:
            continue
        flag = "--" + dest.replace("_", "-")
        if isinstance(value, bool):
            words.append(flag if value else f"--no-{flag[2:]}")
        elif isinstance(value, list):
            for item in value:  # pyright: ignore[reportUnknownVariableType]
                words.extend((flag, str(item)))  # pyright: ignore[reportUnknownArgumentType]
        elif dest == "db":
            words.extend((flag, store_name(str(value))))
        elif dest == "base_url":
            words.extend((flag, mask_url(str(value))))
        else:
            words.extend((flag, str(value)))
    return words


async def _serve(
    args: argparse.Namespace, tools: list[Tool], harness: Harness | None, settings: ServeSettings
) -> ExitCode:
    """``rxagent serve``: listen, say where on stdout, then serve until SIGINT or SIGTERM."""
    from rxagent.serve import AgentServer

    loop = asyncio.get_running_loop()
    loop.set_default_executor(_DaemonThreads())
    model = _model(args)
    _tune_collector(args.gc_threshold)
    agent: ReActAgent | None = None
    stop = asyncio.Event()
    signals = (signal.SIGINT, signal.SIGTERM)
    for number in signals:
        loop.add_signal_handler(number, stop.set)
    try:
        with _said_plainly():  # before it listens: a store that cannot be opened, an address in use
            agent = _agent(args, model, tools, harness)
            server = AgentServer(agent, settings)
            await server.start()
        try:
            print(f"listening on {server.url}", flush=True)
            logging.getLogger("rxagent.serve").info("sessions are kept in %s", store_name(args.db))
            await stop.wait()
            logging.getLogger("rxagent.serve").info("stopping: interrupting runs, closing connections")
        finally:
            await server.stop()
        return ExitCode.ANSWER
    finally:
        for number in signals:
            loop.remove_signal_handler(number)
        if agent is not None:
            await agent.aclose()
        close: Any = getattr(model, "aclose", None)
        if close is not None:
            await close()


SERVE_GC_THRESHOLD = 50_000
"""``rxagent serve``'s first threshold of the cyclic garbage collector (see :func:`_tune_collector`)."""


def _tune_collector(threshold: int) -> None:
    # A server runs many turns at once, and each keeps a few hundred container objects alive while it
    # goes on (its operators' subscriptions, its messages). With Python's default threshold (700
    # allocations) they outlive two young collections and reach the old generation, where full
    # collections walk every session's history again: measured in bench/soak.py, over half the CPU at
    # 1 000 concurrent sessions. A higher first threshold lets a turn's objects die young; freezing
    # what start-up made (modules, classes, the model) takes it out of every later collection.
    if threshold > 0:
        gc.collect()
        gc.freeze()
        gc.set_threshold(threshold, *gc.get_threshold()[1:])
        logging.getLogger("rxagent.serve").info(
            "garbage collector: first threshold %d; %d objects from start-up frozen",
            threshold,
            gc.get_freeze_count(),
        )


def _front_ends(
    parser: argparse.ArgumentParser, args: argparse.Namespace, settings: ServeSettings
) -> ServeSettings:
    """``settings`` with what ``serve`` says of front ends: the origins let in, and whether a client that
    goes away interrupts its run."""
    try:
        return replace(
            settings, allow_origins=tuple(args.allow_origins), cancel_on_disconnect=args.cancel_on_disconnect
        )
    except ValueError as error:
        parser.error(f"--allow-origin: {error}")


def _serve_settings(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ServeSettings:
    try:
        from rxagent.serve import ServeSettings
    except ImportError as error:
        parser.error(f"serve needs the extra: pip install 'rxagent[serve]' ({error})")
    if args.token is not None and args.token_file is not None:
        parser.error("give the token once: --token-file or --token, not both")
    token: str | None = args.token
    if args.token is not None:
        print(
            "rxagent: --token shows in `ps` to every user of this machine: prefer --token-file or "
            "$RXAGENT_TOKEN",
            file=sys.stderr,
        )
    elif args.token_file is not None:
        token = _read_token(parser, args.token_file)
    proxies = tuple(p.strip() for given in args.trusted_proxies for p in given.split(",") if p.strip())
    try:
        # The environment is read here, not as the option's default: --help shows defaults.
        token = token or os.environ.get("RXAGENT_TOKEN") or None
        return ServeSettings(host=args.host, port=args.port, token=token, trusted_proxies=proxies)
    except ValueError as error:
        parser.error(str(error))


def _read_token(parser: argparse.ArgumentParser, path: str) -> str:
    """The token in the file at ``path``: its first line, without the line's end."""
    try:
        with open(path, encoding="utf-8") as file:
            token = file.readline().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as error:
        parser.error(f"--token-file {path}: cannot read it ({type(error).__name__}: {error.args[-1]})")
    if not token.strip():
        parser.error(f"--token-file {path}: its first line is empty (the token goes there)")
    return token


class _CannotStart(Exception):
    """The command cannot start; the message says why, in a sentence (exit code 1)."""


@contextmanager
def _said_plainly() -> Generator[None]:
    """The errors of opening what the command needs (a session store, the address to listen on) stop it
    with their message alone: theirs are written for people, and the exception's class name would not
    help them."""
    try:
        yield
    except (ValueError, ImportError, OSError, RuntimeError) as error:
        raise _CannotStart(str(error)) from error


def _served_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The model to ask at ``--base-url`` when none was named: the one the server lists."""
    from rxagent.model.errors import ModelError
    from rxagent.model.openai import list_models

    where = mask_url(args.base_url.rstrip("/"))
    try:
        names = asyncio.run(list_models(args.base_url, api_key_env=args.api_key_env))
    except ModelError as error:
        raise _CannotStart(
            f"could not ask {where}/models which model to use ({error}): pass --model NAME"
        ) from error
    if not names:
        raise _CannotStart(f"{where}/models lists no model: pass --model NAME")
    if len(names) > 1:
        listed = ", ".join(terminal_safe(name) for name in names)
        parser.error(f"{where} serves {len(names)} models: pass --model with one of {listed}")
    return names[0]


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``rxagent`` command; returns the process exit code (see :class:`ExitCode`).

    A wrong command line raises ``SystemExit`` with :attr:`ExitCode.USAGE`, as argparse does.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    db: str | None = getattr(args, "db", None)
    if db is not None and not db.strip():
        parser.error("--db needs a SQLite file or a postgresql:// URL")
    if args.command == "sessions":  # only the store: no model, no tools
        return _exit_code_of(lambda: asyncio.run(_sessions(args)))
    if args.command == "respond":
        if not args.answers:
            parser.error(
                "respond needs an answer: --approve CALL_ID, --always CALL_ID, --deny CALL_ID or "
                "--result CALL_ID TEXT"
            )
        if missing_file(args.db):  # no such session, and answering creates no store
            print(f"rxagent: {terminal_safe(unknown_session(args.db, args.session))}", file=sys.stderr)
            return ExitCode.USAGE
    if args.model != "local" and not args.base_url:
        parser.error("--model NAME needs --base-url (or use --model local)")
    try:
        tools = demo_tools(_tool_names(args), files_root=args.files_root)
    except ValueError as error:
        parser.error(str(error))
    harness = _harness(parser, args)
    names = _every_tool_name(tools, harness)
    for pattern in args.ask:  # a glob that matches no tool would never ask: a typo, not a rule
        if not any(fnmatchcase(name, pattern) for name in names):
            listed = ", ".join(names) or "none: see --tools"
            parser.error(f"--ask {pattern!r} matches none of the tools ({listed})")
    if args.first_tool and args.first_tool not in names:
        listed = ", ".join(names) or "none: see --tools"
        parser.error(f"--first-tool {args.first_tool!r} is none of the tools ({listed})")
    settings = _serve_settings(parser, args) if args.command == "serve" else None
    settings = _front_ends(parser, args, settings) if settings is not None else None
    if settings is not None and args.otel:
        try:
            importlib.import_module("rxagent.telemetry")  # the extra's packages, checked before serving
        except ImportError as error:
            parser.error(f"--otel needs the extra: pip install 'rxagent[otel]' ({error})")
    if args.base_url and not os.environ.get(args.api_key_env):
        print(f"rxagent: no ${args.api_key_env} set: sending no API key", file=sys.stderr)

    def work() -> int:
        if args.base_url and args.model == "local":
            args.model = _served_model(parser, args)
        if settings is not None:
            if args.log_json:
                from rxagent.logs import json_log_handler

                logging.basicConfig(level=logging.INFO, handlers=[json_log_handler(sys.stderr)])
            else:
                logging.basicConfig(
                    level=logging.INFO,
                    stream=sys.stderr,
                    format="%(asctime)s %(levelname)s %(name)s: %(message)s",
                )
            return asyncio.run(_serve(args, tools, harness, settings))
        return asyncio.run(_main(args, tools, harness))

    return _exit_code_of(work)


def _exit_code_of(work: Callable[[], int]) -> int:
    """``work()``'s exit code, and one for each way the command can stop short."""
    try:
        return work()
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except BrokenPipeError:  # the reader went away (`rxagent run … --json | head`): not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.ANSWER
    except _CannotStart as error:  # one line, though libpq, say, writes its reasons on several
        print(f"rxagent: {' '.join(terminal_safe(str(error)).split())}", file=sys.stderr)
        return ExitCode.ERROR
    except Exception as error:  # one clear line for the terminal instead of a traceback
        print(f"rxagent: {type(error).__name__}: {terminal_safe(str(error))}", file=sys.stderr)
        return ExitCode.ERROR
