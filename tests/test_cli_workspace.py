"""``rxagent run/chat/serve --workspace DIR``: the command's agent built by the harness.

Each test runs the real command (``python -m rxagent``, or :func:`rxagent.cli.main` for usage errors) against
the loopback OpenAI-compatible server, scripted to call the harness's tools, so what happens does not depend
on what a model chooses. The shell tests run the shell under bubblewrap where the machine has it (the
test set-up installs it), and once with ``bwrap`` out of reach, where the command refuses unless told
``--shell-unsandboxed``.

Bad inputs tried: ``--workspace`` without a folder, with a missing folder, with a file; ``--skills`` pointing
at a file or at a missing folder, or at a skill whose ``SKILL.md`` has no description; ``--budget`` 0,
negative, not a whole number, or too small for the reply; every harness option without ``--workspace``;
``--shell-unsandboxed`` without ``--shell``; ``--shell`` where ``bwrap`` cannot be found; an ``--ask`` glob
that matches none of the tools (they now include the harness's); a model's path out of the workspace.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from rxagent.cli import ExitCode, main
from rxagent.harness.workspace import WORKSPACE_KEY
from rxagent.session import Projection, SQLiteStore
from tests.harness.conftest import bwrap  # noqa: F401 (a fixture: the shell's sandbox)
from tests.model.openai_server import OpenAIServer
from tests.test_cli import (
    MODEL_RUN_TIMEOUT_S,
    RUN_TIMEOUT_S,
    advised,
    call_reply,
    command_env,
    finish,
    on,
    own_home,  # noqa: F401 (autouse: an empty $HOME for every command)
    rxagent,
    start,
    text_reply,
)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    """The folder the command works in."""
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


def db(tmp_path: Path) -> tuple[str, str]:
    return ("--db", str(tmp_path / "sessions.db"))


def skill(root: Path, name: str, description: str, body: str) -> Path:
    """A skill folder ``root/name`` with its ``SKILL.md``."""
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    return folder


def written_below(folder: Path, name: str) -> dict[str, str]:
    """The text of each file ``name`` one folder below ``folder``, by that folder's name up to a ``-``."""
    return {path.parent.name.split("-")[0]: path.read_text() for path in sorted(folder.glob(f"*/{name}"))}


def exists(path: str) -> bool:
    return Path(path).exists()


