"""The notebooks run, top to bottom, on a real kernel: they are documentation that cannot rot.

Each runs without the embedded model (a stand-in ``llama_cpp`` that fails to import, as on a machine
where llama.cpp cannot load): everything but the cells that need the model runs, and those say why they
were skipped. The two notebooks that use the model run again with it (``llm``). Their outputs are
checked, not only produced: cells the tests read are tagged (cell metadata ``tags``). Only what rxagent
guarantees is asserted about the embedded model's runs, never what it answers.

The notebooks are committed with their outputs (``bash scripts/notebooks.sh`` writes them, through
``tests/notebook_runner.py``): each run here also checks that the committed copy shows what the run
showed, and the committed files are checked for what a run leaves that is not the notebook's.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbformat import NotebookNode
from nbformat.v4 import new_code_cell, new_notebook

from tests.notebook_runner import (
    NOTEBOOKS,
    ROOT,
    dumps,
    execute,
    main,
    names,
    normalise,
    python_path,
    skipped,
    without_llama,
)
from tests.test_scripts import Project

SVG = "{http://www.w3.org/2000/svg}"
WITHOUT_MODEL = (
    "skipped: needs the embedded model (install rxagent[local]) — RuntimeError: llama.cpp's library does "
    "not load here (a stand-in llama_cpp, as on a machine where llama.cpp cannot load)"
)
"""What a cell that needs the embedded model prints when run without it."""


def without_model(notebook: NotebookNode, *tags: str) -> None:
    """The cells tagged ``tags`` printed why they were skipped, and nothing else."""
    for tag in tags:
        assert [o.get("text") for o in tagged(notebook, tag)] == [WITHOUT_MODEL + "\n"], tag


def code_cells(notebook: NotebookNode) -> list[NotebookNode]:
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def kinds(cell: NotebookNode) -> list[tuple[str, Any]]:
    """What a cell shows, by kind: a stream's name, or a display's formats."""
    return [
        (o.output_type, o.name if o.output_type == "stream" else sorted(o.get("data", {})))
        for o in cell.outputs
    ]


def committed_as_run(name: str, run: NotebookNode) -> None:
    """The committed ``notebooks/NAME`` shows what ``run`` showed: the same kinds of output in each cell,
    and, in the cells that ``run`` skipped for want of the embedded model, what the model did."""
    committed = nbformat.read(NOTEBOOKS / name, as_version=4)
    ran = code_cells(normalise(copy.deepcopy(run)))
    for cell, kept in zip(ran, code_cells(committed), strict=True):
        where = f"{name}, cell {kept.id}: its committed outputs are stale; run bash scripts/notebooks.sh"
        if skipped(cell):
            assert kept.outputs, where
            assert not skipped(kept), where
        else:
            assert kinds(kept) == kinds(cell), where


def tagged(notebook: Any, tag: str) -> list[Any]:
    """The outputs of the cell tagged ``tag``."""
    [cell] = [c for c in notebook.cells if tag in c.get("metadata", {}).get("tags", [])]
    return list(cell.get("outputs", []))


def plain(notebook: Any, tag: str) -> str:
    """The text a plain front end shows for the cell tagged ``tag`` (printed text and text/plain).

    Printed text comes in as many stream outputs as the kernel flushed (a cell that awaits for a while
    on a loaded machine prints in two); a front end shows them as one text, and so does this."""
    parts: list[str] = []
    last_stream: str | None = None  # the stream (stdout, stderr) of the last output, if it was printed text
    for o in tagged(notebook, tag):
        stream = o.get("name") if o.get("output_type") == "stream" else None
        if stream is not None and stream == last_stream:
            parts[-1] += o["text"]
        else:
            parts.append(o["text"] if stream is not None else str(o.get("data", {}).get("text/plain", "")))
        last_stream = stream
    return "\n".join(parts)


def svg_of(notebook: Any, tag: str) -> str:
    [picture] = [
        o["data"]["image/svg+xml"] for o in tagged(notebook, tag) if "image/svg+xml" in o.get("data", {})
    ]
    return str(picture)


def widgets(notebook: Any, tag: str) -> list[dict[str, Any]]:
    """The states of the widgets shown by the cell tagged ``tag``, the displayed one first, then its
    children (as the executed notebook saved them: the last state each widget was sent)."""
    saved = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    found: list[dict[str, Any]] = []
    for output in tagged(notebook, tag):
        view = output.get("data", {}).get("application/vnd.jupyter.widget-view+json")
        if view is None:
            continue
        model = saved[view["model_id"]]
        found.append(model)
        found.extend(saved[child.removeprefix("IPY_MODEL_")] for child in model["state"].get("children", []))
    return found


def bars(svg: str, kind: str) -> list[ET.Element]:
    root = ET.fromstring(svg)
    return [e for e in root.iter(f"{SVG}rect") if e.get("class") == "rxa-bar" and e.get("data-kind") == kind]


def quickstart_scripted(notebook: NotebookNode) -> None:
    """The scripted half of 01_quickstart: the live view, the result, the transcript, the approval."""
    # the live view drew each run into one output area, updated in place to the final frame
    [live] = tagged(notebook, "live-scripted")
    assert live["output_type"] == "display_data"
    assert set(live["data"]) == {"text/plain", "text/html"}
    final = live["data"]["text/plain"]
    assert final.startswith("✓ finished · MODEL_STOP")
    assert '⚙ weather({"city": "Oslo"})  [ok · ' in final
    assert "→ weather [ok] Oslo: 14 °C, light rain" in final
    assert "→ add [ok] 17" in final
    assert "assistant: It is 14 °C with light rain in Oslo; 3 degrees warmer would be 17 °C." in final
    assert "AgentResult MODEL_STOP · 2 iteration(s) · 2 model call(s)" in final
    assert "Oslo: 14 °C, light rain" in live["data"]["text/html"]
    # the result and the session display richly
    assert plain(notebook, "result").startswith("AgentResult MODEL_STOP · 2 iteration(s)")
    transcript = plain(notebook, "transcript")
    assert transcript.startswith("AgentState: 4 message(s)")
    assert "assistant: It is 14 °C with light rain in Oslo" in transcript
    # a call waiting for approval, shown with buttons, then approved
    asking, panel = tagged(notebook, "approvals")
    assert asking["data"]["text/plain"].startswith("✓ finished · PERMISSION_ASKING")
    assert "[awaiting approval · weather lookups cost money]" in asking["data"]["text/plain"]
    assert "application/vnd.jupyter.widget-view+json" in panel["data"]
    approved = plain(notebook, "approved")
    assert approved.startswith("AgentResult MODEL_STOP")
    assert "Bergen: 14 °C, light rain — take an umbrella." in approved


def test_quickstart_notebook_runs_its_scripted_half_without_the_embedded_model(tmp_path: Path) -> None:
    notebook = execute("01_quickstart.ipynb", tmp_path, embedded=False)
    quickstart_scripted(notebook)
    without_model(notebook, "live-local", "local-answer")
    committed_as_run("01_quickstart.ipynb", notebook)


@pytest.mark.llm
def test_quickstart_notebook_runs_with_the_embedded_model(tmp_path: Path) -> None:
    notebook = execute("01_quickstart.ipynb", tmp_path, embedded=True)
    quickstart_scripted(notebook)
    # The embedded model: its forced first step calls the tool (first_tool_choice="required"); what it does
    # next is its own choice (answer, call again, or say nothing), so any ending reason will do.
    [local] = tagged(notebook, "live-local")
    local_final = local["data"]["text/plain"]
    assert local_final.startswith("✓ finished · ")
    assert "⚙ add(" in local_final
    assert re.search(r"AgentResult (MODEL_STOP|MAX_ITERATIONS|NO_ANSWER) · \d+ iteration", local_final)
    reason, _ = plain(notebook, "local-answer").rstrip("\n").split(" | ", 1)
    assert reason in {"MODEL_STOP", "MAX_ITERATIONS", "NO_ANSWER"}


def timelines_scripted(notebook: NotebookNode, scratch: Path) -> None:
    """The scripted half of 05_timelines: the pictures of a run with parallel tools, and their files."""
    # the scripted run: two steps of tools (three fetches at once, then one summary), three model calls
    scripted = svg_of(notebook, "scripted-timeline")
    assert len(bars(scripted, "model")) == 3
    tool_bars = bars(scripted, "tool")
    assert len(tool_bars) == 4
    lanes = sorted(int(bar.get("data-lane") or -1) for bar in tool_bars)
    assert lanes == [0, 0, 1, 2]  # the fetches overlapped
    assert "model calls: 3 | tool calls: 4" in plain(notebook, "scripted-spans")
    steps = [
        g
        for g in ET.fromstring(svg_of(notebook, "scripted-usage")).iter(f"{SVG}g")
        if g.get("class") == "rxa-step"
    ]
    assert len(steps) == 3
    transcript = plain(notebook, "scripted-transcript")
    assert transcript.rstrip().endswith("assistant: The three pages are all about rxagent.")
    # the pictures were saved (in the kernel's temporary folder): the file holds the picture shown inline
    saved = Path(plain(notebook, "saved").strip())
    assert saved.is_relative_to(scratch)
    assert saved.read_text(encoding="utf-8") == scripted
    tokens = saved.parent / "parallel-tools-tokens.svg"
    assert tokens.read_text(encoding="utf-8") == svg_of(notebook, "scripted-usage")


LOCAL_TIMELINE_CELLS = ("local-answer", "local-timeline", "local-counts", "local-usage", "local-transcript")


def test_timelines_notebook_draws_the_scripted_run_without_the_embedded_model(tmp_path: Path) -> None:
    notebook = execute("05_timelines.ipynb", tmp_path, embedded=False)
    timelines_scripted(notebook, tmp_path)
    without_model(notebook, *LOCAL_TIMELINE_CELLS)
    committed_as_run("05_timelines.ipynb", notebook)
    # the committed copy carries the embedded model's pictures too
    committed = nbformat.read(NOTEBOOKS / "05_timelines.ipynb", as_version=4)
    for tag in ("local-timeline", "local-usage"):
        assert ET.fromstring(svg_of(committed, tag)).tag == f"{SVG}svg"


@pytest.mark.llm
def test_timelines_notebook_draws_one_bar_per_call_of_the_embedded_model(tmp_path: Path) -> None:
    notebook = execute("05_timelines.ipynb", tmp_path, embedded=True)
    timelines_scripted(notebook, tmp_path)
    # the embedded model: one bar per call it made, whatever it chose to do
    counts = re.search(r"model calls: (\d+) \| tool calls: (\d+)", plain(notebook, "local-counts"))
    assert counts is not None
    model_calls, tool_calls = int(counts.group(1)), int(counts.group(2))
    local = svg_of(notebook, "local-timeline")
    assert len(bars(local, "model")) == model_calls >= 1
    assert len(bars(local, "tool")) == tool_calls >= 1  # its first step was forced to call the calculator
    local_steps = ET.fromstring(svg_of(notebook, "local-usage")).iter(f"{SVG}g")
    assert len([g for g in local_steps if g.get("class") == "rxa-step"]) == model_calls
    # the transcript holds the run's answer
    reason, answer = plain(notebook, "local-answer").rstrip("\n").split(" | ", 1)
    assert reason in {"MODEL_STOP", "MAX_ITERATIONS", "NO_ANSWER"}
    local_transcript = plain(notebook, "local-transcript")
    assert local_transcript.startswith("AgentState: ")
    assert answer in local_transcript


def test_custom_pipelines_notebook_shows_each_operator_recipe_fan_out_and_nested_agent(
    tmp_path: Path,
) -> None:
    notebook = execute("02_custom_pipelines.ipynb", tmp_path, embedded=False)
    # operators outside an agent: folded, read chunk by chunk, as snapshots, retried, timed out
    assert plain(notebook, "fold") == 'assistant: Let me look that up.\n  ⚙ weather({"city": "Oslo"})'
    pieces, finish, usage = plain(notebook, "chunks").strip().split("\n")
    assert "".join(re.findall(r"'([^']*)'", pieces)) == "Oslo is 14 °C with light rain."
    assert finish == "finish: stop"
    assert usage.startswith("usage: Usage(")
    snapshots = plain(notebook, "snapshots").splitlines()
    assert snapshots[0] == "'Oslo'"
    assert snapshots[-1].endswith("the last one is the message: 'Oslo is 14 °C with light rain.'")
    assert plain(notebook, "retry").splitlines() == [
        "retry 1 in 0.05 s after: HTTP 503 from the model server: overloaded, try again",
        "answer after 2 model calls: Oslo is 14 °C with light rain.",
        "retries left in the budget: 2",
    ]
    assert plain(notebook, "timeout").splitlines() == [
        "model stream ended: cancelled",
        "TimeoutError: the stream did not finish within 30 s",
        "virtual seconds passed: 30.0",
    ]
    # plan, then execute: the plan's items as notes, the tools run, the closing answer
    [plan] = tagged(notebook, "plan")
    planned = plan["data"]["text/plain"]
    assert planned.startswith("✓ finished · MODEL_STOP")
    assert "plan: Step 1 of 2: Add 2 and 3\nplan: Step 2 of 2: Shout the sum" in planned
    assert "→ add [ok] 5" in planned
    assert "→ shout [ok] FIVE!" in planned
    assert "assistant: 2 + 3 = 5, and I shouted FIVE!" in planned
    assert "AgentResult MODEL_STOP · 6 iteration(s) · 6 model call(s)" in planned
    # a reviewer before tools run: one call approved and run, one rejected with the reason
    [review] = tagged(notebook, "review")
    reviewed = review["data"]["text/plain"]
    assert "→ shout [ok] HELLO!" in reviewed
    assert "→ shout [denied] Rejected by the reviewer: it would delete everything" in reviewed
    assert "reviewer: approved shout\nreviewer: rejected shout" in reviewed
    assert plain(notebook, "review-ran").strip() == "calls that ran: ['hello']"
    # reflect, then revise: the critic objected once, in a side turn out of the history; the revision passed
    [reflect] = tagged(notebook, "reflect")
    reflected = reflect["data"]["text/plain"]
    assert reflected.startswith("✓ finished · MODEL_STOP")
    assert "assistant: 5.\nassistant: 2 + 3 = 5: three more than two is five." in reflected
    assert "critic: Say how you got there, not only the number." in reflected
    assert "AgentResult MODEL_STOP · 2 iteration(s) · 4 model call(s)" in reflected
    assert plain(notebook, "reflect-history").splitlines() == [
        "user: What is 2 + 3?",
        "assistant: 5.",
        "user: Revise your answer: Say how you got there, not only the number.",
        "assistant: 2 + 3 = 5: three more than two is five.",
        "2 iterations, 4 model calls (the critic's included)",
    ]
    # a step of our own around model_turn: the headline's side turn counted, not saved, not an iteration
    assert plain(notebook, "side-turn").splitlines() == [
        "Oslo is 14 °C with light rain. | headline: Mild and wet in Oslo",
        "1 iteration, 2 model calls",
        "history: [\"What's the weather in Oslo?\", 'Oslo is 14 °C with light rain.']",
    ]
    # the fan-out's progress bar ended full, with the final counts beside it
    [box, label, bar, counts] = widgets(notebook, "fan-out")
    assert box["model_name"] == "HBoxModel"
    assert label["state"]["value"].replace("\u2007", " ") == "questions: 100%"
    assert (bar["state"]["value"], bar["state"]["max"], bar["state"]["bar_style"]) == (20, 20, "success")
    right = counts["state"]["value"].replace("\u2007", " ")
    assert right.startswith(" 20/20 [")
    assert right.endswith(", done=19, failed=1, running=0]")
    assert plain(notebook, "fan-out-summary").splitlines() == [
        "20 outcomes: 19 done, 1 failed",
        "in input order: True",
        "  What is 0 squared? → 0 squared is 0.",
        "  What is 1 squared? → 1 squared is 1.",
        "  What is 2 squared? → 2 squared is 4.",
        "  What is 7 squared? → ModelHTTPError: HTTP 400 from the model server: question 7 was rejected",
    ]
    # an agent as a tool: its run nested under the call, its usage counted in the lead's result
    assert plain(notebook, "as-tool").splitlines() == [
        "lead: run started with 'Which year is 55 years after 1969?'",
        'lead: calls researcher({"task": "Add 55 years to 1969."})',
        "    researcher: run started with 'Add 55 years to 1969.'",
        '    researcher: calls add({"a": 1969, "b": 55})',
        "    researcher: add answered '2024'",
        "    researcher: MODEL_STOP, '1969 + 55 = 2024.'",
        "lead: researcher answered '1969 + 55 = 2024.'",
        "lead: MODEL_STOP, '55 years after 1969 is 2024.'",
    ]
    usage = plain(notebook, "usage")
    assert "the researcher: 2 model calls, 280 + 25 tokens" in usage
    assert "the lead's result: 4 model calls (2 its own), 740 + 57 tokens" in usage  # 200+260+120+160
    assert "AgentResult MODEL_STOP · 2 iteration(s) · 4 model call(s) · 797 tokens (740 in, 57 out)" in usage

    committed_as_run("02_custom_pipelines.ipynb", notebook)


def test_live_sessions_notebook_starts_watches_steers_and_approves_a_run(tmp_path: Path) -> None:
    notebook = execute("03_live_sessions.ipynb", tmp_path, embedded=False)
    assert plain(notebook, "start").splitlines() == [
        "run: running · place in the session's queue: 0",
        "session: running",
    ]
    # the watcher joined after the start and replayed the session from its first fact, numbered 1, 2, …
    feed, view = tagged(notebook, "watch")
    assert [line.split() for line in feed["text"].splitlines()] == [
        ["1", "turn_started"],
        ["2", "run_started"],
        ["3", "message"],
        ["4", "event", "run_started"],
        ["5", "event", "step_started"],
        ["6", "event", "step_started"],
        ["7", "event", "phase_changed"],
        ["8", "event", "model_call_started"],
    ]
    assert view["data"]["text/plain"].splitlines() == [  # where the run stood when the watcher caught up
        "● running · Reason · thinking, iteration 1 · 5 events · 0 tokens",
        "user: Book me a hotel in Oslo for two nights.",
    ]
    [following] = tagged(notebook, "follow")
    assert following["output_type"] == "display_data"  # the area the watcher keeps redrawing
    assert following["data"]["text/plain"] == view["data"]["text/plain"]
    # the steer landed in the running run: the model read it before it asked to book
    assert plain(notebook, "steer").splitlines() == [
        "run ended: PERMISSION_ASKING",
        "session: waiting_for_approval",
        "  waiting: book_hotel({'city': 'Oslo', 'nights': 3}) — bookings cost money",
    ]
    assert plain(notebook, "approve").splitlines() == [
        "run ended: MODEL_STOP · Booked the Fjord Hotel in Oslo. Pack an umbrella: 14 °C and rain.",
        "bookings made: [('Oslo', 3)]",
        "session: idle",
    ]
    transcript = plain(notebook, "transcript").splitlines()
    assert transcript[0] == "AgentState: 7 message(s)"
    # recorded where it took effect: after the weather lookup's result, before the booking call
    steered = transcript.index("user: Make it three nights, please.")
    assert transcript[steered - 1] == "  → weather [ok] Oslo: 14 °C, light rain"
    assert transcript[steered + 2] == '  ⚙ book_hotel({"city": "Oslo", "nights": 3})'
    # the watcher that followed live and the one that joined late drew the same session
    followed = plain(notebook, "followed")
    assert followed.startswith("✓ finished · MODEL_STOP · ")
    assert "user: Make it three nights, please." in followed
    assert "→ book_hotel [ok] Booked the Fjord Hotel in Oslo for 3 nights." in followed
    [late] = tagged(notebook, "late")
    assert late["data"]["text/plain"] == followed
    numbers = plain(notebook, "numbers").splitlines()
    assert re.fullmatch(r"(\d+) facts, numbered 1 to \1 without a gap: True", numbers[0])
    assert numbers[1] == "the late watcher's result is the last run's: True"

    committed_as_run("03_live_sessions.ipynb", notebook)


def test_sessions_and_recovery_notebook_continues_after_a_restart_and_reconciles_a_killed_call(
    tmp_path: Path,
) -> None:
    notebook = execute("04_sessions_and_recovery.ipynb", tmp_path, embedded=False)
    # a new agent on the same SQLite file carries the conversation on: its model was sent the earlier turn
    assert plain(notebook, "restart").strip() == (
        "agent: From our earlier conversation (2 messages) — user: Hi, I'm Ada. My order is A-1.; "
        "assistant: Hello Ada! I have noted order A-1."
    )
    turns = plain(notebook, "restart-turns").splitlines()
    assert turns[:2] == [
        'turn ["Hi, I\'m Ada. My order is A-1."] → MODEL_STOP, runs: 1',
        "turn ['Which order was mine?'] → MODEL_STOP, runs: 1",
    ]
    assert "AgentState: 4 message(s)" in turns
    # the process was SIGKILLed inside the tool, after the side effect
    assert plain(notebook, "crash").splitlines() == [
        "the other process: refund written to the ledger; waiting for the bank",
        "killed: True",
        "the ledger: ['refund A-1 25.00']",
    ]
    # the log ends with the call dispatched: uncertain, and a run is refused until it is reconciled
    assert plain(notebook, "uncertain").splitlines() == [
        "last facts in the log: ['message', 'message', 'tool_dispatched']",
        "uncertain: refund({'order': 'A-1', 'amount': 25.0}) id=refund-1",
    ]
    refused = plain(notebook, "refused").strip()
    assert refused.startswith("UncertainToolCallsError: this session has 1 tool call(s) whose outcome")
    assert 'refund {"order": "A-1", "amount": 25.0} (id refund-1)' in refused
    # reconciled from the ledger, the session completes, and the refund was paid once
    assert plain(notebook, "reconciled").splitlines() == [
        "the ledger shows the refund: True",
        "uncertain now: []",
        "MODEL_STOP · Your refund of 25.00 for order A-1 went through; it was confirmed in our ledger.",
        "refunds paid by this process: []",
        "lines in the ledger: ['refund A-1 25.00']",
    ]
    transcript = plain(notebook, "recovered-transcript").splitlines()
    assert transcript[0] == "AgentState: 9 message(s)"
    assert "  → refund [ok] refunded 25.00 for A-1 (found in the ledger)" in transcript
    assert transcript[-1] == (
        "assistant: Your refund of 25.00 for order A-1 went through; it was confirmed in our ledger."
    )
    committed_as_run("04_sessions_and_recovery.ipynb", notebook)


def harness_scripted(notebook: NotebookNode) -> None:
    """The scripted sections of 06_harness: files, todos, skills, a background task, the budget."""
    assert plain(notebook, "setup") == (
        "parts: ['files', 'todos', 'skills', 'budget'] + the background tasks of each agent\n"
    )
    files = plain(notebook, "files")
    assert (
        "write(path='notes/plan.md', content='1. look up the height\\n2. write it down\\n') → ok: "
        "Wrote 2 lines (39 bytes) to notes/plan.md (a new file)." in files
    )
    assert "-2. write it down\n+2. write a haiku about it" in files  # edit answers with a diff
    assert (
        "read(path='notes/plan.md') → ok:      1\t1. look up the height\n     2\t2. write a haiku about it"
        in files
    )
    assert (
        "read(path='../../etc/passwd') → error: Error: PathRefused: '../../etc/passwd': '..' is not allowed"
        in files
    )
    assert "grep(pattern='haiku') → ok: notes/plan.md:2: 2. write a haiku about it" in files
    assert re.search(r"the session's folder: work/notes-[0-9a-f]{10}$", files.strip())
    todos = plain(notebook, "todos").splitlines()
    assert todos[:3] == [
        "completed    look up the height",
        "in_progress  write a haiku about it",
        "pending      read it aloud",
    ]
    assert todos[3].startswith(
        "the last request ends with a system message: Reminder: 2 item(s) of your todo"
    )
    assert "look up the height" not in todos[3]  # only the open items are recalled
    skills = plain(notebook, "skills")
    assert skills.startswith("in the system prompt: ['- haiku: Writes a haiku about anything.']\n")
    assert "use_skill(name='haiku') → ok: # Skill: haiku" in skills
    assert "read(path='skills/haiku/example.md') → ok:      1\tAn old silent pond" in skills
    assert "write(path='skills/haiku/mine.md', content='no') → error: Error: PathRefused:" in skills
    assert plain(notebook, "tasks").splitlines() == [
        "The researcher says: The Eiffel tower is 330 m tall.",
        "model calls in the lead's result: 4 (the task's one included)",
        "the task: finished, by researcher, answer: 'The Eiffel tower is 330 m tall.'",
        "its own session: research/tasks/<task id>",
        "the parent's log: ['task_started', 'task_collected', 'task_finished']",
    ]
    budget = plain(notebook, "budget").splitlines()
    assert budget[0] == "Line 5000 reads: 05000 GET /page/53 200 0 ms"  # read back through the pointer
    size = int(budget[1].removeprefix("export_log answered ").removesuffix(" bytes").replace(",", ""))
    assert size > 200_000
    assert budget[2].startswith("what the request carried instead: [The result of `export_log` is ")
    saved = re.search(r"saved to the file `tool-results/([^`]+)`", budget[2])
    assert saved is not None
    assert budget[3] == f"the file: {saved[1]} ({size:,} bytes)"
    assert budget[4] == "the file holds the result, and so does the session: True"


def test_harness_notebook_runs_its_scripted_sections_without_the_embedded_model(tmp_path: Path) -> None:
    notebook = execute("06_harness.ipynb", tmp_path, embedded=False)
    harness_scripted(notebook)
    without_model(notebook, "local-write", "local-transcript")
    committed_as_run("06_harness.ipynb", notebook)


@pytest.mark.llm
def test_harness_notebook_gives_the_embedded_model_a_workspace_it_writes_in(tmp_path: Path) -> None:
    notebook = execute("06_harness.ipynb", tmp_path, embedded=True)
    harness_scripted(notebook)
    # Its first step was forced to call write: whatever path it chose, the write landed in its folder.
    wrote, listed = plain(notebook, "local-write").splitlines()
    done = re.fullmatch(
        r"write\(path='(.+)'\) → ok: Wrote \d+ lines \(\d+ bytes\) to (.+) \(a new file\)\.", wrote
    )
    assert done is not None, wrote
    assert listed == f"in its folder: [{done[2]!r}]"
    assert plain(notebook, "local-transcript").startswith("AgentState: ")


# ---- the committed notebooks, and what writes them ------------------------------------------------------


@pytest.mark.parametrize("name", names())
def test_the_committed_notebook_carries_its_outputs_and_nothing_run_specific(name: str) -> None:
    text = (NOTEBOOKS / name).read_text(encoding="utf-8")
    notebook = nbformat.reads(text, as_version=4)
    nbformat.validate(notebook)
    code = code_cells(notebook)
    # one run, top to bottom, every cell of it (which cells print nothing, the runs above check)
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert any(cell.outputs for cell in code)
    assert not [o for cell in code for o in cell.outputs if o.output_type == "error"]
    # written by a run with the embedded model
    assert not [skipped(cell) for cell in code if skipped(cell)]
    # nothing that changes from run to run without telling the reader anything: no timings, no
    # interpreter version, no random widget ids, no split printed text; the file is as the runner writes it
    assert not [cell.id for cell in notebook.cells if "execution" in cell.metadata]
    assert "version" not in notebook.metadata.get("language_info", {})
    assert dumps(normalise(copy.deepcopy(notebook))) == text


def run_runner(*args: str, pythonpath: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m tests.notebook_runner ARGS``, as scripts/notebooks.sh runs it."""
    return subprocess.run(
        [sys.executable, "-m", "tests.notebook_runner", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": pythonpath or python_path(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_the_runner_writes_a_notebook_back_with_its_outputs(tmp_path: Path) -> None:
    done = run_runner("--into", str(tmp_path), "02_custom_pipelines.ipynb")

    assert done.returncode == 0, done.stderr
    written = tmp_path / "02_custom_pipelines.ipynb"
    assert done.stdout.startswith(f"wrote {written} in ")
    assert [p.name for p in tmp_path.iterdir()] == ["02_custom_pipelines.ipynb"]
    text = written.read_text(encoding="utf-8")
    notebook = nbformat.reads(text, as_version=4)
    assert dumps(normalise(copy.deepcopy(notebook))) == text  # already as plain as it gets
    code = code_cells(notebook)
    assert [cell.execution_count for cell in code] == list(range(1, len(code) + 1))
    assert not [cell.id for cell in notebook.cells if "execution" in cell.metadata]
    # the progress bar's widgets, numbered in the order they were made, in the state and in the output
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert list(state) == [f"{n:032x}" for n in range(1, len(state) + 1)]
    [box, *_] = widgets(notebook, "fan-out")
    assert box["model_name"] == "HBoxModel"
    committed = nbformat.read(NOTEBOOKS / "02_custom_pipelines.ipynb", as_version=4)
    assert [kinds(cell) for cell in code] == [kinds(cell) for cell in code_cells(committed)]


def test_the_runner_writes_nothing_when_the_embedded_model_cannot_run(tmp_path: Path) -> None:
    into = tmp_path / "out"
    into.mkdir()
    done = run_runner(
        "--into", str(into), "01_quickstart.ipynb", pythonpath=python_path(without_llama(tmp_path), ROOT)
    )

    assert done.returncode == 1
    assert done.stderr.endswith(  # after what the kernel said on its stderr
        "01_quickstart.ipynb: the embedded model cannot run here, so the notebook was not written "
        f"(the committed notebooks carry its outputs): {WITHOUT_MODEL}\n"
    )
    assert list(into.iterdir()) == []


def test_the_runner_leaves_a_notebook_whose_cell_fails_as_it_was(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "notebooks"
    folder.mkdir()
    cells = [new_code_cell("print('before')"), new_code_cell("1 / 0"), new_code_cell("print('after')")]
    failing = folder / "failing.ipynb"
    text = dumps(new_notebook(cells=cells))
    failing.write_text(text, encoding="utf-8")

    assert main(["failing.ipynb"], folder=folder) == 1

    said = capsys.readouterr()
    assert said.err.startswith("failing.ipynb: a cell failed, the notebook was not written:\n")
    assert "ZeroDivisionError" in said.err
    assert said.out == ""
    assert failing.read_text(encoding="utf-8") == text
    assert [p.name for p in folder.iterdir()] == ["failing.ipynb"]


def test_a_python3_kernel_of_another_environment_is_refused_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = tmp_path / "kernels" / "python3" / "kernel.json"
    spec.parent.mkdir(parents=True)
    argv = ["/opt/elsewhere/bin/python", "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    spec.write_text(json.dumps({"argv": argv, "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))  # found before the environment's own spec

    with pytest.raises(RuntimeError) as refused:
        execute("02_custom_pipelines.ipynb", tmp_path, embedded=False)
    assert str(refused.value) == (
        f"the 'python3' kernel runs /opt/elsewhere/bin/python, not {sys.executable}: "
        f"run {sys.executable} -m ipykernel install --user --name python3"
    )


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nope.ipynb"], "no such notebook: nope.ipynb (there are: 01_quickstart.ipynb, "),
        (["../README.md"], "no such notebook: ../README.md"),
        (["--into", "/nonexistent/folder"], "--into /nonexistent/folder: not a folder"),
    ],
)
def test_the_runner_refuses_what_it_cannot_run_before_running_anything(args: list[str], said: str) -> None:
    done = run_runner(*args)
    assert done.returncode == 2
    assert said in done.stderr
    assert done.stdout == ""


def test_notebooks_sh_sets_up_the_test_environment_then_runs_the_runner(tmp_path: Path) -> None:
    # In a scratch project whose .venv/bin/python is a stand-in that logs how it is called (see
    # tests/test_scripts.py): the script installs the `test` extras, then hands its arguments on.
    project = Project(tmp_path)
    shutil.copy(ROOT / "scripts" / "notebooks.sh", tmp_path / "scripts" / "notebooks.sh")
    done = subprocess.run(
        ["bash", str(tmp_path / "scripts" / "notebooks.sh"), "--into", "out", "05_timelines.ipynb"],
        cwd=tmp_path.parent,  # the script finds its project from where it is, not from where it is run
        env=project.env(CACHED_WHEEL="1"),  # a cached wheel: no compile
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    calls = project.calls()
    assert "-m pip install -q -e .[test]" in calls
    assert calls[-1] == "-m tests.notebook_runner --into out 05_timelines.ipynb"