def results(events: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    """``(tool, status, text)`` of every tool result a ``--json`` run printed."""
    found: list[tuple[str, str, str]] = []
    for event in events:
        if event["type"] == "tool_result":
            result = event["result"]
            found.append((result["name"], result["status"], "".join(b["text"] for b in result["output"])))
    return found


# ---- usage errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "hi", "--workspace"], "argument --workspace: expected one argument"),
        (["run", "hi", "--workspace", "{missing}"], "argument --workspace: no folder at '{missing}'"),
        (["run", "hi", "--workspace", "{file}"], "argument --workspace: '{file}' is not a folder"),
        (["run", "hi", "--workspace", ""], "argument --workspace: no folder at ''"),
        (["run", "hi", "--skills", "{work}"], "--skills needs --workspace DIR"),
        (["chat", "--shell"], "--shell needs --workspace DIR"),
        (["serve", "--budget", "9000"], "--budget needs --workspace DIR"),
        (["run", "hi", "--workspace-per-session"], "--workspace-per-session needs --workspace DIR"),
        (["run", "hi", "--shell", "--budget", "9000"], "--shell, --budget need --workspace DIR"),
        (
            ["run", "hi", "--workspace", "{work}", "--shell-unsandboxed"],
            "--shell-unsandboxed needs --shell",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--skills", "{file}"],
            "--skills: {file}: is not a folder of skills (it does not exist, or is a file)",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--skills", "{missing}"],
            "--skills: {missing}: is not a folder of skills",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--skills", "{bad_skills}"],
            "--skills: {bad_skills}/terse/SKILL.md: ",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--budget", "0"],
            "--budget: must be a whole number 1 or more",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--budget", "-5"],
            "--budget: must be a whole number 1 or more",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--budget", "8k"],
            "--budget: must be a whole number 1 or more, not '8k'",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--budget", "2.5"],
            "--budget: must be a whole number 1 or more",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--budget", "256"],
            "--budget 256 leaves no room for a request: the reply's 256 tokens (--max-tokens) must fit",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--first-tool", "bash"],
            "--first-tool 'bash' is none of the tools (calculator, clock, read, write, edit, list, glob, "
            "grep, write_todos, read_todos)",
        ),
        (
            ["run", "hi", "--first-tool", "write"],
            "--first-tool 'write' is none of the tools (calculator, clock)",
        ),
        (
            ["run", "hi", "--workspace", "{work}", "--ask", "bash"],
            "--ask 'bash' matches none of the tools (calculator, clock, read, write, edit, list, glob, grep, "
            "write_todos, read_todos)",
        ),
    ],
)
def test_a_wrong_harness_option_is_a_usage_error(
    argv: list[str], message: str, tmp_path: Path, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("a file\n")
    bad_skills = tmp_path / "bad-skills"
    (bad_skills / "terse").mkdir(parents=True)
    (bad_skills / "terse" / "SKILL.md").write_text("---\nname: terse\n---\nNo description.\n")
    places = {
        "missing": str(tmp_path / "nowhere"),
        "file": str(tmp_path / "notes.txt"),
        "work": str(work),
        "bad_skills": str(bad_skills),
    }

    with pytest.raises(SystemExit) as exited:
        main([arg.format(**places) for arg in argv])

    assert exited.value.code == ExitCode.USAGE == 2
    err = capsys.readouterr().err
    assert message.format(**places) in err
    assert not re.search(r"Traceback|[A-Z]\w*Error\b", err), err


def test_the_shell_without_bubblewrap_is_refused_unless_the_user_opts_in(
    work: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nothing = tmp_path / "empty-path"
    nothing.mkdir()
    monkeypatch.setenv("PATH", str(nothing))  # `bwrap` is looked up on PATH: now it is nowhere

    with pytest.raises(SystemExit) as exited:
        main(["run", "hi", "--workspace", str(work), "--shell"])

    assert exited.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "--shell: bubblewrap ('bwrap') is not installed, so the shell tool would not be a sandbox" in err
    assert "(here, that is --shell-unsandboxed)" in err
    assert list(work.iterdir()) == []  # refused before anything started


def test_the_help_says_what_each_harness_option_does(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("run", "chat", "serve", "respond"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for option in ("--workspace DIR", "--workspace-per-session", "--skills DIR", "--shell ",
                       "--shell-unsandboxed", "--budget TOKENS"):  # fmt: skip
            assert option in text, (command, option)
        assert "needs your approval" in text
        assert "under bubblewrap" in text


# ---- runs with a workspace ------------------------------------------------------------------------------


async def test_run_writes_in_the_workspace_and_refuses_a_path_out_of_it(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    server.script(
        call_reply("write", {"path": "notes/hello.md", "content": "Hello!\n"}, "w1"),
        call_reply("write", {"path": "../escaped.md", "content": "out"}, "w2"),
        text_reply("Written."),
    )

    done = await rxagent(
        *on(server, "run", "Write a greeting.", "--workspace", str(work), "--session", "s1", "--json"),
        *db(tmp_path),
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    assert (work / "notes" / "hello.md").read_text() == "Hello!\n"
    assert results(done.events()) == [
        ("write", "ok", "Wrote 1 lines (7 bytes) to notes/hello.md (a new file)."),
        (
            "write",
            "error",
            "Error: PathRefused: '../escaped.md': '..' is not allowed in a path; name the file from the "
            "workspace down",
        ),
    ]
    assert not (tmp_path / "escaped.md").exists()
    # The model was offered the harness's tools after the demo tools, and told where it works.
    first = server.requests[0].body
    assert [t["function"]["name"] for t in first["tools"]] == [
        "calculator", "clock", "read", "write", "edit", "list", "glob", "grep", "write_todos", "read_todos",
    ]  # fmt: skip
    assert "You work in a folder of your own, the workspace." in first["messages"][0]["content"]
    # The session records the folder: resumed later, it finds it again.
    store = SQLiteStore(tmp_path / "sessions.db")
    try:
        state = Projection.replay(None, await store.read((None, "s1"))).state
    finally:
        await store.aclose()
    assert state.extras[WORKSPACE_KEY] == {"folder": str(work)}


async def test_require_tool_forces_a_call_with_the_harness_tools_alone(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    server.script(call_reply("list", {}), text_reply("Empty."))

    done = await rxagent(
        *on(server, "run", "What is here?", "--workspace", str(work), "--tools", "none", "--require-tool"),
        *db(tmp_path),
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    first, second = (request.body for request in server.requests)
    assert first["tool_choice"] == "required"  # no demo tool, but the harness's: the first step calls one
    assert "tool_choice" not in second or second["tool_choice"] == "auto"


async def test_first_tool_forces_that_tool_on_the_first_step_only(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    server.script(call_reply("write", {"path": "a.txt", "content": "a\n"}), text_reply("Written."))

    done = await rxagent(
        *on(server, "run", "Write a.txt.", "--workspace", str(work), "--first-tool", "write"),
        *db(tmp_path),
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    first, second = (request.body for request in server.requests)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "write"}}
    assert "tool_choice" not in second or second["tool_choice"] == "auto"
    assert (work / "a.txt").read_text() == "a\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file below ``folder`` with its content (what "nothing changed" compares)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def written_inside(work: Path, path: str, content: str) -> bool:
    """Whether ``path`` (as the model gave it) names a file inside ``work`` that holds ``content``."""
    written = (work / path).resolve()
    return written.is_relative_to(work.resolve()) and written.read_text() == content


@pytest.mark.llm
async def test_the_embedded_model_writes_a_file_with_workspace(work: Path, tmp_path: Path) -> None:
    """The main job's forced first step, with ``--workspace``: the embedded model's first message is a
    well-formed call of ``write`` (its grammar allows nothing else) that lands inside the workspace. What
    it writes, and says after, are the model's own choice: only rxagent's guarantees are checked."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.txt").write_text("left alone\n")
    before = snapshot(outside)

    done = await rxagent(
        "run", "Write a file named hello.txt that says hello.", "--workspace", str(work), "--tools", "none",
        "--first-tool", "write", "--max-iters", "2", "--json", *db(tmp_path), timeout_s=MODEL_RUN_TIMEOUT_S,
    )  # fmt: skip

    assert done.code in {int(code) for code in ExitCode}, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    calls = [e["call"] for e in events if e["type"] == "tool_call_completed"]
    assert calls, done.stdout
    assert calls[0]["name"] == "write"
    assert calls[0]["state"] == "complete"
    results = {e["result"]["tool_use_id"]: e["result"] for e in events if e["type"] == "tool_result"}
    first = results[calls[0]["id"]]
    if first["status"] == "ok":  # a path the tool took: the file is inside the workspace, as written
        assert written_inside(work, calls[0]["input"]["path"], calls[0]["input"]["content"])
    else:  # a path the tool refused (the model's choice): refused in words, nothing written
        assert first["status"] == "error"
        assert snapshot(work) == {}
    assert snapshot(outside) == before


async def test_per_session_workspaces_keep_sessions_apart(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    for session in ("alpha", "beta"):
        server.script(call_reply("write", {"path": "mine.txt", "content": session}), text_reply("Done."))
        done = await rxagent(
            *on(server, "run", "Write.", "--workspace", str(work), "--workspace-per-session"),
            *("--session", session, "--json", *db(tmp_path)),
        )
        assert done.code == ExitCode.ANSWER, done.stderr

    assert written_below(work, "mine.txt") == {"alpha": "alpha", "beta": "beta"}


async def test_the_todo_list_outlives_the_command(server: OpenAIServer, work: Path, tmp_path: Path) -> None:
    todos = [{"content": "draft", "status": "completed"}, {"content": "review", "status": "pending"}]
    server.script(call_reply("write_todos", {"todos": todos}), text_reply("Planned."))
    first = await rxagent(
        *on(server, "run", "Plan.", "--workspace", str(work), "--session", "s1", "--json"), *db(tmp_path)
    )
    assert first.code == ExitCode.ANSWER, first.stderr
    assert [e["todos"] for e in first.events() if e["type"] == "todos_updated"] == [todos]

    server.script(call_reply("read_todos", {}), text_reply("One left."))
    second = await rxagent(
        *on(server, "run", "What is left?", "--workspace", str(work), "--session", "s1", "--json"),
        *db(tmp_path),
    )

    assert second.code == ExitCode.ANSWER, second.stderr
    assert results(second.events()) == [("read_todos", "ok", "1. [x] draft\n2. [ ] review")]
    # Each request reminds the model of what is open, once: the reminder is added, never stored.
    for request in server.requests[-2:]:
        reminders = [m["content"] for m in request.body["messages"][1:] if m["role"] == "system"]
        assert len(reminders) == 1
        assert "review" in reminders[0]
        assert "draft" not in reminders[0]


async def test_skills_are_listed_and_loaded_on_demand(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    skills = tmp_path / "skills"
    skill(skills, "haiku", "Writes a haiku.", "Three lines: five, seven, five syllables.")
    skill(skills, "limerick", "Writes a limerick.", "Five lines, AABBA.")
    more = tmp_path / "more-skills"
    skill(more, "sonnet", "Writes a sonnet.", "Fourteen lines.")
    server.script(call_reply("use_skill", {"name": "haiku"}), text_reply("Ready."))

    done = await rxagent(
        *on(server, "run", "A haiku, please.", "--workspace", str(work), "--json"),
        *("--skills", str(skills), "--skills", str(more), *db(tmp_path)),
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    system = server.requests[0].body["messages"][0]["content"]
    for line in ("haiku: Writes a haiku.", "limerick: Writes a limerick.", "sonnet: Writes a sonnet."):
        assert line in system
    assert "five, seven, five" not in system  # a body enters only through use_skill
    [(tool, status, text)] = results(done.events())
    assert (tool, status) == ("use_skill", "ok")
    assert "Three lines: five, seven, five syllables." in text


async def test_a_large_tool_result_is_evicted_under_the_budget_and_read_back(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    (work / "big.txt").write_text("".join(f"line {n}: the quick brown fox jumps\n" for n in range(1, 401)))
    server.script(
        call_reply("read", {"path": "big.txt"}, "r1"),
        text_reply("It is long."),
    )

    done = await rxagent(
        *on(server, "run", "Read big.txt.", "--workspace", str(work), "--budget", "3000", "--json"),
        *db(tmp_path),
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    [(_, status, whole)] = results(done.events())
    assert status == "ok"
    assert "line 400: the quick brown fox jumps" in whole  # the session keeps the result whole
    sent = server.requests[1].body["messages"][-1]
    assert sent["role"] == "tool"
    pointer = sent["content"]
    assert "line 400" not in pointer  # the request carries a pointer instead
    [evicted] = (work / "tool-results").iterdir()
    assert f"tool-results/{evicted.name}" in pointer
    assert evicted.read_text() == whole


# ---- the shell: asks first, then runs in the workspace -------------------------------------------------


async def test_the_shell_asks_then_respond_runs_it_in_the_sandbox(
    server: OpenAIServer,
    work: Path,
    tmp_path: Path,
    bwrap: str,  # noqa: F811
) -> None:
    command = "echo sandboxed > made.txt; touch /etc/rxagent-escape 2>/dev/null || echo read-only"
    server.script(call_reply("shell", {"command": command}))
    waiting = await rxagent(
        *on(server, "run", "Make a file.", "--workspace", str(work), "--shell"), *db(tmp_path)
    )

    assert waiting.code == ExitCode.WAITING, waiting.stderr
    assert "needs approval" in waiting.stdout
    assert not (work / "made.txt").exists()  # nothing ran before the approval
    answer = advised(waiting.stderr)
    # The command it names makes the same agent: the same workspace, the shell.
    assert answer[answer.index("--workspace") + 1] == str(work)
    assert "--shell" in answer

    server.script(text_reply("Made."))
    done = await rxagent(*answer, "--json")

    assert done.code == ExitCode.ANSWER, done.stderr
    [(tool, status, text)] = results(done.events())
    assert (tool, status) == ("shell", "ok")
    assert "read-only" in text
    assert (work / "made.txt").read_text() == "sandboxed\n"
    assert not exists("/etc/rxagent-escape")


async def test_chat_asks_before_each_shell_command(
    server: OpenAIServer,
    work: Path,
    tmp_path: Path,
    bwrap: str,  # noqa: F811
) -> None:
    server.script(
        call_reply("shell", {"command": "echo yes > allowed.txt"}, "c1"),
        text_reply("Done."),
        call_reply("shell", {"command": "echo no > denied.txt"}, "c2"),
        text_reply("Fine."),
    )

    done = await rxagent(
        *on(server, "chat", "--workspace", str(work), "--shell", "--json"),
        *db(tmp_path),
        stdin="First file.\ny\nSecond file.\nn\n",
    )

    assert done.code == ExitCode.ANSWER, done.stderr
    assert done.stderr.count("allow shell(") == 2
    assert (work / "allowed.txt").read_text() == "yes\n"
    assert not (work / "denied.txt").exists()


async def test_the_opt_in_runs_the_shell_without_a_sandbox_and_says_so(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    nothing = tmp_path / "empty-path"
    nothing.mkdir()
    env = command_env(PATH=str(nothing))  # no `bwrap` to be found
    server.script(call_reply("shell", {"command": "echo plain > made.txt"}))
    waiting = await rxagent(
        *on(server, "run", "Make a file.", "--workspace", str(work), "--shell", "--shell-unsandboxed"),
        *db(tmp_path),
        env=env,
    )
    assert waiting.code == ExitCode.WAITING, waiting.stderr
    assert "WITHOUT a sandbox" in server.requests[0].body["messages"][0]["content"]
    answer = advised(waiting.stderr)
    assert "--shell-unsandboxed" in answer

    server.script(text_reply("Made."))
    done = await rxagent(*answer, env=env)

    assert done.code == ExitCode.ANSWER, done.stderr
    assert (work / "made.txt").read_text() == "plain\n"


# ---- serve ------------------------------------------------------------------------------------------------


async def test_serve_runs_a_harness_agent_in_the_workspace(
    server: OpenAIServer, work: Path, tmp_path: Path
) -> None:
    todos = [{"content": "greet", "status": "in_progress"}]
    server.script(
        call_reply("write_todos", {"todos": todos}, "t1"),
        call_reply("write", {"path": "hello.txt", "content": "hello"}, "w1"),
        text_reply("Done."),
    )
    process = await start(
        *on(server, "serve", "--port", "0", "--tools", "none", "--workspace", str(work)), *db(tmp_path)
    )
    try:
        assert process.stdout is not None
        first = (await asyncio.wait_for(process.stdout.readline(), RUN_TIMEOUT_S)).decode()
        url = first.removeprefix("listening on ").strip()
        async with aiohttp.ClientSession(base_url=url) as http:
            async with http.post("/api/sessions/s1/runs", json={"input": "Greet."}) as response:
                assert response.status == 202, await response.text()
                run_id = (await response.json())["run_id"]
            timeout = aiohttp.ClientTimeout(total=RUN_TIMEOUT_S)
            async with http.get("/api/sessions/s1/feed", timeout=timeout) as feed:
                async for raw in feed.content:
                    line = raw.decode()
                    if line.startswith("data: ") and '"agent_result"' in line and run_id in line:
                        break
    finally:
        process.send_signal(signal.SIGTERM)
        done = await finish(process)

    assert done.code == ExitCode.ANSWER, done.stderr
    assert (work / "hello.txt").read_text() == "hello"
    store = SQLiteStore(tmp_path / "sessions.db")
    try:
        state = Projection.replay(None, await store.read((None, "s1"))).state
    finally:
        await store.aclose()
    assert state.extras["todos"] == todos
